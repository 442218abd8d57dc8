//! Scripted tests of the Reflector's rules (CONFORMANCE 18–24). The randomized, fault-injecting
//! tests against a model API server live in `crate::sim`.

use super::*;
use crate::object::{DynamicObject, ObjectMeta};
use alloc::string::ToString;
use alloc::vec;

type R = Reflector<DynamicObject>;

fn obj(name: &str, rv: u64) -> Arc<DynamicObject> {
    Arc::new(DynamicObject {
        metadata: ObjectMeta {
            name: name.into(),
            namespace: Some("ns".into()),
            resource_version: Some(rv.to_string()),
            ..Default::default()
        },
        ..Default::default()
    })
}

fn at(ms: u64) -> Instant {
    Instant::from_epoch(Duration::from_millis(ms))
}

fn drain(r: &mut R) -> Vec<Output<DynamicObject>> {
    let mut v = Vec::new();
    while let Some(o) = r.poll() {
        v.push(o);
    }
    v
}

/// The single request among `outs`, panicking (test only) otherwise.
fn request(outs: &[Output<DynamicObject>]) -> (RequestId, Request) {
    let reqs: Vec<_> = outs
        .iter()
        .filter_map(|o| match o {
            Output::Request { id, request } => Some((*id, request.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(reqs.len(), 1, "expected exactly one request in {outs:?}");
    reqs.into_iter().next().unwrap()
}

fn request_opt(outs: &[Output<DynamicObject>]) -> Option<Request> {
    outs.iter().find_map(|o| match o {
        Output::Request { request, .. } => Some(request.clone()),
        _ => None,
    })
}

fn list_req(req: &Request) -> &ListRequest {
    match req {
        Request::List(l) => l,
        other => panic!("expected a list, got {other:?}"),
    }
}

fn watch_req(req: &Request) -> &WatchRequest {
    match req {
        Request::Watch(w) => w,
        other => panic!("expected a watch, got {other:?}"),
    }
}

fn errors(outs: &[Output<DynamicObject>]) -> Vec<Failure> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Error(f) => Some(f.clone()),
            _ => None,
        })
        .collect()
}

fn stores(outs: &[Output<DynamicObject>]) -> Vec<&StoreOp<DynamicObject>> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Store(s) => Some(s),
            _ => None,
        })
        .collect()
}

fn page(items: Vec<Arc<DynamicObject>>, rv: &str, cont: Option<&str>) -> ListPage<DynamicObject> {
    ListPage {
        items,
        resource_version: rv.into(),
        continue_token: cont.map(Into::into),
        remaining_item_count: None,
    }
}

fn status(code: u16, reason: &str) -> Status {
    Status {
        code,
        reason: reason.into(),
        message: "m".into(),
        ..Status::default()
    }
}

fn expired() -> Failure {
    Failure::Expired(status(410, "Expired"))
}

/// Starts `r` and completes a one-page list at `rv`; returns the watch's id.
fn list_then_watch(r: &mut R, now: Instant, rv: &str) -> RequestId {
    r.start(now);
    let (id, req) = request(&drain(r));
    assert!(matches!(req, Request::List(_)));
    r.handle_list_page(now, id, page(vec![obj("a", 1)], rv, None));
    let (wid, req) = request(&drain(r));
    assert_eq!(watch_req(&req).resource_version, rv);
    wid
}

/// Fires the pending backoff timer, returning the outputs.
fn fire(r: &mut R) -> (Instant, Vec<Output<DynamicObject>>) {
    let t = r.poll_timeout().expect("a backoff is pending");
    r.handle_timeout(t);
    (t, drain(r))
}

#[test]
fn conformance_18_first_list_rv_zero_then_last_synced() {
    let mut r = R::new(ReflectorConfig::default());
    r.start(at(0));
    let (id, req) = request(&drain(&mut r));
    let l = list_req(&req);
    assert_eq!(l.resource_version.as_deref(), Some("0"));
    assert_eq!(l.limit, Some(DEFAULT_PAGE_SIZE));
    r.handle_list_page(at(5), id, page(vec![obj("a", 3)], "10", None));
    let (wid, _) = request(&drain(&mut r));
    r.handle_watch_event(at(2000), wid, WatchEvent::Modified(obj("a", 12)));
    r.handle_watch_event(at(2000), wid, WatchEvent::Error(expired()));
    let outs = drain(&mut r);
    assert_eq!(errors(&outs).len(), 1);
    let (_, outs) = fire(&mut r);
    let (_, req) = request(&outs);
    let l = list_req(&req);
    assert_eq!(
        l.resource_version.as_deref(),
        Some("12"),
        "relist at the last synced RV"
    );
}

#[test]
fn conformance_18_relist_expired_or_too_large_retries_at_once_with_consistent_read() {
    for failure in [
        expired(),
        Failure::Expired(status(410, "Gone")),
        Failure::TooLargeResourceVersion(status(504, "Timeout")),
    ] {
        let mut r = R::new(ReflectorConfig::default());
        let wid = list_then_watch(&mut r, at(0), "10");
        r.handle_failure(at(5000), wid, Failure::other("boom"));
        drain(&mut r);
        let (t, outs) = fire(&mut r);
        let (lid, req) = request(&outs);
        assert_eq!(list_req(&req).resource_version.as_deref(), Some("10"));
        r.handle_failure(t, lid, failure.clone());
        let outs = drain(&mut r);
        assert_eq!(errors(&outs), vec![failure.clone()]);
        assert_eq!(
            r.poll_timeout(),
            Some(t + Duration::from_secs(90)),
            "no backoff before the consistent retry, only the list's deadline"
        );
        let (lid2, req) = request(&outs);
        assert_eq!(list_req(&req).resource_version, None, "consistent read");
        // A second failure of the consistent list backs off.
        r.handle_failure(t, lid2, failure.clone());
        let outs = drain(&mut r);
        assert_eq!(errors(&outs).len(), 1);
        assert!(r.poll_timeout().is_some());
        let (_, outs) = fire(&mut r);
        let (_, req) = request(&outs);
        assert_eq!(
            list_req(&req).resource_version,
            None,
            "the last synced RV stays unavailable until a list succeeds"
        );
    }
}

#[test]
fn conformance_19_paged_list_applied_once_complete() {
    let mut r = R::new(ReflectorConfig::default());
    r.start(at(0));
    let (id, _) = request(&drain(&mut r));
    r.handle_list_page(
        at(1),
        id,
        page(vec![obj("a", 1), obj("b", 2)], "7", Some("c1")),
    );
    let outs = drain(&mut r);
    assert!(stores(&outs).is_empty(), "never a half list");
    let (id2, req) = request(&outs);
    let l = list_req(&req);
    assert_eq!(l.continue_token.as_deref(), Some("c1"));
    assert_eq!(l.resource_version, None);
    assert_eq!(l.limit, Some(DEFAULT_PAGE_SIZE));
    // A late page of the first request is ignored.
    r.handle_list_page(at(1), id, page(vec![obj("z", 1)], "7", None));
    assert!(drain(&mut r).is_empty());
    r.handle_list_page(at(2), id2, page(vec![obj("c", 5)], "7", None));
    let outs = drain(&mut r);
    match stores(&outs).as_slice() {
        [
            StoreOp::Replace {
                items,
                resource_version,
            },
        ] => {
            assert_eq!(resource_version, "7");
            let names: Vec<_> = items.iter().map(|o| o.name()).collect();
            assert_eq!(names, ["a", "b", "c"]);
        }
        other => panic!("expected one replace, got {other:?}"),
    }
    assert_eq!(watch_req(&request(&outs).1).resource_version, "7");
}

#[test]
fn conformance_19_expired_continue_token_restarts_the_list() {
    let mut r = R::new(ReflectorConfig::default());
    r.start(at(0));
    let (id, _) = request(&drain(&mut r));
    r.handle_list_page(at(1), id, page(vec![obj("a", 1)], "7", Some("c1")));
    let (id2, _) = request(&drain(&mut r));
    let mut st = status(410, "Expired");
    st.continue_token = Some("inconsistent".into());
    r.handle_failure(at(2), id2, Failure::Expired(st));
    let outs = drain(&mut r);
    assert_eq!(errors(&outs).len(), 1);
    let (id3, req) = request(&outs);
    let l = list_req(&req);
    assert_eq!(l.resource_version.as_deref(), Some("0"));
    assert_eq!(
        l.continue_token, None,
        "the inconsistent token is never used"
    );
    assert_eq!(l.limit, None, "full list, as client-go's pager");
    r.handle_list_page(at(3), id3, page(vec![obj("b", 9)], "9", None));
    let outs = drain(&mut r);
    match stores(&outs).as_slice() {
        [
            StoreOp::Replace {
                items,
                resource_version,
            },
        ] => {
            assert_eq!(resource_version, "9");
            assert_eq!(items.len(), 1, "pages of the abandoned list are dropped");
        }
        other => panic!("expected one replace, got {other:?}"),
    }
}

#[test]
fn conformance_19_paging_off_at_specific_rv_unless_page_size_set() {
    // Default: a relist at a specific RV is unpaged.
    let mut r = R::new(ReflectorConfig::default());
    let wid = list_then_watch(&mut r, at(0), "10");
    r.handle_watch_event(at(10), wid, WatchEvent::Error(expired()));
    drain(&mut r);
    let (_, outs) = fire(&mut r);
    assert_eq!(list_req(&request(&outs).1).limit, None);

    // Explicit page size: always paged.
    let mut r = R::new(ReflectorConfig {
        page_size: Some(3),
        ..ReflectorConfig::default()
    });
    r.start(at(0));
    let (id, req) = request(&drain(&mut r));
    assert_eq!(list_req(&req).limit, Some(3));
    r.handle_list_page(at(1), id, page(vec![], "10", None));
    let (wid, _) = request(&drain(&mut r));
    r.handle_watch_event(at(10), wid, WatchEvent::Error(expired()));
    drain(&mut r);
    let (_, outs) = fire(&mut r);
    let req = request(&outs).1;
    assert_eq!(list_req(&req).resource_version.as_deref(), Some("10"));
    assert_eq!(list_req(&req).limit, Some(3));

    // A list at "0" that came back paginated: the server honours paging; keep it on.
    let mut r = R::new(ReflectorConfig::default());
    r.start(at(0));
    let (id, _) = request(&drain(&mut r));
    r.handle_list_page(at(1), id, page(vec![obj("a", 1)], "10", Some("c")));
    let (id, _) = request(&drain(&mut r));
    r.handle_list_page(at(1), id, page(vec![obj("b", 2)], "10", None));
    let (wid, _) = request(&drain(&mut r));
    r.handle_watch_event(at(10), wid, WatchEvent::Error(expired()));
    drain(&mut r);
    let (_, outs) = fire(&mut r);
    assert_eq!(list_req(&request(&outs).1).limit, Some(DEFAULT_PAGE_SIZE));
}

#[test]
fn conformance_20_watch_at_list_rv_with_bookmarks_and_random_timeout() {
    let mut seen_low = false;
    let mut seen_high = false;
    for seed in 0..200 {
        let mut r = R::new(ReflectorConfig {
            seed,
            ..ReflectorConfig::default()
        });
        r.start(at(0));
        let (id, _) = request(&drain(&mut r));
        r.handle_list_page(at(0), id, page(vec![], "42", None));
        let (_, req) = request(&drain(&mut r));
        let w = watch_req(&req);
        assert_eq!(w.resource_version, "42");
        assert!(w.allow_watch_bookmarks);
        assert!(!w.send_initial_events);
        let t = w.timeout_seconds.unwrap();
        assert!((300..600).contains(&t), "{t}");
        seen_low |= t < 450;
        seen_high |= t >= 450;
    }
    assert!(seen_low && seen_high, "timeouts spread over [300, 600)");
}

#[test]
fn conformance_20_bookmark_advances_rv_and_emits_nothing() {
    let mut r = R::new(ReflectorConfig::default());
    let wid = list_then_watch(&mut r, at(0), "10");
    r.handle_watch_event(
        at(100),
        wid,
        WatchEvent::Bookmark {
            resource_version: "55".into(),
            initial_events_end: false,
        },
    );
    assert!(drain(&mut r).is_empty());
    assert_eq!(r.last_sync_resource_version(), "55");
    // Resume after a normal end starts at the bookmark's RV.
    r.handle_stream_end(at(200), wid);
    let outs = drain(&mut r);
    assert_eq!(watch_req(&request(&outs).1).resource_version, "55");
}

#[test]
fn conformance_21_normal_end_resumes_watch_without_relist() {
    let mut r = R::new(ReflectorConfig::default());
    let wid = list_then_watch(&mut r, at(0), "10");
    r.handle_watch_event(at(500), wid, WatchEvent::Added(obj("b", 11)));
    drain(&mut r);
    // Even a quick end is fine when an event arrived.
    r.handle_stream_end(at(600), wid);
    let outs = drain(&mut r);
    assert!(errors(&outs).is_empty());
    let (wid2, req) = request(&outs);
    let t = u64::from(watch_req(&req).timeout_seconds.unwrap());
    assert_eq!(
        r.poll_timeout(),
        Some(at(600) + Duration::from_secs(t + 60)),
        "no backoff, only the watchdog"
    );
    assert_eq!(watch_req(&req).resource_version, "11");
    // A long quiet watch ending normally also resumes.
    r.handle_stream_end(at(600 + 300_000), wid2);
    let outs = drain(&mut r);
    assert_eq!(watch_req(&request(&outs).1).resource_version, "11");
}

#[test]
fn conformance_21_watch_error_or_410_relists() {
    for how in 0..3 {
        let mut r = R::new(ReflectorConfig::default());
        let wid = list_then_watch(&mut r, at(0), "10");
        match how {
            0 => r.handle_watch_event(at(5000), wid, WatchEvent::Error(expired())),
            1 => r.handle_failure(at(5000), wid, expired()),
            _ => r.handle_watch_event(
                at(5000),
                wid,
                WatchEvent::Error(Failure::Other(status(500, "InternalError"))),
            ),
        }
        let outs = drain(&mut r);
        assert_eq!(errors(&outs).len(), 1);
        let (_, outs) = fire(&mut r);
        assert!(matches!(request(&outs).1, Request::List(_)), "case {how}");
    }
}

#[test]
fn conformance_21_very_short_watch_is_an_error_and_backs_off() {
    let mut r = R::new(ReflectorConfig::default());
    let wid = list_then_watch(&mut r, at(0), "10");
    r.handle_stream_end(at(999), wid);
    let outs = drain(&mut r);
    assert_eq!(errors(&outs), vec![Failure::other(VERY_SHORT_WATCH)]);
    assert!(outs.iter().all(|o| !matches!(o, Output::Request { .. })));
    let t = r.poll_timeout().unwrap();
    assert!(t >= at(999 + 800) && t < at(999 + 1600), "{t:?}");
    let (_, outs) = fire(&mut r);
    assert!(matches!(request(&outs).1, Request::List(_)));
}

#[test]
fn conformance_22_backoff_exponential_capped_jittered_and_reset() {
    let mut r = R::new(ReflectorConfig {
        seed: 99,
        ..ReflectorConfig::default()
    });
    let mut wid = list_then_watch(&mut r, at(0), "10");
    let mut now = at(10_000);
    let mut base = 800u64;
    for _ in 0..10 {
        r.handle_failure(now, wid, Failure::ConnectionRefused("refused".into()));
        drain(&mut r);
        let until = r.poll_timeout().unwrap();
        let d = (until - now).as_millis() as u64;
        assert!(d >= base && d < 2 * base, "delay {d} for base {base}");
        base = (base * 2).min(30_000);
        let (t, outs) = fire(&mut r);
        now = t;
        wid = request(&outs).0;
    }
    // More than 2 min after the last backoff began: back to 800 ms.
    now = now + Duration::from_secs(121);
    r.handle_failure(now, wid, Failure::ConnectionRefused("refused".into()));
    drain(&mut r);
    let d = (r.poll_timeout().unwrap() - now).as_millis();
    assert!((800..1600).contains(&d), "reset: {d}");
}

#[test]
fn conformance_22_connection_refused_and_429_rewatch_without_relist() {
    let mut r = R::new(ReflectorConfig::default());
    let wid = list_then_watch(&mut r, at(0), "10");
    r.handle_failure(
        at(10),
        wid,
        Failure::ConnectionRefused("econnrefused".into()),
    );
    drain(&mut r);
    let (t, outs) = fire(&mut r);
    let (wid, req) = request(&outs);
    assert_eq!(
        watch_req(&req).resource_version,
        "10",
        "re-watch, no relist"
    );
    let mut st = status(429, "TooManyRequests");
    st.retry_after = Some(Duration::from_secs(45));
    r.handle_failure(t, wid, Failure::TooManyRequests(st.clone()));
    drain(&mut r);
    assert!(
        r.poll_timeout().unwrap() >= t + Duration::from_secs(45),
        "Retry-After"
    );
    let (t, outs) = fire(&mut r);
    let (wid, req) = request(&outs);
    assert_eq!(watch_req(&req).resource_version, "10");
    // A 429 as a watch ERROR event too.
    r.handle_watch_event(t, wid, WatchEvent::Error(Failure::TooManyRequests(st)));
    drain(&mut r);
    let (_, outs) = fire(&mut r);
    assert!(matches!(request(&outs).1, Request::Watch(_)));
}

#[test]
fn conformance_23_every_failure_is_reported_typed() {
    let failures = [
        expired(),
        Failure::TooLargeResourceVersion(status(504, "Timeout")),
        Failure::TooManyRequests(status(429, "TooManyRequests")),
        Failure::Unauthorized(status(403, "Forbidden")),
        Failure::ConnectionRefused("refused".into()),
        Failure::Other(status(500, "InternalError")),
    ];
    for f in failures {
        // As a list failure.
        let mut r = R::new(ReflectorConfig::default());
        r.start(at(0));
        let (id, _) = request(&drain(&mut r));
        r.handle_failure(at(1), id, f.clone());
        assert_eq!(errors(&drain(&mut r)), vec![f.clone()]);
        // As a watch request failure and as a watch ERROR event.
        let mut r = R::new(ReflectorConfig::default());
        let wid = list_then_watch(&mut r, at(0), "1");
        r.handle_failure(at(1), wid, f.clone());
        assert_eq!(errors(&drain(&mut r)), vec![f.clone()]);
        let mut r = R::new(ReflectorConfig::default());
        let wid = list_then_watch(&mut r, at(0), "1");
        r.handle_watch_event(at(1), wid, WatchEvent::Error(f.clone()));
        assert_eq!(errors(&drain(&mut r)), vec![f.clone()]);
    }
    // A list at "0" that fails with 410: reported, then the consistent retry.
    let mut r = R::new(ReflectorConfig::default());
    r.start(at(0));
    let (id, _) = request(&drain(&mut r));
    r.handle_failure(at(1), id, expired());
    let outs = drain(&mut r);
    assert_eq!(errors(&outs), vec![expired()]);
    assert_eq!(list_req(&request(&outs).1).resource_version, None);
}

#[test]
fn conformance_24_last_sync_resource_version() {
    let mut r = R::new(ReflectorConfig::default());
    assert_eq!(r.last_sync_resource_version(), "");
    let wid = list_then_watch(&mut r, at(0), "10");
    assert_eq!(r.last_sync_resource_version(), "10");
    r.handle_watch_event(at(1), wid, WatchEvent::Added(obj("x", 11)));
    assert_eq!(r.last_sync_resource_version(), "11");
    r.handle_watch_event(at(1), wid, WatchEvent::Modified(obj("x", 12)));
    r.handle_watch_event(at(1), wid, WatchEvent::Deleted(obj("x", 13)));
    assert_eq!(r.last_sync_resource_version(), "13");
    r.handle_watch_event(
        at(1),
        wid,
        WatchEvent::Bookmark {
            resource_version: "20".into(),
            initial_events_end: false,
        },
    );
    assert_eq!(r.last_sync_resource_version(), "20");
    let ops = drain(&mut r);
    assert_eq!(stores(&ops).len(), 3);
}

fn streaming() -> R {
    R::new(ReflectorConfig {
        streaming_list: true,
        ..ReflectorConfig::default()
    })
}

#[test]
fn streaming_list_applies_one_replace_at_initial_events_end() {
    let mut r = streaming();
    r.start(at(0));
    let (id, req) = request(&drain(&mut r));
    let w = watch_req(&req);
    assert!(w.send_initial_events && w.allow_watch_bookmarks);
    assert_eq!(
        w.resource_version_match,
        Some(ResourceVersionMatch::NotOlderThan)
    );
    assert_eq!(w.resource_version, "");
    r.handle_watch_event(at(1), id, WatchEvent::Added(obj("a", 3)));
    r.handle_watch_event(at(1), id, WatchEvent::Added(obj("b", 4)));
    r.handle_watch_event(at(1), id, WatchEvent::Deleted(obj("a", 5)));
    r.handle_watch_event(at(1), id, WatchEvent::Added(obj("c", 6)));
    r.handle_watch_event(
        at(1),
        id,
        WatchEvent::Bookmark {
            resource_version: "8".into(),
            initial_events_end: false,
        },
    );
    assert!(
        drain(&mut r).is_empty(),
        "the store never sees a half-built state"
    );
    r.handle_watch_event(
        at(2),
        id,
        WatchEvent::Bookmark {
            resource_version: "9".into(),
            initial_events_end: true,
        },
    );
    let outs = drain(&mut r);
    match stores(&outs).as_slice() {
        [
            StoreOp::Replace {
                items,
                resource_version,
            },
        ] => {
            assert_eq!(resource_version, "9");
            let names: Vec<_> = items.iter().map(|o| o.name()).collect();
            assert_eq!(names, ["b", "c"]);
        }
        other => panic!("expected one replace, got {other:?}"),
    }
    assert!(
        outs.iter().all(|o| !matches!(o, Output::Request { .. })),
        "same stream"
    );
    assert_eq!(r.last_sync_resource_version(), "9");
    // The stream goes on as the watch.
    r.handle_watch_event(at(3), id, WatchEvent::Modified(obj("b", 10)));
    assert!(matches!(
        stores(&drain(&mut r)).as_slice(),
        [StoreOp::Modified(_)]
    ));
    r.handle_stream_end(at(400_000), id);
    let outs = drain(&mut r);
    let w = watch_req(&request(&outs).1).clone();
    assert_eq!(w.resource_version, "10");
    assert!(!w.send_initial_events);
}

#[test]
fn streaming_list_falls_back_to_paged_list_when_refused() {
    let mut r = streaming();
    r.start(at(0));
    let (id, _) = request(&drain(&mut r));
    let refusal = Failure::StreamingListUnsupported(status(400, "BadRequest"));
    r.handle_failure(at(1), id, refusal.clone());
    let outs = drain(&mut r);
    assert_eq!(errors(&outs), vec![refusal]);
    let (id, req) = request(&outs);
    let l = list_req(&req);
    assert_eq!(l.resource_version.as_deref(), Some("0"));
    assert_eq!(l.limit, Some(DEFAULT_PAGE_SIZE));
    r.handle_list_page(at(2), id, page(vec![obj("a", 1)], "5", None));
    let outs = drain(&mut r);
    assert_eq!(stores(&outs).len(), 1);
    assert_eq!(watch_req(&request(&outs).1).resource_version, "5");
}

/// A v1.20 server ignores `sendInitialEvents`: the watch streams ADDED events and ends at its
/// timeout without the initial-events-end bookmark. The reflector must not stream forever: it
/// lists, and keeps listing on later syncs.
#[test]
fn streaming_list_ignored_by_the_server_falls_back_to_list_for_good() {
    let mut r = streaming();
    r.start(at(0));
    let (id, req) = request(&drain(&mut r));
    assert!(watch_req(&req).send_initial_events);
    r.handle_watch_event(at(1), id, WatchEvent::Added(obj("a", 1)));
    r.handle_stream_end(at(400), id);
    let outs = drain(&mut r);
    assert!(
        stores(&outs).is_empty(),
        "nothing half-built may be applied"
    );
    assert_eq!(errors(&outs), vec![Failure::other(STREAMING_LIST_IGNORED)]);
    let (id, req) = request(&outs);
    assert_eq!(list_req(&req).resource_version.as_deref(), Some("0"));
    r.handle_list_page(at(401), id, page(vec![obj("a", 1)], "5", None));
    let outs = drain(&mut r);
    assert_eq!(stores(&outs).len(), 1);
    let (id, req) = request(&outs);
    assert!(!watch_req(&req).send_initial_events);
    // A 410 on the watch forces a relist: still a list, not a stream.
    r.handle_failure(at(402), id, Failure::Expired(status(410, "Expired")));
    let mut outs = drain(&mut r);
    let mut t = 402;
    // Skip any backoff wait.
    while request_opt(&outs).is_none() {
        t += 31;
        r.handle_timeout(at(t));
        outs = drain(&mut r);
    }
    let (_, req) = request(&outs);
    assert!(matches!(req, Request::List(_)), "{req:?}");
}

#[test]
fn streaming_list_expired_retries_with_consistent_rv() {
    let mut r = streaming();
    r.start(at(0));
    let (id, _) = request(&drain(&mut r));
    r.handle_watch_event(
        at(1),
        id,
        WatchEvent::Bookmark {
            resource_version: "5".into(),
            initial_events_end: true,
        },
    );
    drain(&mut r);
    r.handle_watch_event(at(5000), id, WatchEvent::Error(expired()));
    drain(&mut r);
    let (t, outs) = fire(&mut r);
    let (id, req) = request(&outs);
    assert_eq!(watch_req(&req).resource_version, "5");
    assert!(watch_req(&req).send_initial_events);
    r.handle_failure(t, id, expired());
    let outs = drain(&mut r);
    let (id, req) = request(&outs);
    assert_eq!(
        watch_req(&req).resource_version,
        "",
        "retry at once, consistent"
    );
    // A 410 for "" cannot be fixed by retrying: fall back to a list.
    r.handle_failure(t, id, expired());
    let outs = drain(&mut r);
    assert!(matches!(request(&outs).1, Request::List(_)));
}

#[test]
fn stale_and_unexpected_inputs_are_ignored() {
    let mut r = R::new(ReflectorConfig::default());
    // Before start.
    r.handle_list_page(at(0), RequestId(1), page(vec![], "1", None));
    r.handle_stream_end(at(0), RequestId(1));
    r.handle_failure(at(0), RequestId(1), expired());
    r.handle_timeout(at(0));
    assert!(drain(&mut r).is_empty());
    let wid = list_then_watch(&mut r, at(0), "3");
    // A watch event tagged with the (old) list id.
    r.handle_watch_event(at(1), RequestId(wid.0 - 1), WatchEvent::Added(obj("q", 9)));
    r.handle_list_page(at(1), wid, page(vec![], "1", None));
    assert!(drain(&mut r).is_empty());
    r.stop();
    r.handle_watch_event(at(1), wid, WatchEvent::Added(obj("q", 9)));
    assert!(drain(&mut r).is_empty());
    assert!(!r.is_running());
}

/// Any input sequence, however nonsensical (unknown ids, events after failures, huge or odd
/// resourceVersions, zero configs), never panics and never leaves the Reflector without either
/// a request in flight, a pending deadline or being stopped/idle.
#[test]
fn random_inputs_never_panic() {
    for seed in 0..300u64 {
        let mut rng = SplitMix64::new(seed);
        let mut r = R::new(ReflectorConfig {
            streaming_list: rng.chance(0.5),
            page_size: [None, Some(0), Some(1), Some(u32::MAX)][rng.below(4) as usize],
            min_watch_timeout: Duration::from_secs(rng.below(3)),
            backoff: BackoffConfig {
                initial: Duration::from_millis(rng.below(1000)),
                cap: Duration::from_millis(rng.below(100_000)),
                reset_after: Duration::from_secs(rng.below(200)),
                factor: [2.0, 0.0, -1.0, f64::NAN, f64::INFINITY, 1e300][rng.below(6) as usize],
                jitter: [1.0, 0.0, -1.0, f64::NAN, 1e300][rng.below(5) as usize],
            },
            seed,
            ..ReflectorConfig::default()
        });
        let mut now = at(0);
        r.start(now);
        let mut last_id = RequestId(0);
        for _ in 0..400 {
            for o in drain(&mut r) {
                if let Output::Request { id, .. } = o {
                    last_id = id;
                }
            }
            now = now + Duration::from_millis(rng.below(5000));
            let id = if rng.chance(0.8) {
                last_id
            } else {
                RequestId(rng.below(last_id.0 + 2))
            };
            let rv = ["", "0", "5", "18446744073709551616", "x"][rng.below(5) as usize];
            match rng.below(9) {
                0 => r.handle_list_page(
                    now,
                    id,
                    page(
                        vec![obj("a", rng.below(10))],
                        rv,
                        [None, Some(""), Some("c")][rng.below(3) as usize],
                    ),
                ),
                1 => r.handle_watch_event(now, id, WatchEvent::Added(obj("a", rng.below(10)))),
                2 => r.handle_watch_event(now, id, WatchEvent::Deleted(obj("a", rng.below(10)))),
                3 => r.handle_watch_event(
                    now,
                    id,
                    WatchEvent::Bookmark {
                        resource_version: rv.into(),
                        initial_events_end: rng.chance(0.5),
                    },
                ),
                4 => r.handle_watch_event(now, id, WatchEvent::Error(expired())),
                5 => r.handle_stream_end(now, id),
                6 => r.handle_failure(
                    now,
                    id,
                    [
                        expired(),
                        Failure::ConnectionRefused("x".into()),
                        Failure::TooManyRequests(Status {
                            retry_after: Some(Duration::MAX),
                            ..status(429, "")
                        }),
                        Failure::StreamingListUnsupported(status(400, "")),
                        Failure::TooLargeResourceVersion(status(504, "")),
                    ][rng.below(5) as usize]
                        .clone(),
                ),
                7 => {
                    if let Some(t) = r.poll_timeout() {
                        now = now.max(t);
                    }
                    r.handle_timeout(now)
                }
                _ => r.handle_timeout(now),
            }
            assert!(
                r.in_flight().is_some() || r.poll_timeout().is_some(),
                "stuck: {r:?}"
            );
        }
    }
}

#[test]
fn hung_watch_is_abandoned_after_its_timeout_plus_grace() {
    let mut r = R::new(ReflectorConfig::default());
    let wid = list_then_watch(&mut r, at(0), "10");
    r.handle_watch_event(at(5), wid, WatchEvent::Added(obj("b", 11)));
    drain(&mut r);
    let deadline = r.poll_timeout().unwrap();
    assert!(deadline >= at(360_000) && deadline < at(660_000));
    r.handle_timeout(Instant::from_epoch(
        deadline.since_epoch() - Duration::from_millis(1),
    ));
    assert!(drain(&mut r).is_empty());
    r.handle_timeout(deadline);
    let outs = drain(&mut r);
    assert_eq!(errors(&outs), vec![Failure::other(HUNG_WATCH)]);
    let (wid2, req) = request(&outs);
    assert_ne!(wid2, wid);
    assert_eq!(
        watch_req(&req).resource_version,
        "11",
        "re-watch, no relist"
    );
    // Late events of the abandoned watch are ignored.
    r.handle_watch_event(deadline, wid, WatchEvent::Added(obj("z", 99)));
    assert!(drain(&mut r).is_empty());
    // Without a grace, no watchdog.
    let mut r = R::new(ReflectorConfig {
        watch_deadline_grace: None,
        ..ReflectorConfig::default()
    });
    list_then_watch(&mut r, at(0), "10");
    assert_eq!(r.poll_timeout(), None);
}

#[test]
fn unanswered_list_fails_at_its_deadline() {
    let mut r = R::new(ReflectorConfig::default());
    r.start(at(0));
    let (id, _) = request(&drain(&mut r));
    assert_eq!(r.poll_timeout(), Some(at(90_000)));
    r.handle_list_page(at(1000), id, page(vec![obj("a", 1)], "5", Some("c")));
    drain(&mut r);
    assert_eq!(
        r.poll_timeout(),
        Some(at(91_000)),
        "each page has its own deadline"
    );
    r.handle_timeout(at(91_000));
    let outs = drain(&mut r);
    assert_eq!(errors(&outs), vec![Failure::other(LIST_TIMEOUT)]);
    let (_, outs) = fire(&mut r);
    assert_eq!(
        list_req(&request(&outs).1).resource_version.as_deref(),
        Some("0")
    );
}

#[test]
fn conformance_22_list_429_honours_retry_after() {
    let mut r = R::new(ReflectorConfig::default());
    r.start(at(0));
    let (id, _) = request(&drain(&mut r));
    let mut st = status(429, "TooManyRequests");
    st.retry_after = Some(Duration::from_secs(20));
    r.handle_failure(at(0), id, Failure::TooManyRequests(st));
    drain(&mut r);
    assert!(r.poll_timeout().unwrap() >= at(20_000));
    let (_, outs) = fire(&mut r);
    assert_eq!(
        list_req(&request(&outs).1).resource_version.as_deref(),
        Some("0")
    );
}
