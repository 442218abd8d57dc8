//! The streaming list decoder against the previous whole-body decoder (kept here as the
//! reference), for edge cases and random lists cut into random chunks.

use super::*;
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
fn streamed<K: DeserializeOwned>(body: &[u8], cuts: &[usize]) -> Result<ListPage<K>, DecodeError> {
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

/// Decodes `body` every way (reference, whole, byte by byte, in threes) and checks they agree;
/// returns the streamed result.
fn all_ways<K: DeserializeOwned + fmt::Debug>(body: &[u8]) -> Result<ListPage<K>, DecodeError> {
    let reference = show(&reference_decode_list::<K>(body));
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

/// One list item: usually a ConfigMap-like object (with awkward strings and extra fields),
/// sometimes something that does not decode as [`Strict`] or at all.
fn arb_item() -> impl Strategy<Value = String> {
    let good = (
        arb_string(),
        prop::option::of(arb_string()),
        prop::collection::vec((arb_string(), arb_string()), 0..3),
        prop::option::of(arb_value()),
        ws(),
    )
        .prop_map(|(name, ns, data, extra, w)| {
            let mut meta = format!(r#""name":{w}{name}"#);
            if let Some(ns) = ns {
                meta.push_str(&format!(r#","namespace":{ns}"#));
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

/// A list body: its fields in random order, some missing or odd.
fn arb_list() -> impl Strategy<Value = String> {
    let kind = prop_oneof![
        4 => Just(Some(r#""ConfigMapList""#.to_string())),
        1 => Just(None),
        1 => Just(Some("null".to_string())),
        1 => Just(Some("3".to_string())),
    ];
    let meta = prop::option::of(
        (
            0u32..1000,
            prop::option::of("[a-z]{0,3}"),
            prop::option::of(-2i64..5),
        )
            .prop_map(|(rv, cont, rem)| {
                let mut m = format!(r#"{{"resourceVersion":"{rv}""#);
                if let Some(c) = cont {
                    m.push_str(&format!(r#","continue":"{c}""#));
                }
                if let Some(r) = rem {
                    m.push_str(&format!(r#","remainingItemCount":{r}"#));
                }
                m + "}"
            }),
    );
    let items = prop_oneof![
        6 => prop::collection::vec((ws(), arb_item()), 0..6).prop_map(|v| Some(format!(
            "[{}]",
            v.into_iter().map(|(w, x)| format!("{w}{x}{w}")).collect::<Vec<_>>().join(",")
        ))),
        1 => Just(Some("null".to_string())),
        1 => Just(None),
    ];
    let extras = prop::collection::vec((arb_string(), arb_value()), 0..3);
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

    /// For random lists cut into random chunks, the streaming decoder gives what the previous
    /// decoder gives, for a lenient and a strict item type.
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
            show(&reference_decode_list::<DynamicObject>(bytes)),
            "{}", body
        );
        prop_assert_eq!(
            show(&streamed::<Strict>(bytes, &cuts)),
            show(&reference_decode_list::<Strict>(bytes)),
            "{}", body
        );
        prop_assert_eq!(
            show(&streamed::<serde_json::Value>(bytes, &cuts)),
            show(&reference_decode_list::<serde_json::Value>(bytes)),
            "{}", body
        );
    }

    /// Damaged lists (cut short, a byte dropped, a structural byte inserted) fail, or succeed,
    /// exactly as with the previous decoder.
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
        // Dropping a byte may cut a multi-byte character: the references agree on that too.
        let cuts: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        prop_assert_eq!(
            show(&streamed::<DynamicObject>(&bytes, &cuts)),
            show(&reference_decode_list::<DynamicObject>(&bytes)),
            "{}", String::from_utf8_lossy(&bytes)
        );
        prop_assert_eq!(
            show(&streamed::<Strict>(&bytes, &cuts)),
            show(&reference_decode_list::<Strict>(&bytes)),
            "{}", String::from_utf8_lossy(&bytes)
        );
    }
}
