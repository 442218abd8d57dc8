use super::*;
use crate::config::{Auth, Secret};
use crate::decode::DecodeError;
use crate::resource::Resource;
use crate::test_support::{Canned, Scripted, run};
use futures_util::stream::StreamExt;
use informer_core::object::DynamicObject;
use informer_core::protocol::DecodeKind;
use std::time::Duration;

fn client(answers: Vec<Result<Canned, Failure>>) -> Client<Scripted> {
    Scripted::client(answers, |cfg| {
        cfg.auth = Auth::Token(Secret::new("tok".into()));
    })
}

fn ok(chunks: Vec<&str>) -> Result<Canned, Failure> {
    Ok(Canned::chunks(chunks))
}

async fn drain(
    mut s: BoxStream<'static, WatchEvent<DynamicObject>>,
) -> Vec<WatchEvent<DynamicObject>> {
    let mut out = Vec::new();
    while let Some(e) = s.next().await {
        out.push(e);
    }
    out
}

#[test]
fn list_sends_the_request_and_decodes_the_page() {
    let body = r#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"10","continue":"c2"},"items":[{"metadata":{"name":"a","namespace":"n"}}]}"#;
    let (a, b) = body.split_at(17);
    let c = client(vec![ok(vec![a, b])]);
    let api = c.api::<DynamicObject>(Resource::CONFIGMAPS, Some("n"));
    let req = ListRequest {
        limit: Some(1),
        ..Default::default()
    };
    let page = run(Transport::list(&api, &req)).unwrap();
    assert_eq!(page.items.len(), 1);
    // List items come without apiVersion/kind; DynamicObjects get them from the resource.
    assert_eq!(page.items[0].kind.as_deref(), Some("ConfigMap"));
    assert_eq!(page.items[0].api_version.as_deref(), Some("v1"));
    assert_eq!(page.continue_token.as_deref(), Some("c2"));
    let seen = c.backend().seen();
    assert_eq!(seen[0].uri(), "/api/v1/namespaces/n/configmaps?limit=1");
    assert_eq!(seen[0].headers()["authorization"], "Bearer tok");
    assert!(seen[0].headers()["authorization"].is_sensitive());
    assert_eq!(seen[0].headers()["accept"], "application/json");
}

#[test]
fn list_errors_map_to_failures() {
    let c = client(vec![
        Ok(Canned {
            status: 410,
            headers: vec![],
            chunks: vec![br#"{"kind":"Status","metadata":{"continue":"fresh"},"status":"Failure","message":"The provided continue parameter is too old","reason":"Expired","code":410}"#.to_vec()],
            fail_after: None,
        }),
        Ok(Canned {
            status: 429,
            headers: vec![("retry-after", "5".into())],
            chunks: vec![b"{\"kind\":\"Status\",\"reason\":\"TooManyRequests\",\"code\":429,\"message\":\"slow\"}".to_vec()],
            fail_after: None,
        }),
        Err(Failure::ConnectionRefused("connect: refused".into())),
        ok(vec!["{not json"]),
    ]);
    let api = c.api::<DynamicObject>(Resource::CONFIGMAPS, None);
    let req = ListRequest::default();
    let f = run(api.list_page(&req)).unwrap_err();
    assert!(
        matches!(&f, Failure::Expired(s) if s.continue_token.as_deref() == Some("fresh")),
        "{f:?}"
    );
    let f = run(api.list_page(&req)).unwrap_err();
    assert!(
        matches!(&f, Failure::TooManyRequests(s) if s.retry_after == Some(Duration::from_secs(5))),
        "{f:?}"
    );
    assert!(matches!(
        run(api.list_page(&req)),
        Err(Failure::ConnectionRefused(_))
    ));
    assert!(
        matches!(run(api.list_page(&req)), Err(Failure::Decode(d)) if d.kind == DecodeKind::Malformed)
    );
}

#[test]
fn watch_streams_events_whatever_the_chunking() {
    let c = client(vec![ok(vec![
        r#"{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"1"}}}"#,
        "\n{\"type\":\"MODI",
        r#"FIED","object":{"metadata":{"name":"a","resourceVersion":"2"}}}"#,
        "\n{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"3\",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}}}}\n",
    ])]);
    let api = c.api::<DynamicObject>(Resource::CONFIGMAPS, None);
    let req = WatchRequest {
        resource_version: "0".into(),
        allow_watch_bookmarks: true,
        ..Default::default()
    };
    let evs = run(async { drain(api.watch(&req).await.unwrap()).await });
    assert_eq!(evs.len(), 3, "{evs:?}");
    assert!(matches!(&evs[0], WatchEvent::Added(o) if o.name() == "a"));
    assert!(matches!(&evs[1], WatchEvent::Modified(o) if o.resource_version() == Some("2")));
    assert!(matches!(
        &evs[2],
        WatchEvent::Bookmark {
            initial_events_end: true,
            ..
        }
    ));
    assert_eq!(
        c.backend().seen()[0].uri(),
        "/api/v1/configmaps?watch=true&resourceVersion=0&allowWatchBookmarks=true"
    );
}

/// Regression (faults probe): an undecodable watch line used to be skipped in silence, so a
/// BOOKMARK after it moved the informer past a change it never applied. Each kind of bad line
/// now ends the stream with a typed `Failure::Decode`; nothing after it is delivered.
#[test]
fn an_undecodable_line_ends_the_watch_with_a_typed_failure() {
    let added = r#"{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"1"}}}"#;
    let bookmark = r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}"#;
    let cases: Vec<(String, DecodeKind)> = vec![
        // A label value that is a number: the object does not decode.
        (
            r#"{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"2","labels":{"x":1}}}}"#.into(),
            DecodeKind::Object,
        ),
        (
            r#"{"type":"FOO","object":{"metadata":{"name":"a"}}}"#.into(),
            DecodeKind::UnknownEventType,
        ),
        (r#"{"type":"ERROR","object":"boom"}"#.into(), DecodeKind::Malformed),
        ("not json".into(), DecodeKind::Malformed),
        (
            r#"{"type":"BOOKMARK","object":{"metadata":{}}}"#.into(),
            DecodeKind::Object,
        ),
        (
            format!(r#"{{"type":"ADDED","object":{{"metadata":{{"name":"{}"}}}}}}"#, "z".repeat(300)),
            DecodeKind::TooLarge,
        ),
    ];
    for (bad, kind) in cases {
        let body = format!("{added}\n{bad}\n{bookmark}\n");
        let c = client(vec![ok(vec![body.as_str()])]);
        let api = c
            .api::<DynamicObject>(Resource::CONFIGMAPS, None)
            .with_max_line(200);
        let evs = run(async { drain(api.watch(&WatchRequest::default()).await.unwrap()).await });
        assert_eq!(evs.len(), 2, "{bad}: {evs:?}");
        assert!(matches!(&evs[0], WatchEvent::Added(_)));
        assert!(
            matches!(&evs[1], WatchEvent::Error(Failure::Decode(d)) if d.kind == kind),
            "{bad}: {evs:?}"
        );
    }
}

#[test]
fn watch_failures() {
    let c = client(vec![
        Ok(Canned {
            status: 401,
            headers: vec![],
            chunks: vec![br#"{"kind":"Status","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#.to_vec()],
            fail_after: None,
        }),
        Ok(Canned {
            status: 422,
            headers: vec![],
            chunks: vec![br#"{"kind":"Status","status":"Failure","message":"sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled","reason":"Invalid","code":422}"#.to_vec()],
            fail_after: None,
        }),
        Ok(Canned {
            status: 200,
            headers: vec![],
            chunks: vec![br#"{"type":"ADDED","object":{"metadata":{"name":"a"}}}"#.to_vec(), b"\n".to_vec()],
            fail_after: Some(Failure::other("broken")),
        }),
        Ok(Canned {
            status: 200,
            headers: vec![],
            chunks: vec![br#"{"type":"ADDED","object":{"metadata":{"name":"a"}}}"#.to_vec(), b"\n".to_vec()],
            fail_after: Some(Failure::ConnectionClosed("reset".into())),
        }),
        ok(vec!["not json\n", r#"{"type":"ADDED","object":{"metadata":{"name":"a"}}}"#]),
        ok(vec!["not json\n", r#"{"type":"ADDED","object":{"metadata":{"name":"a"}}}"#]),
    ]);
    let api = c.api::<DynamicObject>(Resource::PODS, None);
    let f = run(api.watch_stream(&WatchRequest::default()))
        .err()
        .unwrap();
    assert!(matches!(&f, Failure::Unauthorized(s) if s.message == "Unauthorized"));
    let streaming = WatchRequest {
        send_initial_events: true,
        ..Default::default()
    };
    let f = run(api.watch_stream(&streaming)).err().unwrap();
    assert!(matches!(f, Failure::StreamingListUnsupported(_)), "{f:?}");
    let evs = run(async { drain(api.watch_stream(&WatchRequest::default()).await.unwrap()).await });
    assert_eq!(evs.len(), 2, "{evs:?}");
    assert!(matches!(&evs[1], WatchEvent::Error(Failure::Other(s)) if s.message == "broken"));
    // A reset connection just ends the stream (client-go's "probable EOF").
    let evs = run(async { drain(api.watch_stream(&WatchRequest::default()).await.unwrap()).await });
    assert_eq!(evs.len(), 1, "{evs:?}");
    // The event stream ends at the undecodable line; watch_results shows every line's result.
    let evs = run(async { drain(api.watch_stream(&WatchRequest::default()).await.unwrap()).await });
    assert!(
        matches!(&evs[..], [WatchEvent::Error(Failure::Decode(d))] if d.kind == DecodeKind::Malformed),
        "{evs:?}"
    );
    let results = run(async {
        api.watch_results(&WatchRequest::default())
            .await
            .unwrap()
            .collect::<Vec<_>>()
            .await
    });
    assert!(
        matches!(
            &results[..],
            [Err(DecodeError::Malformed { .. }), Ok(WatchEvent::Added(_))]
        ),
        "{results:?}"
    );
}

/// The streaming-list path (Kubernetes 1.27+, not in the v1.20 test cluster) against a scripted
/// server: the request asks for initial events, they arrive as ADDED, and the bookmark with
/// `k8s.io/initial-events-end` ends them.
#[test]
fn streaming_list_against_a_scripted_server() {
    let c = client(vec![ok(vec![
        "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p1\",\"namespace\":\"n\",\"resourceVersion\":\"5\"}}}\n",
        "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p2\",\"namespace\":\"n\",\"resourceVersion\":\"7\"}}}\n{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"resourceVersion\":\"9\",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}}}}\n",
        "{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p1\",\"namespace\":\"n\",\"resourceVersion\":\"10\"}}}\n",
    ])]);
    let api = c.api::<DynamicObject>(Resource::PODS, Some("n"));
    let req = WatchRequest {
        resource_version_match: Some(informer_core::protocol::ResourceVersionMatch::NotOlderThan),
        allow_watch_bookmarks: true,
        send_initial_events: true,
        timeout_seconds: Some(60),
        ..Default::default()
    };
    let evs = run(async { drain(api.watch(&req).await.unwrap()).await });
    assert_eq!(
        c.backend().seen()[0].uri(),
        "/api/v1/namespaces/n/pods?watch=true&resourceVersion=&resourceVersionMatch=NotOlderThan\
         &allowWatchBookmarks=true&sendInitialEvents=true&timeoutSeconds=60"
    );
    assert_eq!(evs.len(), 4, "{evs:?}");
    assert!(matches!(&evs[0], WatchEvent::Added(o) if o.name() == "p1"));
    assert!(matches!(&evs[1], WatchEvent::Added(o) if o.name() == "p2"));
    assert!(matches!(
        &evs[2],
        WatchEvent::Bookmark { resource_version, initial_events_end: true } if resource_version == "9"
    ));
    assert!(matches!(&evs[3], WatchEvent::Modified(o) if o.resource_version() == Some("10")));
}

/// A typed object (all fields optional) would decode from another kind's list items as an
/// empty value: a list whose kind is not the type's is refused with a typed failure.
#[cfg(feature = "k8s-openapi")]
#[test]
fn a_typed_list_of_another_kind_is_refused() {
    use crate::K8s;
    use k8s_openapi::api::core::v1::Pod;
    let c = client(vec![
        ok(vec![
            r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[{"metadata":{"name":"a","namespace":"ns"}}]}"#,
        ]),
        ok(vec![
            r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[{"metadata":{"name":"p","namespace":"ns"}}]}"#,
        ]),
    ]);
    // A resource named by hand with the wrong kind: the server answers with ConfigMaps.
    let api = c.api::<K8s<Pod>>(Resource::CONFIGMAPS, None);
    let f = run(api.list_page(&ListRequest::default())).unwrap_err();
    assert!(
        matches!(&f, Failure::Decode(d) if d.message.contains("ConfigMapList") && d.message.contains("Pod")),
        "{f:?}"
    );
    let page = run(api.list_page(&ListRequest::default())).unwrap();
    assert_eq!(page.items.len(), 1);
}

/// A custom type that knows its resource needs it named once: `client.api_for::<K>(ns)`.
#[test]
fn api_for_a_custom_type_that_knows_its_resource() {
    #[derive(serde::Deserialize)]
    struct Greeting {
        metadata: informer_core::object::ObjectMeta,
    }
    informer_core::impl_object!(Greeting);
    impl HasResource for Greeting {
        fn resource() -> Resource {
            Resource::new("example.com", "v1", "Greeting", "greetings", true)
        }
    }
    let c = client(vec![ok(vec![
        r#"{"kind":"GreetingList","apiVersion":"example.com/v1","metadata":{"resourceVersion":"3"},"items":[{"metadata":{"name":"hi","namespace":"n"}}]}"#,
    ])]);
    let api = c.api_for::<Greeting>(Some("n"));
    assert_eq!(api.resource(), &Greeting::resource());
    assert_eq!(api.namespace(), Some("n"));
    let page = run(api.list_page(&ListRequest::default())).unwrap();
    assert_eq!(page.items[0].metadata.name(), "hi");
    assert_eq!(
        Greeting::resource()
            .controller_of(&Greeting {
                metadata: informer_core::object::ObjectMetaParts {
                    name: "hi".into(),
                    uid: Some("g-1".into()),
                    ..Default::default()
                }
                .into(),
            })
            .unwrap()
            .api_version,
        "example.com/v1"
    );
}
