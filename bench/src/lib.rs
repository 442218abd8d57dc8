//! The measuring side of the `sync-tokio` and `sync-smol` client processes that
//! `cargo xtask bench e2e` runs: each starts an informer of every ConfigMap, waits until its
//! handler has synced, prints one JSON line, then prints another once its handler has seen the
//! expected number of updates.
//!
//! ```text
//! {"event":"synced","objects":20000,"wall_s":1.23,"cpu_user_s":0.11,"cpu_sys_s":0.03,"rss_kb":41000,"hwm_kb":52000}
//! {"event":"updates","updates":5000,"wall_s":9.87,"cpu_user_s":0.21,"cpu_sys_s":0.05,"rss_kb":42000,"hwm_kb":52000}
//! ```
//!
//! Arguments: `--updates N` (default 0: exit right after the sync), `--timeout SECONDS`
//! (default 120), `--strip-managed-fields` (a transform drops `metadata.managedFields` before
//! objects are cached, as client-go users often do), `--metadata-only` (`sync-tokio`: an
//! informer of `PartialObjectMetadata`, the server sending metadata only), `--snapshot PATH` (warm restarts through
//! that file: after the sync and the updates the client also prints a `resume` line — how it started, how many
//! lists it made — and a `formats` line comparing the snapshot with JSON), `--log` (the informer's
//! info and debug log on stderr, each line with the seconds since process start: where a start's
//! time goes). The API server comes from `$KUBECONFIG` (or in-cluster configuration).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::time::{Duration, Instant};

use informer_core::object::DynamicObject;
use informer_core::protocol::{Failure, ListPage, ListRequest, WatchEvent, WatchRequest};
use informer_tokio::http::Transport;
use informer_tokio::http::transport::{BoxFuture, BoxStream};

/// A transform dropping `metadata.managedFields` (about a quarter of a small ConfigMap).
pub fn strip_managed_fields(obj: Arc<DynamicObject>) -> Arc<DynamicObject> {
    if !obj.metadata.other().contains_key("managedFields") {
        return obj;
    }
    let mut obj = Arc::unwrap_or_clone(obj);
    obj.metadata.remove_other("managedFields");
    Arc::new(obj)
}

/// CPU time and memory of this process (`getrusage`, `/proc/self`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    /// User CPU seconds of every thread (`getrusage(RUSAGE_SELF)`, microseconds).
    pub user_s: f64,
    /// System CPU seconds of every thread (`getrusage(RUSAGE_SELF)`, microseconds).
    pub sys_s: f64,
    /// Resident set size now (`VmRSS`), KiB.
    pub rss_kb: u64,
    /// Peak resident set size (`VmHWM`), KiB.
    pub hwm_kb: u64,
    /// Bytes read through `read(2)` and friends (`rchar` of `/proc/self/io`): sockets (the API
    /// server's answers, TLS included), files (the snapshot) and the `/proc` files read here.
    pub rchar: u64,
}

impl Usage {
    /// Reads `getrusage(RUSAGE_SELF)`, `/proc/self/io` and `/proc/self/status`.
    #[allow(unsafe_code)]
    pub fn now() -> Usage {
        let mut u = Usage::default();
        // SAFETY: `getrusage` only writes the `rusage` it is given, which is plain data.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `ru` is a valid, writable `rusage`.
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } == 0 {
            let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            u.user_s = secs(ru.ru_utime);
            u.sys_s = secs(ru.ru_stime);
        }
        if let Ok(io) = std::fs::read_to_string("/proc/self/io") {
            u.rchar = io
                .lines()
                .find_map(|l| l.strip_prefix("rchar:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
        }
        if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
            for line in status.lines() {
                let kb = || {
                    line.split_whitespace()
                        .nth(1)
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0)
                };
                if line.starts_with("VmRSS:") {
                    u.rss_kb = kb();
                } else if line.starts_with("VmHWM:") {
                    u.hwm_kb = kb();
                }
            }
        }
        u
    }
}

/// One benchmark run of a client process: its arguments, start time and update counter.
#[derive(Debug)]
pub struct Run {
    started: Instant,
    /// Updates to wait for after the sync (`--updates`).
    pub updates: u64,
    /// How long to wait for the sync, and then for the updates (`--timeout`).
    pub timeout: Duration,
    /// Whether to drop `metadata.managedFields` before caching (`--strip-managed-fields`).
    pub strip_managed_fields: bool,
    /// The snapshot file (`--snapshot PATH`).
    pub snapshot: Option<PathBuf>,
    /// Whether to cache metadata only (`--metadata-only`: an informer of
    /// `PartialObjectMetadata`; `sync-tokio` only).
    pub metadata_only: bool,
    seen: Arc<AtomicU64>,
    done_tx: SyncSender<()>,
    done_rx: Receiver<()>,
}

/// The value given after `name` on this process's command line (`--name VALUE`), if any.
pub fn arg_value(name: &str) -> Option<String> {
    let mut args = std::env::args().skip(1);
    args.by_ref().find(|a| a == name)?;
    args.next()
}

impl Run {
    /// Starts the clock and reads the arguments.
    pub fn start() -> Run {
        let started = Instant::now();
        let args: Vec<String> = std::env::args().skip(1).collect();
        let flag = |name: &str| arg_value(name).and_then(|v| v.parse::<u64>().ok());
        let (done_tx, done_rx) = mpsc::sync_channel(1);
        if args.iter().any(|a| a == "--log") {
            let _ = tracing::subscriber::set_global_default(StderrLog { started });
        }
        Run {
            started,
            updates: flag("--updates").unwrap_or(0),
            timeout: Duration::from_secs(flag("--timeout").unwrap_or(120)),
            strip_managed_fields: args.iter().any(|a| a == "--strip-managed-fields"),
            metadata_only: args.iter().any(|a| a == "--metadata-only"),
            snapshot: arg_value("--snapshot").map(PathBuf::from),
            seen: Arc::default(),
            done_tx,
            done_rx,
        }
    }

    /// An `on_update` handler body that counts updates and signals when `--updates` are in.
    pub fn count_updates<K>(&self) -> impl FnMut(Arc<K>, Arc<K>) + Send + 'static {
        let (seen, target, done) = (self.seen.clone(), self.updates, self.done_tx.clone());
        move |_old, _new| {
            if seen.fetch_add(1, Ordering::Relaxed) + 1 == target {
                let _ = done.try_send(());
            }
        }
    }

    /// Notes on stderr how long after process start `phase` was reached (where a start's time
    /// goes: `cargo xtask bench e2e` shows the client's stderr).
    pub fn mark(&self, phase: &str) {
        eprintln!(
            "    phase {phase}: {:.4} s",
            self.started.elapsed().as_secs_f64()
        );
    }

    /// Prints the `synced` line.
    pub fn synced(&self, objects: usize) {
        self.report("synced", "objects", objects as u64);
    }

    /// Waits until the handler has seen `--updates` updates (at most `--timeout`) and prints
    /// the `updates` line. Returns at once when no updates are expected.
    pub fn wait_for_updates(&self) -> Result<(), String> {
        if self.updates == 0 {
            return Ok(());
        }
        match self.done_rx.recv_timeout(self.timeout) {
            Ok(()) => {
                self.report("updates", "updates", self.updates);
                Ok(())
            }
            Err(_) => Err(format!(
                "saw {} of {} updates in {:?}",
                self.seen.load(Ordering::Relaxed),
                self.updates,
                self.timeout
            )),
        }
    }

    fn report(&self, event: &str, what: &str, n: u64) {
        let u = Usage::now();
        print_line(&format!(
            "{{\"event\":\"{event}\",\"{what}\":{n},\"wall_s\":{:.3},\"cpu_user_s\":{:.4},\
             \"cpu_sys_s\":{:.4},\"rss_kb\":{},\"hwm_kb\":{},\"rchar\":{}}}",
            self.started.elapsed().as_secs_f64(),
            u.user_s,
            u.sys_s,
            u.rss_kb,
            u.hwm_kb,
            u.rchar
        ));
    }

    /// Prints the `resume` line: how the informer started (`load`, the snapshot's size when it
    /// resumed) and how many lists it made.
    pub fn resumed(&self, load: &str, snapshot_bytes: usize, lists: u64) {
        print_line(&format!(
            "{{\"event\":\"resume\",\"load\":\"{load}\",\"snapshot_bytes\":{snapshot_bytes},\"lists\":{lists}}}"
        ));
    }
}

fn print_line(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line.as_bytes());
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

/// Prints the `formats` line: the snapshot file against the same objects as a JSON array (what
/// a list's `items` is), bytes per object and decode time on one thread (best of 3), the load
/// time `load_s` of the file read and decoded 64 KiB at a time as an informer does (best of 3,
/// so on a heap already grown: without the page faults a fresh process takes, which the
/// informer has another thread take while it decodes), and the time `write_s` the informer
/// took to write the file (encode + fsync + rename).
pub fn format_figures(objects: &[Arc<DynamicObject>], file: &Path, write_s: f64) {
    use informer_core::snapshot::{Snapshot, peek_identity};
    let Ok(bytes) = std::fs::read(file) else {
        return;
    };
    let Ok((identity, _)) = peek_identity(&bytes) else {
        return;
    };
    let refs: Vec<&DynamicObject> = objects.iter().map(|o| &**o).collect();
    let json = serde_json::to_vec(&refs).unwrap_or_default();
    let best = |f: &dyn Fn() -> bool| {
        (0..3)
            .map(|_| {
                let t = Instant::now();
                let ok = f();
                (t.elapsed().as_secs_f64(), ok)
            })
            .fold((f64::INFINITY, true), |(b, all), (s, ok)| {
                (b.min(s), all && ok)
            })
    };
    let (snap_s, snap_ok) = best(&|| Snapshot::<DynamicObject>::decode(&bytes, &identity).is_ok());
    let (json_s, json_ok) = best(&|| serde_json::from_slice::<Vec<DynamicObject>>(&json).is_ok());
    // What an informer's load does: read the file 64 KiB at a time, decoding as it goes.
    let (load_s, load_ok) = best(&|| load_in_pieces(file, &identity).is_some());
    let n = objects.len().max(1) as f64;
    print_line(&format!(
        "{{\"event\":\"formats\",\"objects\":{},\"snapshot_bytes\":{},\"json_bytes\":{},\
         \"snapshot_per_object\":{:.1},\"json_per_object\":{:.1},\"snapshot_decode_s\":{snap_s:.4},\
         \"json_decode_s\":{json_s:.4},\"load_s\":{load_s:.4},\"decoded\":{},\"write_s\":{write_s:.4}}}",
        objects.len(),
        bytes.len(),
        json.len(),
        bytes.len() as f64 / n,
        json.len() as f64 / n,
        snap_ok && json_ok && load_ok
    ));
}

/// Loads `file` as the informer does: its start (the layout), its tail, then its body 64 KiB at
/// a time through a `SnapshotStream`. `None` when anything fails.
fn load_in_pieces(
    file: &Path,
    identity: &informer_core::snapshot::SnapshotIdentity,
) -> Option<informer_core::snapshot::Snapshot<DynamicObject>> {
    use informer_core::snapshot::{SnapshotLayout, SnapshotStream};
    use std::io::{Read, Seek, SeekFrom};
    const PIECE: usize = 64 * 1024;
    let mut f = std::fs::File::open(file).ok()?;
    let len = f.metadata().ok()?.len();
    let mut head = vec![0u8; PIECE.min(len as usize)];
    f.read_exact(&mut head).ok()?;
    let layout = SnapshotLayout::read(&head).ok()??;
    let (start, end) = (layout.body_start as usize, layout.body_end);
    let mut tail = Vec::new();
    f.seek(SeekFrom::Start(end)).ok()?;
    f.read_to_end(&mut tail).ok()?;
    let mut stream =
        SnapshotStream::<DynamicObject>::new(layout, &head[..start], &tail, identity).ok()?;
    let first = (head.len() as u64).min(end);
    stream.feed(&head[start..first as usize]).ok()?;
    f.seek(SeekFrom::Start(first)).ok()?;
    let mut left = end - first;
    let mut buf = vec![0u8; PIECE];
    while left > 0 {
        let n = (left as usize).min(PIECE);
        f.read_exact(&mut buf[..n]).ok()?;
        stream.feed(&buf[..n]).ok()?;
        left -= n as u64;
    }
    stream.finish().ok()
}

/// `--log`: the informer's log (info and debug) on stderr, each line with the seconds since
/// process start.
struct StderrLog {
    started: Instant,
}

/// An event's fields as `message field=value ...`.
struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        let _ = if field.name() == "message" {
            write!(self.0, " {value:?}")
        } else {
            write!(self.0, " {}={value:?}", field.name())
        };
    }
}

impl tracing::Subscriber for StderrLog {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::DEBUG
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        eprintln!(
            "    log {:.4} s {}:{}",
            self.started.elapsed().as_secs_f64(),
            event.metadata().level(),
            fields.0
        );
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// A transport without a server, for the benches that need none: lists answer the scripted
/// pages in order (and then never answer); the first watches stream the scripted channels in
/// order (later ones never answer).
pub struct Script {
    lists: std::sync::Mutex<std::collections::VecDeque<ListPage<DynamicObject>>>,
    watches: std::sync::Mutex<
        std::collections::VecDeque<async_channel::Receiver<WatchEvent<DynamicObject>>>,
    >,
}

impl Script {
    /// A transport answering `lists`, then streaming `watches`, each once, in order.
    pub fn new(
        lists: impl IntoIterator<Item = ListPage<DynamicObject>>,
        watches: impl IntoIterator<Item = async_channel::Receiver<WatchEvent<DynamicObject>>>,
    ) -> Script {
        Script {
            lists: std::sync::Mutex::new(lists.into_iter().collect()),
            watches: std::sync::Mutex::new(watches.into_iter().collect()),
        }
    }
}

impl Transport<DynamicObject> for Script {
    fn list<'a>(
        &'a self,
        _: &'a ListRequest,
    ) -> BoxFuture<'a, Result<ListPage<DynamicObject>, Failure>> {
        Box::pin(async move {
            let page = self
                .lists
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .pop_front();
            match page {
                Some(p) => Ok(p),
                None => std::future::pending().await,
            }
        })
    }

    fn watch<'a>(
        &'a self,
        _: &'a WatchRequest,
    ) -> BoxFuture<'a, Result<BoxStream<'static, WatchEvent<DynamicObject>>, Failure>> {
        Box::pin(async move {
            let rx = self
                .watches
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .pop_front();
            match rx {
                Some(rx) => Ok(Box::pin(rx) as BoxStream<'static, _>),
                None => std::future::pending().await,
            }
        })
    }
}

/// A complete list page of `items` at resourceVersion `rv`.
pub fn page(items: Vec<Arc<DynamicObject>>, rv: &str) -> ListPage<DynamicObject> {
    ListPage {
        items,
        resource_version: rv.into(),
        continue_token: None,
        remaining_item_count: None,
    }
}
