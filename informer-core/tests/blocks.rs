//! How many heap blocks a cached object holds (issue: objects in fewer blocks). A counting
//! global allocator sees every block; this binary holds one test, so nothing else allocates
//! while it counts.

// The counting global allocator needs `unsafe impl GlobalAlloc`; the core itself forbids unsafe.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

use informer_core::{object::DynamicObject, object::Object, object::PartialObjectMetadata};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: delegates to the system allocator; only adds counters.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(1, Ordering::Relaxed);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A ConfigMap as kube-apiserver v1.20 sends it: a 36-byte uid, labels, annotations, several
/// other metadata fields (managedFields the largest) and a data map.
const CONFIGMAP: &str = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm-00042","namespace":"bench-ns","selfLink":"/api/v1/namespaces/bench-ns/configmaps/cm-00042","uid":"4f0c1a5e-9b7d-4c1e-8f3a-2d6b9e0c7a11","resourceVersion":"123456","creationTimestamp":"2026-11-23T05:00:00Z","labels":{"app":"bench","tier":"back\u0065nd","zone":"a"},"annotations":{"note":"x","kubectl.kubernetes.io/last-applied-configuration":"{\"apiVersion\":\"v1\"}"},"managedFields":[{"manager":"bench","operation":"Update","apiVersion":"v1","time":"2026-11-23T05:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:payload":{}},"f:metadata":{"f:labels":{".":{},"f:app":{}}}}}]},"data":{"payload":"0123456789abcdef0123456789abcdef"}}"#;

/// Live blocks and allocations (including reallocations) made by `f`, and its result.
fn count<T>(f: impl FnOnce() -> T) -> (T, isize, usize) {
    let (live, allocs) = (LIVE.load(Ordering::SeqCst), ALLOCS.load(Ordering::SeqCst));
    let out = f();
    (
        out,
        LIVE.load(Ordering::SeqCst) - live,
        ALLOCS.load(Ordering::SeqCst) - allocs,
    )
}

#[test]
fn a_cached_object_is_three_blocks_and_its_metadata_one() {
    // A dynamic object: the Arc, the metadata's one block, the other fields' one block.
    let (obj, blocks, allocs) =
        count(|| Arc::new(serde_json::from_str::<DynamicObject>(CONFIGMAP).unwrap()));
    assert_eq!(blocks, 3, "blocks held by a cached ConfigMap");
    // The Arc, the two blocks, two escaped strings (a label value, an annotation value) and
    // serde_json's scratch buffer for unescaping.
    assert!(allocs <= 8, "{allocs} allocations to decode one ConfigMap");
    assert_eq!(obj.uid(), Some("4f0c1a5e-9b7d-4c1e-8f3a-2d6b9e0c7a11"));
    assert_eq!(obj.label("tier"), Some("backend"), "an escaped value");
    assert_eq!(obj.metadata.annotations().len(), 2);
    assert!(obj.metadata.other().contains_key("managedFields"));
    let ((), freed, _) = count(|| drop(obj));
    assert_eq!(freed, -3, "dropping it frees every block it held");

    // Without escapes nothing is copied but into the blocks: no allocation but the three and
    // serde_json's own scratch buffer (its nesting stack while it skips over managedFields).
    let plain = CONFIGMAP
        .replace(r#"back\u0065nd"#, "backend")
        .replace(r#"{\"apiVersion\":\"v1\"}"#, "{}");
    assert!(!plain.contains('\\'), "no escapes left");
    let (obj, blocks, allocs) =
        count(|| Arc::new(serde_json::from_str::<DynamicObject>(&plain).unwrap()));
    assert_eq!((blocks, allocs), (3, 4), "blocks held, allocations made");
    assert_eq!(obj.label("tier"), Some("backend"));
    drop(obj);

    // Metadata only: the Arc and one block.
    let (meta, blocks, _) =
        count(|| Arc::new(serde_json::from_str::<PartialObjectMetadata>(CONFIGMAP).unwrap()));
    assert_eq!(blocks, 2, "blocks held by a PartialObjectMetadata");
    assert_eq!(meta.key_ref().to_string(), "bench-ns/cm-00042");

    // Changing metadata through its parts keeps it one block.
    let mut obj: DynamicObject = serde_json::from_str(CONFIGMAP).unwrap();
    let ((), blocks, _) = count(|| {
        obj.metadata.edit(|m| {
            m.labels.insert("new", "label");
            m.other.remove("managedFields");
        })
    });
    assert_eq!(blocks, 0, "the edited block replaces the old one");
    assert_eq!(obj.label("new"), Some("label"));
    assert!(!obj.metadata.other().contains_key("managedFields"));
}
