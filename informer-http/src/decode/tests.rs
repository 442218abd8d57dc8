use super::*;
use informer_core::object::{DynamicObject, Object};
use informer_core::protocol::DecodeKind;
use proptest::prelude::*;

mod list;

fn cm(ty: &str, ns: &str, name: &str, rv: u32) -> String {
    format!(
        r#"{{"type":"{ty}","object":{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"{rv}","labels":{{"app":"ü\n"}}}},"data":{{"k":"line1\nline2 {{}}"}}}}}}"#
    )
}

/// Events rendered to comparable strings.
fn show<K: Object>(r: &Result<WatchEvent<K>, DecodeError>) -> String {
    match r {
        Ok(WatchEvent::Added(o)) => format!("ADDED {:?} {:?}", o.key_ref(), o.resource_version()),
        Ok(WatchEvent::Modified(o)) => {
            format!("MODIFIED {:?} {:?}", o.key_ref(), o.resource_version())
        }
        Ok(WatchEvent::Deleted(o)) => {
            format!("DELETED {:?} {:?}", o.key_ref(), o.resource_version())
        }
        Ok(WatchEvent::Bookmark {
            resource_version,
            initial_events_end,
        }) => format!("BOOKMARK {resource_version} {initial_events_end}"),
        Ok(WatchEvent::Error(f)) => format!("ERROR {f:?}"),
        Err(e) => format!("ERR {e:?}"),
    }
}

fn decode_all(chunks: &[&[u8]], max: usize) -> Vec<String> {
    let mut d = WatchDecoder::<DynamicObject>::new(max);
    let mut out = Vec::new();
    for c in chunks {
        d.feed(c);
        while let Some(r) = d.next_event() {
            out.push(show(&r));
        }
    }
    if let Some(r) = d.finish() {
        out.push(show(&r));
    }
    out
}

#[test]
fn all_event_types() {
    let stream = [
        cm("ADDED", "ns1", "a", 10),
        cm("MODIFIED", "ns1", "a", 11),
        cm("DELETED", "ns1", "a", 12),
        r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"13","creationTimestamp":null}}}"#.into(),
        r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"14","annotations":{"k8s.io/initial-events-end":"true"}}}}"#.into(),
        r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (203)","reason":"Expired","code":410}}"#.into(),
    ]
    .join("\n")
        + "\n";
    let mut d = WatchDecoder::<DynamicObject>::default();
    d.feed(stream.as_bytes());
    let mut evs = Vec::new();
    while let Some(e) = d.next_event() {
        evs.push(e.unwrap());
    }
    assert!(d.finish().is_none());
    assert_eq!(evs.len(), 6);
    let WatchEvent::Added(a) = &evs[0] else {
        panic!()
    };
    assert_eq!(
        a.key_ref(),
        informer_core::object::KeyRef::new(Some("ns1"), "a")
    );
    assert_eq!(a.fields.to_map()["data"]["k"], "line1\nline2 {}");
    assert!(matches!(&evs[1], WatchEvent::Modified(o) if o.resource_version() == Some("11")));
    assert!(matches!(&evs[2], WatchEvent::Deleted(o) if o.resource_version() == Some("12")));
    assert!(
        matches!(&evs[3], WatchEvent::Bookmark { resource_version, initial_events_end: false } if resource_version == "13")
    );
    assert!(
        matches!(&evs[4], WatchEvent::Bookmark { resource_version, initial_events_end: true } if resource_version == "14")
    );
    let WatchEvent::Error(Failure::Expired(s)) = &evs[5] else {
        panic!("{:?}", evs[5])
    };
    assert_eq!(s.code, 410);
    assert_eq!(s.message, "too old resource version: 1 (203)");
}

#[test]
fn error_events_map_to_failures() {
    let line = |status: &str| format!(r#"{{"type":"ERROR","object":{status}}}"#);
    let f = |status: &str| match decode_event::<DynamicObject>(line(status).as_bytes()) {
        Ok(WatchEvent::Error(f)) => f,
        other => panic!("{:?}", other.map(|_| ())),
    };
    assert!(matches!(
        f(r#"{"kind":"Status","status":"Failure","reason":"Gone","code":410,"message":"x"}"#),
        Failure::Expired(_)
    ));
    assert!(matches!(
        f(
            r#"{"kind":"Status","status":"Failure","message":"Timeout: Too large resource version: 9, current: 3","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}"#
        ),
        Failure::TooLargeResourceVersion(_)
    ));
    assert!(matches!(
        f(r#"{"kind":"Status","status":"Failure","message":"internal error","reason":"InternalError","code":500}"#),
        Failure::Other(ref s) if s.code == 500
    ));
    assert!(matches!(
        decode_event::<DynamicObject>(br#"{"type":"ERROR","object":[1]}"#),
        Err(DecodeError::Malformed { .. })
    ));
}

#[derive(Debug, Deserialize)]
struct Strict {
    metadata: informer_core::object::ObjectMeta,
    #[allow(dead_code)]
    data: BTreeMap<String, String>,
}

informer_core::impl_object!(Strict);

#[test]
fn undecodable_object_is_named_and_the_stream_goes_on() {
    let bad = r#"{"type":"MODIFIED","object":{"kind":"ConfigMap","metadata":{"name":"broken","namespace":"prod","resourceVersion":"5"},"data":{"k":42}}}"#;
    let good = r#"{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"name":"ok","namespace":"prod","resourceVersion":"6"},"data":{"k":"v"}}}"#;
    let mut d = WatchDecoder::<Strict>::default();
    d.feed(format!("{bad}\n{good}\nnot json at all\n{good}\n").as_bytes());
    let e = d.next_event().unwrap().unwrap_err();
    let DecodeError::Object {
        event_type,
        kind,
        namespace,
        name,
        ..
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!(event_type.as_deref(), Some("MODIFIED"));
    assert_eq!(kind.as_deref(), Some("ConfigMap"));
    assert_eq!(namespace.as_deref(), Some("prod"));
    assert_eq!(name.as_deref(), Some("broken"));
    assert!(e.to_string().contains("ConfigMap prod/broken"), "{e}");
    let f = e.to_failure();
    assert!(
        matches!(&f, Failure::Decode(d) if d.kind == DecodeKind::Object && d.message.contains("ConfigMap prod/broken"))
    );
    assert!(matches!(d.next_event(), Some(Ok(WatchEvent::Added(o))) if o.name() == "ok"));
    assert!(matches!(
        d.next_event(),
        Some(Err(DecodeError::Malformed { .. }))
    ));
    assert!(matches!(d.next_event(), Some(Ok(WatchEvent::Added(_)))));
    assert!(d.next_event().is_none());
    // Unknown types are reported too.
    assert!(matches!(
        decode_event::<DynamicObject>(br#"{"type":"SYNC","object":{}}"#),
        Err(DecodeError::UnknownEventType { event_type }) if event_type == "SYNC"
    ));
}

#[test]
fn over_long_line_fails_clearly_and_decoding_resumes() {
    let good = cm("ADDED", "n", "after", 2);
    let long = format!(
        r#"{{"type":"ADDED","object":{{"metadata":{{"name":"big"}},"data":"{}"}}}}"#,
        "x".repeat(5000)
    );
    let stream = format!("{}\n{long}\n{good}\n", cm("ADDED", "n", "before", 1));
    let expect = vec![
        r#"ADDED KeyRef { namespace: Some("n"), name: "before" } Some("1")"#.to_string(),
        "ERR LineTooLong { limit: 1000 }".into(),
        r#"ADDED KeyRef { namespace: Some("n"), name: "after" } Some("2")"#.into(),
    ];
    assert_eq!(decode_all(&[stream.as_bytes()], 1000), expect);
    let bytes: Vec<&[u8]> = stream.as_bytes().chunks(1).collect();
    assert_eq!(decode_all(&bytes, 1000), expect);
    let bytes: Vec<&[u8]> = stream.as_bytes().chunks(700).collect();
    assert_eq!(decode_all(&bytes, 1000), expect);
}

#[test]
fn memory_stays_bounded_on_an_endless_line() {
    let mut d = LineDecoder::new(1 << 20);
    let chunk = vec![b'a'; 64 * 1024];
    let mut too_long = 0;
    for _ in 0..200 {
        d.feed(&chunk);
        while let Some(l) = d.next_line() {
            assert_eq!(l, Line::TooLong);
            too_long += 1;
        }
        assert!(d.buffered() <= (1 << 20) + chunk.len());
    }
    assert_eq!(too_long, 1, "reported once");
    d.feed(b"tail\nnext\n");
    assert_eq!(d.next_line(), Some(Line::Complete(b"next")));
    assert_eq!(d.next_line(), None);
    assert_eq!(d.finish(), None);
}

#[test]
fn truncated_stream() {
    let full = cm("ADDED", "n", "a", 1);
    // A complete event missing only its newline is accepted.
    assert_eq!(decode_all(&[full.as_bytes()], DEFAULT_MAX_LINE).len(), 1);
    assert!(decode_all(&[full.as_bytes()], DEFAULT_MAX_LINE)[0].starts_with("ADDED"));
    let cut = &full.as_bytes()[..full.len() - 5];
    assert_eq!(
        decode_all(&[cut], DEFAULT_MAX_LINE),
        vec![format!("ERR Truncated {{ len: {} }}", cut.len())]
    );
    // Blank lines and CRLF are fine.
    let crlf = format!("\r\n\n{full}\r\n  \n");
    assert_eq!(decode_all(&[crlf.as_bytes()], DEFAULT_MAX_LINE).len(), 1);
}

#[test]
fn lists_decode_with_paging_metadata() {
    let body = br#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"99","continue":"abc","remainingItemCount":7},"items":[{"metadata":{"name":"a","namespace":"x","resourceVersion":"3"},"data":{"k":"v"}},{"metadata":{"name":"b","namespace":"x","resourceVersion":"4"}}]}"#;
    let page = decode_list::<DynamicObject>(body).unwrap();
    assert_eq!(page.items.len(), 2);
    assert_eq!(page.items[1].name(), "b");
    assert_eq!(page.resource_version, "99");
    assert_eq!(page.continue_token.as_deref(), Some("abc"));
    assert_eq!(page.remaining_item_count, Some(7));

    let last = br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"100","continue":""},"items":null}"#;
    let page = decode_list::<DynamicObject>(last).unwrap();
    assert!(page.items.is_empty());
    assert_eq!(page.continue_token, None);

    let slow = list::reference_decode_list::<DynamicObject>(body).unwrap();
    assert_eq!(slow.items, page_items(body));
    let err = decode_list::<Strict>(body).unwrap_err();
    assert!(
        matches!(&err, DecodeError::Object { kind: Some(k), name: Some(n), event_type: None, .. } if k == "ConfigMap" && n == "b"),
        "{err:?}"
    );
    assert!(matches!(
        decode_list::<DynamicObject>(b"<html>"),
        Err(DecodeError::Malformed { .. })
    ));
}

/// One line of a generated stream.
fn arb_line() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u32..1000, "[a-z]{1,8}").prop_map(|(rv, n)| cm("ADDED", "ns", &n, rv)),
        (0u32..1000, "[a-z]{1,8}").prop_map(|(rv, n)| cm("DELETED", "other", &n, rv)),
        (0u32..1000).prop_map(|rv| format!(
            r#"{{"type":"BOOKMARK","object":{{"metadata":{{"resourceVersion":"{rv}"}}}}}}"#
        )),
        Just(r#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"gone"}}"#.to_string()),
        "[ -~]{0,40}", // printable junk: malformed or blank
        (0u32..1000).prop_map(|rv| format!(
            r#"{{"object":{{"metadata":{{"name":"late","resourceVersion":"{rv}"}}}},"type":"MODIFIED"}}"#
        )),
        Just(r#"{"type":"BOOKMARK","object":{"metadata":{}}}"#.to_string()),
        Just(r#"{"type":"ADDED","object":{"metadata":{"name":["x"]}}}"#.to_string()),
        Just(r#"{"type":"NOPE","object":{}}"#.to_string()),
        (300usize..900).prop_map(|n| format!(r#"{{"type":"ADDED","object":{{"metadata":{{"name":"{}"}}}}}}"#, "y".repeat(n))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The single-pass decoder and the two-pass one agree on every line.
    #[test]
    fn fast_and_slow_paths_agree(line in arb_line()) {
        let fast = decode_event::<DynamicObject>(line.as_bytes());
        let slow = decode_event_slow::<DynamicObject>(line.as_bytes());
        prop_assert_eq!(show(&fast), show(&slow));
        let strict_fast = decode_event::<Strict>(line.as_bytes()).map(|_| ());
        let strict_slow = decode_event_slow::<Strict>(line.as_bytes()).map(|_| ());
        prop_assert_eq!(strict_fast, strict_slow);
    }

    /// Whatever the chunk boundaries, the same results come out, in the same order, as when the
    /// stream arrives in one piece; and as many results as non-blank lines.
    #[test]
    fn chunking_does_not_matter(
        lines in proptest::collection::vec(arb_line(), 0..20),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..30),
        trailing_newline in any::<bool>(),
    ) {
        let mut stream = lines.join("\n");
        if trailing_newline && !stream.is_empty() {
            stream.push('\n');
        }
        let bytes = stream.as_bytes();
        let whole = decode_all(&[bytes], 600);
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        points.sort_unstable();
        let mut chunks = Vec::new();
        let mut prev = 0;
        for p in points {
            chunks.push(&bytes[prev..p]);
            prev = p;
        }
        chunks.push(&bytes[prev..]);
        prop_assert_eq!(decode_all(&chunks, 600), whole.clone());
        let non_blank = lines.iter().filter(|l| !l.trim().is_empty()).count();
        prop_assert_eq!(whole.len(), non_blank);
        for (line, out) in lines.iter().filter(|l| !l.trim().is_empty()).zip(&whole) {
            if line.len() > 600 {
                prop_assert!(out.contains("LineTooLong"), "{}", out);
            }
        }
    }
}

fn page_items(body: &[u8]) -> Vec<std::sync::Arc<DynamicObject>> {
    decode_list::<DynamicObject>(body).unwrap().items
}

#[test]
fn object_before_type_and_bad_bookmarks() {
    let late = br#"{"object":{"metadata":{"name":"x","resourceVersion":"9"}},"type":"DELETED"}"#;
    assert!(
        matches!(decode_event::<DynamicObject>(late), Ok(WatchEvent::Deleted(o)) if o.name() == "x")
    );
    let bad = br#"{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{}}}"#;
    assert!(matches!(
        decode_event::<DynamicObject>(bad),
        Err(DecodeError::Object { event_type: Some(t), kind: Some(k), .. }) if t == "BOOKMARK" && k == "Pod"
    ));
}

/// An ERROR or BOOKMARK whose object is a JSON array: serde's derived structs accept arrays
/// (fields by position), so `["Failure","boom"]` used to pass for a Status (an `Other` failure
/// with code 0) and `["ConfigMap",{"resourceVersion":"9"}]` for a bookmark at 9. The hostile
/// table found it; both are decode errors now.
#[test]
fn error_and_bookmark_objects_must_be_json_objects() {
    for (line, kind) in [
        (
            r#"{"type":"ERROR","object":["not","a","status"]}"#,
            DecodeKind::Malformed,
        ),
        (
            r#"{"type":"ERROR","object":["Status","Failure","gone","Expired",410]}"#,
            DecodeKind::Malformed,
        ),
        (r#"{"type":"ERROR","object":"boom"}"#, DecodeKind::Malformed),
        (
            r#"{"type":"BOOKMARK","object":["ConfigMap",{"resourceVersion":"9"}]}"#,
            DecodeKind::Object,
        ),
    ] {
        match decode_event::<DynamicObject>(line.as_bytes()) {
            Err(e) => assert_eq!(e.kind(), kind, "{line}: {e:?}"),
            Ok(ev) => panic!("{line} decoded as {ev:?}"),
        }
    }
    // Objects still decode, in either key order.
    let ok = r#"{"object":{"kind":"Status","code":410,"reason":"Expired","message":"old"},"type":"ERROR"}"#;
    assert!(matches!(
        decode_event::<DynamicObject>(ok.as_bytes()),
        Ok(WatchEvent::Error(Failure::Expired(_)))
    ));
}

/// 100,000 nested arrays, never a stack overflow: kept as raw JSON in a field `DynamicObject`
/// does not read, skipped (without recursion) in an unknown field of the event, and an `Object`
/// error naming the object where a value is read (a label).
#[test]
fn deep_nesting_in_watch_lines() {
    let nested = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let kept = format!(
        r#"{{"type":"ADDED","object":{{"kind":"ConfigMap","metadata":{{"name":"d","namespace":"ns","resourceVersion":"6"}},"data":{nested}}}}}"#
    );
    match decode_event::<DynamicObject>(kept.as_bytes()) {
        Ok(WatchEvent::Added(o)) => assert_eq!(o.name(), "d"),
        other => panic!("{other:?}"),
    }
    let skipped =
        format!(r#"{{"type":"ADDED","x":{nested},"object":{{"metadata":{{"name":"e"}}}}}}"#);
    assert!(matches!(
        decode_event::<DynamicObject>(skipped.as_bytes()),
        Ok(WatchEvent::Added(o)) if o.name() == "e"
    ));
    let read = format!(
        r#"{{"type":"ADDED","object":{{"metadata":{{"name":"f","namespace":"ns","labels":{{"k":{nested}}}}}}}}}"#
    );
    match decode_event::<DynamicObject>(read.as_bytes()) {
        Err(e) => {
            assert_eq!(e.kind(), DecodeKind::Object);
            assert!(e.to_string().contains("ns/f"), "{e}");
        }
        other => panic!("{other:?}"),
    }
}

/// The object an event carries.
fn object_of<K>(r: &Result<WatchEvent<K>, DecodeError>) -> Option<&K> {
    match r {
        Ok(WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o)) => Some(o),
        _ => None,
    }
}

/// Events of `DynamicObject`s in kube-apiserver's form decode straight
/// (`DynamicObject::from_json_start`) to the very event serde_json gives; any other form, any
/// other type, and what serde_json refuses are left to serde_json.
#[test]
fn watch_events_decode_straight_as_serde_json_does() {
    let obj = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7","labels":{"app":"ü"},"managedFields":[{"f":{"g":[]}}]},"data":{"k":"line1\nline2 {}"}}"#;
    let cases = [
        (format!(r#"{{"type":"ADDED","object":{obj}}}"#), true),
        (format!(r#"{{"type":"MODIFIED","object":{obj}}}"#), true),
        (format!(r#"{{"type":"DELETED","object":{obj}}}"#), true),
        (
            format!(" {{ \"type\" :\t\"ADDED\" ,\r\n \"object\" : {obj} }} \r"),
            true,
        ),
        (format!(r#"{{"type":"ADDED","object":{obj}}}x"#), false),
        (
            format!(r#"{{"type":"ADDED","object":{obj},"extra":1}}"#),
            false,
        ),
        (format!(r#"{{"object":{obj},"type":"ADDED"}}"#), false),
        (format!(r#"{{"type":"BOOKMARK","object":{obj}}}"#), false),
        (format!(r#"{{"type":"ADDEDX","object":{obj}}}"#), false),
        (
            format!("\u{c}{{\"type\":\"ADDED\",\"object\":{obj}}}"),
            false,
        ),
        (format!(r#"{{"type":"ADDED","object":{obj}"#), false),
        (r#"{"type":"ADDED","object":null}"#.to_string(), false),
        (
            r#"{"type":"ADDED","object":{"metadata":{"name":"a\"b"}}}"#.to_string(),
            false,
        ),
        (
            r#"{"type":"ADDED","object":{"metadata":{"name":1}}}"#.to_string(),
            false,
        ),
    ];
    for (line, straight) in cases {
        let ours = straight_event::<DynamicObject>(line.as_bytes());
        assert_eq!(ours.is_some(), straight, "{line}");
        let slow = decode_event_slow::<DynamicObject>(line.as_bytes());
        let event = decode_event::<DynamicObject>(line.as_bytes());
        assert_eq!(show(&event), show(&slow), "{line}");
        assert_eq!(object_of(&event), object_of(&slow), "{line}");
        if let Some(ev) = ours {
            let ours = Ok(ev);
            assert_eq!(show(&ours), show(&slow), "{line}");
            assert_eq!(object_of(&ours), object_of(&slow), "{line}");
            assert!(object_of(&ours).is_some());
        }
    }
    let typed = format!(r#"{{"type":"ADDED","object":{obj}}}"#);
    assert!(straight_event::<Strict>(typed.as_bytes()).is_none());
    assert!(decode_event::<Strict>(typed.as_bytes()).is_ok());
}
