//! A compact string → string map for labels and annotations.

use alloc::borrow::Cow;
use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::cmp::Ordering;
use core::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use smallvec::SmallVec;

/// A map of strings to strings, sorted by key, stored in one heap block.
///
/// Labels and annotations are small maps held by every cached object. A
/// `BTreeMap<String, String>` spends a whole B-tree node (about 540 bytes) on even one entry,
/// and a vector of string pairs one heap block per key and per value; this type keeps every
/// entry in a single exact-size string (`<key length>:<key><value length>:<value>`, lengths in
/// decimal bytes), so three labels are one allocation to build and one `free` to drop. Lookups
/// scan the entries, skipping by length. It reads like a map: [`get`](Self::get),
/// [`iter`](Self::iter), [`insert`](Self::insert), `collect()`, and (de)serializes as a JSON
/// object.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct StringMap {
    /// The entries, sorted by key, without duplicates; `None` when empty.
    text: Option<Box<str>>,
    /// Number of entries.
    len: usize,
}

impl StringMap {
    /// An empty map (no allocation).
    pub const fn new() -> Self {
        StringMap { text: None, len: 0 }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The map, borrowed: what [`ObjectMeta`](crate::object::ObjectMeta)'s labels and annotations read
    /// as.
    pub fn as_ref(&self) -> StringMapRef<'_> {
        StringMapRef {
            text: self.text.as_deref().unwrap_or(""),
            len: self.len,
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.as_ref().get(key)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key` to `value`; returns the previous value.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) -> Option<String> {
        let key = key.into();
        let value = value.into();
        let mut entries: Vec<(&str, &str)> = self.iter().collect();
        let old = match entries.binary_search_by(|(k, _)| (*k).cmp(&key)) {
            Ok(i) => Some(String::from(core::mem::replace(&mut entries[i].1, &value))),
            Err(i) => {
                entries.insert(i, (&key, &value));
                None
            }
        };
        *self = StringMap::encode(&entries);
        old
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let mut entries: Vec<(&str, &str)> = self.iter().collect();
        let i = entries.binary_search_by(|(k, _)| (*k).cmp(key)).ok()?;
        let old = String::from(entries.remove(i).1);
        *self = StringMap::encode(&entries);
        Some(old)
    }

    /// The entries, sorted by key.
    pub fn iter(&self) -> Iter<'_> {
        self.as_ref().iter()
    }

    /// The keys, sorted.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> {
        self.iter().map(|(k, _)| k)
    }

    /// The values, in key order.
    pub fn values(&self) -> impl ExactSizeIterator<Item = &str> {
        self.iter().map(|(_, v)| v)
    }

    /// Builds from unsorted pairs: later duplicates win.
    pub(crate) fn from_pairs<S: AsRef<str>>(mut pairs: Vec<(S, S)>) -> Self {
        let kept = sort_dedup(&mut pairs);
        let out: Vec<(&str, &str)> = pairs[..kept]
            .iter()
            .map(|(k, v)| (k.as_ref(), v.as_ref()))
            .collect();
        StringMap::encode(&out)
    }

    /// Encodes sorted, distinct entries into one exact-size block.
    fn encode(entries: &[(&str, &str)]) -> Self {
        if entries.is_empty() {
            return StringMap::new();
        }
        let mut text = String::with_capacity(encoded_len(entries.iter().copied()));
        encode_into(&mut text, entries.iter().copied());
        StringMap {
            text: Some(text.into_boxed_str()),
            len: entries.len(),
        }
    }
}

/// Bytes the encoding of `entries` takes.
pub(crate) fn encoded_len<'a>(entries: impl Iterator<Item = (&'a str, &'a str)>) -> usize {
    entries
        .map(|(k, v)| digits(k.len()) + 1 + k.len() + digits(v.len()) + 1 + v.len())
        .sum()
}

/// Appends the encoding of `entries` (sorted by key, distinct) to `out`.
pub(crate) fn encode_into<'a>(out: &mut String, entries: impl Iterator<Item = (&'a str, &'a str)>) {
    for (k, v) in entries {
        push_field(out, k);
        push_field(out, v);
    }
}

/// Sorts `pairs` by key and moves the last of each run of equal keys to the front (later
/// duplicates win, as when a JSON object is decoded into a map); returns how many there are.
pub(crate) fn sort_dedup<S: AsRef<str>>(pairs: &mut [(S, S)]) -> usize {
    pairs.sort_by(|a, b| a.0.as_ref().cmp(b.0.as_ref()));
    let mut kept = 0;
    for i in 0..pairs.len() {
        let last_of_run = pairs
            .get(i + 1)
            .is_none_or(|next| next.0.as_ref() != pairs[i].0.as_ref());
        if last_of_run {
            pairs.swap(kept, i);
            kept += 1;
        }
    }
    kept
}

/// A [`StringMap`] borrowed, or the labels or annotations of an
/// [`ObjectMeta`](crate::object::ObjectMeta) (which keeps them inside its one block): the same reads
/// as `StringMap`'s.
#[derive(Clone, Copy, Default)]
pub struct StringMapRef<'a> {
    text: &'a str,
    len: usize,
}

impl<'a> StringMapRef<'a> {
    /// The map encoded as `text` with `len` entries (built by [`encode_into`]).
    pub(crate) fn new(text: &'a str, len: usize) -> Self {
        StringMapRef { text, len }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The value of `key`.
    ///
    /// Scans the encoded bytes, comparing each key's bytes in place (byte order is `str`
    /// order) and skipping values by their length: no `str` is sliced but the value returned.
    /// A label index reads one label of the stored and of the new object on every update.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        let bytes = self.text.as_bytes();
        let mut at = 0;
        for _ in 0..self.len {
            let (k_start, k_end) = field_at(bytes, at)?;
            let (v_start, v_end) = field_at(bytes, k_end)?;
            let k = &bytes[k_start..k_end];
            if k == key.as_bytes() {
                return self.text.get(v_start..v_end);
            }
            if k > key.as_bytes() {
                return None;
            }
            at = v_end;
        }
        None
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The entries, sorted by key.
    pub fn iter(&self) -> Iter<'a> {
        Iter {
            rest: self.text,
            left: self.len,
        }
    }

    /// The keys, sorted.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &'a str> + use<'a> {
        self.iter().map(|(k, _)| k)
    }

    /// The values, in key order.
    pub fn values(&self) -> impl ExactSizeIterator<Item = &'a str> + use<'a> {
        self.iter().map(|(_, v)| v)
    }

    /// An owned copy (one exact-size block, or none when empty).
    pub fn to_owned(&self) -> StringMap {
        StringMap {
            text: (!self.text.is_empty()).then(|| self.text.into()),
            len: self.len,
        }
    }

    /// The encoded text (for a block that holds it).
    pub(crate) fn text(&self) -> &'a str {
        self.text
    }
}

impl PartialEq for StringMapRef<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.text == other.text
    }
}

impl Eq for StringMapRef<'_> {}

impl PartialEq<StringMap> for StringMapRef<'_> {
    fn eq(&self, other: &StringMap) -> bool {
        *self == other.as_ref()
    }
}

impl<'a> PartialEq<StringMapRef<'a>> for StringMap {
    fn eq(&self, other: &StringMapRef<'a>) -> bool {
        self.as_ref() == *other
    }
}

impl<'a> IntoIterator for StringMapRef<'a> {
    type Item = (&'a str, &'a str);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl fmt::Debug for StringMapRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for StringMapRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl From<StringMapRef<'_>> for StringMap {
    fn from(m: StringMapRef<'_>) -> Self {
        m.to_owned()
    }
}

/// Number of decimal digits of `n`.
fn digits(mut n: usize) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

/// Appends `<len>:<s>`.
fn push_field(out: &mut String, s: &str) {
    let mut n = s.len();
    if n < 10 {
        // Most keys and values of labels: one digit.
        out.push(char::from(b'0' + n as u8));
    } else {
        let mut buf = [0u8; 20];
        let mut i = buf.len();
        loop {
            i -= 1;
            buf[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        // ASCII digits: always UTF-8.
        out.push_str(core::str::from_utf8(&buf[i..]).unwrap_or_default());
    }
    out.push(':');
    out.push_str(s);
}

/// Where the field `<len>:<field>` that starts at byte `at` of `bytes` lies: the range of
/// its content (which ends where the next field starts).
fn field_at(bytes: &[u8], mut at: usize) -> Option<(usize, usize)> {
    // Most label keys and values are shorter than ten bytes: one digit, then `:`.
    if let Some(&[d @ b'0'..=b'9', b':']) = bytes.get(at..at.wrapping_add(2)) {
        let start = at + 2;
        let end = start + usize::from(d - b'0');
        return (end <= bytes.len()).then_some((start, end));
    }
    let mut n = 0usize;
    loop {
        let b = *bytes.get(at)?;
        at += 1;
        match b {
            // Wrapping: a length that overflowed (text not built by `encode_into`) is caught by
            // the bounds check below or gives another in-bounds range, never a panic.
            b'0'..=b'9' => n = n.wrapping_mul(10).wrapping_add(usize::from(b - b'0')),
            b':' => break,
            _ => return None,
        }
    }
    let end = at.checked_add(n)?;
    (end <= bytes.len()).then_some((at, end))
}

/// Splits `<len>:<field>` off the front of `s`.
fn take_field(s: &str) -> Option<(&str, &str)> {
    let (start, end) = field_at(s.as_bytes(), 0)?;
    Some((s.get(start..end)?, s.get(end..)?))
}

/// The entries of a [`StringMap`], sorted by key.
#[derive(Clone, Debug)]
pub struct Iter<'a> {
    rest: &'a str,
    left: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        // The text is built by `encode`, so both fields are always there.
        let entry = take_field(self.rest)
            .and_then(|(k, rest)| take_field(rest).map(|(v, rest)| (k, v, rest)));
        match entry {
            Some((k, v, rest)) => {
                self.rest = rest;
                self.left -= 1;
                Some((k, v))
            }
            None => {
                self.left = 0;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl PartialOrd for StringMap {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for StringMap {
    /// Entry by entry, as a sorted list of pairs.
    fn cmp(&self, other: &Self) -> Ordering {
        self.iter().cmp(other.iter())
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for StringMap {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        StringMap::from_pairs(
            iter.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect::<Vec<(String, String)>>(),
        )
    }
}

impl From<BTreeMap<String, String>> for StringMap {
    fn from(m: BTreeMap<String, String>) -> Self {
        let entries: Vec<(&str, &str)> = m.iter().map(|(k, v)| (&**k, &**v)).collect();
        StringMap::encode(&entries)
    }
}

impl From<StringMap> for BTreeMap<String, String> {
    fn from(m: StringMap) -> Self {
        m.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }
}

impl<'a> IntoIterator for &'a StringMap {
    type Item = (&'a str, &'a str);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl fmt::Debug for StringMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_ref().fmt(f)
    }
}

impl Serialize for StringMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.as_ref().serialize(s)
    }
}

/// A JSON string, borrowed from the input when it has no escapes.
pub(crate) struct Str<'de>(pub(crate) Cow<'de, str>);

impl AsRef<str> for Str<'_> {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.into())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A map of strings as decoded: pairs borrowed from the input where they have no escapes, on
/// the stack for up to eight of them.
pub(crate) struct Pairs<'de>(SmallVec<[(Str<'de>, Str<'de>); 8]>);

impl<'de> Deserialize<'de> for Pairs<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Pairs<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Pairs<'de>, A::Error> {
                let mut pairs = SmallVec::new();
                while let Some(pair) = map.next_entry::<Str<'de>, Str<'de>>()? {
                    pairs.push(pair);
                }
                let kept = sort_dedup(&mut pairs);
                pairs.truncate(kept);
                Ok(Pairs(pairs))
            }
        }
        d.deserialize_map(V)
    }
}

impl Pairs<'_> {
    /// The pairs, borrowed.
    pub(crate) fn strs(&self) -> SmallVec<[(&str, &str); 8]> {
        self.0
            .iter()
            .map(|(k, v)| (k.as_ref(), v.as_ref()))
            .collect()
    }
}

impl<'de> Deserialize<'de> for StringMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Borrowed from the input where possible: the map's one block is the only allocation
        // that outlives decoding.
        Ok(StringMap::encode(&Pairs::deserialize(d)?.strs()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn behaves_like_a_sorted_map() {
        let mut m: StringMap = vec![("b", "2"), ("a", "1"), ("b", "3")]
            .into_iter()
            .collect();
        assert_eq!(m.len(), 2);
        assert_eq!(m.get("b"), Some("3"), "later duplicates win");
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(m.insert("c", "4"), None);
        assert_eq!(m.insert("a", "9"), Some("1".into()));
        assert_eq!(m.remove("b"), Some("3".into()));
        assert_eq!(m.remove("zz"), None);
        assert!(m.contains_key("c") && !m.contains_key("b"));
        assert_eq!(m.values().collect::<Vec<_>>(), ["9", "4"]);
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(json, r#"{"a":"9","c":"4"}"#);
        let back: StringMap = serde_json::from_str(r#"{"c":"4","a":"9"}"#).unwrap();
        assert_eq!(back, m);
        let b: BTreeMap<String, String> = m.clone().into();
        assert_eq!(StringMap::from(b), m);
        assert!(serde_json::from_str::<StringMap>(r#"{"a":1}"#).is_err());
    }

    /// `get` scans the encoded bytes itself: it answers as a search of `iter` does, for every
    /// key present and for absent keys before, between (prefixes, extensions, multi-byte
    /// neighbours) and after them.
    #[test]
    fn get_answers_as_a_search_of_the_entries() {
        let m: StringMap = [
            ("app", "web"),
            ("app.kubernetes.io/name", "x"),
            ("apq", ""),
            ("tier", "backend"),
            ("é", "1:2"),
            ("team", "team-3"),
        ]
        .into_iter()
        .collect();
        let probes = [
            "",
            "a",
            "ap",
            "app",
            "app.",
            "app.kubernetes.io/name",
            "app.kubernetes.io/namf",
            "apq",
            "apr",
            "te",
            "team",
            "tier",
            "tiers",
            "z",
            "é",
            "ê",
            "e\u{301}",
        ];
        for probe in probes {
            let searched = m.iter().find(|(k, _)| *k == probe).map(|(_, v)| v);
            assert_eq!(m.get(probe), searched, "{probe:?}");
        }
        assert_eq!(m.get("app"), Some("web"));
        assert_eq!(m.get("é"), Some("1:2"));
        assert_eq!(StringMap::new().get("app"), None);
    }

    /// Keys and values holding the encoding's own characters (digits, `:`), empty strings,
    /// escapes, multi-byte text and long values all read back as stored, in one block.
    #[test]
    fn one_block_keeps_any_strings() {
        let long = "x:1:".repeat(5000);
        let pairs = [
            ("", ""),
            ("1:", "2:3"),
            ("a\"b\n", "\u{7}é"),
            ("long", long.as_str()),
            ("10", ""),
            ("ü", "0"),
        ];
        let m: StringMap = pairs.iter().copied().collect();
        assert_eq!(m.len(), pairs.len());
        for (k, v) in pairs {
            assert_eq!(m.get(k), Some(v), "{k:?}");
        }
        assert_eq!(m.get("1"), None);
        assert_eq!(m.get("zzz"), None);
        let mut sorted: Vec<_> = pairs.to_vec();
        sorted.sort();
        assert_eq!(m.iter().collect::<Vec<_>>(), sorted);
        assert_eq!(m.iter().len(), pairs.len());
        let json = serde_json::to_string(&m).unwrap();
        let back: StringMap = serde_json::from_str(&json).unwrap();
        assert_eq!(back, m);
        let via_value: StringMap =
            serde_json::from_value(serde_json::to_value(&m).unwrap()).unwrap();
        assert_eq!(via_value, m);
        assert!(StringMap::new().iter().next().is_none());
        assert_eq!(
            StringMap::new(),
            [("a", "b")]
                .into_iter()
                .filter(|_| false)
                .collect::<StringMap>()
        );
        let (a, b): (StringMap, StringMap) = (
            [("a", "1")].into_iter().collect(),
            [("a", "1"), ("b", "0")].into_iter().collect(),
        );
        assert!(a < b);
        assert_eq!(b.cmp(&a), Ordering::Greater);
        assert_eq!(a.cmp(&a.clone()), Ordering::Equal);
    }
}
