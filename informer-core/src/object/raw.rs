//! Raw JSON members: the part of an object the informer does not interpret, kept as one
//! compact block of JSON text instead of a `serde_json::Value` tree.
//!
//! A 1 KB ConfigMap decoded into `serde_json::Value` takes about 3.7 KB in about 30 heap blocks;
//! kept raw it takes its own text size in one block, and it drops in one `free`.

use alloc::borrow::{Cow, ToOwned};
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use smallvec::SmallVec;

use crate::object::string_map::Str;

/// The members of a JSON object, kept as its JSON text (`{"data":{…},"spec":{…}}`).
///
/// Read a member with [`get`](Self::get) (raw) or [`field`](Self::field) (decoded on demand),
/// or everything with [`to_map`](Self::to_map). An empty set allocates nothing.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RawFields(Option<Box<str>>);

impl RawFields {
    /// No members.
    pub const fn new() -> Self {
        RawFields(None)
    }

    /// Members from the text of a JSON object, kept verbatim: the text is checked to be one
    /// JSON object (a scan; no value is built), not rewritten. `{}` is no members.
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = usize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
                let mut n = 0;
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(n)
            }
        }
        let mut de = serde_json::Deserializer::from_str(text);
        let members = de::Deserializer::deserialize_map(&mut de, Members)?;
        de.end()?;
        Ok(if members == 0 {
            RawFields(None)
        } else {
            RawFields(Some(text.into()))
        })
    }

    /// Members from the text of a snapshot's raw fields, kept verbatim without the scan of
    /// [`from_json`](Self::from_json): only its framing (`{` … `}`) is checked. For text this
    /// crate wrote from a `RawFields` (checked when it was built) and read back behind the
    /// snapshot's checksum; `None` when the framing is wrong.
    pub(crate) fn from_checksummed_json(text: &str) -> Option<Self> {
        let framed = text.len() >= 2 && text.starts_with('{') && text.ends_with('}');
        match text {
            _ if !framed => None,
            "{}" => Some(RawFields(None)),
            _ => Some(RawFields(Some(text.into()))),
        }
    }

    /// The members, borrowed: what [`ObjectMeta`](crate::object::ObjectMeta)'s other fields read as.
    pub fn as_ref(&self) -> RawFieldsRef<'_> {
        RawFieldsRef(self.0.as_deref())
    }

    /// The members as a JSON object text (`{}` when empty).
    pub fn as_json(&self) -> &str {
        self.as_ref().as_json()
    }

    /// Whether there are no members.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Heap bytes used by the text.
    pub fn heap_size(&self) -> usize {
        self.0.as_ref().map_or(0, |s| s.len())
    }

    /// The raw JSON of member `name`, without decoding the others.
    pub fn get(&self, name: &str) -> Option<&RawValue> {
        self.as_ref().get(name)
    }

    /// Member `name` decoded as `T`; `None` when absent.
    pub fn field<T: de::DeserializeOwned>(
        &self,
        name: &str,
    ) -> Option<Result<T, serde_json::Error>> {
        self.as_ref().field(name)
    }

    /// The members, borrowed, in document order.
    pub fn entries(&self) -> Vec<(String, &RawValue)> {
        self.as_ref().entries()
    }

    /// All members decoded into a JSON map.
    pub fn to_map(&self) -> Map<String, Value> {
        self.as_ref().to_map()
    }

    /// Members from a JSON map.
    pub fn from_map(map: &Map<String, Value>) -> Self {
        if map.is_empty() {
            return RawFields(None);
        }
        let mut b = RawFieldsBuilder::default();
        for (k, v) in map {
            // Serializing a `Value` to a string cannot fail.
            if let Ok(text) = serde_json::to_string(v) {
                b.push(k.as_str(), text);
            }
        }
        b.finish()
    }

    /// Whether member `name` is present.
    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Removes member `name` (rebuilding the text); returns its raw JSON if it was present.
    pub fn remove(&mut self, name: &str) -> Option<Box<RawValue>> {
        let mut removed = None;
        let mut b = RawFieldsBuilder::default();
        for (k, v) in self.entries() {
            if k == name && removed.is_none() {
                removed = Some(v.to_owned());
            } else {
                b.push(k, v.get());
            }
        }
        if removed.is_some() {
            *self = b.finish();
        }
        removed
    }

    /// Sets member `name` to `value` (replacing it if present), rebuilding the text.
    pub fn insert(&mut self, name: String, value: Value) {
        let Ok(text) = serde_json::to_string(&value) else {
            return;
        };
        let mut b = RawFieldsBuilder::default();
        for (k, v) in self.entries() {
            if k != name {
                b.push(k, v.get());
            }
        }
        b.push(name, text);
        *self = b.finish();
    }

    /// Writes each member into a map being serialized.
    pub(crate) fn serialize_into<M: SerializeMap>(&self, map: &mut M) -> Result<(), M::Error> {
        self.as_ref().serialize_into(map)
    }
}

impl fmt::Debug for RawFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_json())
    }
}

impl Serialize for RawFields {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.as_ref().serialize(s)
    }
}

/// A [`RawFields`] borrowed, or the other metadata fields of an
/// [`ObjectMeta`](crate::object::ObjectMeta) (kept inside its one block): the same reads as
/// `RawFields`'s.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct RawFieldsRef<'a>(Option<&'a str>);

impl<'a> RawFieldsRef<'a> {
    /// Members kept as `text` (a JSON object text with at least one member, or empty).
    pub(crate) fn new(text: &'a str) -> Self {
        RawFieldsRef((!text.is_empty()).then_some(text))
    }

    /// The members as a JSON object text (`{}` when empty).
    pub fn as_json(&self) -> &'a str {
        self.0.unwrap_or("{}")
    }

    /// Whether there are no members.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// The raw JSON of member `name`, without decoding the others.
    pub fn get(&self, name: &str) -> Option<&'a RawValue> {
        let text = self.0?;
        let mut de = serde_json::Deserializer::from_str(text);
        de::Deserializer::deserialize_map(&mut de, FindVisitor { name }).unwrap_or(None)
    }

    /// Member `name` decoded as `T`; `None` when absent.
    pub fn field<T: de::DeserializeOwned>(
        &self,
        name: &str,
    ) -> Option<Result<T, serde_json::Error>> {
        self.get(name).map(|raw| serde_json::from_str(raw.get()))
    }

    /// Whether member `name` is present.
    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The members, borrowed, in document order.
    pub fn entries(&self) -> Vec<(String, &'a RawValue)> {
        let Some(text) = self.0 else {
            return Vec::new();
        };
        let mut de = serde_json::Deserializer::from_str(text);
        de::Deserializer::deserialize_map(&mut de, EntriesVisitor).unwrap_or_default()
    }

    /// The members, keys and raw values borrowed (keys with escapes unescaped), in document
    /// order.
    pub(crate) fn members(&self) -> SmallVec<[(Cow<'a, str>, Cow<'a, str>); 4]> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = SmallVec<[(Cow<'de, str>, Cow<'de, str>); 4]>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = SmallVec::new();
                while let Some(Str(k)) = map.next_key()? {
                    let v: &'de RawValue = map.next_value()?;
                    out.push((k, Cow::Borrowed(v.get())));
                }
                Ok(out)
            }
        }
        let Some(text) = self.0 else {
            return SmallVec::new();
        };
        let mut de = serde_json::Deserializer::from_str(text);
        de::Deserializer::deserialize_map(&mut de, Members).unwrap_or_default()
    }

    /// All members decoded into a JSON map.
    pub fn to_map(&self) -> Map<String, Value> {
        match self.0 {
            Some(text) => serde_json::from_str(text).unwrap_or_default(),
            None => Map::new(),
        }
    }

    /// An owned copy (one exact-size block, or none when empty).
    pub fn to_owned(&self) -> RawFields {
        RawFields(self.0.map(Into::into))
    }

    /// The kept text: empty, or a JSON object with at least one member.
    pub(crate) fn text(&self) -> &'a str {
        self.0.unwrap_or("")
    }

    /// Writes each member into a map being serialized.
    pub(crate) fn serialize_into<M: SerializeMap>(&self, map: &mut M) -> Result<(), M::Error> {
        for (k, v) in self.entries() {
            map.serialize_entry(&k, v)?;
        }
        Ok(())
    }
}

impl fmt::Debug for RawFieldsRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_json())
    }
}

impl Serialize for RawFieldsRef<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        self.serialize_into(&mut map)?;
        map.end()
    }
}

impl PartialEq<RawFields> for RawFieldsRef<'_> {
    fn eq(&self, other: &RawFields) -> bool {
        *self == other.as_ref()
    }
}

impl<'a> PartialEq<RawFieldsRef<'a>> for RawFields {
    fn eq(&self, other: &RawFieldsRef<'a>) -> bool {
        self.as_ref() == *other
    }
}

impl From<RawFieldsRef<'_>> for RawFields {
    fn from(r: RawFieldsRef<'_>) -> Self {
        r.to_owned()
    }
}

impl<'de> Deserialize<'de> for RawFields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawFields;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawFields, A::Error> {
                let mut b = RawFieldsBuilder::default();
                while let Some(Str(key)) = map.next_key()? {
                    b.push_value(key, &mut map)?;
                }
                Ok(b.finish())
            }
        }
        d.deserialize_map(V)
    }
}

/// Builds a [`RawFields`] member by member: the members are kept borrowed (from the input
/// being decoded, where it allows) until [`finish`](Self::finish) writes them into one
/// exact-size block.
#[derive(Default)]
pub(crate) struct RawFieldsBuilder<'a> {
    members: SmallVec<[(Cow<'a, str>, Cow<'a, str>); 4]>,
}

impl<'a> RawFieldsBuilder<'a> {
    /// Appends member `key` with raw JSON `value`.
    pub(crate) fn push(&mut self, key: impl Into<Cow<'a, str>>, value: impl Into<Cow<'a, str>>) {
        self.members.push((key.into(), value.into()));
    }

    /// Reads the next value of `map` as raw JSON (borrowed where the deserializer lends its
    /// input) and appends it under `key`.
    pub(crate) fn push_value<A: MapAccess<'a>>(
        &mut self,
        key: Cow<'a, str>,
        map: &mut A,
    ) -> Result<(), A::Error> {
        let RawText(raw) = map.next_value()?;
        self.members.push((key, raw));
        Ok(())
    }

    /// The members so far.
    pub(crate) fn members(&self) -> &[(Cow<'a, str>, Cow<'a, str>)] {
        &self.members
    }

    pub(crate) fn finish(self) -> RawFields {
        if self.members.is_empty() {
            return RawFields(None);
        }
        let mut text = String::with_capacity(members_len(&self.members));
        write_members(&mut text, &self.members);
        debug_assert_eq!(
            text.len(),
            text.capacity(),
            "the size written is the size computed"
        );
        RawFields(Some(text.into_boxed_str()))
    }
}

/// Bytes of the JSON object text of `members` (0 when there are none).
pub(crate) fn members_len(members: &[(Cow<'_, str>, Cow<'_, str>)]) -> usize {
    if members.is_empty() {
        return 0;
    }
    // Braces, one `:` per member and a `,` between members.
    1 + members
        .iter()
        .map(|(k, v)| json_string_len(k) + 1 + v.len() + 1)
        .sum::<usize>()
}

/// Appends the JSON object text of `members` (nothing when there are none).
pub(crate) fn write_members(out: &mut String, members: &[(Cow<'_, str>, Cow<'_, str>)]) {
    for (i, (k, v)) in members.iter().enumerate() {
        out.push(if i == 0 { '{' } else { ',' });
        push_json_string(out, k);
        out.push(':');
        out.push_str(v);
    }
    if !members.is_empty() {
        out.push('}');
    }
}

/// serde_json's name for its raw-value protocol (what `RawValue`'s own `Deserialize` asks
/// for): a serde_json deserializer asked for a newtype struct of this name hands the value's
/// JSON text over as the one entry of a map, borrowed when it reads from a slice or a string.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// A JSON value's text, borrowed from the input where the deserializer lends it: a raw member
/// costs no allocation of its own before it is copied into its block.
pub(crate) struct RawText<'de>(pub(crate) Cow<'de, str>);

impl<'de> Deserialize<'de> for RawText<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawText<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawText<'de>, A::Error> {
                // The protocol's one entry: the token, then the text.
                match map.next_key::<Str<'de>>()? {
                    Some(Str(key)) if key == RAW_VALUE_TOKEN => {}
                    _ => return Err(de::Error::custom("expected a raw JSON value")),
                }
                let Str(text) = map.next_value()?;
                Ok(RawText(text))
            }
            fn visit_newtype_struct<D: Deserializer<'de>>(
                self,
                d: D,
            ) -> Result<RawText<'de>, D::Error> {
                // A deserializer that does not speak the protocol: as `RawValue` would.
                let raw = Box::<RawValue>::deserialize(d)?;
                Ok(RawText(Cow::Owned(String::from(raw.get()))))
            }
        }
        d.deserialize_newtype_struct(RAW_VALUE_TOKEN, V)
    }
}

/// Whether byte `b` is written escaped in a JSON string literal: `"`, `\\` and the control
/// characters. All are ASCII, so a string splits into runs of plain text at them on character
/// boundaries.
fn needs_escape(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// Bytes `s` takes as a JSON string literal written by [`push_json_string`].
fn json_string_len(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' => 2,
            b if b < 0x20 => 6,
            _ => 1,
        })
        .sum::<usize>()
}

/// Appends `s` as a JSON string literal: its plain runs copied whole, the bytes between them
/// escaped (most keys have none, and are one copy).
fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    let mut rest = s;
    while let Some(i) = rest.bytes().position(needs_escape) {
        out.push_str(&rest[..i]);
        match rest.as_bytes()[i] {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            c => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(c >> 4)]));
                out.push(char::from(HEX[usize::from(c & 0xf)]));
            }
        }
        rest = &rest[i + 1..];
    }
    out.push_str(rest);
    out.push('"');
}

/// Whether a map key equals a name, without allocating for unescaped keys.
struct KeyIs<'a>(&'a str);

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIs<'_> {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        Ok(v == self.0)
    }
}

struct FindVisitor<'n> {
    name: &'n str,
}

impl<'de> Visitor<'de> for FindVisitor<'_> {
    type Value = Option<&'de RawValue>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = None;
        while let Some(found) = map.next_key_seed(KeyIs(self.name))? {
            if found && out.is_none() {
                out = Some(map.next_value()?);
            } else {
                // The deserializer insists on reading the map to its end.
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(out)
    }
}

struct EntriesVisitor;

impl<'de> Visitor<'de> for EntriesVisitor {
    type Value = Vec<(String, &'de RawValue)>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(k) = map.next_key::<String>()? {
            out.push((k, map.next_value()?));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Keys are written as JSON string literals in runs of plain text between the bytes to
    /// escape: escapes first, last, side by side, every control character, next to multi-byte
    /// characters, and none at all all read back as the same string, in the length computed.
    #[test]
    fn json_string_literals_escape_exactly_what_they_must() {
        let mut cases: Vec<String> = [
            "",
            "plain",
            "\"",
            "\"lead",
            "trail\\",
            "mid\"dle",
            "two\\\"side\n\r\tby side",
            "é\"ü\\ß",
            "\u{1}x\u{1f}",
            "κλειδί",
            "a/b:c",
        ]
        .iter()
        .map(|s| String::from(*s))
        .collect();
        cases.push((0u8..0x20).map(char::from).collect());
        cases.push((0u8..0x80).map(char::from).rev().collect());
        for s in &cases {
            let mut out = String::new();
            push_json_string(&mut out, s);
            assert_eq!(out.len(), json_string_len(s), "{s:?}");
            assert_eq!(serde_json::from_str::<String>(&out).unwrap(), *s, "{out}");
            let raw = out.as_bytes();
            assert!(
                raw[1..raw.len() - 1].iter().all(|&b| b >= 0x20),
                "no raw control byte: {out:?}"
            );
        }
        let mut out = String::new();
        push_json_string(&mut out, "a\"b\\c\u{1}é");
        assert_eq!(out, r#""a\"b\\c\u0001é""#);
        let members = [
            (Cow::Borrowed("k\"1"), Cow::Borrowed("1")),
            ("é".into(), "[]".into()),
        ];
        let mut text = String::new();
        write_members(&mut text, &members);
        assert_eq!(text.len(), members_len(&members));
        assert_eq!(text, r#"{"k\"1":1,"é":[]}"#);
    }

    #[test]
    fn edit_members_in_place() {
        let mut f: RawFields = serde_json::from_str(r#"{"a":1,"b":{"c":[true]},"d":"x"}"#).unwrap();
        assert!(f.contains_key("b"));
        assert_eq!(f.remove("b").unwrap().get(), r#"{"c":[true]}"#);
        assert!(!f.contains_key("b"));
        assert!(f.remove("b").is_none());
        f.insert("a".into(), json!({"z": null}));
        f.insert("e".into(), json!(2));
        assert_eq!(
            serde_json::to_value(&f).unwrap(),
            json!({"d": "x", "a": {"z": null}, "e": 2})
        );
        let mut empty = RawFields::new();
        assert!(empty.remove("x").is_none());
        empty.insert("k".into(), json!("v"));
        assert_eq!(empty.as_json(), r#"{"k":"v"}"#);
        assert_eq!(RawFields::from_map(&empty.to_map()), empty);
    }
}
