//! Scripted tests of the composed informer (CONFORMANCE 12–15 and the informer API). The
//! randomized end-to-end check (CONFORMANCE 25) is `crate::sim`.

use super::*;
use crate::cache::indexer::{IndexValues, index_fn};
use crate::object::{DynamicObject, Key, ObjectMeta, ObjectMetaParts, ObjectOrTombstone};
use crate::protocol::{Failure, Input, ListPage, Status, WatchEvent};
use crate::sim::SimObject;
use alloc::borrow::Cow;
use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

type Inf = SharedIndexInformer<SimObject>;

fn obj(name: &str, rv: u64, data: u64) -> Arc<SimObject> {
    Arc::new(SimObject {
        name: name.into(),
        namespace: Some("ns".into()),
        resource_version: rv.to_string(),
        uid: alloc::format!("uid-{name}"),
        data,
        noise: 7,
    })
}

fn at(ms: u64) -> Instant {
    Instant::from_epoch(Duration::from_millis(ms))
}

/// What one drain produced.
#[derive(Default)]
struct Drained {
    requests: Vec<(RequestId, Request)>,
    notes: Vec<(HandlerId, Notification<SimObject>)>,
    errors: Vec<Failure>,
}

impl Drained {
    fn for_handler(&self, h: HandlerId) -> Vec<String> {
        self.notes
            .iter()
            .filter(|(id, _)| *id == h)
            .map(|(_, n)| describe(n))
            .collect()
    }

    fn last_request(&self) -> RequestId {
        self.requests.last().expect("a request").0
    }
}

fn describe(n: &Notification<SimObject>) -> String {
    match n {
        Notification::Add {
            obj,
            in_initial_list,
        } => alloc::format!(
            "add {} {}{}",
            obj.name,
            obj.resource_version,
            if *in_initial_list { " initial" } else { "" }
        ),
        Notification::Update { old, new } => alloc::format!(
            "update {} {}->{}",
            new.name,
            old.resource_version,
            new.resource_version
        ),
        Notification::Delete(d) => alloc::format!(
            "delete {}{}",
            d.object().name,
            if d.is_tombstone() { " tombstone" } else { "" }
        ),
    }
}

/// Drains every output; handlers in `stalled` are not told they finished.
fn drain_except(inf: &mut Inf, stalled: &[HandlerId]) -> Drained {
    let mut d = Drained::default();
    while let Some(o) = inf.poll() {
        match o {
            Output::Request { id, request } => d.requests.push((id, request)),
            Output::WatchError(f) => d.errors.push(f),
        }
    }
    let handlers: Vec<HandlerId> = inf.handlers().collect();
    let mut one = Vec::new();
    for handler in handlers {
        while inf.poll_notifications(handler, 1, &mut one) > 0 {
            d.notes.extend(one.drain(..).map(|n| (handler, n)));
            if stalled.contains(&handler) {
                break;
            }
            inf.handler_done(handler);
        }
    }
    d
}

fn drain(inf: &mut Inf) -> Drained {
    drain_except(inf, &[])
}

fn page(items: Vec<Arc<SimObject>>, rv: u64) -> ListPage<SimObject> {
    ListPage {
        items,
        resource_version: rv.to_string(),
        continue_token: None,
        remaining_item_count: None,
    }
}

/// Answers the list `d` ends with, which must ask for resourceVersion `rv` (`None`: a
/// consistent read), with what the server holds after a warm restart's downtime: `same`
/// unchanged, `changed`, `new`, at 22.
fn answer_relist(inf: &mut Inf, d: &Drained, rv: Option<&str>, now: Instant) {
    let (lid, req) = d.requests.last().cloned().expect("a list");
    match req {
        Request::List(l) => assert_eq!(l.resource_version.as_deref(), rv, "the list's rv"),
        other => panic!("expected a list, got {other:?}"),
    }
    inf.handle_input(
        now,
        lid,
        Input::ListPage(page(
            vec![obj("same", 3, 0), obj("changed", 20, 1), obj("new", 21, 0)],
            22,
        )),
    );
}

fn informer(check: Duration) -> Inf {
    Inf::new(InformerConfig {
        resync_check_period: check,
        ..InformerConfig::default()
    })
}

/// Starts `inf`, answers its list with `items` at `rv`; returns the drained outputs (which end
/// with the watch request).
fn start_and_list(inf: &mut Inf, now: Instant, items: Vec<Arc<SimObject>>, rv: u64) -> Drained {
    inf.start(now);
    let d = drain(inf);
    let id = d.last_request();
    inf.handle_input(now, id, Input::ListPage(page(items, rv)));
    drain(inf)
}

/// Ends the watch `wid` with a 410 at `now` and runs `inf` (through a backoff, if it takes
/// one) until it asks for the relist; returns the list's id.
fn expire_until_relisted(inf: &mut Inf, wid: RequestId, now: Instant) -> RequestId {
    let status = Status {
        code: 410,
        ..Status::default()
    };
    inf.handle_input(now, wid, Input::Failed(Failure::Expired(status)));
    let mut d = drain(inf);
    while !matches!(d.requests.last(), Some((_, Request::List(_)))) {
        inf.handle_timeout(inf.poll_timeout().expect("a backoff"));
        d = drain(inf);
    }
    d.last_request()
}

/// An object named `name` in `namespace`, whatever the name (an empty one, one with a `/`).
fn named(name: &str, namespace: Option<&str>, rv: u64) -> Arc<SimObject> {
    Arc::new(SimObject {
        name: name.into(),
        namespace: namespace.map(Into::into),
        resource_version: rv.to_string(),
        uid: alloc::format!("uid-{name}"),
        data: 0,
        noise: 0,
    })
}

#[test]
fn conformance_12_resync_reaches_only_due_handlers_changed_rv_reaches_all() {
    let mut inf = informer(Duration::from_secs(1));
    let (due, _) = inf.add_handler(Duration::from_secs(1), at(0)).unwrap();
    let (never, _) = inf.add_handler(Duration::ZERO, at(0)).unwrap();
    let d = start_and_list(&mut inf, at(0), vec![obj("a", 1, 0)], 1);
    assert_eq!(d.for_handler(due), ["add a 1 initial"]);
    assert_eq!(d.for_handler(never), ["add a 1 initial"]);
    let wid = d.last_request();
    // The resync check at t=1: a Sync with the same resourceVersion, for the due handler only.
    assert_eq!(inf.poll_timeout(), Some(at(1000)));
    inf.handle_timeout(at(1000));
    let d = drain(&mut inf);
    assert_eq!(d.for_handler(due), ["update a 1->1"]);
    assert!(d.for_handler(never).is_empty());
    // A changed resourceVersion reaches everyone.
    inf.handle_input(
        at(1200),
        wid,
        Input::Event(WatchEvent::Modified(obj("a", 2, 1))),
    );
    let d = drain(&mut inf);
    assert_eq!(d.for_handler(due), ["update a 1->2"]);
    assert_eq!(d.for_handler(never), ["update a 1->2"]);

    // A relist: `Replaced` with an unchanged resourceVersion is a resync (nobody is due here),
    // a changed one reaches everyone.
    let mut inf = informer(Duration::ZERO);
    let (h1, _) = inf.add_handler(Duration::ZERO, at(0)).unwrap();
    let (h2, _) = inf.add_handler(Duration::ZERO, at(0)).unwrap();
    let d = start_and_list(&mut inf, at(0), vec![obj("a", 1, 0), obj("b", 2, 0)], 2);
    let wid = d.last_request();
    inf.handle_input(
        at(10),
        wid,
        Input::Event(WatchEvent::Error(Failure::other("broken"))),
    );
    let d = drain(&mut inf);
    assert_eq!(d.errors.len(), 1);
    let t = inf.poll_timeout().unwrap();
    inf.handle_timeout(t);
    let lid = drain(&mut inf).last_request();
    inf.handle_input(
        t,
        lid,
        Input::ListPage(page(vec![obj("a", 1, 0), obj("b", 5, 9)], 5)),
    );
    let d = drain(&mut inf);
    for h in [h1, h2] {
        assert_eq!(d.for_handler(h), ["update b 2->5"]);
    }
}

#[test]
fn conformance_13_resync_periods_2s_and_3s_on_a_1s_informer() {
    let mut inf = informer(Duration::from_secs(1));
    let (h2, p2) = inf.add_handler(Duration::from_secs(2), at(0)).unwrap();
    let (h3, p3) = inf.add_handler(Duration::from_secs(3), at(0)).unwrap();
    assert_eq!(p2.effective, Duration::from_secs(2));
    assert_eq!(p3.effective, Duration::from_secs(3));
    let d = start_and_list(&mut inf, at(0), vec![obj("a", 1, 0), obj("b", 1, 0)], 1);
    assert_eq!(d.for_handler(h2).len(), 2);
    let mut got = BTreeMap::new();
    for s in 1..=6u64 {
        assert_eq!(inf.poll_timeout(), Some(at(s * 1000)));
        inf.handle_timeout(at(s * 1000));
        let d = drain(&mut inf);
        got.insert(s, (d.for_handler(h2).len(), d.for_handler(h3).len()));
    }
    assert_eq!(got[&1], (0, 0));
    assert_eq!(got[&2], (2, 0), "at t=2 only the 2 s handler");
    assert_eq!(got[&3], (0, 2), "at t=3 only the 3 s handler");
    assert_eq!(got[&4], (2, 0));
    assert_eq!(got[&5], (0, 0));
    assert_eq!(got[&6], (2, 2));

    // 0 means never; below 1 s is raised to 1 s; before start a shorter period lowers the
    // check period, after start it is raised to the check period.
    let mut inf = informer(Duration::from_secs(10));
    let (_, p) = inf.add_handler(Duration::ZERO, at(0)).unwrap();
    assert_eq!(p.effective, Duration::ZERO);
    let (_, p) = inf.add_handler(Duration::from_millis(300), at(0)).unwrap();
    assert_eq!(p.effective, Duration::from_secs(1));
    inf.start(at(0));
    assert_eq!(
        inf.poll_timeout(),
        Some(at(1000)),
        "check period lowered to 1 s"
    );
    let mut inf = informer(Duration::from_secs(10));
    inf.start(at(0));
    let (_, p) = inf.add_handler(Duration::from_secs(2), at(0)).unwrap();
    assert_eq!(p.effective, Duration::from_secs(10));
    // Check period 0: no handler resyncs.
    let mut inf = informer(Duration::ZERO);
    let (_, p) = inf.add_handler(Duration::from_secs(5), at(0)).unwrap();
    assert_eq!(p.effective, Duration::ZERO);
    inf.start(at(0));
    assert_eq!(
        inf.poll_timeout(),
        Some(at(90_000)),
        "no resync check: only the list's deadline"
    );
}

#[test]
fn conformance_14_late_handler_gets_the_cache_then_live_events() {
    let mut inf = informer(Duration::ZERO);
    let (early, _) = inf.add_handler(Duration::ZERO, at(0)).unwrap();
    let d = start_and_list(&mut inf, at(0), vec![obj("a", 1, 0), obj("b", 2, 0)], 2);
    let wid = d.last_request();
    assert!(inf.has_synced());
    assert!(inf.handler_has_synced(early));
    // Join while the late handler is stalled on its first replayed add.
    let (late, _) = inf.add_handler(Duration::ZERO, at(10)).unwrap();
    assert!(!inf.handler_has_synced(late));
    let d1 = drain_except(&mut inf, &[late]);
    assert_eq!(d1.for_handler(late).len(), 1);
    // Live events arrive meanwhile.
    inf.handle_input(
        at(20),
        wid,
        Input::Event(WatchEvent::Modified(obj("a", 3, 1))),
    );
    inf.handle_input(
        at(20),
        wid,
        Input::Event(WatchEvent::Modified(obj("b", 4, 1))),
    );
    inf.handle_input(at(20), wid, Input::Event(WatchEvent::Added(obj("c", 5, 1))));
    let d2 = drain_except(&mut inf, &[late]);
    assert_eq!(d2.for_handler(early).len(), 3);
    assert!(d2.for_handler(late).is_empty(), "stalled");
    assert!(!inf.handler_has_synced(late));
    inf.handler_done(late);
    let d3 = drain(&mut inf);
    assert!(inf.handler_has_synced(late));
    // Fold what the late handler saw: exactly the cache, each object once.
    let mut view: BTreeMap<String, String> = BTreeMap::new();
    let mut initial_adds = 0;
    for (_, n) in d1.notes.iter().chain(&d3.notes).filter(|(h, _)| *h == late) {
        match n {
            Notification::Add {
                obj,
                in_initial_list,
            } => {
                assert!(
                    view.insert(obj.name.clone(), obj.resource_version.clone())
                        .is_none()
                );
                initial_adds += usize::from(*in_initial_list);
            }
            Notification::Update { old, new } => {
                assert_eq!(view.get(&new.name), Some(&old.resource_version));
                view.insert(new.name.clone(), new.resource_version.clone());
            }
            Notification::Delete(_) => panic!("no delete expected"),
        }
    }
    let cache: BTreeMap<String, String> = inf
        .indexer()
        .list()
        .map(|o| (o.name.clone(), o.resource_version.clone()))
        .collect();
    assert_eq!(view, cache);
    assert!(initial_adds >= 1);
}

#[test]
fn conformance_15_removed_handler_gets_nothing_new() {
    let mut inf = informer(Duration::from_secs(1));
    let (keep, _) = inf.add_handler(Duration::from_secs(1), at(0)).unwrap();
    let (gone, _) = inf.add_handler(Duration::from_secs(1), at(0)).unwrap();
    let d = start_and_list(&mut inf, at(0), vec![obj("a", 1, 0)], 1);
    let wid = d.last_request();
    assert_eq!(inf.remove_handler(gone), Ok(true));
    assert_eq!(inf.remove_handler(gone), Ok(false));
    inf.handle_input(at(5), wid, Input::Event(WatchEvent::Added(obj("b", 2, 0))));
    inf.handle_timeout(at(1000));
    let d = drain(&mut inf);
    assert!(d.for_handler(gone).is_empty());
    // The resync of `b` coalesces into its pending add.
    assert_eq!(d.for_handler(keep), ["add b 2", "update a 1->1"]);
}

/// CONFORMANCE 31: a handler added to a stopped informer is refused with a typed error and
/// not registered (client-go's `AddEventHandler` returns an error once the informer has
/// stopped). The old core registered it and replayed the cache to a handler that would never
/// hear a live change. Before start and while running, adding works.
#[test]
fn conformance_31_add_handler_on_a_stopped_informer_is_an_error() {
    let mut inf = informer(Duration::ZERO);
    let (before, _) = inf.add_handler(Duration::ZERO, at(0)).unwrap();
    start_and_list(&mut inf, at(0), vec![obj("a", 1, 0)], 1);
    let (running, _) = inf.add_handler(Duration::ZERO, at(1)).unwrap();
    drain(&mut inf);
    inf.stop();
    assert!(inf.is_stopped());
    assert_eq!(
        inf.add_handler(Duration::ZERO, at(2)),
        Err(HandlerError::Stopped)
    );
    assert_eq!(inf.handlers().collect::<Vec<_>>(), vec![before, running]);
    assert!(
        drain(&mut inf).notes.is_empty(),
        "no replay for a refused handler"
    );
    // Removing still works on a stopped informer.
    assert_eq!(inf.remove_handler(running), Ok(true));
    let shown = alloc::format!("{}", HandlerError::Stopped);
    assert!(shown.contains("stopped"), "{shown}");
}

/// CONFORMANCE 32: a handler id knows its informer. Removing informer A's handler from
/// informer B is refused with a typed error and removes nothing, even though both informers'
/// first handlers have the same number. (client-go's registration handles are pointers, so a
/// foreign one is silently not found there; here it is an error, and with the old
/// per-informer counters B removed its own handler.)
#[test]
fn conformance_32_a_foreign_handler_id_is_refused_and_nothing_is_removed() {
    let mut a = informer(Duration::ZERO);
    let mut b = informer(Duration::ZERO);
    assert_ne!(a.id(), b.id());
    let (ha, _) = a.add_handler(Duration::ZERO, at(0)).unwrap();
    let (hb, _) = b.add_handler(Duration::ZERO, at(0)).unwrap();
    assert_eq!((ha.index(), hb.index()), (0, 0));
    assert_ne!(ha, hb);
    assert_eq!((ha.informer(), hb.informer()), (a.id(), b.id()));
    assert_eq!(
        b.remove_handler(ha),
        Err(HandlerError::Foreign {
            handler: ha,
            informer: b.id()
        })
    );
    assert_eq!(b.handlers().collect::<Vec<_>>(), vec![hb]);
    assert_eq!(a.handlers().collect::<Vec<_>>(), vec![ha]);
    // B's handler still hears B's changes; A's id means nothing to B's other calls either.
    start_and_list(&mut b, at(0), vec![obj("x", 1, 0)], 1);
    assert_eq!(b.pending(ha), 0);
    assert!(!b.handler_has_synced(ha));
    let mut got = Vec::new();
    assert_eq!(b.poll_notifications(ha, 10, &mut got), 0);
    assert_eq!(b.remove_handler(hb), Ok(true));
    assert_eq!(a.remove_handler(ha), Ok(true));
    let shown = alloc::format!(
        "{}",
        HandlerError::Foreign {
            handler: ha,
            informer: b.id()
        }
    );
    assert!(shown.contains("nothing removed"), "{shown}");
}

#[test]
fn transform_applies_before_store_and_handlers() {
    let mut inf: SharedIndexInformer<DynamicObject> = SharedIndexInformer::new(Default::default());
    assert!(inf.set_transform(Box::new(|o: Arc<DynamicObject>| {
        if !o.metadata.other().contains_key("managedFields") {
            return o;
        }
        let mut c = (*o).clone();
        c.metadata.edit(|m| m.other.remove("managedFields"));
        Arc::new(c)
    })));
    let (h, _) = inf.add_handler(Duration::ZERO, at(0)).unwrap();
    let mk = |name: &str, rv: &str| {
        let mut meta: ObjectMeta = ObjectMetaParts {
            name: name.into(),
            namespace: Some("ns".into()),
            resource_version: Some(rv.into()),
            ..Default::default()
        }
        .into();
        meta.edit(|m| {
            m.other.insert(
                "managedFields".into(),
                serde_json::json!([{"manager": "kubectl"}]),
            )
        });
        Arc::new(DynamicObject {
            metadata: meta,
            ..Default::default()
        })
    };
    inf.start(at(0));
    let mut seen = Vec::new();
    let mut req = None;
    while let Some(o) = inf.poll() {
        if let Output::Request { id, .. } = o {
            req = Some(id);
        }
    }
    inf.handle_input(
        at(1),
        req.unwrap(),
        Input::ListPage(ListPage {
            items: vec![mk("a", "1")],
            resource_version: "1".into(),
            continue_token: None,
            remaining_item_count: None,
        }),
    );
    let mut wid = None;
    while let Some(o) = inf.poll() {
        if let Output::Request { id, .. } = o {
            wid = Some(id);
        }
    }
    let handlers: Vec<HandlerId> = inf.handlers().collect();
    for &h in &handlers {
        while inf.poll_notifications(h, 1, &mut seen) > 0 {
            inf.handler_done(h);
        }
    }
    inf.handle_input(
        at(2),
        wid.unwrap(),
        Input::Event(WatchEvent::Modified(mk("a", "2"))),
    );
    while inf.poll().is_some() {}
    for &h in &handlers {
        while inf.poll_notifications(h, 1, &mut seen) > 0 {
            inf.handler_done(h);
        }
    }
    assert_eq!(seen.len(), 2);
    for o in inf.indexer().list() {
        assert!(!o.metadata.other().contains_key("managedFields"));
    }
    if let Notification::Update { old, new } = &seen[1] {
        assert!(!old.metadata.other().contains_key("managedFields"));
        assert!(!new.metadata.other().contains_key("managedFields"));
    } else {
        panic!("expected an update");
    }
    assert!(!inf.set_transform(Box::new(|o| o)), "only before start");
    let _ = h;
}

fn by_data(o: &SimObject) -> IndexValues<'_> {
    let mut v = IndexValues::new();
    v.push(Cow::Owned(o.data.to_string()));
    v
}

#[test]
fn indexers_added_before_and_after_start() {
    let mut inf = informer(Duration::ZERO);
    inf.add_index("by-data", index_fn(by_data)).unwrap();
    let d = start_and_list(
        &mut inf,
        at(0),
        vec![obj("a", 1, 7), obj("b", 2, 7), obj("c", 3, 8)],
        3,
    );
    let wid = d.last_request();
    assert_eq!(inf.indexer().by_index("by-data", "7").unwrap().count(), 2);
    // After start: existing objects are indexed at once.
    inf.add_index(
        "by-name",
        index_fn(|o: &SimObject| {
            let mut v = IndexValues::new();
            v.push(Cow::Borrowed(o.name.as_str()));
            v
        }),
    )
    .unwrap();
    assert_eq!(inf.indexer().by_index("by-name", "c").unwrap().count(), 1);
    assert!(inf.add_index("by-name", index_fn(by_data)).is_err());
    inf.handle_input(
        at(1),
        wid,
        Input::Event(WatchEvent::Modified(obj("c", 4, 7))),
    );
    drain(&mut inf);
    assert_eq!(inf.indexer().by_index("by-data", "7").unwrap().count(), 3);
    assert_eq!(inf.indexer().by_index("by-data", "8").unwrap().count(), 0);
}

#[test]
fn has_synced_last_sync_rv_watch_errors_and_deadlines() {
    let mut inf = informer(Duration::from_secs(30));
    let (h, _) = inf.add_handler(Duration::ZERO, at(0)).unwrap();
    assert!(!inf.has_synced());
    assert_eq!(inf.last_sync_resource_version(), "");
    inf.start(at(0));
    let d = drain(&mut inf);
    let lid = d.last_request();
    // A failed list: reported, backoff deadline before the resync check.
    inf.handle_input(
        at(5),
        lid,
        Input::Failed(Failure::TooManyRequests(Status {
            code: 429,
            ..Status::default()
        })),
    );
    let d = drain(&mut inf);
    assert_eq!(d.errors.len(), 1);
    assert!(matches!(d.errors[0], Failure::TooManyRequests(_)));
    let t = inf.poll_timeout().unwrap();
    assert!(t < at(30_000));
    assert!(!inf.has_synced());
    inf.handle_timeout(t);
    let lid = drain(&mut inf).last_request();
    inf.handle_input(t, lid, Input::ListPage(page(vec![obj("a", 4, 0)], 9)));
    let d = drain(&mut inf);
    assert!(inf.has_synced());
    assert!(inf.handler_has_synced(h));
    assert_eq!(inf.last_sync_resource_version(), "9");
    let wid = d.last_request();
    inf.handle_input(t, wid, Input::Event(WatchEvent::Deleted(obj("a", 11, 0))));
    let d = drain(&mut inf);
    assert_eq!(d.for_handler(h), ["delete a"]);
    assert_eq!(inf.last_sync_resource_version(), "11");
    assert!(inf.indexer().is_empty());
    assert_eq!(
        inf.poll_timeout(),
        Some(at(30_000)),
        "only the resync check is pending"
    );
    let k = Key::new(Some("ns"), "a");
    assert!(inf.indexer().get_by_key(k.as_str()).is_none());
    let _ = ObjectOrTombstone::<SimObject>::is_tombstone;
}

/// Regression (faults probe): a cluster-scoped object named `"x/" + "y" * 400` was stored, but
/// `get` and `delete` no longer found it and the entry stayed after its delete. Such a name
/// (Kubernetes never issues one) is now refused and reported; everything else goes on.
#[test]
fn objects_with_a_slash_in_their_name_are_refused_and_reported() {
    let long = alloc::format!("x/{}", "y".repeat(400));
    let odd = |name: &str, rv: u64| named(name, None, rv);
    let mut inf = informer(Duration::ZERO);
    let (h, _) = inf.add_handler(Duration::ZERO, at(0)).unwrap();
    let d = start_and_list(
        &mut inf,
        at(0),
        vec![obj("a", 1, 0), odd(&long, 2), odd("p/q", 3), odd("", 3)],
        3,
    );
    assert_eq!(d.errors.len(), 3, "{:?}", d.errors);
    assert!(
        d.errors
            .iter()
            .all(|e| matches!(e, Failure::InvalidObject(m) if m.contains("not stored")))
    );
    let keys: Vec<String> = inf.indexer().list_keys().map(|k| k.to_string()).collect();
    assert_eq!(keys, vec![String::from("ns/a")]);
    assert_eq!(d.for_handler(h), vec!["add a 1 initial"]);
    let wid = d.last_request();
    inf.handle_input(at(1), wid, Input::Event(WatchEvent::Added(odd(&long, 4))));
    inf.handle_input(at(1), wid, Input::Event(WatchEvent::Deleted(odd(&long, 5))));
    inf.handle_input(
        at(1),
        wid,
        Input::Event(WatchEvent::Deleted(obj("a", 6, 0))),
    );
    let d = drain(&mut inf);
    assert_eq!(d.errors.len(), 2);
    assert_eq!(inf.indexer().len(), 0, "nothing left behind");
    assert_eq!(d.for_handler(h), vec!["delete a"]);
    assert_eq!(inf.last_sync_resource_version(), "6");
}

fn watch_rv(d: &Drained) -> Option<String> {
    match &d.requests.last()?.1 {
        Request::Watch(w) => Some(w.resource_version.clone()),
        Request::List(_) => None,
    }
}

/// Warm restart: the snapshot's objects are the initial population, the informer is synced
/// before any request is answered, and the first request is a watch from the snapshot's
/// resourceVersion; events on it apply as usual.
#[test]
fn resume_from_snapshot_watches_instead_of_listing() {
    let mut old = informer(Duration::ZERO);
    old.add_handler(Duration::ZERO, at(0)).unwrap();
    let d = start_and_list(&mut old, at(0), vec![obj("a", 1, 0), obj("b", 2, 0)], 5);
    let wid = d.last_request();
    old.handle_input(
        at(1),
        wid,
        Input::Event(WatchEvent::Modified(obj("a", 6, 1))),
    );
    let _ = drain(&mut old);
    let snap = old.snapshot().expect("synced");
    assert_eq!(snap.resource_version, "6");
    let mut bytes = Vec::new();
    let ident = crate::snapshot::SnapshotIdentity::default();
    snap.encode(&ident, &mut bytes).unwrap();

    let mut inf = informer(Duration::ZERO);
    let (h, _) = inf.add_handler(Duration::ZERO, at(0)).unwrap();
    assert!(inf.snapshot().is_none(), "nothing to snapshot before sync");
    assert!(inf.resume(Resume::Snapshot(Snapshot::decode(&bytes, &ident).unwrap())));
    inf.start(at(10));
    assert!(!inf.resume(Resume::Snapshot(Snapshot {
        resource_version: "1".into(),
        items: vec![]
    })));
    assert!(inf.has_synced());
    let d = drain(&mut inf);
    let mut got = d.for_handler(h);
    got.sort();
    assert_eq!(got, ["add a 6 initial", "add b 2 initial"]);
    assert_eq!(d.requests.len(), 1);
    assert_eq!(watch_rv(&d).as_deref(), Some("6"), "{:?}", d.requests);
    assert!(inf.handler_has_synced(h));
    let wid = d.last_request();
    inf.handle_input(
        at(11),
        wid,
        Input::Event(WatchEvent::Deleted(obj("b", 7, 0))),
    );
    let d = drain(&mut inf);
    assert_eq!(d.for_handler(h), ["delete b"]);
    assert_eq!(inf.last_sync_resource_version(), "7");
}

/// A snapshot's objects are checked as a list's are: one whose key cannot be stored (a name
/// with `/`, an empty name) is reported and left out, wherever it is among the others (the
/// check runs in the same pass that stores them), and the rest are stored and delivered.
#[test]
fn resumed_objects_with_unstorable_keys_are_refused_and_reported() {
    let odd = |name: &str| {
        Arc::new(SimObject {
            name: name.into(),
            namespace: Some("ns".into()),
            resource_version: "2".into(),
            uid: alloc::format!("uid-{name}"),
            data: 0,
            noise: 0,
        })
    };
    let mut items: Vec<_> = (0..30)
        .map(|i| obj(&alloc::format!("o{i}"), 100 + i, i))
        .collect();
    items.insert(0, odd("a/b"));
    items.insert(15, odd(""));
    items.push(odd("c/d"));
    let mut inf = informer(Duration::ZERO);
    let (h, _) = inf.add_handler(Duration::ZERO, at(0)).unwrap();
    assert!(inf.resume(Resume::Snapshot(Snapshot {
        resource_version: "10".into(),
        items,
    })));
    inf.start(at(0));
    let d = drain(&mut inf);
    assert_eq!(d.errors.len(), 3, "{:?}", d.errors);
    assert!(
        d.errors
            .iter()
            .all(|e| matches!(e, Failure::InvalidObject(m) if m.contains("not stored")))
    );
    assert_eq!(inf.indexer().len(), 30);
    let adds = d.for_handler(h);
    assert_eq!(adds.len(), 30, "{adds:?}");
    assert!(
        adds.iter()
            .all(|a| a.starts_with("add o") && a.ends_with("initial"))
    );
    assert!(inf.has_synced());
}

/// A snapshot older than the compaction window: the watch gets 410, the informer relists at
/// once (no backoff) at the snapshot's resourceVersion, which is gone too (410: no watch
/// cache), then with a consistent read; the list's Replace delivers exactly the difference: updates for changed objects, tombstones for deletes missed while down, adds for
/// new objects, nothing for unchanged ones.
#[test]
fn resume_from_compacted_snapshot_relists_and_delivers_the_difference() {
    let mut inf = informer(Duration::ZERO);
    let (h, _) = inf.add_handler(Duration::ZERO, at(0)).unwrap();
    inf.resume(Resume::Snapshot(Snapshot {
        resource_version: "10".into(),
        items: vec![obj("same", 3, 0), obj("changed", 4, 0), obj("gone", 5, 0)],
    }));
    inf.start(at(0));
    let d = drain(&mut inf);
    assert_eq!(d.for_handler(h).len(), 3);
    let wid = d.last_request();
    let status = Status {
        code: 410,
        ..Status::default()
    };
    inf.handle_input(at(5), wid, Input::Failed(Failure::Expired(status)));
    let d = drain(&mut inf);
    assert_eq!(d.errors.len(), 1);
    assert!(
        inf.backing_off_until().is_none(),
        "no backoff before the relist"
    );
    let (lid, req) = d.requests.last().cloned().expect("a list");
    match req {
        Request::List(l) => assert_eq!(l.resource_version.as_deref(), Some("10")),
        other => panic!("expected a list, got {other:?}"),
    }
    let status = Status {
        code: 410,
        ..Status::default()
    };
    inf.handle_input(at(5), lid, Input::Failed(Failure::Expired(status)));
    let d = drain(&mut inf);
    assert!(
        inf.backing_off_until().is_none(),
        "no backoff before the retry"
    );
    answer_relist(&mut inf, &d, None, at(6));
    let d = drain(&mut inf);
    let mut got = d.for_handler(h);
    got.sort();
    assert_eq!(
        got,
        [
            "add new 21",
            "delete gone tombstone",
            "update changed 4->20"
        ]
    );
    assert_eq!(watch_rv(&d).as_deref(), Some("22"));
    let keys: Vec<_> = inf.indexer().list_keys().map(|k| k.to_string()).collect();
    assert_eq!(keys.len(), 3);
}

/// A resume in two steps (a snapshot file still loading): the watch from the snapshot's
/// resourceVersion goes out at start, its 410 relists at once, and the list and a later watch
/// event wait until the objects are in; then the snapshot is applied as the initial
/// population, the list as its difference and the event, in that order, in one step. Nothing
/// is applied or synced before.
#[test]
fn resume_at_watches_while_the_snapshot_loads_and_applies_what_came_after_its_objects() {
    let mut inf = informer(Duration::ZERO);
    let (h, _) = inf.add_handler(Duration::ZERO, at(0)).unwrap();
    assert!(
        !inf.resume(Resume::At(String::new())),
        "an empty resourceVersion"
    );
    assert!(inf.resume(Resume::At("10".into())));
    assert!(
        !inf.handle_snapshot(
            at(0),
            Some(Snapshot {
                resource_version: "10".into(),
                items: vec![]
            })
        ),
        "not started"
    );
    inf.start(at(0));
    assert!(!inf.resume(Resume::At("11".into())), "started");
    assert!(inf.awaiting_snapshot());
    let d = drain(&mut inf);
    assert_eq!(watch_rv(&d).as_deref(), Some("10"), "{:?}", d.requests);
    assert!(d.notes.is_empty());
    assert!(!inf.has_synced());
    assert!(!inf.is_watching(), "the cache is not the state at 10 yet");
    let status = Status {
        code: 410,
        ..Status::default()
    };
    inf.handle_input(
        at(1),
        d.last_request(),
        Input::Event(WatchEvent::Error(Failure::Expired(status))),
    );
    let d = drain(&mut inf);
    assert!(inf.backing_off_until().is_none(), "no backoff");
    answer_relist(&mut inf, &d, Some("10"), at(2));
    let d = drain(&mut inf);
    assert_eq!(watch_rv(&d).as_deref(), Some("22"));
    inf.handle_input(
        at(3),
        d.last_request(),
        Input::Event(WatchEvent::Modified(obj("new", 23, 2))),
    );
    let d = drain(&mut inf);
    assert!(d.notes.is_empty(), "nothing applied before the objects");
    assert_eq!(inf.indexer().len(), 0);
    assert!(!inf.has_synced());
    assert!(!inf.is_watching());
    assert!(inf.snapshot().is_none());

    assert!(inf.handle_snapshot(
        at(4),
        Some(Snapshot {
            resource_version: "10".into(),
            items: vec![obj("same", 3, 0), obj("changed", 4, 0), obj("gone", 5, 0)],
        })
    ));
    assert!(!inf.awaiting_snapshot());
    assert!(inf.has_synced());
    assert!(inf.is_watching());
    let d = drain(&mut inf);
    assert!(d.requests.is_empty(), "the watch from 22 goes on");
    // Everything is applied in one step, before the handler could take any of it: its
    // pending notifications coalesce per key (CONFORMANCE 11), so it hears each object once,
    // in its latest state, and nothing of the object deleted while down it never saw. (Had it
    // taken the initial adds first, as when the objects load before the list is in, it
    // would hear the update, the add and a tombstone: the test above.)
    let mut got = d.for_handler(h);
    got.extend(drain(&mut inf).for_handler(h));
    got.sort();
    assert_eq!(
        got,
        ["add changed 20 initial", "add new 23", "add same 3 initial"]
    );
    let mut store: Vec<_> = inf
        .indexer()
        .list()
        .map(|o| alloc::format!("{} {}", o.name, o.resource_version))
        .collect();
    store.sort();
    assert_eq!(store, ["changed 20", "new 23", "same 3"]);
    assert_eq!(inf.last_sync_resource_version(), "23");
    assert!(!inf.handle_snapshot(
        at(5),
        Some(Snapshot {
            resource_version: "10".into(),
            items: vec![]
        })
    ));
}

/// A snapshot announced with `resume_at` that turns out unusable (`resume_failed`, or objects
/// of another resourceVersion): what its watch brought is dropped and the informer lists at
/// once with a consistent read, whose result is the initial population as without a snapshot;
/// late inputs of the abandoned watch are ignored.
#[test]
fn resume_at_then_failed_lists_from_scratch() {
    for other_rv in [false, true] {
        let mut inf = informer(Duration::ZERO);
        let (h, _) = inf.add_handler(Duration::ZERO, at(0)).unwrap();
        assert!(inf.resume(Resume::At("10".into())));
        inf.start(at(0));
        let d = drain(&mut inf);
        let wid = d.last_request();
        inf.handle_input(
            at(1),
            wid,
            Input::Event(WatchEvent::Added(obj("early", 11, 0))),
        );
        assert!(drain(&mut inf).notes.is_empty());
        if other_rv {
            assert!(inf.handle_snapshot(
                at(2),
                Some(Snapshot {
                    resource_version: "9".into(),
                    items: vec![obj("stale", 3, 0)],
                })
            ));
        } else {
            assert!(inf.handle_snapshot(at(2), None));
        }
        assert!(!inf.handle_snapshot(at(2), None), "only once");
        assert!(!inf.awaiting_snapshot());
        assert!(!inf.has_synced());
        let d = drain(&mut inf);
        let (lid, req) = d.requests.last().cloned().expect("a list");
        match req {
            Request::List(l) => assert_eq!(l.resource_version, None, "a consistent read"),
            other => panic!("expected a list, got {other:?}"),
        }
        assert!(inf.backing_off_until().is_none());
        inf.handle_input(
            at(3),
            wid,
            Input::Event(WatchEvent::Added(obj("late", 12, 0))),
        );
        inf.handle_input(at(4), lid, Input::ListPage(page(vec![obj("a", 8, 0)], 15)));
        let d = drain(&mut inf);
        assert_eq!(d.for_handler(h), ["add a 8 initial"]);
        assert!(inf.has_synced());
        assert_eq!(inf.indexer().len(), 1);
        assert_eq!(watch_rv(&d).as_deref(), Some("15"));
    }
}

/// Everything one pipeline run shows from outside: each handler's notifications in order,
/// the store, and the sync flags before and after the stalled handler finishes.
#[derive(Debug, PartialEq)]
struct PipelineRun {
    /// By handler number: each run's pipeline is an informer of its own.
    notes: Vec<(u64, String)>,
    store: Vec<(String, String)>,
    synced: bool,
    handlers_synced: Vec<bool>,
    handlers_synced_at_end: Vec<bool>,
}

/// A pipeline with a handler that keeps up and one stalled on its first notification, fed
/// `before` as watch adds (processed), then `items` as the initial population by `populate`
/// (bulk) or by `replace` and popping every key (the DeltaFIFO), then a late handler; then
/// the stalled handler catches up and a watch update arrives.
fn pipeline_run(bulk: bool, before: &[Arc<SimObject>], items: &[Arc<SimObject>]) -> PipelineRun {
    use crate::cache::pipeline::Pipeline;
    let mut p: Pipeline<SimObject> = Pipeline::new(Duration::ZERO);
    let (keeps_up, _) = p.add_handler(Duration::ZERO, at(0));
    let (stalled, _) = p.add_handler(Duration::ZERO, at(0));
    p.start(at(0));
    let mut notes = Vec::new();
    let mut stalled_busy = false;
    let mut drain = |p: &mut Pipeline<SimObject>, notes: &mut Vec<_>, release: bool| {
        if release && stalled_busy {
            p.handler_done(stalled);
            stalled_busy = false;
        }
        while let Some((h, n)) = p.poll_notification() {
            notes.push((h.index(), describe(&n)));
            if h == stalled && !release {
                stalled_busy = true;
            } else {
                p.handler_done(h);
            }
        }
    };
    for o in before {
        p.added(o.clone());
        while p.process_one() {}
        drain(&mut p, &mut notes, false);
    }
    if bulk {
        p.populate(items.to_vec());
    } else {
        p.replace(items.to_vec());
    }
    while p.process_one() {}
    let synced = p.has_synced();
    drain(&mut p, &mut notes, false);
    let (late, _) = p.add_handler(Duration::ZERO, at(1));
    let handlers = [keeps_up, stalled, late];
    let handlers_synced = handlers.iter().map(|&h| p.handler_has_synced(h)).collect();
    drain(&mut p, &mut notes, true);
    p.modified(obj("a", 90, 9));
    while p.process_one() {}
    drain(&mut p, &mut notes, true);
    let store = p
        .indexer()
        .list()
        .map(|o| (o.name.clone(), o.resource_version.clone()))
        .collect::<BTreeMap<_, _>>()
        .into_iter()
        .collect();
    PipelineRun {
        notes,
        store,
        synced,
        handlers_synced,
        handlers_synced_at_end: handlers.iter().map(|&h| p.handler_has_synced(h)).collect(),
    }
}

/// A warm restart's bulk population (`Pipeline::populate`, no DeltaFIFO round trip) gives
/// what a `Replace` through the DeltaFIFO gives: the same notifications to every handler in
/// the same order (initial adds flagged), the same store, the informer and every handler
/// synced at the same moments, a late handler's replay; and on a pipeline that already holds
/// objects it is the `Replace` (tombstones for what the list lacks).
#[test]
fn bulk_population_equals_replace_through_the_fifo() {
    let items: Vec<_> = (0..40)
        .map(|i| obj(&alloc::format!("o{i}"), 100 + i, i))
        .chain([obj("a", 5, 1)])
        .collect();
    let bulk = pipeline_run(true, &[], &items);
    let fifo = pipeline_run(false, &[], &items);
    assert_eq!(bulk, fifo);
    assert!(bulk.synced);
    assert_eq!(bulk.handlers_synced, [true, false, false]);
    assert_eq!(bulk.handlers_synced_at_end, [true, true, true]);
    assert_eq!(bulk.store.len(), 41);
    // Each of the three handlers got every object once, flagged initial; then the update.
    let mut initial: BTreeMap<u64, usize> = BTreeMap::new();
    for (h, n) in &bulk.notes {
        if n.ends_with(" initial") {
            *initial.entry(*h).or_default() += 1;
        }
    }
    assert_eq!(initial.values().copied().collect::<Vec<_>>(), [41, 41, 41]);
    assert!(bulk.notes.iter().any(|(_, n)| n == "update a 5->90"));
    // A repeated key (not in a decoded snapshot, whose keys are unique, but populate takes
    // any list): an add, then an update, as the FIFO's two Replaced deltas give.
    let repeated = vec![obj("a", 5, 1), obj("b", 6, 1), obj("a", 7, 2)];
    assert_eq!(
        pipeline_run(true, &[], &repeated).store,
        pipeline_run(false, &[], &repeated).store
    );
    // Not a first population: populate is the Replace and its diff.
    let before = vec![obj("gone", 1, 0), obj("a", 2, 0)];
    let bulk = pipeline_run(true, &before, &items);
    assert_eq!(bulk, pipeline_run(false, &before, &items));
    assert!(bulk.notes.iter().any(|(_, n)| n == "delete gone tombstone"));
}

/// `deliver` (inline handlers by reference) and `poll_notifications` (one handler's notifications
/// in one step) give what `poll` + `handler_done` give, busy handlers excepted.
#[test]
fn deliver_and_batches_give_each_handler_what_poll_gives() {
    let mut inf = informer(Duration::ZERO);
    let (inline, _) = inf.add_handler(Duration::ZERO, at(0)).unwrap();
    let (batched, _) = inf.add_handler(Duration::ZERO, at(0)).unwrap();
    inf.start(at(0));
    let lid = drain(&mut inf).last_request();
    inf.handle_input(
        at(0),
        lid,
        Input::ListPage(page(
            vec![obj("a", 1, 0), obj("b", 2, 0), obj("c", 3, 0)],
            3,
        )),
    );
    let mut seen: Vec<(HandlerId, String)> = Vec::new();
    let delivered = inf.deliver(|h, n| seen.push((h, describe(n))));
    assert_eq!(delivered, 6);
    for h in [inline, batched] {
        let got: Vec<&str> = seen
            .iter()
            .filter(|(id, _)| *id == h)
            .map(|(_, s)| s.as_str())
            .collect();
        assert_eq!(
            got,
            ["add a 1 initial", "add b 2 initial", "add c 3 initial"]
        );
    }
    let d = drain(&mut inf);
    assert!(d.notes.is_empty(), "deliver left nothing to poll");
    let wid = d.last_request();
    assert!(inf.handler_has_synced(inline) && inf.handler_has_synced(batched));

    // Three events; the batched handler takes two, is busy, and the third waits for it.
    for (i, o) in [obj("a", 4, 1), obj("b", 5, 1), obj("c", 6, 1)]
        .into_iter()
        .enumerate()
    {
        inf.handle_input(
            at(10 + i as u64),
            wid,
            Input::Event(WatchEvent::Modified(o)),
        );
    }
    let mut batch = Vec::new();
    assert_eq!(inf.poll_notifications(batched, 2, &mut batch), 2);
    let got: Vec<String> = batch.iter().map(describe).collect();
    assert_eq!(got, ["update a 1->4", "update b 2->5"]);
    assert_eq!(
        inf.poll_notifications(batched, 2, &mut batch),
        0,
        "busy with its batch"
    );
    seen.clear();
    assert_eq!(inf.deliver(|h, n| seen.push((h, describe(n)))), 3);
    assert!(
        seen.iter().all(|(h, _)| *h == inline),
        "a busy handler is skipped"
    );
    // While busy, a newer change of `c` coalesces behind the batch.
    inf.handle_input(
        at(20),
        wid,
        Input::Event(WatchEvent::Modified(obj("c", 7, 2))),
    );
    inf.handler_done(batched);
    batch.clear();
    assert_eq!(inf.poll_notifications(batched, 10, &mut batch), 1);
    assert_eq!(describe(&batch[0]), "update c 3->7");
    inf.handler_done(batched);
    seen.clear();
    assert_eq!(inf.deliver(|h, n| seen.push((h, describe(n)))), 1);
    assert_eq!(seen, [(inline, "update c 6->7".to_string())]);
    assert!(drain(&mut inf).notes.is_empty());
}

/// A relist that hands back the very objects the cache holds (a transport that took them
/// instead of decoding the items again) does not transform them a second time; listed copies,
/// changed or not, are transformed as always.
#[test]
fn a_relist_of_the_cached_objects_does_not_transform_them_again() {
    let calls = Arc::new(core::sync::atomic::AtomicUsize::new(0));
    let mut inf = informer(Duration::ZERO);
    let counted = calls.clone();
    assert!(
        inf.set_transform(alloc::boxed::Box::new(move |o: Arc<SimObject>| {
            counted.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
            let mut c = (*o).clone();
            c.noise += 1;
            Arc::new(c)
        }))
    );
    let (h, _) = inf.add_handler(Duration::ZERO, at(0)).unwrap();
    let d = start_and_list(&mut inf, at(0), vec![obj("a", 1, 0), obj("b", 2, 0)], 2);
    assert_eq!(calls.load(core::sync::atomic::Ordering::Relaxed), 2);
    let lid = expire_until_relisted(&mut inf, d.last_request(), at(5));
    let held_a = inf.indexer().get_by_key("ns/a").unwrap().clone();
    // `a` as held, `b` changed, `c` new, and a copy of `a` as listed would be: only the copies
    // go through the transform.
    inf.handle_input(
        at(6),
        lid,
        Input::ListPage(page(
            vec![held_a.clone(), obj("b", 3, 1), obj("c", 4, 0)],
            4,
        )),
    );
    let d = drain(&mut inf);
    assert_eq!(calls.load(core::sync::atomic::Ordering::Relaxed), 4);
    let now_a = inf.indexer().get_by_key("ns/a").unwrap();
    assert!(Arc::ptr_eq(now_a, &held_a));
    assert_eq!(now_a.noise, 8, "transformed once");
    assert_eq!(inf.indexer().get_by_key("ns/b").unwrap().noise, 8);
    assert_eq!(d.for_handler(h), ["update b 2->3", "add c 4"]);
}

/// A relist that hands back the very objects the cache holds notifies them as a relist of
/// unchanged copies does: a resync update for the handlers due for one (the last resync check
/// chose them), nothing for the others.
#[test]
fn a_relist_of_the_cached_objects_is_a_resync_for_the_handlers_due() {
    let mut inf = informer(Duration::from_secs(1));
    let (due, _) = inf.add_handler(Duration::from_secs(1), at(0)).unwrap();
    let (never, _) = inf.add_handler(Duration::ZERO, at(0)).unwrap();
    let d = start_and_list(&mut inf, at(0), vec![obj("a", 1, 0), obj("b", 2, 0)], 2);
    let wid = d.last_request();
    inf.handle_timeout(at(1000));
    let d = drain(&mut inf);
    let mut resynced = d.for_handler(due);
    resynced.sort();
    assert_eq!(resynced, ["update a 1->1", "update b 2->2"]);
    let lid = expire_until_relisted(&mut inf, wid, at(1001));
    let held: Vec<_> = ["ns/a", "ns/b"]
        .iter()
        .map(|k| inf.indexer().get_by_key(k).unwrap().clone())
        .collect();
    inf.handle_input(at(1002), lid, Input::ListPage(page(held, 3)));
    let d = drain(&mut inf);
    let mut resynced = d.for_handler(due);
    resynced.sort();
    assert_eq!(resynced, ["update a 1->1", "update b 2->2"]);
    assert!(
        d.for_handler(never).is_empty(),
        "{:?}",
        d.for_handler(never)
    );
}

/// A relist without a transform checks keys as it applies the list (no pass of its own): an
/// object whose key cannot be stored is refused and reported, and counts as not listed (its
/// presence saves no stored object from its tombstone); the very objects the cache holds are
/// kept as they are, changed and new ones applied, the missing one deleted.
#[test]
fn a_relist_refuses_unstorable_keys_as_it_applies_the_list() {
    let odd = |name: &str, rv: u64| named(name, Some("ns"), rv);
    let mut inf = informer(Duration::ZERO);
    let (h, _) = inf.add_handler(Duration::ZERO, at(0)).unwrap();
    let first = vec![obj("a", 1, 0), obj("b", 2, 0), obj("gone", 3, 0)];
    let d = start_and_list(&mut inf, at(0), first, 3);
    assert!(d.errors.is_empty(), "{:?}", d.errors);
    let lid = expire_until_relisted(&mut inf, d.last_request(), at(5));
    let held_a = inf.indexer().get_by_key("ns/a").unwrap().clone();
    inf.handle_input(
        at(6),
        lid,
        Input::ListPage(page(
            vec![
                odd("p/q", 7),
                held_a.clone(),
                obj("b", 4, 1),
                odd("", 8),
                obj("c", 5, 0),
            ],
            8,
        )),
    );
    let d = drain(&mut inf);
    assert_eq!(d.errors.len(), 2, "{:?}", d.errors);
    assert!(
        d.errors
            .iter()
            .all(|e| matches!(e, Failure::InvalidObject(m) if m.contains("not stored")))
    );
    assert_eq!(
        d.for_handler(h),
        ["delete gone tombstone", "update b 2->4", "add c 5"]
    );
    let mut keys: Vec<String> = inf.indexer().list_keys().map(|k| k.to_string()).collect();
    keys.sort();
    assert_eq!(keys, ["ns/a", "ns/b", "ns/c"]);
    assert!(Arc::ptr_eq(
        inf.indexer().get_by_key("ns/a").unwrap(),
        &held_a
    ));
    assert_eq!(inf.last_sync_resource_version(), "8");
}

#[test]
fn changed_selectors_abandon_the_watch_and_relist_with_them() {
    let mut inf = informer(Duration::ZERO);
    let (h, _) = inf.add_handler(Duration::ZERO, at(0)).unwrap();
    let d = start_and_list(&mut inf, at(0), vec![obj("a", 1, 0), obj("b", 2, 0)], 2);
    let wid = d.last_request();
    let shard = |s: &str| Selectors {
        shard: Some(s.into()),
        ..Selectors::default()
    };
    // The same selectors: nothing happens.
    assert!(!inf.set_selectors(at(10), Selectors::default()));
    assert!(drain(&mut inf).requests.is_empty());
    // New ones: the watch is abandoned, a list at the last synced resourceVersion carries them.
    assert!(inf.set_selectors(at(10), shard("r1")));
    assert_eq!(inf.selectors(), &shard("r1"));
    let d = drain(&mut inf);
    let (lid, req) = d.requests.last().cloned().expect("a relist");
    assert_ne!(lid, wid);
    match req {
        Request::List(l) => {
            assert_eq!(l.selectors, shard("r1"));
            assert_eq!(l.resource_version.as_deref(), Some("2"));
        }
        other => panic!("expected a list, got {other:?}"),
    }
    // An event of the abandoned watch is not applied.
    inf.handle_input(at(11), wid, Input::Event(WatchEvent::Added(obj("z", 3, 0))));
    assert!(drain(&mut inf).notes.is_empty());
    // The list's replace: `a` no longer matches (deleted, as a tombstone: a relist cannot
    // tell a deletion from an object that left the selectors), `c` now does (added).
    inf.handle_input(
        at(12),
        lid,
        Input::ListPage(page(vec![obj("b", 2, 0), obj("c", 4, 0)], 5)),
    );
    let d = drain(&mut inf);
    let mut seen = d.for_handler(h);
    seen.sort();
    assert_eq!(seen, ["add c 4", "delete a tombstone"]);
    let mut names: Vec<String> = inf.indexer().list().map(|o| o.name.clone()).collect();
    names.sort();
    assert_eq!(names, ["b", "c"]);
    match d.requests.last() {
        Some((_, Request::Watch(w))) => assert_eq!(w.selectors, shard("r1")),
        other => panic!("expected the watch, got {other:?}"),
    }
    // During a backoff the next request carries them, without a request of its own.
    let lid = expire_until_relisted(&mut inf, d.last_request(), at(20));
    inf.handle_input(
        at(21),
        lid,
        Input::Failed(Failure::ConnectionRefused("down".into())),
    );
    let _ = drain(&mut inf);
    let until = inf.reflector.backing_off_until().expect("a backoff");
    assert!(inf.set_selectors(at(22), shard("r2")));
    assert!(drain(&mut inf).requests.is_empty(), "waits out the backoff");
    inf.handle_timeout(until);
    let d = drain(&mut inf);
    match d.requests.last() {
        Some((_, Request::List(l))) => assert_eq!(l.selectors, shard("r2")),
        other => panic!("expected a list, got {other:?}"),
    }
}
