//! The change journal (`Indexer::record_changes` / `take_changes` / `apply`): replaying what one
//! indexer recorded on another leaves both equal, objects and index buckets, whatever mix of
//! adds, updates, deletes and replaces came in between and however the journal was cut.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::*;
use informer_core::indexer::{Change, IndexValues, NAMESPACE_INDEX, index_fn};
use informer_core::{DynamicObject, Indexer, Key};

fn colour_index(store: &mut Indexer<DynamicObject>) {
    store
        .add_index(
            "colour",
            index_fn(|o: &DynamicObject| -> IndexValues<'_> {
                o.metadata
                    .labels
                    .get("colour")
                    .map(Into::into)
                    .into_iter()
                    .collect()
            }),
        )
        .unwrap();
}

/// Every key with its object's resourceVersion, and every (index, value, key) bucket entry.
type Contents = (
    BTreeSet<(String, String)>,
    BTreeSet<(String, String, String)>,
);

/// Everything a reader can ask, from both indices.
fn contents(store: &Indexer<DynamicObject>) -> Contents {
    let objects = store
        .iter()
        .map(|(k, o)| {
            (
                k.to_string(),
                o.metadata.resource_version.clone().unwrap().into(),
            )
        })
        .collect();
    let mut buckets = BTreeSet::new();
    for index in ["colour", NAMESPACE_INDEX] {
        for value in store.list_index_values(index).unwrap() {
            for key in store.index_keys(index, value).unwrap() {
                buckets.insert((index.to_string(), value.to_string(), key.to_string()));
            }
        }
    }
    (objects, buckets)
}

#[test]
fn a_replayed_journal_leaves_the_copy_equal_to_the_original() {
    let mut original = Indexer::new();
    colour_index(&mut original);
    original.record_changes(true);
    let mut copy = Indexer::new();
    colour_index(&mut copy);
    let colours = ["red", "green", "blue"];
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut journal: Vec<Change<DynamicObject>> = Vec::new();
    let mut replays = 0;
    for step in 0..5_000u64 {
        let ns = ["a", "b"][next(2) as usize];
        let name = format!("o{}", next(40));
        let colour = colours[next(3) as usize];
        match next(20) {
            0..=11 => {
                original.add(obj_labels(ns, &name, step, &[("colour", colour)]));
            }
            12..=17 => {
                original.delete_key(Key::new(Some(ns), &name).as_ref_parts());
            }
            18 => {
                // The same object again: no change to record.
                let same = original.iter().next().map(|(_, o)| o.clone());
                if let Some(o) = same {
                    original.add(o);
                }
            }
            _ => {
                let items: Vec<Arc<DynamicObject>> = (0..next(30))
                    .map(|i| obj_labels("a", &format!("o{i}"), step, &[("colour", colour)]))
                    .collect();
                original.replace(items);
            }
        }
        if next(7) == 0 {
            original.take_changes(&mut journal);
            for change in journal.drain(..) {
                copy.apply(change);
            }
            assert_eq!(contents(&copy), contents(&original), "after step {step}");
            replays += 1;
        }
    }
    assert!(replays > 100);
    assert!(!original.is_empty());
}

#[test]
fn nothing_is_recorded_unless_asked_and_stopping_drops_the_journal() {
    let mut store = Indexer::new();
    store.add(obj_labels("a", "x", 1, &[]));
    assert!(!store.has_changes());
    store.record_changes(true);
    store.add(obj_labels("a", "y", 2, &[]));
    assert!(store.has_changes());
    store.record_changes(false);
    store.record_changes(true);
    assert!(!store.has_changes());
    let mut out = Vec::new();
    store.take_changes(&mut out);
    assert!(out.is_empty());
}
