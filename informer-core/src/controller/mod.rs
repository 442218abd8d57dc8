//! The sans-IO state machines a controller runs beside its informers: the rate-limited
//! [work queue](workqueue) (client-go `workqueue`) and [leader election](leaderelection)
//! (client-go `leaderelection` over a Lease), [sharding](shard) one controller across replicas
//! through Leases, and the [finalizer] decisions.

pub mod events;
pub mod finalizer;
pub mod leaderelection;
pub mod shard;
pub mod workqueue;
