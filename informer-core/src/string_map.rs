//! A compact string → string map for labels and annotations.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A map of strings to strings, sorted by key, stored as one exact-size vector.
///
/// Labels and annotations are small maps held by every cached object. A
/// `BTreeMap<String, String>` spends a whole B-tree node (about 540 bytes) on even one entry;
/// this type spends 32 bytes per entry plus the strings, so a typical object is about a
/// quarter smaller. Lookups are binary searches. It reads like a map: [`get`](Self::get),
/// [`iter`](Self::iter), [`insert`](Self::insert), `collect()`, and (de)serializes as a JSON
/// object.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StringMap(Vec<(Box<str>, Box<str>)>);

impl StringMap {
    /// An empty map (no allocation).
    pub const fn new() -> Self {
        StringMap(Vec::new())
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| (**k).cmp(key))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.find(key).ok().map(|i| &*self.0[i].1)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }

    /// Sets `key` to `value`; returns the previous value.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) -> Option<String> {
        let key = key.into();
        let value: Box<str> = value.into().into_boxed_str();
        match self.find(&key) {
            Ok(i) => Some(core::mem::replace(&mut self.0[i].1, value).into_string()),
            Err(i) => {
                self.0.insert(i, (key.into_boxed_str(), value));
                None
            }
        }
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let i = self.find(key).ok()?;
        Some(self.0.remove(i).1.into_string())
    }

    /// The entries, sorted by key.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }

    /// The keys, sorted.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> {
        self.0.iter().map(|(k, _)| &**k)
    }

    /// The values, in key order.
    pub fn values(&self) -> impl ExactSizeIterator<Item = &str> {
        self.0.iter().map(|(_, v)| &**v)
    }

    /// Builds from unsorted pairs: later duplicates win, storage is exact-size.
    fn from_pairs(mut pairs: Vec<(Box<str>, Box<str>)>) -> Self {
        // Stable sort keeps input order among equal keys; keep the last of each run.
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(Box<str>, Box<str>)> = Vec::with_capacity(pairs.len());
        for (k, v) in pairs {
            match out.last_mut() {
                Some(last) if last.0 == k => last.1 = v,
                _ => out.push((k, v)),
            }
        }
        out.shrink_to_fit();
        StringMap(out)
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for StringMap {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        StringMap::from_pairs(
            iter.into_iter()
                .map(|(k, v)| (k.into().into_boxed_str(), v.into().into_boxed_str()))
                .collect(),
        )
    }
}

impl From<BTreeMap<String, String>> for StringMap {
    fn from(m: BTreeMap<String, String>) -> Self {
        m.into_iter().collect()
    }
}

impl From<StringMap> for BTreeMap<String, String> {
    fn from(m: StringMap) -> Self {
        m.0.into_iter()
            .map(|(k, v)| (k.into_string(), v.into_string()))
            .collect()
    }
}

impl<'a> IntoIterator for &'a StringMap {
    type Item = (&'a str, &'a str);
    type IntoIter = core::iter::Map<
        core::slice::Iter<'a, (Box<str>, Box<str>)>,
        fn(&'a (Box<str>, Box<str>)) -> (&'a str, &'a str),
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }
}

impl fmt::Debug for StringMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for StringMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for StringMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StringMap;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StringMap, A::Error> {
                let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
                while let Some((k, v)) = map.next_entry::<String, String>()? {
                    pairs.push((k.into_boxed_str(), v.into_boxed_str()));
                }
                Ok(StringMap::from_pairs(pairs))
            }
        }
        d.deserialize_map(V)
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
}
