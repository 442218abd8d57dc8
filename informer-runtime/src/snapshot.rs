//! Warm restarts: the informer's cache in a file, loaded at start instead of a list, written on
//! demand, periodically and at graceful shutdown.
//!
//! The core encodes and decodes ([`informer_core::snapshot`]); this module does the file I/O,
//! always on a thread of its own (never on the runtime, never under the informer's lock):
//!
//! - load: read the file, decode it (all-or-nothing, checked against the informer's resource
//!   and selectors), then start the core resumed from it; a missing, unreadable, corrupt or
//!   foreign file means a normal list, and the reason is kept ([`Informer::snapshot_load`]);
//! - write: take the snapshot under the read lock (the objects are shared `Arc`s, nothing is
//!   copied), then encode and write it atomically: a temporary file in the same directory,
//!   `fsync`, rename over the target, `fsync` the directory. Writes are ordered: an older
//!   snapshot never replaces a newer one.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use informer_core::Object;
use informer_core::snapshot::{Snapshot, SnapshotError, SnapshotIdentity};

use crate::error::Error;
use crate::informer::Informer;
use crate::runtime::Runtime;
use crate::state::Shared;

type EncodeFn<K> = fn(&Snapshot<K>, &SnapshotIdentity, &mut Vec<u8>) -> Result<(), SnapshotError>;
type DecodeFn<K> = fn(&[u8], &SnapshotIdentity) -> Result<Snapshot<K>, SnapshotError>;

/// What became of the snapshot file at start.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SnapshotLoad {
    /// There was no file: the informer listed.
    Missing,
    /// The informer resumed from the file: it watches from `resource_version`.
    Resumed {
        /// The snapshot's resourceVersion.
        resource_version: String,
        /// How many objects it held.
        objects: usize,
        /// Its size in bytes.
        bytes: usize,
    },
    /// The file was refused (truncated, corrupt, another resource or selectors, an unknown
    /// format): the informer listed.
    Refused(SnapshotError),
    /// The file could not be read (the I/O error's text): the informer listed.
    Unreadable(String),
}

/// A snapshot written by [`Informer::write_snapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SnapshotWritten {
    /// Its resourceVersion.
    pub resource_version: String,
    /// How many objects it holds.
    pub objects: usize,
    /// Its size in bytes.
    pub bytes: usize,
    /// A newer snapshot reached the file first (a concurrent write): this one was not written,
    /// so as not to replace it.
    pub superseded: bool,
}

/// The snapshot file of one informer.
pub(crate) struct SnapshotFile<K> {
    path: PathBuf,
    pub(crate) every: Option<Duration>,
    identity: SnapshotIdentity,
    encode: EncodeFn<K>,
    decode: DecodeFn<K>,
    loading: AtomicBool,
    /// Set when a panic in a transform or index function stopped the informer: its cache may
    /// be half-updated, so it is never written.
    poisoned: AtomicBool,
    loaded: Mutex<Option<SnapshotLoad>>,
    /// Orders writes: the sequence number of the snapshot taken last.
    taken: AtomicU64,
    /// The sequence number of the snapshot on disk; held while writing.
    written: Mutex<u64>,
}

impl<K: Object + serde::Serialize + serde::de::DeserializeOwned> SnapshotFile<K> {
    pub(crate) fn new(path: PathBuf, every: Option<Duration>, identity: SnapshotIdentity) -> Self {
        SnapshotFile {
            path,
            every,
            identity,
            encode: |s, id, out| s.encode(id, out),
            decode: Snapshot::decode,
            loading: AtomicBool::new(false),
            poisoned: AtomicBool::new(false),
            loaded: Mutex::new(None),
            taken: AtomicU64::new(0),
            written: Mutex::new(0),
        }
    }
}

impl<K> SnapshotFile<K> {
    /// The cache may be inconsistent (a panic mid-step): no snapshot is written from now on.
    pub(crate) fn poison(&self) {
        self.poisoned.store(true, Ordering::Release);
    }

    fn load(&self) -> (SnapshotLoad, Option<Snapshot<K>>) {
        let bytes = match fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return (SnapshotLoad::Missing, None);
            }
            Err(e) => return (SnapshotLoad::Unreadable(e.to_string()), None),
        };
        match (self.decode)(&bytes, &self.identity) {
            Ok(s) => (
                SnapshotLoad::Resumed {
                    resource_version: s.resource_version.clone(),
                    objects: s.items.len(),
                    bytes: bytes.len(),
                },
                Some(s),
            ),
            Err(e) => (SnapshotLoad::Refused(e), None),
        }
    }

    /// Encodes and writes snapshot number `seq`, unless a newer one is already on disk.
    fn write(&self, seq: u64, snapshot: &Snapshot<K>) -> Result<SnapshotWritten, Error> {
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        if *written > seq {
            return Ok(SnapshotWritten {
                resource_version: snapshot.resource_version.clone(),
                objects: snapshot.items.len(),
                bytes: 0,
                superseded: true,
            });
        }
        let mut bytes = Vec::new();
        (self.encode)(snapshot, &self.identity, &mut bytes).map_err(Error::Snapshot)?;
        write_atomically(&self.path, &bytes).map_err(Error::SnapshotIo)?;
        *written = seq;
        Ok(SnapshotWritten {
            resource_version: snapshot.resource_version.clone(),
            objects: snapshot.items.len(),
            bytes: bytes.len(),
            superseded: false,
        })
    }
}

/// Temporary file in the same directory, fsync, rename, fsync the directory.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(format!(
        ".tmp-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        #[cfg(unix)]
        fs::File::open(&dir)?.sync_all()?;
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Runs `f` on a thread of its own and awaits its result (file I/O off the runtime).
async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Error> {
    let (tx, rx) = async_channel::bounded(1);
    std::thread::Builder::new()
        .name("informer-snapshot".into())
        .spawn(move || {
            let _ = tx.send_blocking(f());
        })
        .map_err(Error::Thread)?;
    rx.recv().await.map_err(|_| Error::Stopped)
}

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

    fn load_and_start(&self) {
        let Some(file) = &self.snapshot else {
            return;
        };
        let (load, snapshot) = file.load();
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
            if !state.stopped {
                if let Some(s) = snapshot {
                    state.core.resume(s);
                }
                state.core.start(self.now());
            }
        }
        tracing::info!(informer = %self.name, "informer started");
        self.wake();
        self.changed.notify(usize::MAX);
    }

    /// Takes a snapshot of the cache and writes it to the snapshot file.
    pub(crate) async fn write_snapshot(self: &Arc<Self>) -> Result<SnapshotWritten, Error> {
        let Some(file) = &self.snapshot else {
            return Err(Error::NoSnapshotFile);
        };
        if file.poisoned.load(Ordering::Acquire) {
            return Err(Error::Stopped);
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
            "snapshot written"
        );
        Ok(w)
    }
}

impl<K: Object + Send + Sync + 'static, R: Runtime> Informer<K, R> {
    /// Writes the cache to the snapshot file now (see
    /// [`InformerBuilder::snapshot`](crate::InformerBuilder::snapshot)). Fails with
    /// [`Error::NoSnapshotFile`] without one, and with [`SnapshotError::NotSynced`] before
    /// the informer has synced.
    pub async fn write_snapshot(&self) -> Result<SnapshotWritten, Error> {
        self.shared().write_snapshot().await
    }

    /// What became of the snapshot file at start: `None` before it was looked at (or without
    /// a snapshot file).
    pub fn snapshot_load(&self) -> Option<SnapshotLoad> {
        self.shared().snapshot.as_ref().and_then(|f| {
            f.loaded
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        })
    }
}
