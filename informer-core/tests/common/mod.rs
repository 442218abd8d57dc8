//! Shared helpers for the core's integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use informer_core::cache::indexer::{IndexValues, index_fn};
use informer_core::{
    cache::pipeline::Pipeline, informer::HandlerId, informer::Notification, object::DynamicObject,
    object::Key, object::Object, object::ObjectMetaParts,
};

/// A namespaced test object with a resourceVersion and labels.
pub fn obj(ns: &str, name: &str, rv: u64) -> Arc<DynamicObject> {
    obj_labels(ns, name, rv, &[])
}

pub fn obj_labels(ns: &str, name: &str, rv: u64, labels: &[(&str, &str)]) -> Arc<DynamicObject> {
    Arc::new(DynamicObject {
        metadata: ObjectMetaParts {
            name: name.into(),
            namespace: (!ns.is_empty()).then(|| ns.into()),
            resource_version: Some(rv.to_string().into()),
            uid: Some(format!("uid-{ns}-{name}").into()),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
        .into(),
        ..Default::default()
    })
}

pub fn rv(o: &DynamicObject) -> u64 {
    o.resource_version().unwrap().parse().unwrap()
}

/// An index function over the `app` label.
pub fn by_app() -> impl for<'a> Fn(&'a DynamicObject) -> IndexValues<'a> + Send + Sync {
    index_fn(|o: &DynamicObject| o.label("app").into_iter().collect())
}

/// A compact, comparable rendering of a notification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    Add(String, u64, bool),
    Update(String, u64, u64),
    Delete(String, u64, bool),
}

pub fn seen(n: &Notification<DynamicObject>) -> Seen {
    match n {
        Notification::Add {
            obj,
            in_initial_list,
        } => Seen::Add(Key::of(&**obj).to_string(), rv(obj), *in_initial_list),
        Notification::Update { old, new } => {
            Seen::Update(Key::of(&**new).to_string(), rv(old), rv(new))
        }
        Notification::Delete(d) => Seen::Delete(
            Key::of(&**d.object()).to_string(),
            rv(d.object()),
            d.is_tombstone(),
        ),
    }
}

/// Processes every queued delta and delivers every notification, each handler finishing at
/// once. Returns what each handler saw, in order.
pub fn drain(p: &mut Pipeline<DynamicObject>) -> BTreeMap<HandlerId, Vec<Seen>> {
    let mut out: BTreeMap<HandlerId, Vec<Seen>> = BTreeMap::new();
    loop {
        let popped = p.process_one();
        let mut delivered = false;
        while let Some((id, n)) = p.poll_notification() {
            out.entry(id).or_default().push(seen(&n));
            p.handler_done(id);
            delivered = true;
        }
        if !popped && !delivered {
            return out;
        }
    }
}

/// Delivers notifications of handler `id` only.
pub fn deliver_to(p: &mut Pipeline<DynamicObject>, id: HandlerId) -> Vec<Seen> {
    let mut out = Vec::new();
    while let Some(n) = p.poll_notification_for(id) {
        out.push(seen(&n));
        p.handler_done(id);
    }
    out
}
