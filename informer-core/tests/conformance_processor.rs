//! CONFORMANCE 11–15 and 17: handlers, resync, late registration, removal, payloads.
//! (16, panicking handlers, belongs to the runtime crates: the core runs no handler code.)

mod common;

use std::time::Duration;

use common::*;
use informer_core::cache::pipeline::DeliveryOrder;
use informer_core::cache::processor::MINIMUM_RESYNC_PERIOD;
use informer_core::{cache::pipeline::Pipeline, informer::Notification, time::Instant};

fn at(secs: u64) -> Instant {
    Instant::from_epoch(Duration::from_secs(secs))
}

fn started(check: u64) -> Pipeline<informer_core::object::DynamicObject> {
    let mut p = Pipeline::new(Duration::from_secs(check));
    p.start(at(0));
    p
}

/// CONFORMANCE 11: add/update/delete reach every handler, in order per object; a stalled
/// handler does not delay the others. The driver drains after every input, as the loop rule
/// says; the stalled handler's backlog is coalesced per key (our bound, see `Processor`), so it
/// ends at the same state through fewer notifications.
#[test]
fn conformance_11_every_handler_sees_changes_in_order_and_a_slow_one_delays_nobody() {
    let mut p = Pipeline::new(Duration::ZERO);
    let (h1, _) = p.add_handler(Duration::ZERO, at(0));
    let (h2, _) = p.add_handler(Duration::ZERO, at(0));
    let (slow, _) = p.add_handler(Duration::ZERO, at(0));
    p.start(at(0));
    p.replace(vec![obj("ns", "x", 1)]);
    while p.process_one() {}
    // `slow` takes its first notification and never finishes it.
    let first_of_slow = p.poll_notification_for(slow).unwrap();
    assert!(matches!(first_of_slow, Notification::Add { .. }));
    let mut got = std::collections::BTreeMap::new();
    for h in [h1, h2] {
        got.insert(h, deliver_to(&mut p, h));
    }

    type Input = fn(&mut Pipeline<informer_core::object::DynamicObject>);
    let inputs: [Input; 5] = [
        |p| p.added(obj("ns", "a", 2)),
        |p| p.modified(obj("ns", "a", 3)),
        |p| p.added(obj("ns", "b", 4)),
        |p| p.deleted(obj("ns", "a", 5)),
        |p| p.modified(obj("ns", "x", 6)),
    ];
    for input in inputs {
        input(&mut p);
        while p.process_one() {}
        for h in [h1, h2] {
            got.get_mut(&h).unwrap().extend(deliver_to(&mut p, h));
        }
    }
    let want = vec![
        Seen::Add("ns/x".into(), 1, true),
        Seen::Add("ns/a".into(), 2, false),
        Seen::Update("ns/a".into(), 2, 3),
        Seen::Add("ns/b".into(), 4, false),
        Seen::Delete("ns/a".into(), 5, false),
        Seen::Update("ns/x".into(), 1, 6),
    ];
    assert_eq!(got[&h1], want);
    assert_eq!(got[&h2], want);

    // The slow handler still holds its first notification; the rest waits in its own queue.
    assert!(
        p.poll_notification_for(slow).is_none(),
        "one in flight at most"
    );
    assert_eq!(
        p.processor().pending(slow),
        2,
        "a cancelled out; b and x pending"
    );
    p.handler_done(slow);
    assert_eq!(
        deliver_to(&mut p, slow),
        [
            Seen::Add("ns/b".into(), 4, false),
            Seen::Update("ns/x".into(), 1, 6)
        ]
    );
}

/// CONFORMANCE 12: a Replaced with an unchanged resourceVersion is a resync, going only to
/// handlers due for one; a changed resourceVersion reaches everyone.
#[test]
fn conformance_12_unchanged_rv_on_relist_is_a_resync() {
    let mut p = Pipeline::new(Duration::from_secs(1));
    let (fast, _) = p.add_handler(Duration::from_secs(1), at(0));
    let (never, _) = p.add_handler(Duration::ZERO, at(0));
    p.start(at(0));
    p.replace(vec![obj("ns", "a", 1), obj("ns", "b", 1)]);
    drain(&mut p);

    // Nobody is due (no resync check has run): an unchanged relist reaches nobody.
    p.replace(vec![obj("ns", "a", 1), obj("ns", "b", 2)]);
    let seen = drain(&mut p);
    assert_eq!(seen[&fast], [Seen::Update("ns/b".into(), 1, 2)]);
    assert_eq!(seen[&never], [Seen::Update("ns/b".into(), 1, 2)]);

    // At t=1 `fast` is due: the resync reaches it only.
    p.handle_timeout(at(1));
    let seen = drain(&mut p);
    assert_eq!(
        sorted(seen[&fast].clone()),
        [
            Seen::Update("ns/a".into(), 1, 1),
            Seen::Update("ns/b".into(), 2, 2)
        ]
    );
    assert!(!seen.contains_key(&never));
}

fn sorted(mut v: Vec<Seen>) -> Vec<Seen> {
    v.sort_by_key(|s| format!("{s:?}"));
    v
}

/// CONFORMANCE 13: 0 means never; below 1 s becomes 1 s.
#[test]
fn conformance_13_zero_is_never_and_minimum_is_one_second() {
    let mut p = Pipeline::<informer_core::object::DynamicObject>::new(Duration::from_millis(100));
    let (h, periods) = p.add_handler(Duration::from_millis(10), at(0));
    assert_eq!(periods.requested, MINIMUM_RESYNC_PERIOD);
    assert_eq!(periods.effective, MINIMUM_RESYNC_PERIOD);
    assert_eq!(
        p.processor().resync_periods(h).unwrap().effective,
        MINIMUM_RESYNC_PERIOD
    );
    let (_, periods) = p.add_handler(Duration::ZERO, at(0));
    assert_eq!(periods.effective, Duration::ZERO);
}

/// CONFORMANCE 13: before start, a shorter period lowers the check period (and others' effective
/// periods follow); after start, it is raised to the check period.
#[test]
fn conformance_13_before_start_lowers_check_period_after_start_is_raised() {
    let mut p = Pipeline::<informer_core::object::DynamicObject>::new(Duration::from_secs(10));
    let (a, pa) = p.add_handler(Duration::from_secs(30), at(0));
    assert_eq!(pa.effective, Duration::from_secs(30));
    let (_, pb) = p.add_handler(Duration::from_secs(4), at(0));
    assert_eq!(pb.effective, Duration::from_secs(4));
    assert_eq!(p.processor().check_period(), Duration::from_secs(4));
    assert_eq!(
        p.processor().resync_periods(a).unwrap().effective,
        Duration::from_secs(30)
    );
    p.start(at(0));
    assert_eq!(p.poll_timeout(), Some(at(4)));
    let (_, pc) = p.add_handler(Duration::from_secs(2), at(0));
    assert_eq!(pc.effective, Duration::from_secs(4));
    assert_eq!(p.processor().check_period(), Duration::from_secs(4));
}

/// CONFORMANCE 13: with a check period of 0 no handler ever resyncs.
#[test]
fn conformance_13_check_period_zero_means_no_resyncs() {
    let mut p = Pipeline::new(Duration::ZERO);
    p.start(at(0));
    let (h, periods) = p.add_handler(Duration::from_secs(5), at(0));
    assert_eq!(periods.effective, Duration::ZERO);
    p.replace(vec![obj("ns", "a", 1)]);
    drain(&mut p);
    assert_eq!(p.poll_timeout(), None);
    for t in 1..20 {
        p.handle_timeout(at(t));
    }
    assert!(!drain(&mut p).contains_key(&h));
}

/// CONFORMANCE 13: handlers of 2 s and 3 s on a 1 s informer: at t=2 only the first gets resync
/// updates, at t=3 only the second.
#[test]
fn conformance_13_two_and_three_second_handlers_on_a_one_second_informer() {
    let mut p = Pipeline::new(Duration::from_secs(1));
    let (two, _) = p.add_handler(Duration::from_secs(2), at(0));
    let (three, _) = p.add_handler(Duration::from_secs(3), at(0));
    p.start(at(0));
    p.replace(vec![obj("ns", "a", 1)]);
    drain(&mut p);

    let resync = vec![Seen::Update("ns/a".into(), 1, 1)];
    let mut timeline = Vec::new();
    for t in 1..=6 {
        assert_eq!(p.poll_timeout(), Some(at(t)));
        p.handle_timeout(at(t));
        let seen = drain(&mut p);
        let who: Vec<&str> = [(two, "2s"), (three, "3s")]
            .iter()
            .filter(|(h, _)| {
                seen.get(h).map(|s| {
                    assert_eq!(s, &resync);
                    true
                }) == Some(true)
            })
            .map(|(_, n)| *n)
            .collect();
        timeline.push((t, who));
    }
    assert_eq!(
        timeline,
        [
            (1, vec![]),
            (2, vec!["2s"]),
            (3, vec!["3s"]),
            (4, vec!["2s"]),
            (5, vec![]),
            (6, vec!["2s", "3s"]),
        ]
    );
}

/// CONFORMANCE 14: a handler added after sync gets one Add per cached object flagged "in
/// initial list", then live events, nothing lost or doubled; its own has_synced turns true only
/// after those adds were handled.
#[test]
fn conformance_14_late_handler_gets_replay_then_live_events() {
    let mut p = started(0);
    let (early, _) = p.add_handler(Duration::ZERO, at(0));
    p.replace(vec![
        obj("ns", "a", 1),
        obj("ns", "b", 1),
        obj("ns", "c", 1),
    ]);
    assert!(!p.handler_has_synced(early));
    drain(&mut p);
    assert!(p.has_synced());
    assert!(p.handler_has_synced(early));

    let (late, _) = p.add_handler(Duration::ZERO, at(5));
    assert!(!p.handler_has_synced(late));
    // Live events race the replay: b changes, c goes away, d arrives.
    p.modified(obj("ns", "b", 2));
    p.deleted(obj("ns", "c", 3));
    p.added(obj("ns", "d", 4));
    while p.process_one() {}

    // Take one replayed add: the handler is not synced while it is in flight.
    let first = p.poll_notification_for(late).unwrap();
    assert!(matches!(
        first,
        Notification::Add {
            in_initial_list: true,
            ..
        }
    ));
    assert!(!p.handler_has_synced(late));
    p.handler_done(late);
    let mut got = vec![seen(&first)];
    got.extend(deliver_to(&mut p, late));
    assert!(p.handler_has_synced(late));

    // Folded, the late handler's view equals the cache, with nothing extra.
    let mut view = std::collections::BTreeMap::new();
    for s in &got {
        match s {
            Seen::Add(k, rv, _) => assert!(view.insert(k.clone(), *rv).is_none(), "double add"),
            Seen::Update(k, old, new) => {
                assert_eq!(view.insert(k.clone(), *new), Some(*old), "update of unseen")
            }
            Seen::Delete(k, _, _) => assert!(view.remove(k).is_some(), "delete of unseen"),
        }
    }
    let cache: std::collections::BTreeMap<_, _> = p
        .indexer()
        .iter()
        .map(|(k, o)| (k.to_string(), rv(o)))
        .collect();
    assert_eq!(view, cache);
    assert_eq!(
        cache.keys().map(String::as_str).collect::<Vec<_>>(),
        ["ns/a", "ns/b", "ns/d"]
    );
    // Replayed objects carry the flag; the genuinely new one does not.
    assert!(got.contains(&Seen::Add("ns/a".into(), 1, true)));
    assert!(got.contains(&Seen::Add("ns/b".into(), 2, true)));
    assert!(got.contains(&Seen::Add("ns/d".into(), 4, false)));
}

/// CONFORMANCE 15: a removed handler receives nothing new.
#[test]
fn conformance_15_removed_handler_receives_nothing() {
    let mut p = started(0);
    let (keep, _) = p.add_handler(Duration::ZERO, at(0));
    let (gone, _) = p.add_handler(Duration::ZERO, at(0));
    p.replace(vec![obj("ns", "a", 1)]);
    drain(&mut p);
    assert!(p.remove_handler(gone));
    assert!(!p.remove_handler(gone));
    p.modified(obj("ns", "a", 2));
    let seen = drain(&mut p);
    assert!(!seen.contains_key(&gone));
    assert_eq!(seen[&keep], [Seen::Update("ns/a".into(), 1, 2)]);
    assert!(p.poll_notification_for(gone).is_none());
    assert!(!p.handler_has_synced(gone));
}

/// CONFORMANCE 17: updates carry (old, new); deletes carry the last known state, or a tombstone
/// when the deletion was inferred from a relist.
#[test]
fn conformance_17_update_has_old_and_new_delete_has_last_state_or_tombstone() {
    let mut p = started(0);
    let (h, _) = p.add_handler(Duration::ZERO, at(0));
    p.replace(vec![obj("ns", "a", 1), obj("ns", "b", 1)]);
    drain(&mut p);

    p.modified(obj("ns", "a", 2));
    p.deleted(obj("ns", "a", 3));
    p.replace(vec![]); // b vanished while we were not watching.
    while p.process_one() {}
    let mut got = Vec::new();
    while let Some(n) = p.poll_notification_for(h) {
        got.push(n);
        p.handler_done(h);
    }
    assert_eq!(got.len(), 2, "update+delete of a coalesce into the delete");
    match &got[0] {
        Notification::Delete(d) => {
            assert!(!d.is_tombstone());
            assert_eq!(rv(d.object()), 3);
        }
        other => panic!("{other:?}"),
    }
    match &got[1] {
        Notification::Delete(d) => {
            assert!(d.is_tombstone());
            assert_eq!(rv(d.object()), 1, "the last state the informer knew");
        }
        other => panic!("{other:?}"),
    }

    // Handled one by one, the update carries both states.
    p.added(obj("ns", "c", 5));
    drain(&mut p);
    p.modified(obj("ns", "c", 6));
    assert_eq!(drain(&mut p)[&h], [Seen::Update("ns/c".into(), 5, 6)]);
}

/// The bound on a stalled handler: per key at most one entry, and a delete followed by a
/// re-creation is never merged into an update.
#[test]
fn stalled_handler_coalesces_per_key_and_keeps_delete_then_recreate() {
    let mut p = started(0);
    let (h, _) = p.add_handler(Duration::ZERO, at(0));
    p.replace(vec![obj("ns", "a", 1)]);
    drain(&mut p);

    for rv in 2..1000 {
        p.modified(obj("ns", "a", rv));
        p.process_one();
    }
    assert_eq!(p.processor().pending(h), 1);
    p.deleted(obj("ns", "a", 1000));
    p.added(obj("ns", "a", 1001));
    p.modified(obj("ns", "a", 1002));
    while p.process_one() {}
    assert_eq!(p.processor().pending(h), 1);
    assert_eq!(
        deliver_to(&mut p, h),
        [
            Seen::Delete("ns/a".into(), 1000, false),
            Seen::Add("ns/a".into(), 1002, false)
        ]
    );

    // Add then delete while stalled: the handler never hears of the object.
    p.added(obj("ns", "tmp", 2000));
    p.deleted(obj("ns", "tmp", 2001));
    while p.process_one() {}
    assert_eq!(p.processor().pending(h), 0);
}

/// The straight path: a watch event whose key has nothing queued (the FIFO is empty) is applied
/// at once, with exactly the store change and notifications that queueing and popping it would
/// give; with anything queued, events wait their turn behind it. (Only the DeltaFIFO order
/// queues: in the default order everything is applied at once, CONFORMANCE 26.)
#[test]
fn watch_events_with_nothing_queued_apply_at_once_and_queue_behind_anything_queued() {
    let mut p = Pipeline::with_order(Duration::ZERO, DeliveryOrder::DeltaFifo);
    let (h, _) = p.add_handler(Duration::ZERO, at(0));
    p.start(at(0));

    // The initial list is queued, not applied: events arriving now queue behind it.
    p.replace(vec![obj("ns", "x", 1), obj("ns", "y", 2)]);
    p.modified(obj("ns", "x", 3));
    p.added(obj("ns", "z", 4));
    p.deleted(obj("ns", "y", 5));
    assert!(
        p.poll_notification().is_none(),
        "nothing is applied before its turn"
    );
    assert_eq!(p.indexer().len(), 0);
    assert_eq!(p.fifo().len(), 3);
    assert!(!p.has_synced());
    let got = drain(&mut p).remove(&h).unwrap();
    // Popped in order: x's Replaced + Updated, y's Replaced + Deleted (both coalesced in the
    // handler's queue: one key's deltas are applied in one step), then z.
    assert_eq!(
        got,
        vec![
            Seen::Add("ns/x".into(), 3, true),
            Seen::Add("ns/z".into(), 4, false),
        ]
    );
    assert_eq!(rv(p.indexer().get_by_key("ns/x").unwrap()), 3);
    assert!(p.indexer().get_by_key("ns/y").is_none());
    assert!(p.has_synced());

    // Nothing queued now: each event is in the store and notified before any `process_one`.
    p.added(obj("ns", "a", 6));
    assert!(p.fifo().is_empty());
    assert_eq!(rv(p.indexer().get_by_key("ns/a").unwrap()), 6);
    assert_eq!(
        deliver_to(&mut p, h),
        vec![Seen::Add("ns/a".into(), 6, false)]
    );
    // A MODIFIED for a key not stored is an add, as the popped `Updated` delta would be.
    p.modified(obj("ns", "b", 7));
    assert_eq!(
        deliver_to(&mut p, h),
        vec![Seen::Add("ns/b".into(), 7, false)]
    );
    p.modified(obj("ns", "a", 8));
    assert_eq!(
        deliver_to(&mut p, h),
        vec![Seen::Update("ns/a".into(), 6, 8)]
    );
    // A delete of a key neither queued nor stored is dropped; a known one is delivered with
    // the watch's object.
    p.deleted(obj("ns", "nobody", 9));
    p.deleted(obj("ns", "b", 10));
    assert_eq!(
        deliver_to(&mut p, h),
        vec![Seen::Delete("ns/b".into(), 10, false)]
    );
    assert!(p.indexer().get_by_key("ns/b").is_none());
    assert!(!p.process_one(), "nothing was queued");

    // A pipeline whose first input is a watch event (no list yet) is populated by it: synced,
    // and its add is not part of an initial list.
    let mut q = Pipeline::new(Duration::ZERO);
    let (h, _) = q.add_handler(Duration::ZERO, at(0));
    q.start(at(0));
    assert!(!q.has_synced());
    q.added(obj("ns", "c", 1));
    assert!(q.has_synced());
    assert_eq!(
        deliver_to(&mut q, h),
        vec![Seen::Add("ns/c".into(), 1, false)]
    );
}

/// `deliver` with a handler that panics: the processor stays consistent, what was handed out
/// before the panic stays delivered, the notification being handed out stays pending (a
/// handler that already had it may get it once more), and nothing is lost. On both paths:
/// every handler keeping up, and one handler busy (so the others read at their own cursors).
#[test]
fn deliver_survives_a_panicking_handler() {
    use informer_core::informer::HandlerId;
    use std::collections::BTreeMap;
    use std::panic::{AssertUnwindSafe, catch_unwind};
    let want = |i: u64| Seen::Add(format!("ns/o{i}"), i, false);
    for busy_one in [false, true] {
        for panic_at in 0..15 {
            let mut p = started(0);
            let ids: Vec<HandlerId> = (0..3)
                .map(|_| p.add_handler(Duration::ZERO, at(0)).0)
                .collect();
            let mut got: BTreeMap<HandlerId, Vec<Seen>> = BTreeMap::new();
            let mut busy = None;
            for i in 0..5 {
                p.added(obj("ns", &format!("o{i}"), i));
                if i == 0 && busy_one {
                    // Handler 0 takes its first notification and is not done before delivery.
                    let n = p.poll_notification_for(ids[0]).unwrap();
                    got.entry(ids[0]).or_default().push(seen(&n));
                    busy = Some(ids[0]);
                }
            }
            let mut calls = 0;
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                p.deliver(|id, n| {
                    got.entry(id).or_default().push(seen(n));
                    calls += 1;
                    if calls == panic_at + 1 {
                        panic!("handler fails");
                    }
                })
            }));
            if let Some(id) = busy {
                p.handler_done(id);
            }
            let again = p.deliver(|id, n| got.entry(id).or_default().push(seen(n)));
            assert_eq!(p.deliver(|_, _| {}), 0, "everything delivered");
            let total: usize = got.values().map(Vec::len).sum();
            if outcome.is_ok() {
                assert_eq!(total, 15, "no panic: each of 3 handlers got 5");
                continue;
            }
            assert!(again > 0 || total == 15);
            for id in &ids {
                let mut seq = got.get(id).cloned().unwrap_or_default();
                let len = seq.len();
                seq.dedup();
                assert!(
                    len - seq.len() <= 1,
                    "busy {busy_one} panic {panic_at}: {len} for {id:?}"
                );
                assert_eq!(
                    seq,
                    (0..5).map(want).collect::<Vec<_>>(),
                    "busy {busy_one} panic at {panic_at}: handler {id:?}"
                );
            }
        }
    }
}
