//! The hash maps the core uses.
//!
//! Normal builds use hashbrown's default hasher (foldhash, seeded per process). Under `test`
//! and the `sim` feature the seed is fixed, so that a simulation seed replays the same cache
//! iteration order (tombstones, resyncs and late-handler replays come out in that order) and a
//! failure reproduces exactly.

#[cfg(not(any(test, feature = "sim")))]
pub(crate) type HashState = hashbrown::DefaultHashBuilder;
#[cfg(any(test, feature = "sim"))]
pub(crate) type HashState = foldhash::fast::FixedState;

pub(crate) type HashMap<K, V> = hashbrown::HashMap<K, V, HashState>;
pub(crate) type HashSet<K> = hashbrown::HashSet<K, HashState>;

/// Capacity kept by an empty queue (the FIFO's, a handler's); larger tables are shrunk back to
/// it when drained, so that a burst (an initial list of 100k objects) does not leave every later
/// insert probing a cold, mostly empty table.
pub(crate) const IDLE_CAPACITY: usize = 64;
