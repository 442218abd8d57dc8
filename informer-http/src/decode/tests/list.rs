//! The streaming list decoder against serde_json (the previous whole-body decoder, kept here
//! as the reference, behind a strict serde_json parse of everything but the items), for edge
//! cases, the inputs of `tests/data/crashes/`, and random lists, with junk in the fields the
//! decoder skips, cut into random chunks.

use super::*;
use informer_core::object::FromJson;
use serde_json::value::RawValue;

#[derive(Deserialize)]
struct RawList<'a> {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    metadata: ListMeta,
    #[serde(borrow, default)]
    items: Option<Vec<&'a RawValue>>,
}

#[derive(Deserialize)]
struct TypedList<K> {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default = "none")]
    items: Option<Vec<K>>,
}

fn none<T>() -> Option<T> {
    None
}

/// The previous, whole-body list decoder, kept as the reference: decodes a list answer (`{"kind":"…List","metadata":{…},"items":[…]}`) into a page.
///
/// One pass when every item decodes; otherwise a second pass decodes the items one by one
/// from the borrowed body and fails the page with [`DecodeError::Object`] naming the first item
/// that does not decode.
pub(super) fn reference_decode_list<K: DeserializeOwned>(
    body: &[u8],
) -> Result<ListPage<K>, DecodeError> {
    match serde_json::from_slice::<TypedList<K>>(body) {
        Ok(list) => Ok(ListPage {
            items: list
                .items
                .unwrap_or_default()
                .into_iter()
                .map(Arc::new)
                .collect(),
            resource_version: list.metadata.resource_version.unwrap_or_default(),
            continue_token: list.metadata.continue_token.filter(|c| !c.is_empty()),
            remaining_item_count: list
                .metadata
                .remaining_item_count
                .and_then(|n| u64::try_from(n).ok()),
        }),
        Err(_) => reference_decode_list_slow(body),
    }
}

fn reference_decode_list_slow<K: DeserializeOwned>(
    body: &[u8],
) -> Result<ListPage<K>, DecodeError> {
    let list: RawList<'_> = serde_json::from_slice(body).map_err(|e| DecodeError::Malformed {
        message: e.to_string(),
    })?;
    let item_kind = list
        .kind
        .as_deref()
        .and_then(|k| k.strip_suffix("List"))
        .map(str::to_string);
    let raw_items = list.items.unwrap_or_default();
    let mut items = Vec::with_capacity(raw_items.len());
    for raw in raw_items {
        match serde_json::from_str::<K>(raw.get()) {
            Ok(obj) => items.push(Arc::new(obj)),
            Err(e) => {
                let mut err = object_error(None, raw.get(), e);
                if let DecodeError::Object { kind, .. } = &mut err {
                    if kind.is_none() {
                        kind.clone_from(&item_kind);
                    }
                }
                return Err(err);
            }
        }
    }
    Ok(ListPage {
        items,
        resource_version: list.metadata.resource_version.unwrap_or_default(),
        continue_token: list.metadata.continue_token.filter(|c| !c.is_empty()),
        remaining_item_count: list
            .metadata
            .remaining_item_count
            .and_then(|n| u64::try_from(n).ok()),
    })
}

/// serde_json as the oracle. A body is a list when serde_json parses it as an object whose
/// every part but the items is a `serde_json::Value` — strictly, so: strings of valid UTF-8
/// with paired surrogate escapes, numbers within `f64` range, at most 128 levels deep — and
/// whose `items` is `null` or an array of JSON texts (so UTF-8); the page is then what serde_json
/// decodes the body to ([`reference_decode_list`]).
///
/// (serde_json's typed decoding alone does not do: it skips the fields a type ignores without
/// checking their UTF-8, surrogates or number range, while the same body as a
/// `serde_json::Value` fails.)
fn oracle<K: DeserializeOwned>(body: &[u8]) -> Result<ListPage<K>, DecodeError> {
    serde_json::from_slice::<Skeleton>(body).map_err(|e| DecodeError::Malformed {
        message: e.to_string(),
    })?;
    reference_decode_list(body)
}

/// A list body's structure, parsed strictly outside the items (see [`oracle`]).
struct Skeleton;

impl<'de> Deserialize<'de> for Skeleton {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Skeleton;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Skeleton, A::Error> {
                while let Some(key) = map.next_key::<String>()? {
                    if key == "items" {
                        map.next_value::<Option<Vec<Box<RawValue>>>>()?;
                    } else {
                        map.next_value::<serde_json::Value>()?;
                    }
                }
                Ok(Skeleton)
            }
        }
        d.deserialize_map(V)
    }
}

/// A list result rendered for comparison: the page, or the error (any `Malformed` alike: the
/// messages differ between the decoders).
fn show<K: fmt::Debug>(r: &Result<ListPage<K>, DecodeError>) -> String {
    match r {
        Ok(p) => format!(
            "OK items={:?} rv={:?} continue={:?} remaining={:?}",
            p.items, p.resource_version, p.continue_token, p.remaining_item_count
        ),
        Err(DecodeError::Malformed { .. }) => "ERR Malformed".to_string(),
        Err(e) => format!("ERR {e:?}"),
    }
}

/// Streams `body` cut at `cuts` (positions, any order) through a [`ListDecoder`].
fn streamed<K: FromJson>(body: &[u8], cuts: &[usize]) -> Result<ListPage<K>, DecodeError> {
    let mut points: Vec<usize> = cuts.iter().map(|&c| c.min(body.len())).collect();
    points.sort_unstable();
    let mut d = ListDecoder::<K>::new();
    let mut prev = 0;
    for p in points.into_iter().chain([body.len()]) {
        d.feed(&body[prev..p])?;
        prev = p;
    }
    d.finish()
}

/// Objects held as an informer's cache holds them, one per key, for
/// [`ListDecoder::with_known`].
#[derive(Default)]
struct Held(BTreeMap<(Option<String>, String), Arc<DynamicObject>>);

impl Held {
    fn hold(&mut self, obj: Arc<DynamicObject>) {
        let k = obj.key_ref();
        self.0
            .insert((k.namespace.map(str::to_string), k.name.to_string()), obj);
    }
}

impl KnownObjects<DynamicObject> for Held {
    fn known(
        &self,
        key: informer_core::object::KeyRef<'_>,
        rv: &str,
    ) -> Option<Arc<DynamicObject>> {
        let obj = self
            .0
            .get(&(key.namespace.map(str::to_string), key.name.to_string()))?;
        (obj.resource_version() == Some(rv)).then(|| obj.clone())
    }
}

/// [`streamed`] with `known` objects.
fn streamed_known(
    body: &[u8],
    cuts: &[usize],
    known: Arc<Held>,
) -> Result<ListPage<DynamicObject>, DecodeError> {
    let mut points: Vec<usize> = cuts.iter().map(|&c| c.min(body.len())).collect();
    points.sort_unstable();
    let mut d = ListDecoder::<DynamicObject>::new().with_known(known);
    let mut prev = 0;
    for p in points.into_iter().chain([body.len()]) {
        d.feed(&body[prev..p])?;
        prev = p;
    }
    d.finish()
}

/// Positions to cut a body of `len` bytes at, from a seed (a small xorshift generator: the
/// same cuts every run).
fn random_cuts(len: usize, seed: u64) -> Vec<usize> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let n = (seed as usize % 7) + 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % (len as u64 + 1)) as usize
        })
        .collect()
}

/// Decodes `body` every way (serde_json, whole, byte by byte, in threes, in random chunks) and
/// checks they agree; returns the streamed result.
fn all_ways<K: FromJson + fmt::Debug>(body: &[u8]) -> Result<ListPage<K>, DecodeError> {
    let reference = show(&oracle::<K>(body));
    let whole = decode_list::<K>(body);
    assert_eq!(
        show(&whole),
        reference,
        "whole body: {}",
        String::from_utf8_lossy(body)
    );
    let bytewise: Vec<usize> = (0..body.len()).collect();
    assert_eq!(
        show(&streamed::<K>(body, &bytewise)),
        reference,
        "byte by byte"
    );
    let threes: Vec<usize> = (0..body.len()).step_by(3).collect();
    assert_eq!(show(&streamed::<K>(body, &threes)), reference, "in threes");
    for seed in 0..16 {
        let cuts = random_cuts(body.len(), seed);
        assert_eq!(
            show(&streamed::<K>(body, &cuts)),
            reference,
            "cut at {cuts:?}: {}",
            String::from_utf8_lossy(body)
        );
    }
    whole
}

#[test]
fn strings_with_brackets_quotes_and_escapes() {
    let body = br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"5"},"items":[{"metadata":{"name":"a]}\"\\","namespace":"n\u005d\u007D\/"},"data":{"k]":"}]\"{[","\\":"\\\"","u":"\u00fc\ud83d\ude00\n\t\b\f\r"}},{"metadata":{"name":"b"},"data":{}}],"x":"]]]}}}\"","y":["}",{"]":"["}]}"#;
    let page = all_ways::<DynamicObject>(body).unwrap();
    assert_eq!(page.items.len(), 2);
    assert_eq!(page.items[0].name(), "a]}\"\\");
    assert_eq!(page.items[0].namespace(), Some("n]}/"));
    assert_eq!(page.resource_version, "5");
    let strict = all_ways::<Strict>(body).unwrap();
    assert_eq!(strict.items[0].data["u"], "ü😀\n\t\u{8}\u{c}\r");
    assert_eq!(strict.items[0].data["k]"], "}]\"{[");
}

/// Strings longer than the scanner's short-string loop (searched in bulk past their first
/// bytes), with escaped quotes, backslashes and brackets just before, at and after that point
/// and far into the string: every item still ends where it does, however the body is cut.
#[test]
fn long_strings_with_escapes_at_every_distance() {
    let mut items = Vec::new();
    let mut expected = Vec::new();
    for len in [23usize, 24, 25, 26, 40, 300] {
        let places = [0, 1, 22, 23, 24, 25, len / 2, len - 2, len - 1];
        for at in places.into_iter().filter(|&at| at < len) {
            for escape in [r#"\""#, r"\\", "]}", r#"\"]}"#] {
                let mut raw = "x".repeat(at);
                raw.push_str(escape);
                raw.push_str(&"y".repeat(len - at));
                let value: String = serde_json::from_str(&format!("\"{raw}\"")).unwrap();
                items.push(format!(
                    r#"{{"metadata":{{"name":"n{}"}},"data":{{"k":"{raw}"}}}}"#,
                    items.len()
                ));
                expected.push(value);
            }
        }
    }
    let body = format!(
        r#"{{"kind":"ConfigMapList","metadata":{{"resourceVersion":"9"}},"items":[{}]}}"#,
        items.join(",")
    );
    let page = all_ways::<Strict>(body.as_bytes()).unwrap();
    assert_eq!(page.items.len(), expected.len());
    for (item, value) in page.items.iter().zip(&expected) {
        assert_eq!(&item.data["k"], value);
    }
}

#[test]
fn null_empty_and_missing_items() {
    for body in [
        &br#"{"kind":"PodList","metadata":{"resourceVersion":"1"},"items":null}"#[..],
        br#"{"kind":"PodList","metadata":{"resourceVersion":"1"},"items":[]}"#,
        br#" { "items" : [ ] , "metadata" : { "resourceVersion" : "1" } } "#,
        br#"{"metadata":{"resourceVersion":"1"}}"#,
        b"\n\t{\"items\":\r\nnull,\"metadata\":{\"resourceVersion\":\"1\"}}\n",
    ] {
        let page = all_ways::<DynamicObject>(body).unwrap();
        assert!(page.items.is_empty());
        assert_eq!(page.resource_version, "1");
    }
    let page = all_ways::<DynamicObject>(b"{}").unwrap();
    assert!(page.items.is_empty());
    assert_eq!(page.resource_version, "");
}

#[test]
fn keys_in_any_order_and_metadata_after_items() {
    let body = br#"{"items":[{"metadata":{"name":"a","resourceVersion":"3"}},{"metadata":{"name":"b"}}],"unknown":{"deep":[[[{"a":[1,-2.5e+3,0,true,false,null]}]]]},"metadata":{"remainingItemCount":3,"continue":"tok","resourceVersion":"42"},"apiVersion":"v1","kind":"ConfigMapList"}"#;
    let page = all_ways::<DynamicObject>(body).unwrap();
    assert_eq!(page.items.len(), 2);
    assert_eq!(page.items[1].name(), "b");
    assert_eq!(page.resource_version, "42");
    assert_eq!(page.continue_token.as_deref(), Some("tok"));
    assert_eq!(page.remaining_item_count, Some(3));
    // An escaped key is the same key.
    let escaped =
        br#"{"it\u0065ms":[{"metadata":{"name":"a"}}],"m\u0065tadata":{"resourceVersion":"2"}}"#;
    let page = all_ways::<DynamicObject>(escaped).unwrap();
    assert_eq!((page.items.len(), page.resource_version.as_str()), (1, "2"));
    // Negative remainingItemCount, empty continue: as before.
    let odd = br#"{"metadata":{"remainingItemCount":-1,"continue":""},"items":[]}"#;
    let page = all_ways::<DynamicObject>(odd).unwrap();
    assert_eq!(
        (page.remaining_item_count, page.continue_token),
        (None, None)
    );
}

#[test]
fn malformed_bodies_fail() {
    let good = br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"5"},"items":[{"metadata":{"name":"a"}}]}"#;
    for cut in 0..good.len() {
        let r = all_ways::<DynamicObject>(&good[..cut]);
        assert!(
            matches!(r, Err(DecodeError::Malformed { .. })),
            "cut at {cut}: {r:?}"
        );
    }
    for body in [
        &b""[..],
        b"   ",
        b"<html>",
        b"null",
        b"\"items\"",
        br#"{"items":[]}x"#,
        br#"{"items":[]}}"#,
        br#"{"items":[]} {}"#,
        br#"{"items":[}"#,
        br#"{"items":[{]}"#,
        br#"{"items":[{"metadata":{"name":"a"}]]}"#,
        br#"{"items":{}}"#,
        br#"{"items":7}"#,
        br#"{"items":"x"}"#,
        br#"{"items":nul}"#,
        br#"{"items":[],}"#,
        br#"{"items":[],"items":[]}"#,
        br#"{"metadata":{},"metadata":{}}"#,
        br#"{"metadata":null}"#,
        br#"{"metadata":{"resourceVersion":5}}"#,
        br#"{"x":01}"#,
        br#"{"x":-}"#,
        br#"{"x":1.}"#,
        br#"{"x":1e}"#,
        br#"{"x":"\x"}"#,
        br#"{"x":"\u12G4"}"#,
        b"{\"x\":\"a\nb\"}",
        br#"{"x":tru}"#,
        br#"{"x" 1}"#,
        br#"{x:1}"#,
        br#"{"x":[1 2]}"#,
        br#"{"x":[1,]}"#,
    ] {
        let r = all_ways::<DynamicObject>(body);
        assert!(
            matches!(r, Err(DecodeError::Malformed { .. })),
            "{}: {r:?}",
            String::from_utf8_lossy(body)
        );
    }
    // The previous decoder took a JSON array for a list (serde's sequence form of a struct); a
    // list answer is an object.
    assert!(reference_decode_list::<DynamicObject>(b"[]").is_ok());
    assert!(matches!(
        decode_list::<DynamicObject>(b"[]"),
        Err(DecodeError::Malformed { .. })
    ));
    assert!(decode_list::<DynamicObject>(br#"[{"resourceVersion":"1"},[]]"#).is_err());
    let deep = format!("{{\"x\":{}{}}}", "[".repeat(200), "]".repeat(200));
    assert!(decode_list::<DynamicObject>(deep.as_bytes()).is_err());
}

#[test]
fn an_undecodable_item_is_named() {
    let body = br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"5"},"items":[{"metadata":{"name":"a","namespace":"x"},"data":{}},{"metadata":{"name":"b","namespace":"x"},"data":{"k":1}},{"metadata":{"name":"c"},"data":{"k":2}}]}"#;
    let err = all_ways::<Strict>(body).unwrap_err();
    let DecodeError::Object {
        event_type,
        kind,
        namespace,
        name,
        message,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(event_type, &None);
    assert_eq!(kind.as_deref(), Some("ConfigMap"));
    assert_eq!(namespace.as_deref(), Some("x"));
    assert_eq!(name.as_deref(), Some("b"));
    assert!(message.contains("invalid type"), "{message}");
    // The list kind may come after the items; the item's own kind wins.
    let late_kind = br#"{"items":[{"kind":"Secret","metadata":{"name":"s"},"data":[]}],"kind":"ConfigMapList"}"#;
    let err = all_ways::<Strict>(late_kind).unwrap_err();
    assert!(
        matches!(&err, DecodeError::Object { kind: Some(k), name: Some(n), .. } if k == "Secret" && n == "s"),
        "{err:?}"
    );
    let late_kind = br#"{"items":[{"metadata":{"name":"s"},"data":[]}],"kind":"ConfigMapList"}"#;
    let err = all_ways::<Strict>(late_kind).unwrap_err();
    assert!(
        matches!(&err, DecodeError::Object { kind: Some(k), .. } if k == "ConfigMap"),
        "{err:?}"
    );
    // A bad item in an otherwise broken body: the body is what is wrong.
    let broken = br#"{"items":[{"metadata":{"name":"s"},"data":[]}],"kind":"ConfigMapList""#;
    assert!(matches!(
        all_ways::<Strict>(broken),
        Err(DecodeError::Malformed { .. })
    ));
    let bad_kind = br#"{"items":[{"metadata":{"name":"s"},"data":[]}],"kind":7}"#;
    assert!(matches!(
        all_ways::<Strict>(bad_kind),
        Err(DecodeError::Malformed { .. })
    ));
    // ... but a non-string kind does not matter when every item decodes.
    assert!(all_ways::<DynamicObject>(bad_kind).is_ok());
    // Items that are not objects.
    let scalars = br#"{"kind":"ConfigMapList","items":[1,"two",null,[3]]}"#;
    assert!(matches!(
        all_ways::<DynamicObject>(scalars),
        Err(DecodeError::Object { .. })
    ));
}

/// The inputs an outside fuzzer found (`tests/data/crashes/`, copied from the probe's report):
/// invalid UTF-8 in `kind` and in fields of `metadata` the decoder skips. serde_json refuses
/// each; so do the decoders now, whole and in any chunking. With the bad bytes replaced by
/// U+FFFD the same bodies are fine lists: what fails is the UTF-8, not the rest.
#[test]
fn crash_inputs_fail_as_serde_json_fails_them() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/crashes");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if !path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("list_decoder-")
        {
            continue;
        }
        seen += 1;
        let body = std::fs::read(&path).unwrap();
        assert!(serde_json::from_slice::<serde_json::Value>(&body).is_err());
        for r in [
            all_ways::<DynamicObject>(&body).map(drop),
            all_ways::<Strict>(&body).map(drop),
            all_ways::<serde_json::Value>(&body).map(drop),
        ] {
            assert!(
                matches!(r, Err(DecodeError::Malformed { .. })),
                "{}: {r:?}",
                path.display()
            );
        }
        let repaired = String::from_utf8_lossy(&body).into_owned();
        assert!(
            all_ways::<DynamicObject>(repaired.as_bytes()).is_ok(),
            "{}",
            path.display()
        );
    }
    assert_eq!(seen, 3, "the crash inputs are in {}", dir.display());
}

/// Junk where the decoder keeps nothing: refused exactly where a `serde_json::Value` refuses
/// it, whole and in every chunking (a character cut by a chunk boundary is fine).
#[test]
fn junk_in_skipped_fields() {
    let bad: &[&[u8]] = &[
        b"{\"kind\":\"\xff\",\"items\":[]}",
        b"{\"kind\":\"a\xe2\x82\",\"items\":[]}",
        b"{\"kind\":\"\xed\xa0\x80\",\"items\":[]}",
        b"{\"kind\":\"\xc0\xaf\"}",
        b"{\"kind\":\"\xf4\x90\x80\x80\"}",
        b"{\"items\":[],\"metadata\":{\"x\":[\"\x80\"]}}",
        b"{\"items\":[],\"metadata\":{\"\xff\":1}}",
        b"{\"other\":{\"a\":{\"b\":\"\xf0\x9f\x98\"}},\"items\":[]}",
        br#"{"kind":"\ud800","items":[]}"#,
        br#"{"kind":"\udc00x","items":[]}"#,
        br#"{"x":"\ud800\u0041"}"#,
        br#"{"x":"\ud800\n"}"#,
        br#"{"x":"\ud800\ud800"}"#,
        br#"{"x":"\ud800"}"#,
        br#"{"metadata":{"y":["\uDFFF"]}}"#,
        br#"{"x":1e400}"#,
        br#"{"x":[-1e400]}"#,
        br#"{"metadata":{"resourceVersion":"1","n":1.8e308},"items":[]}"#,
    ];
    for body in bad {
        let r = all_ways::<DynamicObject>(body);
        assert!(
            matches!(r, Err(DecodeError::Malformed { .. })),
            "{}: {r:?}",
            String::from_utf8_lossy(body)
        );
    }
    let good: &[&[u8]] = &[
        "{\"kind\":\"ü€😀\",\"items\":[]}".as_bytes(),
        br#"{"kind":"\ud83d\ude00\uDBFF\uDFFF\u00e9","items":[]}"#,
        br#"{"x":[1e308,-1e308,1e-400,0e99999,-0.0E-0,123456789012345678901234567890]}"#,
        br#"{"metadata":{"resourceVersion":"1","n":12345678901234567890123,"s":"\ud800\udc00"}}"#,
    ];
    for body in good {
        assert!(
            all_ways::<DynamicObject>(body).is_ok(),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
    // An item is JSON text too: invalid UTF-8 in a field the item type ignores (serde_json's
    // typed decoding skips it unchecked) fails the list all the same.
    let item = b"{\"items\":[{\"metadata\":{\"name\":\"a\"},\"data\":{},\"extra\":\"\xff\"}]}";
    assert!(reference_decode_list::<Strict>(item).is_ok());
    assert!(matches!(
        all_ways::<Strict>(item),
        Err(DecodeError::Malformed { .. })
    ));
    // Unpaired surrogates and numbers out of range inside an item are the item type's
    // business, as serde_json decodes it: ignored by `Strict`, refused by `Value`.
    for extra in [r#""\ud800""#, "1e400"] {
        let item =
            format!(r#"{{"items":[{{"metadata":{{"name":"a"}},"data":{{}},"extra":{extra}}}]}}"#);
        assert_eq!(all_ways::<Strict>(item.as_bytes()).unwrap().items.len(), 1);
        assert!(matches!(
            all_ways::<serde_json::Value>(item.as_bytes()),
            Err(DecodeError::Object { .. })
        ));
    }
}

#[test]
fn only_the_unfinished_item_is_buffered() {
    let item = r#"{"metadata":{"name":"cm","namespace":"ns"},"data":{"k":"vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"}}"#;
    let items = vec![item; 2000].join(",");
    let body = format!(
        r#"{{"kind":"ConfigMapList","metadata":{{"resourceVersion":"9"}},"items":[{items}],"x":"{}"}}"#,
        "y".repeat(100_000)
    );
    let mut d = ListDecoder::<DynamicObject>::new();
    let mut most = 0;
    for chunk in body.as_bytes().chunks(1000) {
        d.feed(chunk).unwrap();
        most = most.max(d.buffered());
    }
    assert!(most < item.len(), "{most}");
    assert_eq!(d.items_decoded(), 2000);
    assert_eq!(d.finish().unwrap().items.len(), 2000);
    // After a failure every call fails.
    let mut d = ListDecoder::<DynamicObject>::new();
    assert!(d.feed(b"[").is_err());
    assert!(d.feed(b"{}").is_err());
    assert!(d.finish().is_err());
}

/// A JSON string with awkward content, as JSON text.
fn arb_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{0,6}".prop_map(|s| format!("\"{s}\"")),
        prop::collection::vec(
            prop::sample::select(vec![
                "a", "]", "}", "[", "{", "\"", "\\", ",", ":", "ü", "😀", "\n", "\t", "\u{1}", " ",
                "\u{2028}",
            ]),
            0..10
        )
        .prop_map(|parts| serde_json::to_string(&parts.concat()).unwrap()),
        prop::sample::select(vec![
            r#""\u005d\u007d\"""#,
            r#""\/\b\f\n\r\t""#,
            r#""\ud83d\ude00\\""#,
            r#""\\\\\"\\""#,
            r#""\u00FCx""#,
        ])
        .prop_map(str::to_string),
    ]
}

/// Whitespace between tokens.
fn ws() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["", "", "", " ", "\n", "\r\n\t "])
}

/// Any JSON value, as text.
fn arb_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
        prop::sample::select(vec![
            "0", "-0", "12", "-3.25", "1e9", "2E-3", "-0.5e+10", "7.0"
        ])
        .prop_map(str::to_string),
        arb_string(),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec((ws(), inner.clone()), 0..4).prop_map(|v| format!(
                "[{}]",
                v.into_iter()
                    .map(|(w, x)| format!("{w}{x}"))
                    .collect::<Vec<_>>()
                    .join(",")
            )),
            prop::collection::vec((arb_string(), ws(), inner), 0..4).prop_map(|v| format!(
                "{{{}}}",
                v.into_iter()
                    .map(|(k, w, x)| format!("{k}{w}:{w}{x}"))
                    .collect::<Vec<_>>()
                    .join(",")
            )),
        ]
    })
}

/// One list item: usually a ConfigMap-like object (with awkward strings and an `extra` field
/// from `extra`, which [`Strict`] ignores), sometimes something that does not decode as
/// [`Strict`] or at all.
fn arb_item_with(extra: BoxedStrategy<String>) -> impl Strategy<Value = String> {
    let good = (
        arb_string(),
        prop::option::of(arb_string()),
        prop::option::of(0u32..4),
        prop::collection::vec((arb_string(), arb_string()), 0..3),
        prop::option::of(extra),
        ws(),
    )
        .prop_map(|(name, ns, rv, data, extra, w)| {
            let mut meta = format!(r#""name":{w}{name}"#);
            if let Some(ns) = ns {
                meta.push_str(&format!(r#","namespace":{ns}"#));
            }
            if let Some(rv) = rv {
                meta.push_str(&format!(r#","resourceVersion":{w}"{rv}""#));
            }
            let data: BTreeMap<String, String> = data
                .into_iter()
                .map(|(k, v)| {
                    (
                        serde_json::from_str(&k).unwrap(),
                        serde_json::from_str(&v).unwrap(),
                    )
                })
                .collect();
            let extra = extra
                .map(|x| format!(r#","extra":{x}"#))
                .unwrap_or_default();
            format!(
                r#"{{{w}"metadata":{{{meta}}},{w}"data":{}{extra}}}"#,
                serde_json::to_string(&data).unwrap()
            )
        });
    prop_oneof![
        8 => good,
        1 => Just(r#"{"metadata":{"name":"bad"},"data":{"k":["not a string"]}}"#.to_string()),
        1 => Just(r#"{"kind":"Thing","metadata":{"name":"n","namespace":"x"},"data":7}"#.to_string()),
        1 => arb_value(),
    ]
}

/// Stand-ins for bytes a `String` cannot hold and for values that are not JSON a
/// `serde_json::Value` accepts: characters of a private use plane that [`expand`] replaces by
/// the bytes given. The first group goes inside strings, the second is a whole value.
const JUNK_IN_STRINGS: &[(char, &[u8])] = &[
    ('\u{F0000}', b"\xff"),
    ('\u{F0001}', b"\x80"),
    ('\u{F0002}', b"\xc0\xaf"),                     // overlong `/`
    ('\u{F0003}', b"\xe2\x82"),                     // `€` cut short
    ('\u{F0004}', b"\xed\xa0\x80"),                 // a surrogate encoded as UTF-8
    ('\u{F0005}', b"\xf4\x90\x80\x80"),             // past U+10FFFF
    ('\u{F0006}', b"\xf0\x9f\x98"),                 // `😀` cut short
    ('\u{F0007}', b"\xe2\x82\xac\xf0\x9f\x98\x80"), // `€😀`: valid
    ('\u{F0008}', br"\ud800"),                      // lone leading surrogate
    ('\u{F0009}', br"\udc00"),                      // lone trailing surrogate
    ('\u{F000A}', br"\ud800\u0041"),
    ('\u{F000B}', br"\ud800\n"),
    ('\u{F000C}', br"\ud800\ud800"),
    ('\u{F000D}', br"\uD83D\uDE00"), // a pair: valid
    ('\u{F000E}', br"\udbff\udfff"), // a pair: valid
];
const JUNK_VALUES: &[(char, &[u8])] = &[
    ('\u{F0100}', b"1e400"),
    ('\u{F0101}', b"-1e400"),
    ('\u{F0102}', b"1.8e308"),
    ('\u{F0103}', b"1e308"),   // valid
    ('\u{F0104}', b"1e-400"),  // valid: 0
    ('\u{F0105}', b"0e99999"), // valid: 0
    ('\u{F0106}', b"-0.0E-0"), // valid
    (
        '\u{F0107}',
        b"12345678901234567890123456789012345678901234567890",
    ), // valid
];

/// The body text with the stand-ins of [`JUNK_IN_STRINGS`] and [`JUNK_VALUES`] replaced.
fn expand(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match JUNK_IN_STRINGS
            .iter()
            .chain(JUNK_VALUES)
            .find(|(m, _)| *m == c)
        {
            Some((_, bytes)) => out.extend_from_slice(bytes),
            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out
}

/// A JSON value that may hold junk (see [`JUNK_IN_STRINGS`]): in a string, as an object key,
/// as a number, inside arrays and objects.
fn arb_junk_value() -> BoxedStrategy<String> {
    let in_string = prop::sample::select(JUNK_IN_STRINGS.iter().map(|j| j.0).collect::<Vec<_>>());
    let value = prop::sample::select(JUNK_VALUES.iter().map(|j| j.0).collect::<Vec<_>>());
    let junk_string =
        ("[a-z]{0,3}", in_string, "[a-z]{0,3}").prop_map(|(a, j, b)| format!("\"{a}{j}{b}\""));
    let leaf = prop_oneof![
        2 => arb_value(),
        3 => junk_string.clone(),
        2 => value.prop_map(String::from),
    ];
    prop_oneof![
        3 => leaf.clone(),
        1 => prop::collection::vec(leaf.clone(), 1..3).prop_map(|v| format!("[{}]", v.join(","))),
        1 => (junk_string, leaf).prop_map(|(k, v)| format!("{{{k}:{v},\"z\":0}}")),
    ]
    .boxed()
}

/// A list body: its fields in random order, some missing or odd.
fn arb_list() -> impl Strategy<Value = String> {
    arb_list_with(arb_value().boxed())
}

/// [`arb_list`] with `value`s in the fields the list decoder skips: `kind`, fields of
/// `metadata` other than its own, other top-level fields, and the `extra` field of items.
fn arb_list_with(value: BoxedStrategy<String>) -> impl Strategy<Value = String> {
    let kind = prop_oneof![
        4 => Just(Some(r#""ConfigMapList""#.to_string())),
        1 => Just(None),
        1 => Just(Some("null".to_string())),
        1 => Just(Some("3".to_string())),
        1 => value.clone().prop_map(Some),
    ];
    let meta = prop::option::of(
        (
            0u32..1000,
            prop::option::of("[a-z]{0,3}"),
            prop::option::of(-2i64..5),
            prop::option::of(value.clone()),
        )
            .prop_map(|(rv, cont, rem, other)| {
                let mut m = format!(r#"{{"resourceVersion":"{rv}""#);
                if let Some(c) = cont {
                    m.push_str(&format!(r#","continue":"{c}""#));
                }
                if let Some(r) = rem {
                    m.push_str(&format!(r#","remainingItemCount":{r}"#));
                }
                if let Some(o) = other {
                    m.push_str(&format!(r#","selfLink":{o}"#));
                }
                m + "}"
            }),
    );
    let items = prop_oneof![
        6 => prop::collection::vec((ws(), arb_item_with(value.clone())), 0..6).prop_map(|v| Some(format!(
            "[{}]",
            v.into_iter().map(|(w, x)| format!("{w}{x}{w}")).collect::<Vec<_>>().join(",")
        ))),
        1 => Just(Some("null".to_string())),
        1 => Just(None),
    ];
    let extras = prop::collection::vec((arb_string(), value), 0..3);
    (
        kind,
        meta,
        items,
        extras,
        any::<prop::sample::Index>(),
        ws(),
        ws(),
    )
        .prop_map(|(kind, meta, items, extras, order, w1, w2)| {
            let mut fields: Vec<String> = Vec::new();
            if let Some(k) = kind {
                fields.push(format!(r#""kind":{k}"#));
            }
            if let Some(m) = meta {
                fields.push(format!(r#""metadata":{w1}{m}"#));
            }
            if let Some(i) = items {
                fields.push(format!(r#""items"{w2}:{i}"#));
            }
            for (k, v) in extras {
                // Extra keys must not collide with the list's own.
                if !matches!(
                    serde_json::from_str::<String>(&k).unwrap().as_str(),
                    "kind" | "metadata" | "items"
                ) {
                    fields.push(format!("{k}:{v}"));
                }
            }
            let n = fields.len();
            if n > 0 {
                fields.rotate_left(order.index(n));
                let last = fields.pop().unwrap();
                fields.insert(order.index(n) / 2, last);
            }
            format!("{w1}{{{w2}{}{w2}}}{w1}", fields.join(&format!(",{w1}")))
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// For random lists cut into random chunks, the streaming decoder gives what serde_json
    /// gives, for a lenient and a strict item type.
    #[test]
    fn streaming_equals_reference(
        body in arb_list(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let bytes = body.as_bytes();
        // The generator makes valid JSON.
        prop_assert!(serde_json::from_str::<serde_json::Value>(&body).is_ok(), "{}", body);
        let cuts: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        prop_assert_eq!(
            show(&streamed::<DynamicObject>(bytes, &cuts)),
            show(&oracle::<DynamicObject>(bytes)),
            "{}", body
        );
        prop_assert_eq!(
            show(&streamed::<Strict>(bytes, &cuts)),
            show(&oracle::<Strict>(bytes)),
            "{}", body
        );
        prop_assert_eq!(
            show(&streamed::<serde_json::Value>(bytes, &cuts)),
            show(&oracle::<serde_json::Value>(bytes)),
            "{}", body
        );
    }

    /// With known objects (some of the listed ones, others at another resourceVersion), random
    /// lists cut into random chunks decode to the same page (or the same error), and every
    /// item known at its resourceVersion is the known object itself, not a copy.
    #[test]
    fn known_objects_are_taken_as_they_are(
        body in arb_list(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
        pick in any::<u64>(),
    ) {
        let bytes = body.as_bytes();
        let cuts: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        let reference = oracle::<DynamicObject>(bytes);
        let mut held = Held::default();
        for (i, obj) in reference.iter().flat_map(|p| &p.items).enumerate() {
            if pick >> (i % 64) & 1 == 1 {
                held.hold(obj.clone());
            } else if let Some(rv) = obj.resource_version() {
                // The same key at another version: decoded, not taken.
                let mut other = (**obj).clone();
                other.metadata.edit(|m| m.resource_version = Some(format!("{rv}0").into()));
                held.hold(Arc::new(other));
            }
        }
        let held = Arc::new(held);
        let got = streamed_known(bytes, &cuts, held.clone());
        prop_assert_eq!(show(&got), show(&reference), "{}", body);
        // Taken: the items whose key and version read without decoding (no escapes there)
        // and are held at that version.
        let raw = serde_json::from_slice::<RawList<'_>>(bytes).ok().and_then(|l| l.items);
        for (item, raw) in got.iter().flat_map(|p| &p.items).zip(raw.iter().flatten()) {
            let Some((id, _)) = informer_core::object::JsonIdentity::of_json_start(raw.get()) else {
                continue;
            };
            if let Some(known) = id.resource_version.and_then(|rv| held.known(id.key(), rv)) {
                prop_assert!(Arc::ptr_eq(&known, item), "a copy of {:?}", item.key_ref());
            }
        }
    }

    /// Junk in the fields the list decoder skips — invalid UTF-8, unpaired surrogate escapes,
    /// numbers out of range, next to their valid neighbours — in `kind`, `metadata`, other
    /// top-level fields and items: the streaming decoder cut anywhere, and `decode_list`, say
    /// what serde_json says (the same page, or both an error).
    #[test]
    fn junk_in_skipped_fields_agrees_with_serde_json(
        text in arb_list_with(arb_junk_value()),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let body = expand(&text);
        let cuts: Vec<usize> = cuts.iter().map(|c| c.index(body.len() + 1)).collect();
        let shown = String::from_utf8_lossy(&body);
        let dynamic = show(&oracle::<DynamicObject>(&body));
        prop_assert_eq!(show(&streamed::<DynamicObject>(&body, &cuts)), dynamic.clone(), "{}", shown);
        prop_assert_eq!(show(&decode_list::<DynamicObject>(&body)), dynamic, "{}", shown);
        let strict = show(&oracle::<Strict>(&body));
        prop_assert_eq!(show(&streamed::<Strict>(&body, &cuts)), strict.clone(), "{}", shown);
        prop_assert_eq!(show(&decode_list::<Strict>(&body)), strict, "{}", shown);
        let value = show(&oracle::<serde_json::Value>(&body));
        prop_assert_eq!(show(&streamed::<serde_json::Value>(&body, &cuts)), value.clone(), "{}", shown);
        prop_assert_eq!(show(&decode_list::<serde_json::Value>(&body)), value, "{}", shown);
    }

    /// Damaged lists (cut short, a byte dropped, a structural byte inserted) fail, or succeed,
    /// exactly as with serde_json.
    #[test]
    fn damaged_lists_agree(
        body in arb_list(),
        at in any::<prop::sample::Index>(),
        how in 0..3u8,
        byte in prop::sample::select(b"{}[]\",:\\ 0-.eantu".to_vec()),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let mut bytes = body.into_bytes();
        let at = at.index(bytes.len() + 1);
        match how {
            0 => bytes.truncate(at),
            1 if at < bytes.len() => { bytes.remove(at); }
            _ => bytes.insert(at, byte),
        }
        // Dropping a byte may cut a multi-byte character: the decoders agree on that too.
        let cuts: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        prop_assert_eq!(
            show(&streamed::<DynamicObject>(&bytes, &cuts)),
            show(&oracle::<DynamicObject>(&bytes)),
            "{}", String::from_utf8_lossy(&bytes)
        );
        prop_assert_eq!(
            show(&streamed::<Strict>(&bytes, &cuts)),
            show(&oracle::<Strict>(&bytes)),
            "{}", String::from_utf8_lossy(&bytes)
        );
    }
}

/// Items that lie wholly in the chunk being fed are decoded straight from it (their end found
/// by serde_json as it decodes them, not by the scanner): each must still be exactly the item
/// the scanner would have delimited, checked as UTF-8 even in fields the type ignores (which
/// serde_json skips unchecked), and an item that does not decode must still be named. A body
/// fed whole takes that path for every item; the byte-by-byte feed of `all_ways` never does.
#[test]
fn items_decoded_straight_from_the_chunk() {
    // Invalid UTF-8 in a field `Strict` ignores, in the first, a middle and the last item.
    let good = r#"{"metadata":{"name":"a"},"data":{"k":"}]\"{["}}"#;
    let bad = "{\"metadata\":{\"name\":\"b\"},\"data\":{},\"x\":\"\u{fffd}\"}".to_string();
    for at in 0..3 {
        let mut items = vec![good.to_string(); 3];
        items[at] = bad.clone();
        let body = format!(
            r#"{{"kind":"ConfigMapList","items":[{}]}}"#,
            items.join(",")
        );
        assert_eq!(all_ways::<Strict>(body.as_bytes()).unwrap().items.len(), 3);
        // U+FFFD (EF BF BD) made invalid: EF BF FF.
        let mut broken = body.into_bytes();
        let p = broken
            .windows(3)
            .position(|w| w == [0xEF, 0xBF, 0xBD])
            .unwrap();
        broken[p + 2] = 0xFF;
        let r = all_ways::<Strict>(&broken);
        assert!(
            matches!(r, Err(DecodeError::Malformed { .. })),
            "{at}: {r:?}"
        );
    }
    // Many items in one chunk, a long one then short ones (a short item may be tried by the
    // scanner only), then one that does not decode: every good item is kept, the bad one named.
    let long = format!(
        r#"{{"metadata":{{"name":"long"}},"data":{{"k":"{}"}}}}"#,
        "v".repeat(5000)
    );
    let short: Vec<String> = (0..20)
        .map(|n| format!(r#" {{"metadata":{{"name":"s{n}"}},"data":{{"k]}}":"{{"}}}} "#))
        .collect();
    let body = format!(
        r#"{{"items":[{long},{}],"kind":"ConfigMapList"}}"#,
        short.join(",")
    );
    let page = all_ways::<Strict>(body.as_bytes()).unwrap();
    let names: Vec<&str> = page.items.iter().map(|o| o.metadata.name()).collect();
    let want: Vec<String> = std::iter::once("long".to_string())
        .chain((0..20).map(|n| format!("s{n}")))
        .collect();
    assert_eq!(names, want);
    let body = format!(
        r#"{{"items":[{long},{},{{"metadata":{{"name":"bad"}},"data":{{"k":1}}}}],"kind":"ConfigMapList"}}"#,
        short.join(",")
    );
    let err = all_ways::<Strict>(body.as_bytes()).unwrap_err();
    assert!(
        matches!(&err, DecodeError::Object { name: Some(n), .. } if n == "bad"),
        "{err:?}"
    );
    // An item followed by junk that serde_json would read as part of a longer value is still
    // refused as a body (the scanner reads on after the item).
    let trailing = format!(r#"{{"items":[{good}}}],"kind":"ConfigMapList"}}"#);
    assert!(matches!(
        all_ways::<Strict>(trailing.as_bytes()),
        Err(DecodeError::Malformed { .. })
    ));
}

/// A relist of ConfigMaps, most held at the listed version: those are the held objects (one
/// read each, nothing built), the others decoded; the decoder stops looking when most are not
/// held; a syntax error is the same error with or without known objects.
#[test]
fn known_objects_in_a_relist() {
    let item = |i: usize, rv: usize| {
        format!(
            r#"{{"metadata":{{"name":"cm-{i}","namespace":"ns","resourceVersion":"{rv}"}},"data":{{"k":"{}"}}}}"#,
            "v".repeat(i % 50)
        )
    };
    let list = |items: &[String]| {
        format!(
            r#"{{"kind":"ConfigMapList","metadata":{{"resourceVersion":"999"}},"items":[{}]}}"#,
            items.join(",")
        )
    };
    let first: Vec<String> = (0..300).map(|i| item(i, 10 + i)).collect();
    let held_page = decode_list::<DynamicObject>(list(&first).as_bytes()).unwrap();
    let mut held = Held::default();
    for obj in &held_page.items {
        held.hold(obj.clone());
    }
    let held = Arc::new(held);
    // Every tenth object changed since.
    let relist: Vec<String> = (0..300)
        .map(|i| item(i, if i % 10 == 0 { 1000 + i } else { 10 + i }))
        .collect();
    let body = list(&relist);
    for chunk in [body.len(), 4096, 100, 7] {
        let mut d = ListDecoder::<DynamicObject>::new().with_known(held.clone());
        for c in body.as_bytes().chunks(chunk) {
            d.feed(c).unwrap();
        }
        assert_eq!(d.items_known(), 270, "chunks of {chunk}");
        let page = d.finish();
        assert_eq!(
            show(&page),
            show(&decode_list::<DynamicObject>(body.as_bytes()))
        );
        for (i, obj) in page.unwrap().items.iter().enumerate() {
            let same = Arc::ptr_eq(obj, &held_page.items[i]);
            assert_eq!(same, i % 10 != 0, "item {i}, chunks of {chunk}");
        }
    }
    // Most objects changed: after 64 lookups with fewer than half found, no more lookups.
    let changed: Vec<String> = (0..300)
        .map(|i| item(i, if i % 4 == 0 { 10 + i } else { 2000 + i }))
        .collect();
    let mut d = ListDecoder::<DynamicObject>::new().with_known(held.clone());
    d.feed(list(&changed).as_bytes()).unwrap();
    assert_eq!(d.items_known(), 0);
    let page = d.finish().unwrap();
    // Held and listed at the same version, but after the decoder stopped looking: decoded.
    assert!(Arc::ptr_eq(&page.items[0], &held_page.items[0]));
    assert_eq!(page.items[200], held_page.items[200]);
    assert!(!Arc::ptr_eq(&page.items[200], &held_page.items[200]));
    // A syntax error after held items: the same error either way.
    let mut broken = relist.clone();
    broken[200] = broken[200].replace(r#""data":{"#, r#""data":{,"#);
    let body = list(&broken);
    let with = streamed_known(body.as_bytes(), &[1000, 20_000], held.clone());
    assert_eq!(
        show(&with),
        show(&decode_list::<DynamicObject>(body.as_bytes()))
    );
    assert!(with.is_err());
}

/// Known objects that are empty as the first item arrives (a first list into an empty cache)
/// are never looked up.
#[test]
fn empty_known_objects_are_not_looked_up() {
    struct Empty;
    impl KnownObjects<DynamicObject> for Empty {
        fn known(
            &self,
            key: informer_core::object::KeyRef<'_>,
            _: &str,
        ) -> Option<Arc<DynamicObject>> {
            panic!("looked up {key:?}");
        }
        fn is_empty(&self) -> bool {
            true
        }
    }
    let body = br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"5"},"items":[{"metadata":{"name":"a","resourceVersion":"1"}},{"metadata":{"name":"b","resourceVersion":"2"}}]}"#;
    for chunk in [body.len(), 20] {
        let mut d = ListDecoder::<DynamicObject>::new().with_known(Arc::new(Empty));
        for c in body.chunks(chunk) {
            d.feed(c).unwrap();
        }
        assert_eq!(d.items_known(), 0);
        assert_eq!(d.finish().unwrap().items.len(), 2);
    }
}
