//! Warm restarts: the informer's cache in a file, loaded at start instead of a list, written on
//! demand, periodically and at graceful shutdown.
//!
//! The core encodes and decodes ([`informer_core::snapshot`]); this module does the file I/O,
//! always on a thread of its own (never on the runtime, never under the informer's lock):
//!
//! - load: read the file, decode it (all-or-nothing, checked against the informer's resource
//!   and selectors), then start the core resumed from it; a missing, unreadable, corrupt or
//!   foreign file means a normal list, and the reason is kept ([`Informer::snapshot_load`](crate::Informer::snapshot_load));
//! - write: take the snapshot under the read lock (the objects are shared `Arc`s, nothing is
//!   copied), then encode and write it atomically: a temporary file in the same directory,
//!   `fsync`, rename over the target, `fsync` the directory. Writes are ordered: an older
//!   snapshot never replaces a newer one.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use informer_core::informer::Resume;
use informer_core::object::Object;
use informer_core::snapshot::SnapshotError;

use crate::error::Error;
use crate::runtime::Runtime;
use crate::snapshot_file::{SnapshotLoad, SnapshotWritten, off_runtime};
use crate::state::Shared;

impl<K: Object + Send + Sync + 'static, R: Runtime> Shared<K, R> {
    /// Start with a snapshot file: load it on a thread, then start the core (resumed if the
    /// file was good). Returns false when there is no snapshot file (start as usual).
    pub(crate) fn start_from_snapshot(self: &Arc<Self>) -> Result<bool, Error> {
        let Some(file) = &self.snapshot else {
            return Ok(false);
        };
        if file.loading.swap(true, Ordering::AcqRel) {
            return Ok(true);
        }
        let shared = self.clone();
        let spawned = std::thread::Builder::new()
            .name("informer-snapshot".into())
            .spawn(move || shared.load_and_start());
        if let Err(e) = spawned {
            file.loading.store(false, Ordering::Release);
            return Err(Error::Thread(e));
        }
        if let Some(every) = file.every.filter(|d| !d.is_zero()) {
            let shared = self.clone();
            self.rt.spawn(Box::pin(async move {
                loop {
                    shared.rt.sleep(every).await;
                    if shared.state.read().stopped {
                        return;
                    }
                    if let Err(e) = shared.write_snapshot().await {
                        tracing::warn!(informer = %shared.name, error = %e, "periodic snapshot not written");
                    }
                }
            }))?;
        }
        Ok(true)
    }

    /// Loads the snapshot file and starts the core from it. As soon as the file's start is
    /// read (and nothing speaks against it yet), the core starts watching from the
    /// snapshot's resourceVersion (`resume_at`): the watch, and on a 410 the relist, are
    /// under way while the objects load; whatever they bring waits in the core until the
    /// objects are in (`resume_objects`), or is dropped for a normal list should the file
    /// turn out unusable (`resume_failed`).
    fn load_and_start(&self) {
        let Some(file) = &self.snapshot else {
            return;
        };
        let mut started_early = false;
        let (load, snapshot) = file.load(&mut |resource_version| {
            {
                let mut state = self.state.write();
                if state.stopped || !state.core.resume(Resume::At(resource_version.into())) {
                    return;
                }
                state.core.start(self.now());
            }
            started_early = true;
            tracing::debug!(
                informer = %self.name,
                resource_version,
                "watching from the snapshot's resourceVersion while it loads"
            );
            self.wake();
        });
        match &load {
            SnapshotLoad::Resumed {
                resource_version,
                objects,
                bytes,
            } => tracing::info!(
                informer = %self.name,
                resource_version = %resource_version,
                objects,
                bytes,
                "resuming from snapshot"
            ),
            SnapshotLoad::Missing => {
                tracing::info!(informer = %self.name, "no snapshot: listing")
            }
            SnapshotLoad::Refused(e) => {
                tracing::warn!(informer = %self.name, error = %e, "snapshot refused: listing")
            }
            SnapshotLoad::Unreadable(e) => {
                tracing::warn!(informer = %self.name, error = %e, "snapshot unreadable: listing")
            }
        }
        // Known before anyone can see the informer synced.
        *file.loaded.lock().unwrap_or_else(PoisonError::into_inner) = Some(load);
        {
            let mut state = self.state.write();
            let now = self.now();
            if !state.stopped {
                match (started_early, snapshot) {
                    (true, Some(s)) => {
                        state.core.handle_snapshot(now, Some(s));
                    }
                    (true, None) => {
                        state.core.handle_snapshot(now, None);
                    }
                    (false, s) => {
                        if let Some(s) = s {
                            state.core.resume(Resume::Snapshot(s));
                        }
                        state.core.start(now);
                    }
                }
            }
        }
        tracing::info!(informer = %self.name, "informer started");
        self.wake();
        self.changed.notify(usize::MAX);
    }

    /// The last handle was dropped: takes a snapshot of the cache now (under the read lock,
    /// sharing the objects) and writes it on a thread of its own, unless `shutdown` wrote one
    /// already. Never blocks the dropping thread on encoding or disk.
    pub(crate) fn write_snapshot_in_background(self: &Arc<Self>) {
        let Some(file) = &self.snapshot else {
            return;
        };
        if file.poisoned.load(Ordering::Acquire)
            || file.written_at_stop.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let taken = {
            let state = self.state.read();
            state
                .core
                .snapshot()
                .map(|s| (file.taken.fetch_add(1, Ordering::AcqRel) + 1, s))
        };
        let Some((seq, snapshot)) = taken else {
            tracing::debug!(informer = %self.name, "not synced: no snapshot at drop");
            return;
        };
        let shared = self.clone();
        let spawned = std::thread::Builder::new()
            .name("informer-snapshot".into())
            .spawn(move || {
                let Some(file) = &shared.snapshot else {
                    return;
                };
                log_final_write(&shared.name, "drop", &file.write(seq, &snapshot));
            });
        if let Err(e) = spawned {
            tracing::warn!(informer = %self.name, error = %e, "no snapshot at drop");
        }
    }

    /// Takes a snapshot of the cache and writes it to the snapshot file.
    pub(crate) async fn write_snapshot(self: &Arc<Self>) -> Result<SnapshotWritten, Error> {
        let Some(file) = &self.snapshot else {
            return Err(Error::NoSnapshotFile);
        };
        if file.poisoned.load(Ordering::Acquire) {
            return Err(Error::Stopped {
                informer: self.name.clone(),
            });
        }
        let (seq, snapshot) = {
            let state = self.state.read();
            let snapshot = state
                .core
                .snapshot()
                .ok_or(Error::Snapshot(SnapshotError::NotSynced))?;
            let seq = self
                .snapshot
                .as_ref()
                .map_or(0, |f| f.taken.fetch_add(1, Ordering::AcqRel) + 1);
            (seq, snapshot)
        };
        let shared = self.clone();
        let w = off_runtime(move || match &shared.snapshot {
            Some(f) => f.write(seq, &snapshot),
            None => Err(Error::NoSnapshotFile),
        })
        .await??;
        tracing::debug!(
            informer = %self.name,
            resource_version = %w.resource_version,
            objects = w.objects,
            bytes = w.bytes,
            superseded = w.superseded,
            unchanged = w.unchanged,
            "snapshot written"
        );
        Ok(w)
    }
}

impl<K: Object + Send + Sync + 'static, R: Runtime> Shared<K, R> {
    /// Writes the snapshot the informer leaves behind at a graceful `shutdown`, once, and logs
    /// the outcome. Nothing without a snapshot file.
    pub(crate) async fn write_final_snapshot(self: &Arc<Self>) {
        if let Some(file) = &self.snapshot {
            // Dropping the last handle later need not write it again.
            file.written_at_stop.store(true, Ordering::Release);
            log_final_write(&self.name, "shutdown", &self.write_snapshot().await);
        }
    }
}

/// Logs the outcome of the snapshot written when the informer stops (`when`: at `shutdown`, or
/// at the `drop` of the last handle).
fn log_final_write(name: &str, when: &str, result: &Result<SnapshotWritten, Error>) {
    match result {
        Ok(w) => tracing::info!(
            informer = %name,
            resource_version = %w.resource_version,
            objects = w.objects,
            bytes = w.bytes,
            superseded = w.superseded,
            unchanged = w.unchanged,
            "snapshot written at {when}"
        ),
        Err(e) => tracing::warn!(informer = %name, error = %e, "no snapshot at {when}"),
    }
}
