//! Exercises informer-core in a `#![no_std]` build. Never run; only built.
#![no_std]

extern crate alloc;

use alloc::sync::Arc;
use alloc::vec;
use core::alloc::{GlobalAlloc, Layout};
use core::time::Duration;

use informer_core::cache::indexer::index_fn;
use informer_core::{cache::pipeline::Pipeline, object::DynamicObject, time::Instant};

/// An allocator that never allocates: the crate is only built, never run.
struct NoAlloc;

// SAFETY: returning null is always a valid answer for `alloc` (allocation failure).
unsafe impl GlobalAlloc for NoAlloc {
    unsafe fn alloc(&self, _layout: Layout) -> *mut u8 {
        core::ptr::null_mut()
    }
    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {}
}

#[global_allocator]
static ALLOC: NoAlloc = NoAlloc;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    loop {}
}

/// Decodes an object and runs it through the pipeline.
#[unsafe(no_mangle)]
pub extern "C" fn informer_nostd_check(json: *const u8, len: usize) -> usize {
    // SAFETY: the caller passes a valid buffer; this function is never actually called.
    let bytes = unsafe { core::slice::from_raw_parts(json, len) };
    let Ok(obj) = serde_json::from_slice::<DynamicObject>(bytes) else {
        return 0;
    };
    let mut p: Pipeline<DynamicObject> = Pipeline::new(Duration::from_secs(1));
    let _ = p.add_index(
        "app",
        index_fn(|o: &DynamicObject| o.label("app").into_iter().collect()),
    );
    let (h, _) = p.add_handler(Duration::ZERO, Instant::ZERO);
    p.start(Instant::ZERO);
    p.replace(vec![Arc::new(obj)]);
    while p.process_one() {}
    let mut n = 0;
    while let Some((id, _)) = p.poll_notification() {
        p.handler_done(id);
        n += 1;
    }
    n + usize::from(p.handler_has_synced(h))
}

/// Raw JSON values work without std.
pub fn raw(json: &str) -> usize {
    serde_json::from_str::<alloc::boxed::Box<serde_json::value::RawValue>>(json)
        .map(|r| r.get().len())
        .unwrap_or(0)
}

/// The spin-locked cache reader works without std: the owner steps the informer, a reader on
/// another core answers from its cache.
pub fn shared_reader() -> usize {
    use informer_core::SharedIndexInformer;
    use informer_core::informer::InformerConfig;
    use informer_core::views::LockedInformer;
    let locked = LockedInformer::new(SharedIndexInformer::<DynamicObject>::new(
        InformerConfig::default(),
    ));
    let reader = locked.reader();
    locked.with(|inf| {
        inf.start(Instant::ZERO);
        while inf.poll().is_some() {}
    });
    reader.len()
        + reader.list().len()
        + reader.get("ns/a").map_or(0, |_| 1)
        + reader
            .by_index(informer_core::cache::indexer::NAMESPACE_INDEX, "ns")
            .map_or(0, |v| v.len())
}
