//! The parts a [`SharedIndexInformer`](crate::SharedIndexInformer) is built from, public for
//! those who assemble their own loop (and for the conformance tests that check each part on
//! its own, as client-go's do):
//!
//! - [`indexer`]: the store plus named indices (client-go `Indexer`), and the copies of it that
//!   readers query;
//! - [`fifo`]: per-key delta lists in arrival order (client-go `DeltaFIFO`);
//! - [`processor`]: handlers, resync bookkeeping and bounded, coalescing per-handler queues
//!   (client-go `sharedProcessor`);
//! - [`pipeline`]: the three joined, DeltaFIFO → Indexer + Processor, as the informer drives
//!   them.
//!
//! Most users never name these: the informer's own methods cover what a runtime needs.

pub mod fifo;
pub mod indexer;
pub mod pipeline;
pub mod processor;
