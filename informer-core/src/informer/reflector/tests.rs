//! Scripted tests of the Reflector's rules (CONFORMANCE 18–24). The randomized, fault-injecting
//! tests against a model API server live in `crate::sim`.

use super::*;
use crate::informer::Output as Runtime;
use crate::object::{DynamicObject, ObjectMetaParts};
use alloc::string::ToString;
use alloc::vec;

type R = Reflector<DynamicObject>;

fn obj(name: &str, rv: u64) -> Arc<DynamicObject> {
    Arc::new(DynamicObject {
        metadata: ObjectMetaParts {
            name: name.into(),
            namespace: Some("ns".into()),
            resource_version: Some(rv.to_string().into()),
            ..Default::default()
        }
        .into(),
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

/// The requests among `outs`.
fn requests(outs: &[Output<DynamicObject>]) -> Vec<(RequestId, Request)> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Runtime(Runtime::Request { id, request }) => Some((*id, request.clone())),
            _ => None,
        })
        .collect()
}

/// The single request among `outs`, panicking (test only) otherwise.
fn request(outs: &[Output<DynamicObject>]) -> (RequestId, Request) {
    let reqs = requests(outs);
    assert_eq!(reqs.len(), 1, "expected exactly one request in {outs:?}");
    reqs.into_iter().next().unwrap()
}

fn request_opt(outs: &[Output<DynamicObject>]) -> Option<Request> {
    outs.iter().find_map(|o| match o {
        Output::Runtime(Runtime::Request { request, .. }) => Some(request.clone()),
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
            Output::Runtime(Runtime::WatchError(f)) => Some(f.clone()),
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
    r.start(now).unwrap();
    let (id, req) = request(&drain(r));
    assert!(matches!(req, Request::List(_)));
    r.handle_input(now, id, Input::ListPage(page(vec![obj("a", 1)], rv, None)))
        .unwrap();
    let (wid, req) = request(&drain(r));
    assert_eq!(watch_req(&req).resource_version, rv);
    wid
}

/// Fires the pending backoff timer, returning the outputs.
fn fire(r: &mut R) -> (Instant, Vec<Output<DynamicObject>>) {
    let t = r.poll_timeout().expect("a backoff is pending");
    r.handle_timeout(t).unwrap();
    (t, drain(r))
}

#[test]
fn conformance_18_first_list_rv_zero_then_last_synced() {
    let mut r = R::new(ReflectorConfig::default());
    r.start(at(0)).unwrap();
    let (id, req) = request(&drain(&mut r));
    let l = list_req(&req);
    assert_eq!(l.resource_version.as_deref(), Some("0"));
    assert_eq!(l.limit, Some(DEFAULT_PAGE_SIZE));
    r.handle_input(
        at(5),
        id,
        Input::ListPage(page(vec![obj("a", 3)], "10", None)),
    )
    .unwrap();
    let (wid, _) = request(&drain(&mut r));
    r.handle_input(
        at(2000),
        wid,
        Input::Event(WatchEvent::Modified(obj("a", 12))),
    )
    .unwrap();
    drain(&mut r);
    r.handle_input(at(2000), wid, Input::Event(WatchEvent::Error(expired())))
        .unwrap();
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
        r.handle_input(at(5000), wid, Input::Failed(Failure::other("boom")))
            .unwrap();
        drain(&mut r);
        let (t, outs) = fire(&mut r);
        let (lid, req) = request(&outs);
        assert_eq!(list_req(&req).resource_version.as_deref(), Some("10"));
        r.handle_input(t, lid, Input::Failed(failure.clone()))
            .unwrap();
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
        r.handle_input(t, lid2, Input::Failed(failure.clone()))
            .unwrap();
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
    r.start(at(0)).unwrap();
    let (id, _) = request(&drain(&mut r));
    r.handle_input(
        at(1),
        id,
        Input::ListPage(page(vec![obj("a", 1), obj("b", 2)], "7", Some("c1"))),
    )
    .unwrap();
    let outs = drain(&mut r);
    assert!(stores(&outs).is_empty(), "never a half list");
    let (id2, req) = request(&outs);
    let l = list_req(&req);
    assert_eq!(l.continue_token.as_deref(), Some("c1"));
    assert_eq!(l.resource_version, None);
    assert_eq!(l.limit, Some(DEFAULT_PAGE_SIZE));
    // A late page of the first request is ignored.
    r.handle_input(
        at(1),
        id,
        Input::ListPage(page(vec![obj("z", 1)], "7", None)),
    )
    .unwrap();
    assert!(drain(&mut r).is_empty());
    r.handle_input(
        at(2),
        id2,
        Input::ListPage(page(vec![obj("c", 5)], "7", None)),
    )
    .unwrap();
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
    r.start(at(0)).unwrap();
    let (id, _) = request(&drain(&mut r));
    r.handle_input(
        at(1),
        id,
        Input::ListPage(page(vec![obj("a", 1)], "7", Some("c1"))),
    )
    .unwrap();
    let (id2, _) = request(&drain(&mut r));
    let mut st = status(410, "Expired");
    st.continue_token = Some("inconsistent".into());
    r.handle_input(at(2), id2, Input::Failed(Failure::Expired(st)))
        .unwrap();
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
    r.handle_input(
        at(3),
        id3,
        Input::ListPage(page(vec![obj("b", 9)], "9", None)),
    )
    .unwrap();
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
    r.handle_input(at(10), wid, Input::Event(WatchEvent::Error(expired())))
        .unwrap();
    drain(&mut r);
    let (_, outs) = fire(&mut r);
    assert_eq!(list_req(&request(&outs).1).limit, None);

    // Explicit page size: always paged.
    let mut r = R::new(ReflectorConfig {
        page_size: Some(3),
        ..ReflectorConfig::default()
    });
    r.start(at(0)).unwrap();
    let (id, req) = request(&drain(&mut r));
    assert_eq!(list_req(&req).limit, Some(3));
    r.handle_input(at(1), id, Input::ListPage(page(vec![], "10", None)))
        .unwrap();
    let (wid, _) = request(&drain(&mut r));
    r.handle_input(at(10), wid, Input::Event(WatchEvent::Error(expired())))
        .unwrap();
    drain(&mut r);
    let (_, outs) = fire(&mut r);
    let req = request(&outs).1;
    assert_eq!(list_req(&req).resource_version.as_deref(), Some("10"));
    assert_eq!(list_req(&req).limit, Some(3));

    // A list at "0" that came back paginated: the server honours paging; keep it on.
    let mut r = R::new(ReflectorConfig::default());
    r.start(at(0)).unwrap();
    let (id, _) = request(&drain(&mut r));
    r.handle_input(
        at(1),
        id,
        Input::ListPage(page(vec![obj("a", 1)], "10", Some("c"))),
    )
    .unwrap();
    let (id, _) = request(&drain(&mut r));
    r.handle_input(
        at(1),
        id,
        Input::ListPage(page(vec![obj("b", 2)], "10", None)),
    )
    .unwrap();
    let (wid, _) = request(&drain(&mut r));
    r.handle_input(at(10), wid, Input::Event(WatchEvent::Error(expired())))
        .unwrap();
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
        r.start(at(0)).unwrap();
        let (id, _) = request(&drain(&mut r));
        r.handle_input(at(0), id, Input::ListPage(page(vec![], "42", None)))
            .unwrap();
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

/// The `timeoutSeconds` of the first watch of a reflector with `config` (listed at "1").
fn first_watch_timeout(config: ReflectorConfig) -> u32 {
    let mut r = R::new(config);
    r.start(at(0)).unwrap();
    let (id, _) = request(&drain(&mut r));
    r.handle_input(at(0), id, Input::ListPage(page(vec![], "1", None)))
        .unwrap();
    let (_, req) = request(&drain(&mut r));
    watch_req(&req).timeout_seconds.unwrap()
}

/// CONFORMANCE 33: a minimum watch timeout below 5 minutes, zero included ("the default"), is
/// raised to 5 minutes, as client-go's reflector does; a longer one is kept, and each watch's
/// timeout is drawn from `[min, 2 × min)`. Only the explicitly test-only
/// `test_min_watch_timeout` gives shorter watches. (The old rule took the value literally,
/// floored at 1 s: zero gave one-second watches.)
#[test]
fn conformance_33_min_watch_timeout_below_5_minutes_is_raised_to_5_minutes() {
    for seed in 0..50 {
        for min in [0, 1, 60, 299, 300] {
            let t = first_watch_timeout(ReflectorConfig {
                min_watch_timeout: Duration::from_secs(min),
                seed,
                ..ReflectorConfig::default()
            });
            assert!((300..600).contains(&t), "min {min} s: timeout {t}");
        }
        let t = first_watch_timeout(ReflectorConfig {
            min_watch_timeout: Duration::from_secs(900),
            seed,
            ..ReflectorConfig::default()
        });
        assert!((900..1800).contains(&t), "min 900 s: timeout {t}");
        let t = first_watch_timeout(ReflectorConfig {
            min_watch_timeout: Duration::ZERO,
            test_min_watch_timeout: Some(Duration::from_secs(2)),
            seed,
            ..ReflectorConfig::default()
        });
        assert!((2..4).contains(&t), "test-only 2 s: timeout {t}");
        let t = first_watch_timeout(ReflectorConfig {
            test_min_watch_timeout: Some(Duration::ZERO),
            seed,
            ..ReflectorConfig::default()
        });
        assert!(
            (1..2).contains(&t),
            "test-only zero is one second: timeout {t}"
        );
    }
}

#[test]
fn conformance_20_bookmark_advances_rv_and_emits_nothing() {
    let mut r = R::new(ReflectorConfig::default());
    let wid = list_then_watch(&mut r, at(0), "10");
    r.handle_input(
        at(1000),
        wid,
        Input::Event(WatchEvent::Bookmark {
            resource_version: "55".into(),
            initial_events_end: false,
        }),
    )
    .unwrap();
    assert!(drain(&mut r).is_empty());
    assert_eq!(r.last_sync_resource_version(), "55");
    // Resume after a normal end starts at the bookmark's RV.
    r.handle_input(at(2000), wid, Input::StreamEnd).unwrap();
    let outs = drain(&mut r);
    assert_eq!(watch_req(&request(&outs).1).resource_version, "55");
}

#[test]
fn conformance_21_normal_end_resumes_watch_without_relist() {
    let mut r = R::new(ReflectorConfig::default());
    let wid = list_then_watch(&mut r, at(0), "10");
    r.handle_input(at(1500), wid, Input::Event(WatchEvent::Added(obj("b", 11))))
        .unwrap();
    drain(&mut r);
    r.handle_input(at(2000), wid, Input::StreamEnd).unwrap();
    let outs = drain(&mut r);
    assert!(errors(&outs).is_empty());
    let (wid2, req) = request(&outs);
    let t = u64::from(watch_req(&req).timeout_seconds.unwrap());
    assert_eq!(
        r.poll_timeout(),
        Some(at(2000) + Duration::from_secs(t + 60)),
        "no backoff, only the watchdog"
    );
    assert_eq!(watch_req(&req).resource_version, "11");
    // A long quiet watch ending normally also resumes.
    r.handle_input(at(2000 + 300_000), wid2, Input::StreamEnd)
        .unwrap();
    let outs = drain(&mut r);
    assert_eq!(watch_req(&request(&outs).1).resource_version, "11");
}

/// A quick end after objects arrived is no error and needs no relist, but the next watch waits
/// for the backoff (unlike client-go), so a server closing every watch at once after an event
/// cannot drive a request per event as fast as it answers.
#[test]
fn conformance_21_quick_end_after_objects_rewatches_through_the_backoff() {
    let mut r = R::new(ReflectorConfig::default());
    let wid = list_then_watch(&mut r, at(0), "10");
    r.handle_input(at(500), wid, Input::Event(WatchEvent::Added(obj("b", 11))))
        .unwrap();
    drain(&mut r);
    r.handle_input(at(600), wid, Input::StreamEnd).unwrap();
    let outs = drain(&mut r);
    assert!(errors(&outs).is_empty(), "{outs:?}");
    assert!(requests(&outs).is_empty(), "waits: {outs:?}");
    let until = r.backing_off_until().expect("backing off");
    assert!(until >= at(600) + Duration::from_millis(800));
    r.handle_timeout(until).unwrap();
    let outs = drain(&mut r);
    let (_, req) = request(&outs);
    assert_eq!(
        watch_req(&req).resource_version,
        "11",
        "a watch, not a relist"
    );
}

/// Regression (soak, a silent 52–76 s wait after the network healed): after a fault storm the
/// failures' backoff sits at its cap (30–60 s); a watch that then ends within 1 s having
/// delivered objects (an apiserver restart, a proxy closing it) is no failure and must not wait
/// that long: its delay starts at 800 ms, grows only with consecutive quick ends, and falls
/// back once a watch lasts.
#[test]
fn conformance_21_quick_end_after_objects_never_waits_the_failures_backoff() {
    let mut r = R::new(ReflectorConfig {
        seed: 7,
        ..ReflectorConfig::default()
    });
    let mut wid = list_then_watch(&mut r, at(0), "10");
    let mut now = at(1_000);
    // A storm: the failures' backoff climbs to its cap.
    for _ in 0..8 {
        r.handle_input(
            now,
            wid,
            Input::Failed(Failure::ConnectionRefused("refused".into())),
        )
        .unwrap();
        drain(&mut r);
        let (t, outs) = fire(&mut r);
        now = t;
        wid = request(&outs).0;
    }
    r.handle_input(
        now,
        wid,
        Input::Failed(Failure::ConnectionRefused("refused".into())),
    )
    .unwrap();
    drain(&mut r);
    let capped = r.poll_timeout().unwrap() - now;
    assert!(capped >= Duration::from_secs(30), "at the cap: {capped:?}");
    let (t, outs) = fire(&mut r);
    now = t;
    wid = request(&outs).0;
    // Quick ends after objects: 0.8–1.6 s, then 1.6–3.2 s (consecutive), each a watch.
    let mut rv = 20;
    for (lo, hi) in [(800, 1600), (1600, 3200)] {
        rv += 1;
        r.handle_input(now, wid, Input::Event(WatchEvent::Added(obj("b", rv))))
            .unwrap();
        drain(&mut r);
        r.handle_input(now + Duration::from_millis(100), wid, Input::StreamEnd)
            .unwrap();
        let outs = drain(&mut r);
        assert!(errors(&outs).is_empty(), "no failure: {outs:?}");
        let d = r.backing_off_until().expect("waits") - (now + Duration::from_millis(100));
        assert!(
            (Duration::from_millis(lo)..Duration::from_millis(hi)).contains(&d),
            "{d:?}, not the failures' {capped:?}"
        );
        let (t, outs) = fire(&mut r);
        now = t;
        let (id, req) = request(&outs);
        assert_eq!(
            watch_req(&req).resource_version,
            rv.to_string(),
            "no relist"
        );
        wid = id;
    }
    // A watch that lasts resets the level.
    now = now + Duration::from_secs(5);
    r.handle_input(now, wid, Input::StreamEnd).unwrap();
    let (id, _) = request(&drain(&mut r));
    wid = id;
    r.handle_input(now, wid, Input::Event(WatchEvent::Added(obj("b", rv + 1))))
        .unwrap();
    drain(&mut r);
    r.handle_input(now + Duration::from_millis(100), wid, Input::StreamEnd)
        .unwrap();
    drain(&mut r);
    let d = r.backing_off_until().expect("waits") - (now + Duration::from_millis(100));
    assert!(d < Duration::from_millis(1600), "back to 800 ms: {d:?}");
}

/// Regression (faults probe): a server that ends every watch right after one BOOKMARK got
/// 2,500–3,000 watch requests per second. Bookmarks are not progress: such a watch is a very
/// short watch, so the request rate is bounded by the backoff.
#[test]
fn bookmark_only_watches_that_end_at_once_back_off() {
    let mut r = R::new(ReflectorConfig::default());
    let mut now = at(0);
    let mut id = list_then_watch(&mut r, now, "10");
    let mut requests_sent = 1u32;
    let mut very_short = 0u32;
    let mut rv = 10u64;
    // One virtual minute of a server answering at once (bounded in turns, so that a hot loop
    // fails the test instead of hanging it).
    for _ in 0..10_000 {
        if now >= at(60_000) {
            break;
        }
        rv += 1;
        r.handle_input(
            now,
            id,
            Input::Event(WatchEvent::Bookmark {
                resource_version: rv.to_string(),
                initial_events_end: false,
            }),
        )
        .unwrap();
        r.handle_input(now, id, Input::StreamEnd).unwrap();
        loop {
            let outs = drain(&mut r);
            very_short += errors(&outs)
                .iter()
                .filter(|f| **f == Failure::VeryShortWatch)
                .count() as u32;
            if let Some((next, req)) = requests(&outs).into_iter().next() {
                requests_sent += 1;
                id = next;
                if let Request::List(_) = req {
                    r.handle_input(
                        now,
                        id,
                        Input::ListPage(page(vec![], &rv.to_string(), None)),
                    )
                    .unwrap();
                    continue;
                }
                break;
            }
            now = r.poll_timeout().expect("a deadline");
            r.handle_timeout(now).unwrap();
        }
    }
    // 800 ms doubling to 30 s (with jitter in [d, 2d)): about 6 backoffs in a minute, each
    // followed by a list and a watch. Without the rule: one request per loop turn, forever.
    assert!(very_short >= 3, "{very_short}");
    assert!(
        requests_sent <= 20,
        "{requests_sent} requests in one minute"
    );
}

/// Regression (faults probe): an undecodable MODIFIED followed by a BOOKMARK at a later
/// resourceVersion moved the informer past a change it never applied. A transport reports the
/// bad line as `WatchEvent::Error(Failure::Decode)`: the watch ends there, the bookmark after
/// it is ignored, the resourceVersion stays, and a relist follows the backoff.
#[test]
fn an_undecodable_event_ends_the_watch_and_never_advances_the_resource_version() {
    let mut r = R::new(ReflectorConfig::default());
    let wid = list_then_watch(&mut r, at(0), "10");
    let bad = Failure::Decode(crate::protocol::DecodeFailure {
        kind: crate::protocol::DecodeKind::Object,
        message: "cannot decode MODIFIED event object ConfigMap ns/a".into(),
    });
    r.handle_input(at(5000), wid, Input::Event(WatchEvent::Error(bad.clone())))
        .unwrap();
    let outs = drain(&mut r);
    r.handle_input(
        at(5000),
        wid,
        Input::Event(WatchEvent::Bookmark {
            resource_version: "99".into(),
            initial_events_end: false,
        }),
    )
    .unwrap();
    assert!(
        drain(&mut r).is_empty(),
        "the bookmark after the bad line is ignored"
    );
    assert_eq!(errors(&outs), vec![bad]);
    assert!(requests(&outs).is_empty());
    assert_eq!(r.last_sync_resource_version(), "10");
    let until = r.backing_off_until().expect("backing off");
    r.handle_timeout(until).unwrap();
    let (_, req) = request(&drain(&mut r));
    assert!(matches!(req, Request::List(_)), "a relist: {req:?}");
}

#[test]
fn conformance_21_watch_error_or_410_relists() {
    for how in 0..3 {
        let mut r = R::new(ReflectorConfig::default());
        let wid = list_then_watch(&mut r, at(0), "10");
        match how {
            0 => r
                .handle_input(at(5000), wid, Input::Event(WatchEvent::Error(expired())))
                .unwrap(),
            1 => r
                .handle_input(at(5000), wid, Input::Failed(expired()))
                .unwrap(),
            _ => r
                .handle_input(
                    at(5000),
                    wid,
                    Input::Event(WatchEvent::Error(Failure::Other(status(
                        500,
                        "InternalError",
                    )))),
                )
                .unwrap(),
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
    r.handle_input(at(999), wid, Input::StreamEnd).unwrap();
    let outs = drain(&mut r);
    assert_eq!(errors(&outs), vec![Failure::VeryShortWatch]);
    assert!(
        outs.iter()
            .all(|o| !matches!(o, Output::Runtime(Runtime::Request { .. })))
    );
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
        r.handle_input(
            now,
            wid,
            Input::Failed(Failure::ConnectionRefused("refused".into())),
        )
        .unwrap();
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
    r.handle_input(
        now,
        wid,
        Input::Failed(Failure::ConnectionRefused("refused".into())),
    )
    .unwrap();
    drain(&mut r);
    let d = (r.poll_timeout().unwrap() - now).as_millis();
    assert!((800..1600).contains(&d), "reset: {d}");
}

#[test]
fn conformance_22_connection_refused_and_429_rewatch_without_relist() {
    let mut r = R::new(ReflectorConfig::default());
    let wid = list_then_watch(&mut r, at(0), "10");
    r.handle_input(
        at(10),
        wid,
        Input::Failed(Failure::ConnectionRefused("econnrefused".into())),
    )
    .unwrap();
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
    r.handle_input(t, wid, Input::Failed(Failure::TooManyRequests(st.clone())))
        .unwrap();
    drain(&mut r);
    assert!(
        r.poll_timeout().unwrap() >= t + Duration::from_secs(45),
        "Retry-After"
    );
    let (t, outs) = fire(&mut r);
    let (wid, req) = request(&outs);
    assert_eq!(watch_req(&req).resource_version, "10");
    // A 429 as a watch ERROR event too.
    r.handle_input(
        t,
        wid,
        Input::Event(WatchEvent::Error(Failure::TooManyRequests(st))),
    )
    .unwrap();
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
        r.start(at(0)).unwrap();
        let (id, _) = request(&drain(&mut r));
        r.handle_input(at(1), id, Input::Failed(f.clone())).unwrap();
        assert_eq!(errors(&drain(&mut r)), vec![f.clone()]);
        // As a watch request failure and as a watch ERROR event.
        let mut r = R::new(ReflectorConfig::default());
        let wid = list_then_watch(&mut r, at(0), "1");
        r.handle_input(at(1), wid, Input::Failed(f.clone()))
            .unwrap();
        assert_eq!(errors(&drain(&mut r)), vec![f.clone()]);
        let mut r = R::new(ReflectorConfig::default());
        let wid = list_then_watch(&mut r, at(0), "1");
        r.handle_input(at(1), wid, Input::Event(WatchEvent::Error(f.clone())))
            .unwrap();
        assert_eq!(errors(&drain(&mut r)), vec![f.clone()]);
    }
    // A list at "0" that fails with 410: reported, then the consistent retry.
    let mut r = R::new(ReflectorConfig::default());
    r.start(at(0)).unwrap();
    let (id, _) = request(&drain(&mut r));
    r.handle_input(at(1), id, Input::Failed(expired())).unwrap();
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
    r.handle_input(at(1), wid, Input::Event(WatchEvent::Added(obj("x", 11))))
        .unwrap();
    assert_eq!(r.last_sync_resource_version(), "11");
    let mut ops = drain(&mut r);
    r.handle_input(at(1), wid, Input::Event(WatchEvent::Modified(obj("x", 12))))
        .unwrap();
    ops.extend(drain(&mut r));
    r.handle_input(at(1), wid, Input::Event(WatchEvent::Deleted(obj("x", 13))))
        .unwrap();
    ops.extend(drain(&mut r));
    assert_eq!(r.last_sync_resource_version(), "13");
    r.handle_input(
        at(1),
        wid,
        Input::Event(WatchEvent::Bookmark {
            resource_version: "20".into(),
            initial_events_end: false,
        }),
    )
    .unwrap();
    assert_eq!(r.last_sync_resource_version(), "20");
    ops.extend(drain(&mut r));
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
    r.start(at(0)).unwrap();
    let (id, req) = request(&drain(&mut r));
    let w = watch_req(&req);
    assert!(w.send_initial_events && w.allow_watch_bookmarks);
    assert_eq!(
        w.resource_version_match,
        Some(ResourceVersionMatch::NotOlderThan)
    );
    assert_eq!(w.resource_version, "");
    r.handle_input(at(1), id, Input::Event(WatchEvent::Added(obj("a", 3))))
        .unwrap();
    r.handle_input(at(1), id, Input::Event(WatchEvent::Added(obj("b", 4))))
        .unwrap();
    r.handle_input(at(1), id, Input::Event(WatchEvent::Deleted(obj("a", 5))))
        .unwrap();
    r.handle_input(at(1), id, Input::Event(WatchEvent::Added(obj("c", 6))))
        .unwrap();
    r.handle_input(
        at(1),
        id,
        Input::Event(WatchEvent::Bookmark {
            resource_version: "8".into(),
            initial_events_end: false,
        }),
    )
    .unwrap();
    assert!(
        drain(&mut r).is_empty(),
        "the store never sees a half-built state"
    );
    r.handle_input(
        at(2),
        id,
        Input::Event(WatchEvent::Bookmark {
            resource_version: "9".into(),
            initial_events_end: true,
        }),
    )
    .unwrap();
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
        outs.iter()
            .all(|o| !matches!(o, Output::Runtime(Runtime::Request { .. }))),
        "same stream"
    );
    assert_eq!(r.last_sync_resource_version(), "9");
    // The stream goes on as the watch.
    r.handle_input(at(3), id, Input::Event(WatchEvent::Modified(obj("b", 10))))
        .unwrap();
    assert!(matches!(
        stores(&drain(&mut r)).as_slice(),
        [StoreOp::Modified(_)]
    ));
    r.handle_input(at(400_000), id, Input::StreamEnd).unwrap();
    let outs = drain(&mut r);
    let w = watch_req(&request(&outs).1).clone();
    assert_eq!(w.resource_version, "10");
    assert!(!w.send_initial_events);
}

#[test]
fn streaming_list_falls_back_to_paged_list_when_refused() {
    let mut r = streaming();
    r.start(at(0)).unwrap();
    let (id, _) = request(&drain(&mut r));
    let refusal = Failure::StreamingListUnsupported(status(400, "BadRequest"));
    r.handle_input(at(1), id, Input::Failed(refusal.clone()))
        .unwrap();
    let outs = drain(&mut r);
    assert_eq!(errors(&outs), vec![refusal]);
    let (id, req) = request(&outs);
    let l = list_req(&req);
    assert_eq!(l.resource_version.as_deref(), Some("0"));
    assert_eq!(l.limit, Some(DEFAULT_PAGE_SIZE));
    r.handle_input(
        at(2),
        id,
        Input::ListPage(page(vec![obj("a", 1)], "5", None)),
    )
    .unwrap();
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
    r.start(at(0)).unwrap();
    let (id, req) = request(&drain(&mut r));
    assert!(watch_req(&req).send_initial_events);
    r.handle_input(at(1), id, Input::Event(WatchEvent::Added(obj("a", 1))))
        .unwrap();
    r.handle_input(at(400), id, Input::StreamEnd).unwrap();
    let outs = drain(&mut r);
    assert!(
        stores(&outs).is_empty(),
        "nothing half-built may be applied"
    );
    assert_eq!(errors(&outs), vec![Failure::StreamingListIgnored]);
    let (id, req) = request(&outs);
    assert_eq!(list_req(&req).resource_version.as_deref(), Some("0"));
    r.handle_input(
        at(401),
        id,
        Input::ListPage(page(vec![obj("a", 1)], "5", None)),
    )
    .unwrap();
    let outs = drain(&mut r);
    assert_eq!(stores(&outs).len(), 1);
    let (id, req) = request(&outs);
    assert!(!watch_req(&req).send_initial_events);
    // A 410 on the watch forces a relist: still a list, not a stream.
    r.handle_input(
        at(402),
        id,
        Input::Failed(Failure::Expired(status(410, "Expired"))),
    )
    .unwrap();
    let mut outs = drain(&mut r);
    let mut t = 402;
    // Skip any backoff wait.
    while request_opt(&outs).is_none() {
        t += 31;
        r.handle_timeout(at(t)).unwrap();
        outs = drain(&mut r);
    }
    let (_, req) = request(&outs);
    assert!(matches!(req, Request::List(_)), "{req:?}");
}

#[test]
fn streaming_list_expired_retries_with_consistent_rv() {
    let mut r = streaming();
    r.start(at(0)).unwrap();
    let (id, _) = request(&drain(&mut r));
    r.handle_input(
        at(1),
        id,
        Input::Event(WatchEvent::Bookmark {
            resource_version: "5".into(),
            initial_events_end: true,
        }),
    )
    .unwrap();
    drain(&mut r);
    r.handle_input(at(5000), id, Input::Event(WatchEvent::Error(expired())))
        .unwrap();
    drain(&mut r);
    let (t, outs) = fire(&mut r);
    let (id, req) = request(&outs);
    assert_eq!(watch_req(&req).resource_version, "5");
    assert!(watch_req(&req).send_initial_events);
    r.handle_input(t, id, Input::Failed(expired())).unwrap();
    let outs = drain(&mut r);
    let (id, req) = request(&outs);
    assert_eq!(
        watch_req(&req).resource_version,
        "",
        "retry at once, consistent"
    );
    // A 410 for "" cannot be fixed by retrying: fall back to a list.
    r.handle_input(t, id, Input::Failed(expired())).unwrap();
    let outs = drain(&mut r);
    assert!(matches!(request(&outs).1, Request::List(_)));
}

#[test]
fn stale_and_unexpected_inputs_are_ignored() {
    let mut r = R::new(ReflectorConfig::default());
    // Before start.
    r.handle_input(
        at(0),
        RequestId(1),
        Input::ListPage(page(vec![], "1", None)),
    )
    .unwrap();
    r.handle_input(at(0), RequestId(1), Input::StreamEnd)
        .unwrap();
    r.handle_input(at(0), RequestId(1), Input::Failed(expired()))
        .unwrap();
    r.handle_timeout(at(0)).unwrap();
    assert!(drain(&mut r).is_empty());
    let wid = list_then_watch(&mut r, at(0), "3");
    // A watch event tagged with the (old) list id.
    r.handle_input(
        at(1),
        RequestId(wid.0 - 1),
        Input::Event(WatchEvent::Added(obj("q", 9))),
    )
    .unwrap();
    r.handle_input(at(1), wid, Input::ListPage(page(vec![], "1", None)))
        .unwrap();
    assert!(drain(&mut r).is_empty());
    r.stop();
    r.handle_input(at(1), wid, Input::Event(WatchEvent::Added(obj("q", 9))))
        .unwrap();
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
        r.start(now).unwrap();
        let mut last_id = RequestId(0);
        for _ in 0..400 {
            let outs = drain(&mut r);
            assert!(outs.len() <= MAX_OUTPUTS_PER_INPUT, "{outs:?}");
            for o in outs {
                if let Output::Runtime(Runtime::Request { id, .. }) = o {
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
                0 => r
                    .handle_input(
                        now,
                        id,
                        Input::ListPage(page(
                            vec![obj("a", rng.below(10))],
                            rv,
                            [None, Some(""), Some("c")][rng.below(3) as usize],
                        )),
                    )
                    .unwrap(),
                1 => r
                    .handle_input(
                        now,
                        id,
                        Input::Event(WatchEvent::Added(obj("a", rng.below(10)))),
                    )
                    .unwrap(),
                2 => r
                    .handle_input(
                        now,
                        id,
                        Input::Event(WatchEvent::Deleted(obj("a", rng.below(10)))),
                    )
                    .unwrap(),
                3 => r
                    .handle_input(
                        now,
                        id,
                        Input::Event(WatchEvent::Bookmark {
                            resource_version: rv.into(),
                            initial_events_end: rng.chance(0.5),
                        }),
                    )
                    .unwrap(),
                4 => r
                    .handle_input(now, id, Input::Event(WatchEvent::Error(expired())))
                    .unwrap(),
                5 => r.handle_input(now, id, Input::StreamEnd).unwrap(),
                6 => r
                    .handle_input(
                        now,
                        id,
                        Input::Failed(
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
                    )
                    .unwrap(),
                7 => {
                    if let Some(t) = r.poll_timeout() {
                        now = now.max(t);
                    }
                    r.handle_timeout(now).unwrap()
                }
                _ => r.handle_timeout(now).unwrap(),
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
    r.handle_input(at(5), wid, Input::Event(WatchEvent::Added(obj("b", 11))))
        .unwrap();
    drain(&mut r);
    let deadline = r.poll_timeout().unwrap();
    assert!(deadline >= at(360_000) && deadline < at(660_000));
    r.handle_timeout(Instant::from_epoch(
        deadline.since_epoch() - Duration::from_millis(1),
    ))
    .unwrap();
    assert!(drain(&mut r).is_empty());
    r.handle_timeout(deadline).unwrap();
    let outs = drain(&mut r);
    assert_eq!(errors(&outs), vec![Failure::HungWatch]);
    let (wid2, req) = request(&outs);
    assert_ne!(wid2, wid);
    assert_eq!(
        watch_req(&req).resource_version,
        "11",
        "re-watch, no relist"
    );
    // Late events of the abandoned watch are ignored.
    r.handle_input(deadline, wid, Input::Event(WatchEvent::Added(obj("z", 99))))
        .unwrap();
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
    r.start(at(0)).unwrap();
    let (id, _) = request(&drain(&mut r));
    assert_eq!(r.poll_timeout(), Some(at(90_000)));
    r.handle_input(
        at(1000),
        id,
        Input::ListPage(page(vec![obj("a", 1)], "5", Some("c"))),
    )
    .unwrap();
    drain(&mut r);
    assert_eq!(
        r.poll_timeout(),
        Some(at(91_000)),
        "each page has its own deadline"
    );
    r.handle_timeout(at(91_000)).unwrap();
    let outs = drain(&mut r);
    assert_eq!(errors(&outs), vec![Failure::ListTimeout]);
    let (_, outs) = fire(&mut r);
    assert_eq!(
        list_req(&request(&outs).1).resource_version.as_deref(),
        Some("0")
    );
}

#[test]
fn conformance_22_list_429_honours_retry_after() {
    let mut r = R::new(ReflectorConfig::default());
    r.start(at(0)).unwrap();
    let (id, _) = request(&drain(&mut r));
    let mut st = status(429, "TooManyRequests");
    st.retry_after = Some(Duration::from_secs(20));
    r.handle_input(at(0), id, Input::Failed(Failure::TooManyRequests(st)))
        .unwrap();
    drain(&mut r);
    assert!(r.poll_timeout().unwrap() >= at(20_000));
    let (_, outs) = fire(&mut r);
    assert_eq!(
        list_req(&request(&outs).1).resource_version.as_deref(),
        Some("0")
    );
}

/// A 429 with `Retry-After: 1` is retried after exactly 1 s, ten times in a row, without raising
/// the failures' backoff (client-go's REST client retries it so); the eleventh waits the
/// backoff (at least the 1 s); an answer in between starts the count again.
#[test]
fn conformance_22_429_retry_after_is_the_delay_for_ten_in_a_row_then_the_backoff() {
    let mut r = R::new(ReflectorConfig::default());
    r.start(at(0)).unwrap();
    let (mut id, _) = request(&drain(&mut r));
    let mut st = status(429, "TooManyRequests");
    st.retry_after = Some(Duration::from_secs(1));
    let mut now = at(0);
    let throttle = |r: &mut R, now: Instant, id| {
        r.handle_input(now, id, Input::Failed(Failure::TooManyRequests(st.clone())))
            .unwrap();
        drain(r);
        r.poll_timeout().unwrap() - now
    };
    for i in 0..MAX_THROTTLED_RETRIES {
        assert_eq!(
            throttle(&mut r, now, id),
            Duration::from_secs(1),
            "429 #{i}"
        );
        let (t, outs) = fire(&mut r);
        (now, id) = (t, request(&outs).0);
    }
    // From the eleventh on, the backoff (800 ms, doubling), never less than the 1 s asked.
    let mut waits = Vec::new();
    for _ in 0..3 {
        waits.push(throttle(&mut r, now, id));
        let (t, outs) = fire(&mut r);
        (now, id) = (t, request(&outs).0);
    }
    assert!(
        waits.iter().all(|w| *w >= Duration::from_secs(1))
            && waits[2] >= Duration::from_millis(3200),
        "past ten 429s in a row the backoff applies: {waits:?}"
    );
    // A list page in between resets the count: the next 429 is retried at 1 s again.
    let t = now;
    r.handle_input(t, id, Input::ListPage(page(vec![], "5", None)))
        .unwrap();
    let outs = drain(&mut r);
    let Some((wid, _)) = outs.iter().find_map(|o| match o {
        Output::Runtime(Runtime::Request { id, request }) => Some((*id, request.clone())),
        _ => None,
    }) else {
        panic!("a watch after the list: {outs:?}");
    };
    assert_eq!(throttle(&mut r, t, wid), Duration::from_secs(1));
}

/// The drain rule is checked: an input fed while outputs are pending is refused and handed
/// back, never applied behind the caller's back.
#[test]
fn an_input_before_the_outputs_are_drained_is_refused_and_handed_back() {
    let mut r = R::new(ReflectorConfig::default());
    r.start(at(0)).unwrap();
    let err = r.start(at(0)).unwrap_err();
    assert_eq!(err, Undrained { input: () });
    assert!(r.handle_timeout(at(0)).is_err());
    let id = match r.poll() {
        Some(Output::Runtime(Runtime::Request { id, .. })) => id,
        other => panic!("{other:?}"),
    };
    r.handle_input(at(1), id, Input::ListPage(page(vec![], "3", None)))
        .unwrap();
    let refused = r
        .handle_input(at(1), id, Input::Event(WatchEvent::Added(obj("a", 4))))
        .unwrap_err();
    assert!(matches!(refused.input, Input::Event(WatchEvent::Added(_))));
    let outs = drain(&mut r);
    assert_eq!(stores(&outs).len(), 1, "the list, not the refused event");
}
