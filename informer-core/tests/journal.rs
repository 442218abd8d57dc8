//! The change journal (`Indexer::record_changes` / `take_changes` / `apply`): replaying what one
//! indexer recorded on another leaves both equal, objects and index buckets, whatever mix of
//! adds, updates, deletes and replaces came in between and however the journal was cut.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::*;
use informer_core::cache::indexer::{
    Change, IndexValues, LabelIndex, NAMESPACE_INDEX, ReadCopy, index_fn, label_index_name,
};
use informer_core::{
    cache::indexer::Indexer, object::DynamicObject, object::Key, object::KeyRef,
    object::selector::Labels, object::selector::Selector,
};

fn colour_index(store: &mut Indexer<DynamicObject>) {
    store
        .add_index(
            "colour",
            index_fn(|o: &DynamicObject| -> IndexValues<'_> {
                o.metadata.labels().get("colour").into_iter().collect()
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
        .map(|(k, o)| (k.to_string(), o.metadata.resource_version().unwrap().into()))
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

/// Every key with its object's resourceVersion, and every bucket entry with the
/// resourceVersion of the object the bucket gives back (so that a bucket still holding an
/// object's previous version shows), and the objects a label selector selects.
type Answers = (
    BTreeSet<(String, String)>,
    BTreeSet<(String, String, String, String)>,
    BTreeSet<(String, String, String)>,
);

fn rv(o: &DynamicObject) -> String {
    o.metadata.resource_version().unwrap().into()
}

const INDICES: [&str; 2] = ["label:colour", NAMESPACE_INDEX];

fn answers_of_original(store: &Indexer<DynamicObject>, selector: &Selector) -> Answers {
    let objects = store.iter().map(|(k, o)| (k.to_string(), rv(o))).collect();
    let mut buckets = BTreeSet::new();
    for index in INDICES {
        for value in store.list_index_values(index).unwrap() {
            for o in store.by_index(index, value).unwrap() {
                let key = Key::of(&**o).to_string();
                buckets.insert((index.to_string(), value.to_string(), key, rv(o)));
            }
        }
    }
    let selected = [Some("a"), None]
        .into_iter()
        .flat_map(|ns| {
            store.select(selector, ns).map(move |o| {
                (
                    ns.unwrap_or("*").to_string(),
                    Key::of(&**o).to_string(),
                    rv(o),
                )
            })
        })
        .collect();
    (objects, buckets, selected)
}

fn answers_of_copy(copy: &ReadCopy<DynamicObject>, selector: &Selector) -> Answers {
    let objects = copy
        .list()
        .map(|o| (Key::of(&**o).to_string(), rv(o)))
        .collect();
    let mut buckets = BTreeSet::new();
    for index in INDICES {
        for value in copy.list_index_values(index).unwrap() {
            let keys: BTreeSet<String> = copy
                .index_keys(index, value)
                .unwrap()
                .map(|k| k.to_string())
                .collect();
            assert_eq!(keys.len(), copy.index_len(index, value).unwrap());
            for o in copy.by_index(index, value).unwrap() {
                let key = Key::of(&**o).to_string();
                assert!(keys.contains(&key));
                assert!(Arc::ptr_eq(copy.get_by_key(&key).unwrap(), o));
                buckets.insert((index.to_string(), value.to_string(), key, rv(o)));
            }
        }
    }
    assert!(copy.select(selector, None).uses_label_index());
    let selected = [Some("a"), None]
        .into_iter()
        .flat_map(|ns| {
            copy.select(selector, ns).map(move |o| {
                (
                    ns.unwrap_or("*").to_string(),
                    Key::of(&**o).to_string(),
                    rv(o),
                )
            })
        })
        .collect();
    (objects, buckets, selected)
}

/// The readers' lean copy (`ReadCopy`, whose tables hold only the objects and find them by the
/// key each carries) fed by the journal answers every query as the original does: the objects,
/// every bucket with the current version of each object in it (a bucket an object stays in
/// across an update gives back the new object, never the one it replaced), and a label
/// selection; and its key table never stays oversized after deletes.
#[test]
fn a_read_copy_fed_by_the_journal_answers_as_the_original() {
    let mut original: Indexer<DynamicObject> = Indexer::new();
    original.add_label_index("colour").unwrap();
    original.record_changes(true);
    let mut copy = ReadCopy::new();
    copy.add_index(&label_index_name("colour"), LabelIndex::new("colour"))
        .unwrap();
    let selector = Selector::parse("colour in (red,blue)").unwrap();
    let colours = ["red", "green", "blue"];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut journal: Vec<Change<DynamicObject>> = Vec::new();
    let mut replays = 0;
    let mut updates_in_place = 0;
    for step in 0..5_000u64 {
        let ns = ["a", "b"][next(2) as usize];
        let name = format!("o{}", next(40));
        let colour = colours[next(3) as usize];
        match next(20) {
            0..=11 => {
                let before = original
                    .get_key_value(Key::new(Some(ns), &name).as_ref_parts())
                    .and_then(|(_, o)| o.label("colour").map(str::to_string));
                updates_in_place += usize::from(before.as_deref() == Some(colour));
                original.add(obj_labels(ns, &name, step, &[("colour", colour)]));
            }
            12..=17 => {
                original.delete_key(Key::new(Some(ns), &name).as_ref_parts());
            }
            18 => {
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
            assert_eq!(
                answers_of_copy(&copy, &selector),
                answers_of_original(&original, &selector),
                "after step {step}"
            );
            replays += 1;
        }
    }
    assert!(replays > 100);
    assert!(updates_in_place > 100, "{updates_in_place}");
    assert!(!copy.is_empty());
}

/// A copy's key table shrinks back after a burst of deletes (the same policy as the core's
/// queues: a table at a quarter of its capacity is shrunk to twice its content, never below
/// 64 entries of capacity), and a relist (`Change::Clear` then the new content) leaves the
/// table sized to the new content, not to the old.
#[test]
fn a_read_copy_gives_back_table_capacity() {
    let mut original = Indexer::new();
    original.record_changes(true);
    let mut copy = ReadCopy::new();
    let mut journal = Vec::new();
    let mut sync = |original: &mut Indexer<DynamicObject>, copy: &mut ReadCopy<DynamicObject>| {
        original.take_changes(&mut journal);
        for change in journal.drain(..) {
            copy.apply(change);
        }
    };
    for i in 0..10_000 {
        original.add(obj_labels("a", &format!("o{i}"), 1, &[]));
    }
    sync(&mut original, &mut copy);
    let full = copy.capacity();
    assert!(full >= 10_000);
    for i in 10..10_000 {
        original.delete_key(KeyRef::new(Some("a"), &format!("o{i}")));
    }
    sync(&mut original, &mut copy);
    assert_eq!(copy.len(), 10);
    assert!(
        copy.capacity() <= 64,
        "{} after the deletes",
        copy.capacity()
    );
    for i in 0..10_000 {
        original.add(obj_labels("a", &format!("o{i}"), 2, &[]));
    }
    sync(&mut original, &mut copy);
    assert_eq!(copy.capacity(), full);
    original.replace((0..100).map(|i| obj_labels("a", &format!("o{i}"), 3, &[])));
    sync(&mut original, &mut copy);
    assert_eq!(copy.len(), 100);
    assert!(
        copy.capacity() < 256,
        "{} after a relist of 100",
        copy.capacity()
    );
    assert_eq!(copy.by_index(NAMESPACE_INDEX, "a").unwrap().count(), 100);
}
