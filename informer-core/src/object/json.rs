//! A straight decoder of [`DynamicObject`] from JSON text, without serde.
//!
//! An informer's first list is mostly raw JSON that it keeps as it is (a ConfigMap's `data`,
//! `managedFields`): serde_json walks every such value byte by byte to find its end, which is
//! most of the cost of decoding. This decoder reads the same grammar with fewer steps (a
//! string's plain bytes a word at a time, 64 a step in a long one) and builds the very same
//! object. It gives up (`None`)
//! wherever it is not sure to agree with serde_json — an escape in a string it keeps, a value
//! of an unexpected type, any syntax error — and the caller then decodes with serde_json,
//! which gives the same object or the error. It never accepts what serde_json refuses.

use alloc::borrow::Cow;

use smallvec::SmallVec;

use crate::object::raw::RawFieldsBuilder;
use crate::object::string_map::sort_dedup;
use crate::object::{DynamicObject, MapSource, MetaStrings, ObjectMeta, OtherSource};

/// Nesting of raw values this decoder follows (serde_json follows any); deeper ones are left
/// to serde_json.
const MAX_DEPTH: u32 = 128;

/// Whether byte `b` ends a string's plain run: `"`, `\` or a control character (refused inside
/// a JSON string).
fn stops(b: u8) -> bool {
    (b == b'"') | (b == b'\\') | (b < 0x20)
}

/// Which bytes of the little-endian word `w` are `"`, `\` or control bytes: the high bit of
/// each such byte set. Exact for the lowest one (a borrow only carries into bytes above a
/// match), which is all [`plain_run`] reads.
#[inline]
fn stop_bytes(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let control = w.wrapping_sub(ONES * 0x20) & !w;
    let quote = w ^ (ONES * u64::from(b'"'));
    let quote = quote.wrapping_sub(ONES) & !quote;
    let backslash = w ^ (ONES * u64::from(b'\\'));
    let backslash = backslash.wrapping_sub(ONES) & !backslash;
    (control | quote | backslash) & HIGH
}

/// The 8 bytes of `s` at `i`, as a little-endian word.
#[inline]
fn word_at(s: &[u8], i: usize) -> Option<u64> {
    let bytes = <[u8; 8]>::try_from(s.get(i..i.checked_add(8)?)?).ok()?;
    Some(u64::from_le_bytes(bytes))
}

/// Whether `block` holds a `"`, `\` or control byte: no early exit, so the compiler compares
/// it 16 bytes at a time.
fn block_stops(block: &[u8]) -> bool {
    block.iter().fold(0u8, |any, &b| any | u8::from(stops(b))) != 0
}

/// Bytes at the start of `s` before the first `"`, `\` or control byte (`s.len()` if none).
///
/// Most strings are short (keys, names): their first 32 bytes are read a word (8 bytes) at a
/// time. A longer one (a data value) goes on 64 bytes a step while there is none, then a word
/// at a time again to find it.
#[inline]
fn plain_run(s: &[u8]) -> usize {
    const HEAD: usize = 32;
    const BLOCK: usize = 64;
    let mut i = 0;
    while i < HEAD {
        let Some(w) = word_at(s, i) else { break };
        let stop = stop_bytes(w);
        if stop != 0 {
            return i + stop.trailing_zeros() as usize / 8;
        }
        i += 8;
    }
    if i == HEAD {
        while let Some(block) = s.get(i..i + BLOCK) {
            if block_stops(block) {
                break;
            }
            i += BLOCK;
        }
    }
    while let Some(w) = word_at(s, i) {
        let stop = stop_bytes(w);
        if stop != 0 {
            return i + stop.trailing_zeros() as usize / 8;
        }
        i += 8;
    }
    let rest = s.get(i..).unwrap_or_default();
    i + rest.iter().position(|&b| stops(b)).unwrap_or(rest.len())
}

/// Labels or annotations as read: borrowed pairs, on the stack for up to eight.
type Pairs<'a> = SmallVec<[(&'a str, &'a str); 8]>;

/// The decoder's position in the text.
struct Reader<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the `{` that starts `text`; `None` when `text` does not start with one.
    fn at_object(text: &'a str) -> Option<Self> {
        let bytes = text.as_bytes();
        (bytes.first() == Some(&b'{')).then_some(Reader { text, bytes, at: 0 })
    }

    /// The next byte that is not JSON whitespace (not consumed); `None` at the end.
    fn peek(&mut self) -> Option<u8> {
        loop {
            let b = *self.bytes.get(self.at)?;
            // Every byte that means something here is above the space.
            if b > b' ' || !matches!(b, b' ' | b'\n' | b'\t' | b'\r') {
                return Some(b);
            }
            self.at += 1;
        }
    }

    /// Consumes `word` (`null`, `true`, `false`) at the current position.
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if !self.bytes.get(self.at..)?.starts_with(word) {
            return None;
        }
        self.at += word.len();
        Some(())
    }

    /// A string kept as text, at its opening quote: its contents, when it has no escape and
    /// no control character.
    fn plain_str(&mut self) -> Option<&'a str> {
        let start = self.at + 1;
        let end = start + plain_run(self.bytes.get(start..)?);
        if self.bytes.get(end) != Some(&b'"') {
            return None;
        }
        self.at = end + 1;
        // Both ends are at ASCII quotes, so on character boundaries.
        self.text.get(start..end)
    }

    /// A string skipped, at its opening quote: escapes checked as serde_json checks them
    /// (one of `"\/bfnrt`, or `u` and four hex digits), control characters refused.
    fn skip_str(&mut self) -> Option<()> {
        let bytes = self.bytes;
        let mut i = self.at + 1;
        loop {
            i += plain_run(bytes.get(i..)?);
            match *bytes.get(i)? {
                b'"' => {
                    self.at = i + 1;
                    return Some(());
                }
                b'\\' => match *bytes.get(i + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                    b'u' if bytes.get(i + 2..i + 6)?.iter().all(u8::is_ascii_hexdigit) => i += 6,
                    _ => return None,
                },
                _ => return None,
            }
        }
    }

    /// A number skipped, with serde_json's grammar (`-`, one `0` or digits without a leading
    /// zero, a fraction with digits, an exponent with digits).
    fn skip_number(&mut self) -> Option<()> {
        let bytes = self.bytes;
        let digits = |mut i: usize| {
            while bytes.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            i
        };
        let mut i = self.at;
        if bytes.get(i) == Some(&b'-') {
            i += 1;
        }
        match *bytes.get(i)? {
            b'0' => {
                i += 1;
                if bytes.get(i).is_some_and(u8::is_ascii_digit) {
                    return None;
                }
            }
            b'1'..=b'9' => i = digits(i + 1),
            _ => return None,
        }
        if bytes.get(i) == Some(&b'.') {
            let end = digits(i + 1);
            if end == i + 1 {
                return None;
            }
            i = end;
        }
        if matches!(bytes.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(bytes.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            let end = digits(i);
            if end == i {
                return None;
            }
            i = end;
        }
        self.at = i;
        Some(())
    }

    /// An object's key in a raw value, after `{` or `,`: a string, then `:`.
    fn skip_key(&mut self) -> Option<()> {
        if self.peek()? != b'"' {
            return None;
        }
        self.skip_str()?;
        if self.peek()? != b':' {
            return None;
        }
        self.at += 1;
        Some(())
    }

    /// Any value, at its first byte: its text, as serde_json's raw values have it.
    fn raw_value(&mut self) -> Option<&'a str> {
        let start = self.at;
        // One bit per open container, innermost lowest: 1 for an object.
        let mut stack: u128 = 0;
        let mut depth = 0;
        loop {
            match self.peek()? {
                b'n' => self.literal(b"null")?,
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'-' | b'0'..=b'9' => self.skip_number()?,
                b'"' => self.skip_str()?,
                open @ (b'{' | b'[') => {
                    if depth == MAX_DEPTH {
                        return None;
                    }
                    self.at += 1;
                    let object = open == b'{';
                    let close = if object { b'}' } else { b']' };
                    if self.peek()? == close {
                        self.at += 1;
                    } else {
                        stack = stack << 1 | u128::from(object);
                        depth += 1;
                        if object {
                            self.skip_key()?;
                        }
                        continue;
                    }
                }
                _ => return None,
            }
            // After a value: close what ends here, or go on after a comma.
            loop {
                if depth == 0 {
                    return self.text.get(start..self.at);
                }
                let object = stack & 1 == 1;
                match self.peek()? {
                    b',' => {
                        self.at += 1;
                        if object {
                            self.skip_key()?;
                        }
                        break;
                    }
                    b'}' if object => {}
                    b']' if !object => {}
                    _ => return None,
                }
                self.at += 1;
                stack >>= 1;
                depth -= 1;
            }
        }
    }

    /// An object's members, at its `{`: `member` is called with each key at its value's first
    /// byte and must consume the value. Commas, colons and the end are read as serde_json's
    /// map access reads them (no trailing comma, keys are strings).
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.at += 1;
        let mut first = true;
        loop {
            let b = self.peek()?;
            if b == b'}' {
                self.at += 1;
                return Some(());
            }
            if !first {
                if b != b',' {
                    return None;
                }
                self.at += 1;
            }
            first = false;
            if self.peek()? != b'"' {
                return None;
            }
            let key = self.plain_str()?;
            if self.peek()? != b':' {
                return None;
            }
            self.at += 1;
            self.peek()?;
            member(self, key)?;
        }
    }

    /// A string or `null`, at the value.
    fn optional_str(&mut self) -> Option<Option<&'a str>> {
        match self.peek()? {
            b'n' => self.literal(b"null").map(|()| None),
            b'"' => self.plain_str().map(Some),
            _ => None,
        }
    }

    /// A map of strings or `null`, at the value, into `pairs` (emptied first: a later
    /// duplicate key wins, as in `Pairs`): sorted by key, later duplicate keys winning.
    fn pairs_into(&mut self, pairs: &mut Pairs<'a>) -> Option<()> {
        pairs.clear();
        match self.peek()? {
            b'n' => self.literal(b"null"),
            b'{' => {
                self.object(|r, key| {
                    if r.peek()? != b'"' {
                        return None;
                    }
                    pairs.push((key, r.plain_str()?));
                    Some(())
                })?;
                let kept = sort_dedup(pairs);
                pairs.truncate(kept);
                Some(())
            }
            _ => None,
        }
    }

    /// Object metadata or `null`, at the value (as `ObjectMeta`'s `Deserialize`).
    fn optional_meta(&mut self) -> Option<Option<ObjectMeta>> {
        match self.peek()? {
            b'n' => return self.literal(b"null").map(|()| None),
            b'{' => {}
            _ => return None,
        }
        let mut other = RawFieldsBuilder::default();
        let mut name = None;
        let (mut namespace, mut uid, mut resource_version) = (None, None, None);
        let mut labels = Pairs::new();
        let mut annotations = Pairs::new();
        self.object(|r, key| {
            match key {
                "name" => name = r.optional_str()?,
                "namespace" => namespace = r.optional_str()?,
                "uid" => uid = r.optional_str()?,
                "resourceVersion" => resource_version = r.optional_str()?,
                "labels" => r.pairs_into(&mut labels)?,
                "annotations" => r.pairs_into(&mut annotations)?,
                _ => other.push(Cow::Borrowed(key), Cow::Borrowed(r.raw_value()?)),
            }
            Some(())
        })?;
        let strings = MetaStrings {
            other: OtherSource::Members(other.members()),
            name: name.unwrap_or(""),
            namespace,
            uid,
            resource_version,
            labels: MapSource::Sorted(&labels),
            annotations: MapSource::Sorted(&annotations),
        };
        Some(Some(strings.build()))
    }
}

/// The [`DynamicObject`] whose JSON object starts `text` (at its `{`), and the bytes it takes;
/// `None` when this decoder leaves it to serde_json.
pub(crate) fn dynamic_object(text: &str) -> Option<(DynamicObject, usize)> {
    let mut r = Reader::at_object(text)?;
    let mut obj = DynamicObject::default();
    let mut fields = RawFieldsBuilder::default();
    r.object(|r, key| {
        match key {
            "apiVersion" => obj.api_version = r.optional_str()?.map(Into::into),
            "kind" => obj.kind = r.optional_str()?.map(Into::into),
            "metadata" => obj.metadata = r.optional_meta()?.unwrap_or_default(),
            _ => fields.push(Cow::Borrowed(key), Cow::Borrowed(r.raw_value()?)),
        }
        Some(())
    })?;
    obj.fields = fields.finish();
    Some((obj, r.at))
}

/// The identity of the JSON object that starts `text` (at its `{`), read without building it:
/// `metadata.namespace`, `metadata.name` and `metadata.resourceVersion` as a [`DynamicObject`]
/// decoded from it would have them (a later `metadata` member replaces an earlier one, a later
/// member of `metadata` an earlier one), and the bytes the object takes. Every other value is
/// skipped with the grammar checks of [`dynamic_object`]'s raw values. `None` where that
/// decoder would leave the text to serde_json for these members (an escape or a value that is
/// not a string or `null`) or the text is not one JSON object.
pub(crate) fn identity(text: &str) -> Option<(crate::object::JsonIdentity<'_>, usize)> {
    let mut r = Reader::at_object(text)?;
    let (mut namespace, mut name, mut resource_version) = (None, None, None);
    r.object(|r, key| {
        if key != "metadata" {
            return r.raw_value().map(drop);
        }
        (namespace, name, resource_version) = (None, None, None);
        match r.peek()? {
            b'n' => r.literal(b"null"),
            b'{' => r.object(|r, key| {
                match key {
                    "name" => name = r.optional_str()?,
                    "namespace" => namespace = r.optional_str()?,
                    "resourceVersion" => resource_version = r.optional_str()?,
                    _ => {
                        r.raw_value()?;
                    }
                }
                Some(())
            }),
            _ => None,
        }
    })?;
    let id = crate::object::JsonIdentity {
        namespace: namespace.filter(|n: &&str| !n.is_empty()),
        name: name.unwrap_or(""),
        resource_version,
    };
    Some((id, r.at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::{KeyRef, Object};
    use alloc::format;
    use alloc::string::{String, ToString};
    use alloc::vec::Vec;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    /// serde_json's answer for the object starting `text`: it and the bytes it takes.
    fn serde(text: &str) -> Option<(DynamicObject, usize)> {
        let mut stream = serde_json::Deserializer::from_str(text).into_iter::<DynamicObject>();
        let obj = stream.next()?.ok()?;
        Some((obj, stream.byte_offset()))
    }

    /// Checks the straight decoder against serde_json on `text`: when it decodes, serde_json
    /// decodes the same object of the same length. Returns whether it decoded.
    fn agree(text: &str) -> bool {
        identity_agrees(text);
        let Some((obj, len)) = dynamic_object(text) else {
            return false;
        };
        assert!(identity(text).is_some(), "identity refused {text:?}");
        let (want, want_len) =
            serde(text).unwrap_or_else(|| panic!("accepted what serde_json refuses: {text:?}"));
        assert_eq!(obj, want, "{text:?}");
        assert_eq!(len, want_len, "{text:?}");
        true
    }

    /// Checks [`identity`] on `text`: what it reads is one JSON value for serde_json, of the
    /// same length, and when serde_json decodes a `DynamicObject` from it, that object has the
    /// identity read.
    fn identity_agrees(text: &str) {
        let Some((id, len)) = identity(text) else {
            return;
        };
        let mut any = serde_json::Deserializer::from_str(text).into_iter::<serde::de::IgnoredAny>();
        assert!(
            matches!(any.next(), Some(Ok(_))),
            "identity read what is not JSON: {text:?}"
        );
        assert_eq!(any.byte_offset(), len, "{text:?}");
        if let Some((obj, _)) = serde(text) {
            assert_eq!(id.key(), obj.key_ref(), "{text:?}");
            assert_eq!(id.resource_version, obj.resource_version(), "{text:?}");
        }
    }

    /// The bench's ConfigMap as kube-apiserver sends it.
    fn config_map(payload: &str) -> String {
        format!(
            r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"cm-1","namespace":"bench-1","uid":"3596bd45-97d7-49b8-a854-1725105d5c02","resourceVersion":"2275","creationTimestamp":"2026-11-23T08:35:24Z","labels":{{"app":"bench","shard":"12"}},"managedFields":[{{"manager":"unknown","operation":"Update","apiVersion":"v1","time":"2026-11-23T08:35:24Z","fieldsType":"FieldsV1","fieldsV1":{{"f:data":{{".":{{}},"f:payload":{{}}}},"f:metadata":{{"f:labels":{{".":{{}},"f:app":{{}},"f:shard":{{}}}}}}}}}}]}},"data":{{"payload":"{payload}"}}}}"#
        )
    }

    /// The plain run ends at the first `"`, `\\` or control byte wherever it lies (in the
    /// word-at-a-time head, a 64-byte block, the words after it, the last bytes), whatever
    /// follows it, with multi-byte characters and bytes that differ from a stop byte by one
    /// around it.
    #[test]
    fn plain_run_stops_at_the_first_stop_byte() {
        let naive = |s: &[u8]| s.iter().position(|&b| stops(b)).unwrap_or(s.len());
        let fillers: [&[u8]; 4] = [
            b"a",
            "é".as_bytes(),
            b"\x21\x23\x5b\x5d\x20",
            b"\x7f\xa2\xdc\xff",
        ];
        for filler in fillers {
            for len in 0..200 {
                let plain: Vec<u8> = filler.iter().copied().cycle().take(len).collect();
                assert_eq!(plain_run(&plain), len);
                for stop in [b'"', b'\\', 0, 0x1f, b'\n'] {
                    for after in [&b""[..], b"\"", b"\x01\\", b"zzzzzzzzzzzzzzzzzzzzzzzzzzz"] {
                        let mut s = plain.clone();
                        s.push(stop);
                        s.extend_from_slice(after);
                        assert_eq!(plain_run(&s), naive(&s), "{s:?}");
                        assert_eq!(plain_run(&s), len);
                    }
                }
            }
        }
    }

    #[test]
    fn a_config_map_decodes_straight_as_serde_json_decodes_it() {
        let text = config_map(&"abcdefghij".repeat(100));
        assert!(agree(&text));
        let followed = format!("{text},{text}]");
        assert!(agree(&followed), "only the first object is read");
        assert_eq!(dynamic_object(&followed).unwrap().1, text.len());
        let (obj, _) = dynamic_object(&text).unwrap();
        assert_eq!(obj.metadata.labels().get("shard"), Some("12"));
        assert_eq!(
            obj.metadata.uid(),
            Some("3596bd45-97d7-49b8-a854-1725105d5c02")
        );
        assert!(obj.metadata.other().contains_key("managedFields"));
        assert_eq!(
            obj.field::<Value>("data").unwrap().unwrap()["payload"]
                .as_str()
                .unwrap()
                .len(),
            1000
        );
    }

    /// Escapes and other bytes that end a plain run, at every position around the 32-byte
    /// steps (of the value and of the text): in a raw value they are read (or refused) as
    /// serde_json reads them, in a kept string an escape leaves the object to serde_json.
    #[test]
    fn escapes_and_control_bytes_at_every_offset() {
        let valid = [
            r#"\""#,
            r#"\\"#,
            r#"\/"#,
            r#"\b\f\n\r\t"#,
            r#"\u00e9"#,
            r#"\uD83D\uDE00"#,
            "é",
            "日本",
            "\u{7f}",
        ];
        let invalid = [
            "\u{1}",
            "\n",
            "\u{1f}",
            r#"\x"#,
            r#"\u12"#,
            r#"\u12G4"#,
            r#"\q"#,
            "\t",
        ];
        for pad in 0..80 {
            let head = "p".repeat(pad);
            for special in valid {
                let text = config_map(&format!("{head}{special}tail"));
                assert!(agree(&text), "{text}");
                let text = config_map(&format!("{head}{special}"));
                assert!(agree(&text), "{text}");
                // In kept strings: the name, a label's key and value, a member's key.
                for kept in [
                    format!(r#"{{"metadata":{{"name":"{head}{special}"}}}}"#),
                    format!(r#"{{"metadata":{{"labels":{{"{head}{special}":"v"}}}}}}"#),
                    format!(r#"{{"metadata":{{"labels":{{"k":"{head}{special}"}}}}}}"#),
                    format!(r#"{{"{head}{special}":1}}"#),
                ] {
                    let straight = agree(&kept);
                    assert!(serde(&kept).is_some(), "{kept}");
                    assert_eq!(straight, !special.starts_with('\\'), "{kept}");
                }
            }
            for special in invalid {
                let text = config_map(&format!("{head}{special}tail"));
                assert!(serde(&text).is_none(), "serde_json refuses {text:?}");
                assert!(!agree(&text), "{text:?}");
                let kept = format!(r#"{{"metadata":{{"name":"{head}{special}"}}}}"#);
                assert!(!agree(&kept));
            }
            // A backslash that escapes the closing quote: the string never ends.
            let text = config_map(&format!("{head}\\"));
            assert!(serde(&text).is_none() && !agree(&text), "{text:?}");
        }
    }

    /// Raw numbers and literals: accepted exactly where serde_json accepts them.
    #[test]
    fn numbers_and_literals_as_serde_json_has_them() {
        let good = [
            "0",
            "-0",
            "7",
            "-12",
            "10",
            "1.5",
            "0.0",
            "-0.25",
            "1e5",
            "1E5",
            "1e+5",
            "1e-5",
            "2.5E-10",
            "1e400",
            "123456789012345678901234567890",
            "true",
            "false",
            "null",
        ];
        let bad = [
            "01", "-", "-a", "+1", "1.", ".5", "1e", "1e+", "1.e5", "--1", "0x1", "1.5.5", "tru",
            "nul", "nulll", "truex", "fals", "True", "NaN", "Infinity", "1 2",
        ];
        for (n, ok) in good
            .iter()
            .map(|n| (n, true))
            .chain(bad.iter().map(|n| (n, false)))
        {
            for text in [
                format!(r#"{{"x":{n}}}"#),
                format!(r#"{{"x":[{n}]}}"#),
                format!(r#"{{"x":[1,{n},{{"a":{n}}}]}}"#),
                format!(r#"{{"metadata":{{"x":{n}}}}}"#),
            ] {
                assert_eq!(serde(&text).is_some(), ok, "{text}");
                assert_eq!(agree(&text), ok, "{text}");
            }
        }
    }

    #[test]
    fn structure_whitespace_duplicates_and_types() {
        for (text, straight) in [
            ("{}", true),
            (" {}", false),
            ("{ }", true),
            (
                " { \"kind\" : \"X\" ,\n\t\"metadata\"\r: { \"name\" : \"a\" , \"labels\" : { } } , \"spec\" : [ 1 , { } , [ ] , { \"a\" : [ null ] } ] } ",
                false,
            ),
            (
                "{ \"kind\" : \"X\" ,\n\t\"metadata\"\r: { \"name\" : \"a\" , \"labels\" : { } } , \"spec\" : [ 1 , { } , [ ] , { \"a\" : [ null ] } ] } ",
                true,
            ),
            (
                r#"{"kind":"A","kind":null,"apiVersion":"v1","metadata":{"name":"a","name":"b","namespace":null,"labels":{"x":"1"},"labels":{"y":"2","b":"0","y":"3"},"annotations":null,"o":1,"o":2},"data":1,"data":{"k":"v"}}"#,
                true,
            ),
            (r#"{"metadata":null,"kind":"K"}"#, true),
            (
                r#"{"metadata":{"uid":"u","resourceVersion":"9","annotations":{"a":"1","a":"2"}}}"#,
                true,
            ),
            (r#"{"x":{"a":{"b":{"c":[[[]]]}}}}"#, true),
            (r#"{"a":1,}"#, false),
            (r#"{,}"#, false),
            (r#"{"a" 1}"#, false),
            (r#"{"a":1 "b":2}"#, false),
            (r#"{"a":[1,]}"#, false),
            (r#"{"a":[1 2]}"#, false),
            (r#"{"a":{"b":1,}}"#, false),
            (r#"{"a":{"b" 1}}"#, false),
            (r#"{"a":{1:2}}"#, false),
            (r#"{"a":{"b":1]}"#, false),
            (r#"{"a":[1}"#, false),
            (r#"{"a":]"#, false),
            (r#"{"a":}"#, false),
            (r#"{"a"}"#, false),
            (r#"{1:2}"#, false),
            (r#"{"metadata":5}"#, false),
            (r#"{"metadata":[]}"#, false),
            (r#"{"kind":5}"#, false),
            (r#"{"kind":{}}"#, false),
            (r#"{"metadata":{"name":1}}"#, false),
            (r#"{"metadata":{"labels":{"a":1}}}"#, false),
            (r#"{"metadata":{"labels":{"a":null}}}"#, false),
            (r#"{"metadata":{"labels":[]}}"#, false),
            (r#"{"metadata":{"labels":"x"}}"#, false),
            (r#"{"a":1}trailing"#, true),
            (r#"{"a":1"#, false),
            ("[]", false),
            ("", false),
        ] {
            assert_eq!(agree(text), straight, "{text}");
        }
        let deep = format!(r#"{{"x":{}{}}}"#, "[".repeat(200), "]".repeat(200));
        assert!(serde(&deep).is_some());
        assert!(!agree(&deep), "deeper than it follows: left to serde_json");
        let deep = format!(r#"{{"x":{}{}}}"#, "[".repeat(127), "]".repeat(127));
        assert!(agree(&deep));
    }

    /// Every prefix of an object, and the object with any one byte changed to one that
    /// matters to the grammar: never accepted where serde_json refuses, the same object where
    /// both accept.
    #[test]
    fn cut_or_changed_anywhere() {
        let text = config_map(r#"ab\"c\u00e9d\\e"#);
        let bytes = text.as_bytes();
        for end in 0..bytes.len() {
            if let Some(prefix) = text.get(..end) {
                assert!(!agree(prefix), "a prefix is not an object: {prefix:?}");
            }
        }
        let mut straight = 0;
        for i in 0..bytes.len() {
            for b in *b"\"\\{}[]:, \n0-e.nulx\x01\x7f" {
                let mut changed = bytes.to_vec();
                changed[i] = b;
                if let Ok(changed) = String::from_utf8(changed) {
                    straight += usize::from(agree(&changed));
                }
            }
        }
        assert!(straight > 0);
    }

    fn arb_string() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop_oneof![
                Just('a'),
                Just('"'),
                Just('\\'),
                Just('/'),
                Just('\n'),
                Just('\u{1}'),
                Just('é'),
                Just('😀'),
                Just(' '),
            ],
            0..40,
        )
        .prop_map(|c| c.into_iter().collect())
    }

    fn arb_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            arb_string().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((arb_string(), inner), 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn arb_key() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("apiVersion".to_string()),
            Just("kind".to_string()),
            Just("metadata".to_string()),
            Just("name".to_string()),
            Just("namespace".to_string()),
            Just("labels".to_string()),
            Just("annotations".to_string()),
            Just("data".to_string()),
            arb_string(),
        ]
    }

    /// An object of `members`, metadata with `meta` members, some values strings or maps of
    /// strings (what the kept fields want), printed compact or pretty.
    fn arb_object() -> impl Strategy<Value = String> {
        let member = || {
            (
                arb_key(),
                prop_oneof![
                    arb_value(),
                    arb_string().prop_map(Value::String),
                    prop::collection::vec((arb_string(), arb_string()), 0..4).prop_map(|m| {
                        Value::Object(m.into_iter().map(|(k, v)| (k, Value::String(v))).collect())
                    }),
                ],
            )
        };
        (
            prop::collection::vec(member(), 0..6),
            prop::collection::vec(member(), 0..8),
            any::<bool>(),
        )
            .prop_map(|(top, meta, pretty)| {
                let mut obj: serde_json::Map<String, Value> = top.into_iter().collect();
                obj.insert("metadata".into(), Value::Object(meta.into_iter().collect()));
                let v = Value::Object(obj);
                if pretty {
                    serde_json::to_string_pretty(&v).unwrap()
                } else {
                    serde_json::to_string(&v).unwrap()
                }
            })
    }

    proptest! {
        /// Generated objects, then the same with one byte changed: the straight decoder never
        /// disagrees with serde_json.
        #[test]
        fn agrees_with_serde_json(text in arb_object(), at in any::<prop::sample::Index>(), b in prop_oneof![Just(b'"'), Just(b'\\'), Just(b'}'), Just(b','), Just(b':'), Just(b'1'), Just(b'\x02'), Just(b' ')]) {
            agree(&text);
            let mut changed = text.clone().into_bytes();
            let i = at.index(changed.len());
            changed[i] = b;
            if let Ok(changed) = String::from_utf8(changed) {
                agree(&changed);
            }
        }
    }

    #[test]
    fn identity_of_a_config_map_and_of_odd_metadata() {
        let text = config_map("x") + ",{";
        let (id, len) = identity(&text).unwrap();
        assert_eq!(id.key(), KeyRef::new(Some("bench-1"), "cm-1"));
        assert_eq!(id.resource_version, Some("2275"));
        assert_eq!(&text[len..], ",{");
        // A later `metadata` replaces an earlier one; a later member an earlier one.
        let text =
            r#"{"metadata":{"name":"a","resourceVersion":"1"},"metadata":{"name":"b","name":"c"}}"#;
        let (id, _) = identity(text).unwrap();
        assert_eq!(
            (id.name, id.namespace, id.resource_version),
            ("c", None, None)
        );
        let (id, _) = identity(r#"{"metadata":null}"#).unwrap();
        assert_eq!((id.name, id.resource_version), ("", None));
        // Left to decoding: an escape in a member kept, a member of another type, broken text.
        for text in [
            r#"{"metadata":{"name":"a\u0062"}}"#,
            r#"{"metadata":{"resourceVersion":7}}"#,
            r#"{"metadata":[]}"#,
            r#"{"metadata":{"name":"a"},"data":{"k":"v",}}"#,
            r#"{"metadata":{"name":"a"}"#,
            r#"["metadata"]"#,
        ] {
            assert_eq!(identity(text), None, "{text}");
        }
    }

    #[test]
    fn a_value_printed_by_serde_json_decodes_straight() {
        let value = json!({"metadata": {"name": "n", "labels": {"a": "b"}},
            "spec": {"x": [1, 2.5, -3e-7, null, true, "s", {"k": []}]}});
        for text in [
            serde_json::to_string(&value).unwrap(),
            serde_json::to_string_pretty(&value).unwrap(),
        ] {
            assert!(agree(&text), "{text}");
        }
    }
}
