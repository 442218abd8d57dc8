//! Property test: random sequences of add / update / delete / replace / resync / pop /
//! delivery / handler-add / handler-remove driven through the `Pipeline`, checked after every
//! step against a plain reference model (a `BTreeMap` of key → resourceVersion) and against
//! brute-force recomputation of every index.
//!
//! Invariants checked after each step:
//! - every index (namespace and label) equals a brute-force recomputation from the store;
//! - once the FIFO is empty, the store equals the model;
//! - every handler's notifications fold validly (add of unseen, update whose `old` is what it
//!   saw, delete of seen, never an older resourceVersion for the same object), and a handler
//!   with nothing pending or in flight has a view equal to the store;
//! - the stalled handler's pending entries never exceed the keys in the cache or its view.
//!
//! At the end everything is drained and every view must equal the store and the model.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::*;
use informer_core::cache::indexer::NAMESPACE_INDEX;
use informer_core::{
    cache::pipeline::Pipeline, informer::HandlerId, informer::Notification, object::DynamicObject,
    object::Key, object::Object, time::Instant,
};
use proptest::prelude::*;

const NAMESPACES: [&str; 2] = ["n1", "n2"];
const NAMES: [&str; 4] = ["a", "b", "c", "d"];
const APPS: [&str; 3] = ["web", "db", "cache"];

#[derive(Clone, Debug)]
enum Op {
    /// Watch ADDED for a key (turned into MODIFIED if the model has it).
    Upsert { key: usize, app: usize },
    /// Watch DELETED (a key the model may not have: then it must be dropped).
    Delete { key: usize },
    /// A relist returning these keys.
    Replace {
        keys: Vec<(usize, usize)>,
        bump: bool,
    },
    /// Advance time and run the resync check.
    Tick { secs: u64 },
    /// Pop and handle this many keys.
    Pop { n: usize },
    /// Deliver up to this many notifications to each live handler but the stalled one.
    Deliver { n: usize },
    /// Register a handler with this resync period in seconds (0: none).
    AddHandler { resync: u64 },
    /// Remove the newest removable handler.
    RemoveHandler,
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..NAMESPACES.len() * NAMES.len();
    prop_oneof![
        6 => (key.clone(), 0..APPS.len()).prop_map(|(key, app)| Op::Upsert { key, app }),
        3 => key.clone().prop_map(|key| Op::Delete { key }),
        1 => (proptest::collection::vec((key, 0..APPS.len()), 0..6), any::<bool>())
            .prop_map(|(keys, bump)| Op::Replace { keys, bump }),
        2 => (1u64..4).prop_map(|secs| Op::Tick { secs }),
        4 => (1usize..5).prop_map(|n| Op::Pop { n }),
        4 => (1usize..6).prop_map(|n| Op::Deliver { n }),
        1 => (0u64..4).prop_map(|resync| Op::AddHandler { resync }),
        1 => Just(Op::RemoveHandler),
    ]
}

fn key_parts(i: usize) -> (&'static str, &'static str) {
    (NAMESPACES[i / NAMES.len()], NAMES[i % NAMES.len()])
}

struct Harness {
    p: Pipeline<DynamicObject>,
    now: u64,
    next_rv: u64,
    /// key → (rv, app) as the server holds it after every input so far.
    model: BTreeMap<String, (u64, usize)>,
    /// handler → its folded view: key → rv.
    views: BTreeMap<HandlerId, BTreeMap<String, u64>>,
    stalled: HandlerId,
    removable: Vec<HandlerId>,
}

impl Harness {
    fn new() -> Self {
        let mut p = Pipeline::new(Duration::from_secs(1));
        p.add_index("app", by_app()).unwrap();
        let (first, _) = p.add_handler(Duration::from_secs(2), Instant::ZERO);
        let (stalled, _) = p.add_handler(Duration::from_secs(1), Instant::ZERO);
        p.start(Instant::ZERO);
        let mut views = BTreeMap::new();
        views.insert(first, BTreeMap::new());
        views.insert(stalled, BTreeMap::new());
        Harness {
            p,
            now: 0,
            next_rv: 1,
            model: BTreeMap::new(),
            views,
            stalled,
            removable: Vec::new(),
        }
    }

    fn make(&mut self, key: usize, app: usize) -> std::sync::Arc<DynamicObject> {
        let (ns, name) = key_parts(key);
        let rv = self.next_rv;
        self.next_rv += 1;
        self.model.insert(format!("{ns}/{name}"), (rv, app));
        obj_labels(ns, name, rv, &[("app", APPS[app])])
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Upsert { key, app } => {
                let (ns, name) = key_parts(*key);
                let exists = self.model.contains_key(&format!("{ns}/{name}"));
                let o = self.make(*key, *app);
                if exists {
                    self.p.modified(o)
                } else {
                    self.p.added(o)
                }
            }
            Op::Delete { key } => {
                let (ns, name) = key_parts(*key);
                let k = format!("{ns}/{name}");
                let rv = self.next_rv;
                self.next_rv += 1;
                self.model.remove(&k);
                self.p.deleted(obj(ns, name, rv));
            }
            Op::Replace { keys, bump } => {
                let mut list = BTreeMap::new();
                for (key, app) in keys {
                    let (ns, name) = key_parts(*key);
                    let k = format!("{ns}/{name}");
                    // Unchanged objects keep their resourceVersion unless `bump`.
                    let o = match self.model.get(&k) {
                        Some(&(rv, old_app)) if !bump => {
                            obj_labels(ns, name, rv, &[("app", APPS[old_app])])
                        }
                        _ => self.make(*key, *app),
                    };
                    list.insert(k, o);
                }
                self.model.retain(|k, _| list.contains_key(k));
                self.p.replace(list.into_values().collect());
            }
            Op::Tick { secs } => {
                self.now += secs;
                self.p
                    .handle_timeout(Instant::from_epoch(Duration::from_secs(self.now)));
            }
            Op::Pop { n } => {
                for _ in 0..*n {
                    self.p.process_one();
                }
            }
            Op::Deliver { n } => {
                let ids: Vec<_> = self.views.keys().copied().collect();
                for id in ids.into_iter().filter(|id| *id != self.stalled) {
                    for _ in 0..*n {
                        match self.p.poll_notification_for(id) {
                            Some(note) => {
                                fold(self.views.get_mut(&id).unwrap(), &note);
                                self.p.handler_done(id);
                            }
                            None => break,
                        }
                    }
                }
            }
            Op::AddHandler { resync } => {
                let now = Instant::from_epoch(Duration::from_secs(self.now));
                let (id, _) = self.p.add_handler(Duration::from_secs(*resync), now);
                self.views.insert(id, BTreeMap::new());
                self.removable.push(id);
            }
            Op::RemoveHandler => {
                if let Some(id) = self.removable.pop() {
                    assert!(self.p.remove_handler(id));
                    self.views.remove(&id);
                }
            }
        }
    }

    fn store(&self) -> BTreeMap<String, u64> {
        self.p
            .indexer()
            .iter()
            .map(|(k, o)| (k.to_string(), rv(o)))
            .collect()
    }

    fn check(&self) {
        let idx = self.p.indexer();
        // Every index equals a brute-force recomputation.
        for (name, value_of) in [
            (
                NAMESPACE_INDEX,
                (|o: &DynamicObject| o.namespace().map(String::from))
                    as fn(&DynamicObject) -> Option<String>,
            ),
            ("app", |o: &DynamicObject| o.label("app").map(String::from)),
        ] {
            let mut want: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for (k, o) in idx.iter() {
                if let Some(v) = value_of(o) {
                    want.entry(v).or_default().insert(k.to_string());
                }
            }
            let values: BTreeSet<String> = idx
                .list_index_values(name)
                .unwrap()
                .map(String::from)
                .collect();
            assert_eq!(
                values,
                want.keys().cloned().collect(),
                "index {name} values"
            );
            for (v, keys) in &want {
                let got: BTreeSet<String> = idx
                    .index_keys(name, v)
                    .unwrap()
                    .map(|k| k.to_string())
                    .collect();
                assert_eq!(&got, keys, "index {name} bucket {v}");
            }
        }
        let store = self.store();
        if self.p.fifo().is_empty() {
            let model: BTreeMap<String, u64> = self
                .model
                .iter()
                .map(|(k, (rv, _))| (k.clone(), *rv))
                .collect();
            assert_eq!(store, model, "store vs model once the FIFO is empty");
        }
        for (id, view) in &self.views {
            let idle = !self.p.processor().is_busy(*id) && self.p.processor().pending(*id) == 0;
            if idle {
                assert_eq!(view, &store, "idle handler {id:?}'s view vs store");
            }
        }
        // The stalled handler's bound.
        let stalled_view = &self.views[&self.stalled];
        let keys: BTreeSet<&String> = store.keys().chain(stalled_view.keys()).collect();
        let pending = self.p.processor().pending(self.stalled);
        assert!(
            pending <= keys.len(),
            "stalled handler has {pending} pending for {} keys",
            keys.len()
        );
    }

    fn finish(&mut self) {
        loop {
            let mut progress = self.p.process_one();
            while let Some((id, note)) = self.p.poll_notification() {
                fold(self.views.get_mut(&id).unwrap(), &note);
                self.p.handler_done(id);
                progress = true;
            }
            if !progress {
                break;
            }
        }
        let store = self.store();
        let model: BTreeMap<String, u64> = self
            .model
            .iter()
            .map(|(k, (rv, _))| (k.clone(), *rv))
            .collect();
        assert_eq!(store, model);
        for (id, view) in &self.views {
            assert_eq!(view, &store, "handler {id:?} after draining");
            assert!(self.p.handler_has_synced(*id));
        }
    }
}

/// Folds one notification into a handler's view, checking that it makes sense there.
fn fold(view: &mut BTreeMap<String, u64>, n: &Notification<DynamicObject>) {
    match n {
        Notification::Add { obj, .. } => {
            let prev = view.insert(Key::of(&**obj).to_string(), rv(obj));
            assert!(prev.is_none(), "add of an object the handler has: {obj:?}");
        }
        Notification::Update { old, new } => {
            let k = Key::of(&**new).to_string();
            let prev = view.insert(k.clone(), rv(new));
            assert_eq!(prev, Some(rv(old)), "update's old is not what {k} was");
            assert!(rv(new) >= rv(old), "{k} went back in time");
        }
        Notification::Delete(d) => {
            let k = Key::of(&**d.object()).to_string();
            assert!(view.remove(&k).is_some(), "delete of unseen {k}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    #[test]
    fn pipeline_matches_reference_model(ops in proptest::collection::vec(op(), 1..80)) {
        let mut h = Harness::new();
        // The informer starts from a list, as a reflector would.
        h.apply(&Op::Replace { keys: vec![(0, 0), (5, 1)], bump: true });
        h.check();
        for op in &ops {
            h.apply(op);
            h.check();
        }
        h.finish();
    }
}
