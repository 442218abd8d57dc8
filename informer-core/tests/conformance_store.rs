//! CONFORMANCE 1–10, 26, 27 and 29: Indexer, DeltaFIFO and delivery-order behaviour (client-go
//! `tools/cache` as reference).

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::*;
use informer_core::cache::indexer::{IndexValues, NAMESPACE_INDEX, index_fn};
use informer_core::cache::pipeline::{DeliveryOrder, Pipeline};
use informer_core::informer::Notification;
use informer_core::object::Object;
use informer_core::time::Instant;
use informer_core::{
    cache::fifo::DeltaFifo, cache::fifo::DeltaFifoOptions, cache::fifo::DeltaType,
    cache::indexer::IndexError, cache::indexer::Indexer, object::DynamicObject, object::Key,
    object::KeyRef, object::ObjectOrTombstone,
};
use std::time::Duration;

fn keys<'a>(it: impl Iterator<Item = &'a Arc<DynamicObject>>) -> BTreeSet<String> {
    it.map(|o| Key::of(&**o).to_string()).collect()
}

fn values<'a>(it: impl Iterator<Item = &'a str>) -> BTreeSet<String> {
    it.map(String::from).collect()
}

/// CONFORMANCE 1: a tombstone's key is the key it was stored under.
#[test]
fn conformance_01_tombstone_key_is_its_stored_key() {
    let mut store = Indexer::new();
    store.add(obj("ns", "a", 1));
    let mut fifo = DeltaFifo::new();
    fifo.replace(vec![], &store);
    let popped = fifo.pop().unwrap();
    assert_eq!(popped.key.as_str(), "ns/a");
    match &popped.deltas[0].object {
        ObjectOrTombstone::Tombstone(t) => assert_eq!(t.key.as_str(), "ns/a"),
        other => panic!("expected a tombstone, got {other:?}"),
    }
}

/// CONFORMANCE 2: multi-valued index functions, bucket moves on update, removal on delete, and
/// empty buckets disappear.
#[test]
fn conformance_02_index_buckets_follow_changes() {
    let mut store = Indexer::new();
    // Index by every label value: zero or more values per object.
    store
        .add_index(
            "labelvalues",
            index_fn(|o: &DynamicObject| -> IndexValues<'_> {
                o.metadata.labels().values().collect()
            }),
        )
        .unwrap();
    store.add(obj_labels("ns", "a", 1, &[("x", "red"), ("y", "blue")]));
    store.add(obj_labels("ns", "b", 1, &[("x", "red")]));
    store.add(obj_labels("ns", "c", 1, &[]));

    assert_eq!(
        keys(store.by_index("labelvalues", "red").unwrap()),
        ["ns/a", "ns/b"].map(String::from).into()
    );
    assert_eq!(
        keys(store.by_index("labelvalues", "blue").unwrap()),
        ["ns/a"].map(String::from).into()
    );
    assert_eq!(
        values(store.list_index_values("labelvalues").unwrap()),
        ["red", "blue"].map(String::from).into()
    );

    // Update moves a between buckets: out of red and blue, into green.
    store.update(obj_labels("ns", "a", 2, &[("x", "green")]));
    assert_eq!(
        keys(store.by_index("labelvalues", "red").unwrap()),
        ["ns/b"].map(String::from).into()
    );
    assert_eq!(store.by_index("labelvalues", "blue").unwrap().count(), 0);
    assert_eq!(
        values(store.list_index_values("labelvalues").unwrap()),
        ["red", "green"].map(String::from).into(),
        "the emptied blue bucket must disappear"
    );

    // Delete removes from every bucket.
    store.delete(&obj("ns", "b", 0));
    assert_eq!(
        values(store.list_index_values("labelvalues").unwrap()),
        ["green"].map(String::from).into()
    );
    assert_eq!(store.index_len("labelvalues", "red").unwrap(), 0);
    // The built-in namespace index.
    assert_eq!(
        keys(store.by_index(NAMESPACE_INDEX, "ns").unwrap()),
        ["ns/a", "ns/c"].map(String::from).into()
    );
    // `index` returns objects sharing any value with the given object, each once.
    let probe = obj_labels("zz", "probe", 1, &[("p", "green"), ("q", "green")]);
    assert_eq!(
        keys(store.index("labelvalues", &probe).unwrap().iter()).len(),
        1
    );

    // Single-valued indices (a label index, the namespace index) follow the same changes.
    let mut store = Indexer::new();
    store.add_label_index("x").unwrap();
    let by_x = informer_core::cache::indexer::label_index_name("x");
    store.add(obj_labels("ns", "a", 1, &[("x", "red")]));
    store.add(obj_labels("ns", "b", 1, &[("x", "red")]));
    store.add(obj_labels("other", "c", 1, &[]));
    store.update(obj_labels("ns", "a", 2, &[("x", "green")]));
    store.update(obj_labels("other", "c", 2, &[("x", "green")]));
    store.update(obj_labels("ns", "b", 2, &[]));
    assert_eq!(store.index_len(&by_x, "red").unwrap(), 0);
    assert_eq!(store.index_len(&by_x, "green").unwrap(), 2);
    assert_eq!(
        values(store.list_index_values(&by_x).unwrap()),
        ["green"].map(String::from).into()
    );
    store.delete(&obj("ns", "a", 0));
    store.delete(&obj("ns", "b", 0));
    assert_eq!(store.index_len(&by_x, "green").unwrap(), 1);
    assert_eq!(store.index_len(NAMESPACE_INDEX, "ns").unwrap(), 0);
    assert_eq!(
        values(store.list_index_values(NAMESPACE_INDEX).unwrap()),
        ["other"].map(String::from).into(),
        "the emptied namespace bucket must disappear"
    );
}

/// CONFORMANCE 3: unknown index name and duplicate index name are errors; an index added to a
/// non-empty store indexes what is there.
#[test]
fn conformance_03_index_errors_and_late_index() {
    let mut store = Indexer::new();
    store.add(obj_labels("ns", "a", 1, &[("app", "web")]));
    store.add(obj_labels("ns", "b", 1, &[("app", "db")]));

    assert_eq!(
        store.by_index("nope", "x").err(),
        Some(IndexError::UnknownIndex {
            name: "nope".into()
        })
    );
    assert!(matches!(
        store.index_keys("nope", "x"),
        Err(IndexError::UnknownIndex { .. })
    ));
    assert!(matches!(
        store.list_index_values("nope"),
        Err(IndexError::UnknownIndex { .. })
    ));

    store.add_index("app", by_app()).unwrap();
    assert_eq!(
        keys(store.by_index("app", "web").unwrap()),
        ["ns/a"].map(String::from).into()
    );
    assert_eq!(
        store.add_index("app", by_app()),
        Err(IndexError::IndexExists { name: "app".into() })
    );
    assert_eq!(
        store.add_index(NAMESPACE_INDEX, by_app()),
        Err(IndexError::IndexExists {
            name: NAMESPACE_INDEX.into()
        })
    );
}

/// CONFORMANCE 4: `replace` swaps the whole content and rebuilds indices. (Readers cannot see a
/// half-replaced store: `replace` takes `&mut self` and completes before returning.)
#[test]
fn conformance_04_replace_swaps_content_and_rebuilds_indices() {
    let mut store = Indexer::new();
    store.add_index("app", by_app()).unwrap();
    store.add(obj_labels("ns1", "a", 1, &[("app", "web")]));
    store.add(obj_labels("ns1", "b", 1, &[("app", "web")]));

    store.replace(vec![
        obj_labels("ns1", "b", 2, &[("app", "db")]),
        obj_labels("ns2", "c", 3, &[("app", "db")]),
    ]);
    assert_eq!(store.len(), 2);
    assert!(store.get_by_key("ns1/a").is_none());
    assert_eq!(rv(store.get_by_key("ns1/b").unwrap()), 2);
    assert_eq!(
        values(store.list_index_values("app").unwrap()),
        ["db"].map(String::from).into()
    );
    assert_eq!(
        values(store.list_index_values(NAMESPACE_INDEX).unwrap()),
        ["ns1", "ns2"].map(String::from).into()
    );
    assert_eq!(store.by_index("app", "db").unwrap().count(), 2);
}

fn kinds(fifo: &DeltaFifo<DynamicObject>, key: &str) -> Vec<(DeltaType, u64)> {
    let k = Key::parse(key);
    fifo.get(k.as_ref_parts())
        .map(|d| d.iter().map(|d| (d.kind, rv(d.object.object()))).collect())
        .unwrap_or_default()
}

/// CONFORMANCE 5: deltas accumulate oldest → newest; each key is queued once, in first-arrival
/// order.
#[test]
fn conformance_05_deltas_accumulate_in_order_and_keys_queue_once() {
    let store = Indexer::new();
    let mut fifo = DeltaFifo::new();
    fifo.add(obj("ns", "b", 1), &store);
    fifo.add(obj("ns", "a", 2), &store);
    fifo.update(obj("ns", "b", 3), &store);
    fifo.update(obj("ns", "b", 4), &store);

    let order: Vec<_> = fifo.queued_keys().map(|k| k.to_string()).collect();
    assert_eq!(order, ["ns/b", "ns/a"]);
    assert_eq!(
        kinds(&fifo, "ns/b"),
        [
            (DeltaType::Added, 1),
            (DeltaType::Updated, 3),
            (DeltaType::Updated, 4)
        ]
    );
    let first = fifo.pop().unwrap();
    assert_eq!(first.key.as_str(), "ns/b");
    assert_eq!(first.deltas.len(), 3);
    // After popping, the key queues again at the back.
    fifo.update(obj("ns", "b", 5), &store);
    let order: Vec<_> = fifo.queued_keys().map(|k| k.to_string()).collect();
    assert_eq!(order, ["ns/a", "ns/b"]);
}

/// CONFORMANCE 6: two trailing deletes merge: keep the older, unless the older is a tombstone,
/// then keep the newer.
#[test]
fn conformance_06_trailing_deletes_merge() {
    let mut store = Indexer::new();
    store.add(obj("ns", "a", 1));
    let mut fifo = DeltaFifo::new();

    // Older is a plain delete: it is kept.
    fifo.delete(ObjectOrTombstone::Object(obj("ns", "a", 2)), &store);
    fifo.delete(ObjectOrTombstone::Object(obj("ns", "a", 3)), &store);
    assert_eq!(kinds(&fifo, "ns/a"), [(DeltaType::Deleted, 2)]);
    fifo.pop();

    // Older is a tombstone (from replace): the newer plain delete replaces it.
    fifo.replace(vec![], &store);
    let d = fifo.get(KeyRef::new(Some("ns"), "a")).unwrap();
    assert!(d[0].object.is_tombstone());
    fifo.delete(ObjectOrTombstone::Object(obj("ns", "a", 9)), &store);
    let d = fifo.get(KeyRef::new(Some("ns"), "a")).unwrap();
    assert_eq!(d.len(), 1);
    assert!(!d[0].object.is_tombstone());
    assert_eq!(rv(d[0].object.object()), 9);

    // Non-delete deltas in between prevent merging.
    let mut fifo = DeltaFifo::new();
    fifo.delete(ObjectOrTombstone::Object(obj("ns", "a", 2)), &store);
    fifo.add(obj("ns", "a", 3), &store);
    fifo.delete(ObjectOrTombstone::Object(obj("ns", "a", 4)), &store);
    assert_eq!(
        kinds(&fifo, "ns/a"),
        [
            (DeltaType::Deleted, 2),
            (DeltaType::Added, 3),
            (DeltaType::Deleted, 4)
        ]
    );
}

/// CONFORMANCE 7: deleting a key neither queued nor known is dropped.
#[test]
fn conformance_07_delete_of_unknown_key_is_dropped() {
    let mut store = Indexer::new();
    let mut fifo = DeltaFifo::new();
    assert!(!fifo.delete(ObjectOrTombstone::Object(obj("ns", "ghost", 1)), &store));
    assert!(fifo.is_empty());
    // Known to the store: queued.
    store.add(obj("ns", "known", 1));
    assert!(fifo.delete(ObjectOrTombstone::Object(obj("ns", "known", 2)), &store));
    // Queued but unknown to the store: queued.
    fifo.add(obj("ns", "new", 1), &store);
    assert!(fifo.delete(ObjectOrTombstone::Object(obj("ns", "new", 2)), &store));
    assert_eq!(fifo.len(), 2);
}

/// The informer's DeltaFIFO options: `Replaced` deltas for a relist (CONFORMANCE 29).
const REPLACED: DeltaFifoOptions = DeltaFifoOptions {
    emit_delta_type_replaced: true,
};

/// CONFORMANCE 8: replace queues `Replaced` for listed objects and tombstones for queued or
/// known keys missing from the list (newest queued state, else stored state), without
/// duplicating tombstones on repeated empty replaces.
#[test]
fn conformance_08_replace_queues_replaced_and_tombstones() {
    let mut store = Indexer::new();
    store.add(obj("ns", "kept", 1));
    store.add(obj("ns", "gone-known", 2));
    store.add(obj("ns", "gone-queued", 3));
    let mut fifo = DeltaFifo::with_options(REPLACED);
    fifo.update(obj("ns", "gone-queued", 4), &store);
    fifo.add(obj("ns", "gone-new", 5), &store);

    fifo.replace(vec![obj("ns", "kept", 6), obj("ns", "fresh", 7)], &store);

    assert_eq!(kinds(&fifo, "ns/kept"), [(DeltaType::Replaced, 6)]);
    assert_eq!(kinds(&fifo, "ns/fresh"), [(DeltaType::Replaced, 7)]);
    // Known, not queued: tombstone with the stored state.
    assert_eq!(kinds(&fifo, "ns/gone-known"), [(DeltaType::Deleted, 2)]);
    // Queued: tombstone with the newest queued state.
    assert_eq!(
        kinds(&fifo, "ns/gone-queued"),
        [(DeltaType::Updated, 4), (DeltaType::Deleted, 4)]
    );
    assert_eq!(
        kinds(&fifo, "ns/gone-new"),
        [(DeltaType::Added, 5), (DeltaType::Deleted, 5)]
    );
    for key in ["ns/gone-known", "ns/gone-queued", "ns/gone-new"] {
        let k = Key::parse(key);
        let last = fifo.get(k.as_ref_parts()).unwrap().last().unwrap();
        assert!(
            last.object.is_tombstone(),
            "{key} should end in a tombstone"
        );
    }

    // Repeated empty replaces: still one tombstone per missing key.
    let mut fifo = DeltaFifo::new();
    fifo.replace(vec![], &store);
    fifo.replace(vec![], &store);
    fifo.replace(vec![], &store);
    for key in ["ns/kept", "ns/gone-known", "ns/gone-queued"] {
        assert_eq!(kinds(&fifo, key).len(), 1, "{key}");
    }
}

/// CONFORMANCE 9: resync queues `Sync` only for known keys with nothing queued.
#[test]
fn conformance_09_resync_only_for_keys_with_nothing_queued() {
    let mut store = Indexer::new();
    store.add(obj("ns", "a", 1));
    store.add(obj("ns", "b", 2));
    let mut fifo = DeltaFifo::new();
    fifo.update(obj("ns", "a", 3), &store);
    fifo.resync(&store);
    assert_eq!(kinds(&fifo, "ns/a"), [(DeltaType::Updated, 3)]);
    assert_eq!(kinds(&fifo, "ns/b"), [(DeltaType::Sync, 2)]);
    // A second resync adds nothing: both keys have something queued.
    fifo.resync(&store);
    assert_eq!(kinds(&fifo, "ns/b"), [(DeltaType::Sync, 2)]);
    assert_eq!(fifo.len(), 2);
}

/// CONFORMANCE 10: `has_synced` stays false until every item of the first replace, tombstones
/// included, has been popped; those items carry "in initial list".
#[test]
fn conformance_10_has_synced_after_initial_batch() {
    let mut store = Indexer::new();
    store.add(obj("ns", "stale", 1));
    let mut fifo = DeltaFifo::new();
    assert!(!fifo.has_synced());
    fifo.replace(vec![obj("ns", "a", 2), obj("ns", "b", 3)], &store);
    assert!(!fifo.has_synced());
    // Events arriving after the list are not part of the initial batch.
    fifo.add(obj("ns", "late", 4), &store);

    let mut flags = Vec::new();
    while let Some(p) = fifo.pop() {
        flags.push((p.key.to_string(), p.in_initial_list, fifo.has_synced()));
    }
    assert_eq!(
        flags,
        [
            ("ns/a".to_string(), true, false),
            ("ns/b".to_string(), true, false),
            ("ns/stale".to_string(), true, true),
            ("ns/late".to_string(), false, true),
        ]
    );
    // A later replace does not reset it.
    fifo.replace(vec![], &store);
    assert!(fifo.has_synced());
    assert!(!fifo.pop().unwrap().in_initial_list);
}

/// Every notification a pipeline's handler gets until idle, as `kind name rv`.
fn heard(p: &mut Pipeline<DynamicObject>) -> Vec<String> {
    let mut got = Vec::new();
    while p.process_one() {}
    while let Some((id, n)) = p.poll_notification() {
        got.push(match &n {
            Notification::Add { obj, .. } => format!("add {}", obj.name()),
            Notification::Update { new, .. } => format!("update {}", new.name()),
            Notification::Delete(d) => {
                format!(
                    "delete {} tombstone={}",
                    d.object().name(),
                    d.is_tombstone()
                )
            }
        });
        p.handler_done(id);
    }
    got
}

/// `[a, b, c]` populated, then a relist `[b (changed), d]`: what the handler hears of the
/// relist, with the deletions (in the cache's order) sorted among themselves.
fn relist_heard(mut p: Pipeline<DynamicObject>) -> Vec<String> {
    p.add_handler(Duration::ZERO, Instant::ZERO);
    p.start(Instant::ZERO);
    p.populate(vec![
        obj("ns", "a", 1),
        obj("ns", "b", 2),
        obj("ns", "c", 3),
    ]);
    assert_eq!(heard(&mut p).len(), 3);
    p.replace(vec![obj("ns", "b", 4), obj("ns", "d", 5)]);
    assert!(p.fifo().is_empty(), "applied at once: nothing left queued");
    assert_eq!(p.indexer().len(), 2, "the store holds the whole new list");
    let mut got = heard(&mut p);
    let first_delete = got.iter().position(|n| n.starts_with("delete")).unwrap();
    got[first_delete..first_delete + 2].sort();
    got
}

/// CONFORMANCE 26: client-go 1.36's order (RealFIFO, `InOrderInformers`), the default: a
/// relist's deletions (tombstones for the cached keys it lacks) reach the handlers before its
/// objects, each key once, and the whole relist is applied in the call that brings it. A
/// resync is applied at once too: nothing is queued, and the handler due hears one update per
/// cached object. (Before, every pipeline delivered the listed objects first.)
#[test]
fn conformance_26_in_order_relists_delete_first() {
    let p = Pipeline::new(Duration::ZERO);
    assert_eq!(p.order(), DeliveryOrder::InOrder, "the default");
    assert_eq!(
        relist_heard(p),
        [
            "delete a tombstone=true",
            "delete c tombstone=true",
            "update b",
            "add d"
        ]
    );

    let mut p: Pipeline<DynamicObject> = Pipeline::new(Duration::from_secs(1));
    p.add_handler(Duration::from_secs(1), Instant::ZERO);
    p.start(Instant::ZERO);
    p.populate(vec![obj("ns", "a", 1), obj("ns", "b", 2)]);
    heard(&mut p);
    p.handle_timeout(Instant::ZERO + Duration::from_secs(1));
    assert!(p.fifo().is_empty(), "a resync queues nothing");
    let mut got = heard(&mut p);
    got.sort();
    assert_eq!(got, ["update a", "update b"]);
}

/// CONFORMANCE 27: client-go's older DeltaFIFO order, on request: a relist's objects first,
/// in list order, then its deletions.
#[test]
fn conformance_27_delta_fifo_order_on_request_deletes_last() {
    let p = Pipeline::with_order(Duration::ZERO, DeliveryOrder::DeltaFifo);
    assert_eq!(
        relist_heard(p),
        [
            "update b",
            "add d",
            "delete a tombstone=true",
            "delete c tombstone=true"
        ]
    );
}

/// CONFORMANCE 29: as client-go's `DeltaFIFOOptions.EmitDeltaTypeReplaced`, a plain DeltaFIFO
/// queues `Sync` for each listed object (client-go's default, for consumers older than
/// `Replaced`) and `Replaced` when asked, which the informer's own FIFO is. (Before, only
/// `Replaced` existed.)
#[test]
fn conformance_29_a_delta_fifo_replace_emits_sync_unless_replaced_is_asked() {
    let store = Indexer::new();
    let mut plain = DeltaFifo::new();
    assert!(!plain.options().emit_delta_type_replaced);
    plain.replace(vec![obj("ns", "a", 1)], &store);
    assert_eq!(kinds(&plain, "ns/a"), [(DeltaType::Sync, 1)]);
    let mut replaced = DeltaFifo::with_options(REPLACED);
    replaced.replace(vec![obj("ns", "a", 1)], &store);
    assert_eq!(kinds(&replaced, "ns/a"), [(DeltaType::Replaced, 1)]);
}
