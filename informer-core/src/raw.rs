//! Raw JSON members: the part of an object the informer does not interpret, kept as one
//! compact block of JSON text instead of a `serde_json::Value` tree.
//!
//! A 1 KB ConfigMap decoded into `serde_json::Value` takes about 3.7 KB in about 30 heap blocks;
//! kept raw it takes its own text size in one block, and it drops in one `free`.

use alloc::borrow::ToOwned;
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

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

    /// The members as a JSON object text (`{}` when empty).
    pub fn as_json(&self) -> &str {
        self.0.as_deref().unwrap_or("{}")
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
        let text = self.0.as_deref()?;
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

    /// The members, borrowed, in document order.
    pub fn entries(&self) -> Vec<(String, &RawValue)> {
        let Some(text) = self.0.as_deref() else {
            return Vec::new();
        };
        let mut de = serde_json::Deserializer::from_str(text);
        de::Deserializer::deserialize_map(&mut de, EntriesVisitor).unwrap_or_default()
    }

    /// All members decoded into a JSON map.
    pub fn to_map(&self) -> Map<String, Value> {
        match self.0.as_deref() {
            Some(text) => serde_json::from_str(text).unwrap_or_default(),
            None => Map::new(),
        }
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
                b.push(k, &text);
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
                b.push(&k, v.get());
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
                b.push(&k, v.get());
            }
        }
        b.push(&name, &text);
        *self = b.finish();
    }

    /// Writes each member into a map being serialized.
    pub(crate) fn serialize_into<M: SerializeMap>(&self, map: &mut M) -> Result<(), M::Error> {
        for (k, v) in self.entries() {
            map.serialize_entry(&k, v)?;
        }
        Ok(())
    }
}

impl fmt::Debug for RawFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_json())
    }
}

impl Serialize for RawFields {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        self.serialize_into(&mut map)?;
        map.end()
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
                while let Some(key) = map.next_key::<String>()? {
                    b.push_value(&key, &mut map)?;
                }
                Ok(b.finish())
            }
        }
        d.deserialize_map(V)
    }
}

/// Builds a [`RawFields`] member by member.
#[derive(Default)]
pub(crate) struct RawFieldsBuilder {
    text: String,
}

impl RawFieldsBuilder {
    /// Appends member `key` with raw JSON `value`.
    pub(crate) fn push(&mut self, key: &str, value: &str) {
        // Room for the member, its punctuation and the closing brace, and no more: a single
        // member (most objects' `data`, `spec`) is written in one allocation that `finish`
        // keeps as it is, instead of growing by doubling and shrinking at the end.
        self.text.reserve_exact(key.len() + value.len() + 5);
        self.text.push(if self.text.is_empty() { '{' } else { ',' });
        push_json_string(&mut self.text, key);
        self.text.push(':');
        self.text.push_str(value);
    }

    /// Reads the next value of `map` as raw JSON and appends it under `key`.
    pub(crate) fn push_value<'de, A: MapAccess<'de>>(
        &mut self,
        key: &str,
        map: &mut A,
    ) -> Result<(), A::Error> {
        let raw: Box<RawValue> = map.next_value()?;
        self.push(key, raw.get());
        Ok(())
    }

    pub(crate) fn finish(mut self) -> RawFields {
        if self.text.is_empty() {
            return RawFields(None);
        }
        self.text.push('}');
        RawFields(Some(self.text.into_boxed_str()))
    }
}

/// Appends `s` as a JSON string literal.
fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(HEX[(c as usize) >> 4] as char);
                out.push(HEX[(c as usize) & 0xf] as char);
            }
            c => out.push(c),
        }
    }
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
