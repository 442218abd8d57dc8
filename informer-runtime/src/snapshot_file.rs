//! The snapshot file: what loading found ([`SnapshotLoad`]), what a write did
//! ([`SnapshotWritten`]), and [`SnapshotFile`], which reads, decodes, encodes and writes it
//! atomically. Below the informer's state; `snapshot.rs` drives it from the informer.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use informer_core::snapshot::{
    Snapshot, SnapshotCodec, SnapshotError, SnapshotIdentity, SnapshotLayout, SnapshotStream,
};

use crate::error::Error;

type EncodeFn<K> = fn(&Snapshot<K>, &SnapshotIdentity, &mut Vec<u8>) -> Result<(), SnapshotError>;
/// Reads and decodes a snapshot file: its size and the outcome (an I/O error, or the decode's).
/// Calls the function it is given with the snapshot's resourceVersion as soon as its start has
/// been read and nothing speaks against it yet (see [`SnapshotStream::resource_version`]).
type ReadFn<K> = fn(
    &mut fs::File,
    &SnapshotIdentity,
    &mut dyn FnMut(&str),
) -> std::io::Result<(u64, Result<Snapshot<K>, SnapshotError>)>;

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
    /// The file already held this state (the same resourceVersion, loaded or written by this
    /// informer, and the file untouched since): it was not written again. `bytes` is the
    /// file's size.
    pub unchanged: bool,
}

/// The snapshot file of one informer.
pub(crate) struct SnapshotFile<K> {
    pub(crate) path: PathBuf,
    pub(crate) every: Option<Duration>,
    pub(crate) identity: SnapshotIdentity,
    pub(crate) encode: EncodeFn<K>,
    pub(crate) read: ReadFn<K>,
    pub(crate) loading: AtomicBool,
    /// Set when a panic in a transform or index function stopped the informer: its cache may
    /// be half-updated, so it is never written.
    pub(crate) poisoned: AtomicBool,
    pub(crate) loaded: Mutex<Option<SnapshotLoad>>,
    /// Set once the stop's snapshot (at shutdown or at the drop of the last handle) is taken.
    pub(crate) written_at_stop: AtomicBool,
    /// Orders writes: the sequence number of the snapshot taken last.
    pub(crate) taken: AtomicU64,
    /// The sequence number of the snapshot on disk and what is known of the file; held while
    /// writing.
    pub(crate) written: Mutex<OnDisk>,
}

/// What this informer knows of its snapshot file.
#[derive(Default)]
pub(crate) struct OnDisk {
    /// The sequence number of the snapshot written last (0: none).
    seq: u64,
    /// The resourceVersion of the snapshot this informer loaded or wrote last, with the file's
    /// size and modification time just after: while the file still has both, it holds that
    /// snapshot.
    file: Option<(String, FileStamp)>,
}

/// A file's size and modification time.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
}

impl FileStamp {
    fn from(meta: &fs::Metadata) -> FileStamp {
        FileStamp {
            len: meta.len(),
            modified: meta.modified().ok(),
        }
    }

    /// The stamp of the file at `path`, `None` when there is none.
    fn of(path: &Path) -> Option<FileStamp> {
        fs::metadata(path).ok().as_ref().map(FileStamp::from)
    }
}

impl<K: SnapshotCodec + Send + Sync> SnapshotFile<K> {
    pub(crate) fn new(path: PathBuf, every: Option<Duration>, identity: SnapshotIdentity) -> Self {
        SnapshotFile {
            path,
            every,
            identity,
            encode: |s, id, out| s.encode(id, out),
            read: read_in_pieces,
            loading: AtomicBool::new(false),
            poisoned: AtomicBool::new(false),
            loaded: Mutex::new(None),
            written_at_stop: AtomicBool::new(false),
            taken: AtomicU64::new(0),
            written: Mutex::new(OnDisk::default()),
        }
    }
}

impl<K> SnapshotFile<K> {
    /// The cache may be inconsistent (a panic mid-step): no snapshot is written from now on.
    pub(crate) fn poison(&self) {
        self.poisoned.store(true, Ordering::Release);
    }

    /// Reads and decodes the file. `early` is called with the snapshot's resourceVersion as
    /// soon as the file's start has been read and nothing speaks against it yet (the rest is
    /// still to read and check: whatever is started from it must wait for the outcome).
    pub(crate) fn load(&self, early: &mut dyn FnMut(&str)) -> (SnapshotLoad, Option<Snapshot<K>>) {
        remove_stale_temporaries(&self.path);
        let read = fs::File::open(&self.path).and_then(|mut f| {
            let stamp = FileStamp::from(&f.metadata()?);
            Ok((stamp, (self.read)(&mut f, &self.identity, early)?))
        });
        match read {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (SnapshotLoad::Missing, None),
            Err(e) => (SnapshotLoad::Unreadable(e.to_string()), None),
            Ok((stamp, (bytes, Ok(s)))) => {
                // The loaded state is on disk: writing it again would change nothing.
                self.on_disk().file = Some((s.resource_version.clone(), stamp));
                (
                    SnapshotLoad::Resumed {
                        resource_version: s.resource_version.clone(),
                        objects: s.items.len(),
                        bytes: usize::try_from(bytes).unwrap_or(usize::MAX),
                    },
                    Some(s),
                )
            }
            Ok((_, (_, Err(e)))) => (SnapshotLoad::Refused(e), None),
        }
    }

    fn on_disk(&self) -> std::sync::MutexGuard<'_, OnDisk> {
        self.written.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Encodes and writes snapshot number `seq`, unless a newer one is already on disk, or the
    /// file already holds this state: a cache at the same resourceVersion holds the same
    /// objects (every change moves it), so an idle informer's periodic and final snapshots
    /// cost a `stat`, not an encode, a write of the whole cache and an fsync.
    pub(crate) fn write(&self, seq: u64, snapshot: &Snapshot<K>) -> Result<SnapshotWritten, Error> {
        let mut on_disk = self.on_disk();
        let written = |bytes, superseded, unchanged| SnapshotWritten {
            resource_version: snapshot.resource_version.clone(),
            objects: snapshot.items.len(),
            bytes,
            superseded,
            unchanged,
        };
        if on_disk.seq > seq {
            return Ok(written(0, true, false));
        }
        if let Some((rv, stamp)) = &on_disk.file {
            if *rv == snapshot.resource_version && FileStamp::of(&self.path) == Some(*stamp) {
                let len = usize::try_from(stamp.len).unwrap_or(usize::MAX);
                on_disk.seq = seq;
                return Ok(written(len, false, true));
            }
        }
        let mut bytes = Vec::new();
        (self.encode)(snapshot, &self.identity, &mut bytes).map_err(Error::Snapshot)?;
        // Until this write is done the file's content is not known (a write that fails after
        // its rename leaves this snapshot there, not the one noted).
        on_disk.file = None;
        write_atomically(&self.path, &bytes).map_err(Error::SnapshotIo)?;
        on_disk.seq = seq;
        on_disk.file =
            FileStamp::of(&self.path).map(|stamp| (snapshot.resource_version.clone(), stamp));
        Ok(written(bytes.len(), false, false))
    }
}

/// How much of the file is read at a time. Below glibc's threshold for serving an allocation
/// with a mapping of its own (128 KiB), so the buffer is a reused part of the heap.
const PIECE: usize = 64 * 1024;

/// Reads the snapshot in `file` a piece at a time, decoding as it goes
/// ([`SnapshotStream`]): its start (to find the layout), its tail (the shared strings and the
/// checksum), then its body. The file is never in memory whole: reading a large file into one
/// buffer costs a fresh process a page fault per 4 KiB, several times the reads themselves. A file
/// that changes size while being read is truncated or corrupt, never partly loaded.
fn read_in_pieces<K: SnapshotCodec>(
    file: &mut fs::File,
    identity: &SnapshotIdentity,
    early: &mut dyn FnMut(&str),
) -> std::io::Result<(u64, Result<Snapshot<K>, SnapshotError>)> {
    use std::io::{Read, Seek, SeekFrom};
    let len = file.metadata()?.len();
    let mut head = Vec::new();
    let layout = loop {
        let want = (head.len() + PIECE).min(usize::try_from(len).unwrap_or(usize::MAX));
        let at = head.len();
        head.resize(want, 0);
        if let Err(e) = file.read_exact(&mut head[at..]) {
            return truncated_if_eof(len, e);
        }
        match SnapshotLayout::read(&head) {
            Err(e) => return Ok((len, Err(e))),
            Ok(Some(layout)) => break layout,
            Ok(None) if head.len() as u64 == len => {
                return Ok((len, Err(SnapshotError::Truncated)));
            }
            Ok(None) => {}
        }
    };
    if layout.body_end > len {
        return Ok((len, Err(SnapshotError::Truncated)));
    }
    // Both offsets are within the file, whose bytes `head` holds a prefix of.
    let body_start = layout.body_start as usize;
    let body_end = layout.body_end;
    let mut tail = Vec::new();
    file.seek(SeekFrom::Start(body_end))?;
    file.take(len - body_end).read_to_end(&mut tail)?;
    if tail.len() as u64 != len - body_end {
        return Ok((len, Err(SnapshotError::Truncated)));
    }
    let mut stream = match SnapshotStream::<K>::new(layout, &head[..body_start], &tail, identity) {
        Ok(s) => s,
        Err(e) => return Ok((len, Err(e))),
    };
    if let Some(rv) = stream.resource_version() {
        early(rv);
    }
    // The start of the body read with the head.
    let read = (head.len() as u64).min(body_end);
    if let Err(e) = stream.feed(&head[body_start..read as usize]) {
        return Ok((len, Err(e)));
    }
    drop(head);
    // One thread: decoding on two (runs of frames handed to a second thread,
    // `SnapshotStream::feed_frames`) took more CPU in all (a second heap to grow and fault in,
    // the two threads' page faults contending for the memory-map lock) and no less time until
    // synced, on two cores.
    grow_heap(body_end - read);
    file.seek(SeekFrom::Start(read))?;
    let mut left = body_end - read;
    let mut buf = vec![0u8; PIECE];
    while left > 0 {
        let n = (left as usize).min(PIECE);
        if let Err(e) = file.read_exact(&mut buf[..n]) {
            return truncated_if_eof(len, e);
        }
        if let Err(e) = stream.feed(&buf[..n]) {
            return Ok((len, Err(e)));
        }
        left -= n as u64;
    }
    Ok((len, stream.finish()))
}

/// Makes room in this thread's heap for the objects about to be decoded from `body` bytes
/// of snapshot (about as many bytes of memory, a little more), and has that memory faulted in
/// on another thread while this one decodes.
///
/// - Room: glibc's malloc grows the heap of a thread other than the main one a page at a
///   time, an `mprotect` call per 4 KiB the decoded objects take (each taking the process's memory-map lock that page faults on other threads
///   need too). Blocks of that much memory, allocated here at once, grow it in one go; the
///   heap keeps the size it once had.
/// - Faulted in: in a fresh process every page the objects land on is new, and its first
///   write is a page fault: a large share of the CPU a restart takes, nearly all on the
///   decoding thread. The blocks go to a thread of their own (`informer-prefault`), which writes a
///   byte to each page of each one (the faults are taken there, on another core) and frees
///   it, lowest address first; the decoding thread's allocations then come from those freed,
///   already present pages, which the allocator prefers to growing the heap further.
///
/// The blocks are below glibc's threshold for a mapping of their own (128 KiB), and the total
/// below its 64 MiB heap. With another allocator, or if the thread cannot start, it costs a
/// few hundred allocations (and a write per page on another core): nothing is shared with the
/// decoding but the allocator. A snapshot too small for one block starts no thread (starting
/// one costs the decoding thread about as much as a few page faults).
fn grow_heap(body: u64) {
    const BLOCK: usize = 120 << 10;
    const PAGE: usize = 4096;
    const MAX: u64 = 60 << 20;
    let total = body.saturating_add(body / 5).min(MAX) as usize;
    let blocks: Vec<Vec<u8>> = (0..total / BLOCK)
        .map(|_| Vec::with_capacity(BLOCK))
        .collect();
    if blocks.is_empty() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("informer-prefault".into())
        .spawn(move || {
            lowest_priority();
            for mut block in blocks {
                // One write per page faults it in. The kernel hands the page over zeroed:
                // filling the rest of it too (as `resize` did) cost this thread a tenth of
                // its time, and the decoding reached pages not faulted in yet sooner.
                for byte in block.spare_capacity_mut().iter_mut().step_by(PAGE) {
                    byte.write(0);
                }
                // Not a write the compiler may leave out.
                drop(std::hint::black_box(block));
            }
        });
    // Without the thread the blocks were dropped unwritten: the heap has grown all the same.
    drop(spawned);
}

/// Has the calling thread run only when nothing else wants its core (nice 19, Linux): the
/// prefault thread's work only pays off when a core is idle, and a warm restart's first
/// request (the watch from the snapshot's resourceVersion) waits for the API server, which
/// may share this machine's cores.
fn lowest_priority() {
    #[cfg(target_os = "linux")]
    {
        let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19);
    }
}

/// A file that ends before its size said (it shrank while being read) is truncated.
fn truncated_if_eof<T>(
    len: u64,
    e: std::io::Error,
) -> std::io::Result<(u64, Result<T, SnapshotError>)> {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        Ok((len, Err(SnapshotError::Truncated)))
    } else {
        Err(e)
    }
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

/// Temporary file in the same directory, fsync, rename, fsync the directory. The directory is
/// created if missing. On Unix the file is readable and writable by its owner only (`0600`,
/// and `0700` for directories created): it holds every cached object, Secrets included.
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
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(&dir)?;
    let result = (|| {
        let mut f = create_private(&tmp)?;
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

/// Creates the file at `path` for writing, readable and writable by its owner only on Unix
/// (`0600`). A file already there (left by a process of the same id that died while writing: a
/// container's PID 1 is always 1) is removed first, so that the new one gets this mode.
fn create_private(path: &Path) -> std::io::Result<fs::File> {
    let _ = fs::remove_file(path);
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
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
    rx.recv().await.map_err(|_| {
        Error::Thread(std::io::Error::other(
            "the snapshot thread ended without an answer",
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use informer_core::object::DynamicObject;
    use informer_core::protocol::Selectors;
    use std::sync::Arc;

    fn identity() -> SnapshotIdentity {
        SnapshotIdentity {
            resource: "/v1/configmaps@".into(),
            selectors: Selectors::default(),
        }
    }

    /// A snapshot of `n` ConfigMaps of about 1 KB: several of the loader's 64 KiB pieces.
    fn snapshot_bytes(n: usize) -> (Vec<Arc<DynamicObject>>, Vec<u8>) {
        let items: Vec<Arc<DynamicObject>> = (0..n)
            .map(|i| {
                let json = format!(
                    r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"cm-{i}","namespace":"ns-{}","resourceVersion":"{}"}},"data":{{"payload":"{}"}}}}"#,
                    i % 3,
                    i + 1,
                    "x".repeat(1000 + i % 7)
                );
                Arc::new(serde_json::from_str(&json).unwrap())
            })
            .collect();
        let s = Snapshot {
            resource_version: "77".into(),
            items: items.clone(),
        };
        let mut out = Vec::new();
        s.encode(&identity(), &mut out).unwrap();
        (items, out)
    }

    fn dir() -> PathBuf {
        std::env::temp_dir().join(format!("informer-snapshot-file-{}", std::process::id()))
    }

    fn file_with(name: &str, bytes: &[u8]) -> SnapshotFile<DynamicObject> {
        fs::create_dir_all(dir()).unwrap();
        let path = dir().join(name);
        fs::write(&path, bytes).unwrap();
        SnapshotFile::new(path, None, identity())
    }

    /// What `Snapshot::decode` makes of the same bytes, as a load outcome.
    fn decoded(bytes: &[u8]) -> SnapshotLoad {
        match Snapshot::<DynamicObject>::decode(bytes, &identity()) {
            Ok(s) => SnapshotLoad::Resumed {
                resource_version: s.resource_version,
                objects: s.items.len(),
                bytes: bytes.len(),
            },
            Err(e) => SnapshotLoad::Refused(e),
        }
    }

    /// The file, read in 64 KiB pieces, loads exactly what decoding it whole gives: the same
    /// objects, and for a file cut anywhere (in the header, the first piece, between and
    /// inside pieces, in the tail) or with a byte changed anywhere, the same refusal; never a
    /// partly loaded cache.
    #[test]
    fn a_file_read_in_pieces_loads_what_decoding_it_whole_gives() {
        let (items, bytes) = snapshot_bytes(300);
        assert!(
            bytes.len() > 4 * PIECE,
            "{} bytes: too few pieces",
            bytes.len()
        );
        let file = file_with("whole", &bytes);
        let mut early = Vec::new();
        let (load, snapshot) = file.load(&mut |rv| early.push(rv.to_string()));
        assert_eq!(early, ["77"], "the resourceVersion before the body is read");
        assert_eq!(load, decoded(&bytes));
        let snapshot = snapshot.unwrap();
        assert_eq!(snapshot.resource_version, "77");
        assert!(items.iter().zip(&snapshot.items).all(|(a, b)| a == b));
        assert_eq!(snapshot.items.len(), items.len());

        let layout = SnapshotLayout::read(&bytes).unwrap().unwrap();
        let (start, end) = (layout.body_start as usize, layout.body_end as usize);
        let mut cuts = vec![
            0,
            5,
            12,
            start - 1,
            start,
            start + 3,
            PIECE - 1,
            PIECE,
            PIECE + 1,
        ];
        cuts.extend([2 * PIECE + 17, end - 1, end, end + 9, bytes.len() - 1]);
        let mut flips = vec![3, 9, start - 2, start + 1, PIECE + 2, 3 * PIECE, end - 2];
        flips.extend([end + 3, bytes.len() - 1]);
        for cut in cuts {
            let file = file_with("cut", &bytes[..cut]);
            let (load, snapshot) = file.load(&mut |_| {});
            assert_eq!(load, decoded(&bytes[..cut]), "cut at {cut}");
            assert_eq!(load, SnapshotLoad::Refused(SnapshotError::Truncated));
            assert!(snapshot.is_none());
        }
        for at in flips {
            let mut b = bytes.clone();
            b[at] ^= 0x20;
            let file = file_with("flip", &b);
            let (load, snapshot) = file.load(&mut |_| {});
            assert_eq!(load, decoded(&b), "byte {at} changed");
            assert!(matches!(load, SnapshotLoad::Refused(_)), "{load:?}");
            assert!(snapshot.is_none());
        }
        // Garbage after the end; no file at all.
        let mut longer = bytes.clone();
        longer.extend_from_slice(b"xx");
        assert_eq!(
            file_with("longer", &longer).load(&mut |_| {}).0,
            decoded(&longer)
        );
        let file = file_with("missing", &bytes);
        fs::remove_file(&file.path).unwrap();
        assert_eq!(file.load(&mut |_| {}).0, SnapshotLoad::Missing);
        let _ = fs::remove_dir_all(dir());
    }

    /// A snapshot at the resourceVersion the file already holds (loaded or written by this
    /// informer) is not written again; one at another resourceVersion is, and so is the same
    /// one once the file was removed or replaced behind the informer's back.
    #[test]
    fn the_state_on_disk_is_not_written_again() {
        let (items, bytes) = snapshot_bytes(20);
        let dir =
            std::env::temp_dir().join(format!("informer-snapshot-same-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("snap");
        fs::write(&path, &bytes).unwrap();
        let file = SnapshotFile::<DynamicObject>::new(path.clone(), None, identity());
        let (load, loaded) = file.load(&mut |_| {});
        assert!(matches!(load, SnapshotLoad::Resumed { .. }), "{load:?}");
        let loaded = loaded.unwrap();

        let w = file.write(1, &loaded).unwrap();
        assert!(w.unchanged && !w.superseded, "{w:?}");
        assert_eq!(w.bytes, bytes.len());
        assert_eq!(
            fs::read(&path).unwrap(),
            bytes,
            "the file is left as it was"
        );

        let newer = Snapshot {
            resource_version: "78".into(),
            items: items[1..].to_vec(),
        };
        let w = file.write(2, &newer).unwrap();
        assert!(!w.unchanged && w.bytes > 0, "{w:?}");
        let on_disk = fs::read(&path).unwrap();
        assert_ne!(on_disk, bytes);
        let w = file.write(3, &newer).unwrap();
        assert!(w.unchanged, "{w:?}");
        assert_eq!(w.bytes, on_disk.len());
        // An older sequence number than the one on disk is still superseded.
        assert!(file.write(2, &loaded).unwrap().superseded);

        fs::remove_file(&path).unwrap();
        let w = file.write(4, &newer).unwrap();
        assert!(!w.unchanged, "the file was removed: {w:?}");
        assert_eq!(fs::read(&path).unwrap(), on_disk);
        // Replaced by something else of another size: written again.
        fs::write(&path, b"junk").unwrap();
        assert!(!file.write(5, &newer).unwrap().unchanged);
        assert_eq!(fs::read(&path).unwrap(), on_disk);
        let _ = fs::remove_dir_all(&dir);
    }

    /// A snapshot is written into a directory that does not exist yet (created), readable by
    /// its owner only: it holds every cached object, Secrets included.
    #[test]
    fn a_snapshot_is_private_to_its_owner_and_its_directory_is_made() {
        let (items, bytes) = snapshot_bytes(3);
        let root =
            std::env::temp_dir().join(format!("informer-snapshot-mode-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let path = root.join("state").join("configmaps.snap");
        let file = SnapshotFile::<DynamicObject>::new(path.clone(), None, identity());
        let snapshot = Snapshot {
            resource_version: "77".into(),
            items,
        };
        let w = file.write(1, &snapshot).unwrap();
        assert!(!w.unchanged && !w.superseded, "{w:?}");
        assert_eq!(fs::read(&path).unwrap(), bytes);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&path), 0o600, "the file");
            assert_eq!(
                mode(&root.join("state")),
                0o700,
                "the directory made for it"
            );
            // A temporary file left over under the same name is replaced, not reused with
            // its mode and content.
            let stale = root.join("state").join(".configmaps.snap.tmp-1-0");
            fs::write(&stale, b"left over").unwrap();
            fs::set_permissions(&stale, fs::Permissions::from_mode(0o644)).unwrap();
            let mut f = create_private(&stale).unwrap();
            f.write_all(b"new").unwrap();
            drop(f);
            assert_eq!(mode(&stale), 0o600, "the file made anew");
            assert_eq!(fs::read(&stale).unwrap(), b"new");
        }
        let newer = Snapshot {
            resource_version: "78".into(),
            items: snapshot.items[1..].to_vec(),
        };
        assert!(!file.write(2, &newer).unwrap().unchanged);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "a file replaced by a later snapshot");
        }
        let _ = fs::remove_dir_all(&root);
    }
}
