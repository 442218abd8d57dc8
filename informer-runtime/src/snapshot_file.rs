//! The snapshot file: what loading found ([`SnapshotLoad`]), what a write did
//! ([`SnapshotWritten`]), and [`SnapshotFile`], which reads, decodes, encodes and writes it
//! atomically. Below the informer's state; `snapshot.rs` drives it from the informer.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use informer_core::snapshot::{Snapshot, SnapshotCodec, SnapshotError, SnapshotIdentity};

use crate::error::Error;

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

/// A snapshot written by [`Informer::write_snapshot`](crate::Informer::write_snapshot).
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
    pub(crate) path: PathBuf,
    pub(crate) every: Option<Duration>,
    pub(crate) identity: SnapshotIdentity,
    pub(crate) encode: EncodeFn<K>,
    pub(crate) decode: DecodeFn<K>,
    pub(crate) loading: AtomicBool,
    /// Set when a panic in a transform or index function stopped the informer: its cache may
    /// be half-updated, so it is never written.
    pub(crate) poisoned: AtomicBool,
    pub(crate) loaded: Mutex<Option<SnapshotLoad>>,
    /// Set once the stop's snapshot (at shutdown or at the drop of the last handle) is taken.
    pub(crate) written_at_stop: AtomicBool,
    /// Orders writes: the sequence number of the snapshot taken last.
    pub(crate) taken: AtomicU64,
    /// The sequence number of the snapshot on disk; held while writing.
    pub(crate) written: Mutex<u64>,
}

impl<K: SnapshotCodec + Send + Sync> SnapshotFile<K> {
    pub(crate) fn new(path: PathBuf, every: Option<Duration>, identity: SnapshotIdentity) -> Self {
        SnapshotFile {
            path,
            every,
            identity,
            encode: |s, id, out| s.encode(id, out),
            decode: decode_on_threads,
            loading: AtomicBool::new(false),
            poisoned: AtomicBool::new(false),
            loaded: Mutex::new(None),
            written_at_stop: AtomicBool::new(false),
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

    pub(crate) fn load(&self) -> (SnapshotLoad, Option<Snapshot<K>>) {
        remove_stale_temporaries(&self.path);
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
    pub(crate) fn write(&self, seq: u64, snapshot: &Snapshot<K>) -> Result<SnapshotWritten, Error> {
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

/// Decodes on up to four threads at once (the snapshot's frames split into parts): the objects
/// are independent, so loading scales with the cores until memory allocation dominates.
fn decode_on_threads<K: SnapshotCodec + Send + Sync>(
    bytes: &[u8],
    identity: &SnapshotIdentity,
) -> Result<Snapshot<K>, SnapshotError> {
    // Below this, a thread costs more than it saves.
    const MIN_PART: usize = 1 << 20;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let parts = threads.min(bytes.len() / MIN_PART).max(1);
    if parts == 1 {
        return Snapshot::decode(bytes, identity);
    }
    Snapshot::decode_parallel(bytes, identity, parts, |jobs| {
        let Some((first, rest)) = jobs.split_first_mut() else {
            return;
        };
        std::thread::scope(|s| {
            for job in rest {
                // A part whose thread cannot be started is decoded by `decode_parallel` itself.
                let _ = std::thread::Builder::new()
                    .name("informer-snapshot".into())
                    .spawn_scoped(s, || job.run());
            }
            first.run();
        });
    })
}

/// The temporary file name prefix of the snapshot file `path` (`.<name>.tmp-`).
fn temporary_prefix(path: &Path) -> Option<std::ffi::OsString> {
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(path.file_name()?);
    prefix.push(".tmp-");
    Some(prefix)
}

/// Removes the temporary files a process that died while writing `path` left behind (they are
/// never read: the file itself is only ever replaced whole, by a rename).
fn remove_stale_temporaries(path: &Path) {
    let Some(prefix) = temporary_prefix(path) else {
        return;
    };
    let prefix = prefix.to_string_lossy().into_owned();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// Temporary file in the same directory, fsync, rename, fsync the directory.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp_name = temporary_prefix(path)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"))?;
    tmp_name.push(format!(
        "{}-{}",
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
pub(crate) async fn off_runtime<T: Send + 'static>(
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
