//! A deterministic simulation: a model API server with faults, a virtual clock and handlers
//! with random speeds, driving a [`SharedIndexInformer`] through the same step/poll API a
//! runtime uses.
//!
//! Every run is a seed. [`run`] returns a [`Report`] or a [`SimFailure`] that names the seed
//! and how to replay it. The checks (CONFORMANCE 25):
//!
//! - while running: no handler ever has more notifications pending than there are keys (one per
//!   key at most); no handler ever sees an object go back to an older resourceVersion; each
//!   handler's notifications fold consistently (no add of a key it has, no update or delete of
//!   a key it lacks, an update's `old` is the state it saw last); a removed handler gets
//!   nothing;
//! - once the server is quiet (no more changes, no more faults): the informer catches up —
//!   the cache equals the server's state (after the transform), every handler's folded view
//!   equals the cache, and everything reports synced;
//! - the consistency check ([`crate::informer::consistency`], the runtime's switchable check) at quiet
//!   moments — every 10 virtual seconds while the informer is synced and its watch open, and at
//!   the final quiet point: a paged list at exactly the cache's last synced resourceVersion
//!   (skipped when compacted away, as the runtime skips a 410) equals the cache in keys,
//!   resourceVersions and content. A divergence fails the run.
//!
//! Built with `cfg(test)` or the `sim` feature.

mod server;

#[cfg(test)]
mod tests;

pub use server::{LogEntry, ModelServer, SimObject, WatchOpen};

use alloc::collections::{BTreeMap, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use crate::cache::processor::{HandlerId, Notification};
use crate::informer::DeliveryOrder;
use crate::informer::consistency;
use crate::informer::reflector::ReflectorConfig;
use crate::informer::{InformerConfig, Output, Resume, SharedIndexInformer};
use crate::object::{Key, Object};
use crate::protocol::RequestId;
use crate::protocol::{self, Failure, ListRequest, Request, Status, WatchEvent, WatchRequest};
use crate::rng::SplitMix64;
use crate::time::Instant;

/// The environment variable naming one seed to replay with a trace.
pub const SEED_ENV: &str = "INFORMER_SIM_SEED";
/// The environment variable giving how many seeds the many-seeds test runs.
pub const SEEDS_ENV: &str = "INFORMER_SIM_SEEDS";

/// Parameters of one run, all derived from its seed by [`SimConfig::from_seed`].
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The seed.
    pub seed: u64,
    /// Number of server changes in the busy phase.
    pub mutations: u32,
    /// Number of distinct names objects are drawn from.
    pub names: u32,
    /// Probability that a request (or an open watch) meets a fault during the busy phase.
    pub fault_rate: f64,
    /// Whether the informer uses a streaming list.
    pub streaming_list: bool,
    /// Whether the server supports streaming lists.
    pub server_streaming: bool,
    /// Whether the server has a watch cache (lists at "0" ignore `limit`).
    pub watch_cache: bool,
    /// Explicit page size.
    pub page_size: Option<u32>,
    /// Whether a transform (dropping `noise`) is installed.
    pub transform: bool,
    /// The informer's resync check period.
    pub resync_check_period: Duration,
    /// Resync periods of the handlers added before start.
    pub handlers_before: Vec<Duration>,
    /// Resync periods of handlers added during the busy phase.
    pub handlers_late: Vec<Duration>,
    /// Remove one handler during the busy phase.
    pub remove_one: bool,
    /// Upper bound of the time between two compactions.
    pub compaction_every: Duration,
    /// The informer's delivery order.
    pub order: DeliveryOrder,
    /// Record a trace of every step.
    pub trace: bool,
    /// A warm restart during the busy phase, if any.
    pub restart: Option<Restart>,
}

/// A warm restart: a snapshot of the cache is taken at `snapshot_at`; at
/// `snapshot_at + down_for` the informer (and its handlers) is dropped and a new one resumes
/// from the snapshot — possibly older than the compaction window by then, or truncated (then
/// refused, and the new informer lists).
#[derive(Clone, Debug)]
pub struct Restart {
    /// When the snapshot is taken (none is if the informer has not synced then: cold start).
    pub snapshot_at: Duration,
    /// How long after the snapshot the new informer starts.
    pub down_for: Duration,
    /// Cut the snapshot's bytes in half (it must be refused).
    pub truncate: bool,
}

impl SimConfig {
    /// The parameters of seed `seed`.
    pub fn from_seed(seed: u64) -> Self {
        let mut r = SplitMix64::new(seed ^ 0x005E_ED0F_1AF0);
        let pick = |r: &mut SplitMix64, xs: &[u64]| xs[r.below(xs.len() as u64) as usize];
        let resync = |r: &mut SplitMix64| Duration::from_secs(pick(r, &[0, 0, 2, 5, 10, 30, 60]));
        let fault_rate = [0.0, 0.1, 0.25, 0.5][r.below(4) as usize];
        let n_before = 1 + r.below(3) as usize;
        let n_late = r.below(3) as usize;
        SimConfig {
            seed,
            mutations: 10 + r.below(120) as u32,
            names: 3 + r.below(30) as u32,
            fault_rate,
            streaming_list: r.chance(0.35),
            server_streaming: r.chance(0.6),
            watch_cache: r.chance(0.5),
            page_size: if r.chance(0.5) {
                Some(1 + r.below(6) as u32)
            } else {
                None
            },
            transform: r.chance(0.5),
            resync_check_period: Duration::from_secs(pick(&mut r, &[0, 1, 5, 30])),
            handlers_before: (0..n_before).map(|_| resync(&mut r)).collect(),
            handlers_late: (0..n_late).map(|_| resync(&mut r)).collect(),
            remove_one: r.chance(0.3),
            compaction_every: Duration::from_secs(pick(&mut r, &[3, 20, 60, 60])),
            // Drawn last: the seeds' other parameters are what they were before it existed.
            order: if r.chance(0.5) {
                DeliveryOrder::InOrder
            } else {
                DeliveryOrder::DeltaFifo
            },
            trace: false,
            restart: Restart::from_seed(seed),
        }
    }
}

impl Restart {
    /// A restart for about a third of the seeds, drawn from its own generator so that the
    /// other parameters of a seed do not change.
    fn from_seed(seed: u64) -> Option<Restart> {
        let mut r = SplitMix64::new(seed ^ 0x0000_5EED_CAC4_E000);
        if !r.chance(0.35) {
            return None;
        }
        Some(Restart {
            snapshot_at: ms(r.below(60_000)),
            down_for: ms([0, 50, 2_000, 30_000, 120_000][r.below(5) as usize]),
            truncate: r.chance(0.1),
        })
    }
}

/// What a successful run did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Virtual time at convergence.
    pub virtual_time: Duration,
    /// Loop iterations.
    pub steps: u64,
    /// Server changes made.
    pub mutations: u64,
    /// List requests issued.
    pub lists: u64,
    /// Watch requests issued.
    pub watches: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Watch errors reported by the informer.
    pub watch_errors: u64,
    /// Notifications handled.
    pub notifications: u64,
    /// Consistency checks that reached a verdict (every one must agree).
    pub consistency_checks: u64,
}

impl Report {
    /// Faults injected in total.
    pub fn total_faults(&self) -> u64 {
        self.faults.values().sum()
    }

    /// Adds another report's counters into this one.
    pub fn absorb(&mut self, other: &Report) {
        self.virtual_time += other.virtual_time;
        self.steps += other.steps;
        self.mutations += other.mutations;
        self.lists += other.lists;
        self.watches += other.watches;
        self.watch_errors += other.watch_errors;
        self.notifications += other.notifications;
        self.consistency_checks += other.consistency_checks;
        for (k, v) in &other.faults {
            *self.faults.entry(k).or_default() += v;
        }
    }
}

/// A failed run.
#[derive(Clone, Debug)]
pub struct SimFailure {
    /// The seed.
    pub seed: u64,
    /// Virtual time of the failure.
    pub at: Duration,
    /// What went wrong.
    pub message: String,
    /// The trace, when recorded.
    pub trace: Vec<String>,
}

impl fmt::Display for SimFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "simulation seed {} failed at t={:?}: {}",
            self.seed, self.at, self.message
        )?;
        writeln!(
            f,
            "replay: {SEED_ENV}={} cargo test -p informer-core --lib sim::tests::sim_replay_seed -- --nocapture",
            self.seed
        )?;
        for line in &self.trace {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug)]
enum MidFault {
    Drop,
    Error410,
    Error500,
    Error429,
}

struct OpenWatch {
    id: RequestId,
    bookmarks: bool,
    cursor: u64,
    queued: VecDeque<WatchEvent<SimObject>>,
    deliver_at: Option<Instant>,
    next_bookmark: Option<Instant>,
    end_at: Instant,
    fault: Option<(Instant, MidFault)>,
}

enum Flight {
    Idle,
    List {
        id: RequestId,
        req: ListRequest,
        due: Instant,
    },
    Opening {
        id: RequestId,
        req: WatchRequest,
        due: Instant,
    },
    Watch(OpenWatch),
    /// A half-open connection: nothing ever arrives, the stream never ends.
    Hung,
}

/// What the model server's transport feeds back: the core's one input type, tagged with the
/// request it answers.
type Input = (RequestId, protocol::Input<SimObject>);

struct SimHandler {
    id: HandlerId,
    view: BTreeMap<Key, Arc<SimObject>>,
    last_rv: BTreeMap<Key, u64>,
    busy_until: Option<Instant>,
    /// Upper bound of the time one notification takes.
    slowness: Duration,
    removed: bool,
    /// The handler has reported synced at some point.
    synced: bool,
}

/// Runs seed `seed` with its default parameters.
pub fn run(seed: u64) -> Result<Report, SimFailure> {
    run_with(SimConfig::from_seed(seed))
}

/// Runs one simulation.
pub fn run_with(cfg: SimConfig) -> Result<Report, SimFailure> {
    let mut sim = Sim::new(cfg);
    let r = sim.run();
    match r {
        Ok(()) => Ok(sim.report),
        Err(message) => Err(SimFailure {
            seed: sim.cfg.seed,
            at: sim.now.since_epoch(),
            message,
            trace: core::mem::take(&mut sim.trace),
        }),
    }
}

/// Runs seeds `base .. base + count`, stopping after `max_failures` failures. Returns the
/// summed report of the passing seeds and the failures. This is what `cargo xtask sim` and the
/// many-seeds test call.
pub fn run_many(base: u64, count: u64, max_failures: usize) -> (Report, Vec<SimFailure>) {
    let mut total = Report::default();
    let mut failures = Vec::new();
    for seed in base..base.saturating_add(count) {
        match run(seed) {
            Ok(r) => total.absorb(&r),
            Err(f) => {
                failures.push(f);
                if failures.len() >= max_failures {
                    break;
                }
            }
        }
    }
    (total, failures)
}

impl fmt::Display for Report {
    /// A multi-line summary: totals, then faults by kind.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} faults injected, {} mutations, {} lists, {} watches, {} watch errors reported, \
             {} notifications, {} consistency checks, {} steps, {:.0?} virtual time",
            self.total_faults(),
            self.mutations,
            self.lists,
            self.watches,
            self.watch_errors,
            self.notifications,
            self.consistency_checks,
            self.steps,
            self.virtual_time,
        )?;
        for (kind, n) in &self.faults {
            writeln!(f, "  {n:>8}  {kind}")?;
        }
        Ok(())
    }
}

const QUIET_LIMIT: Duration = Duration::from_secs(20 * 60);
/// How often the consistency check runs (virtual time), at a quiet moment.
const CHECK_EVERY: Duration = Duration::from_secs(10);
/// The consistency check's page size: small, so that its paging is exercised.
const CHECK_PAGE: u32 = 4;
const STEP_LIMIT: u64 = 3_000_000;

struct Sim {
    cfg: SimConfig,
    now: Instant,
    server: ModelServer,
    inf: SharedIndexInformer<SimObject>,
    flight: Flight,
    handlers: Vec<SimHandler>,
    rng_work: SplitMix64,
    /// Handler speeds: separate, so that the order of notifications (which depends on the
    /// hash order of the cache) cannot change the workload or the network.
    rng_handlers: SplitMix64,
    rng_net: SplitMix64,
    rng_fault: SplitMix64,
    mutations_left: u32,
    next_mutation: Option<Instant>,
    next_compaction: Option<Instant>,
    late_handlers: VecDeque<(Instant, Duration)>,
    removal_at: Option<Instant>,
    snapshot_at: Option<Instant>,
    restart_at: Option<Instant>,
    snapshot: Option<Vec<u8>>,
    /// The resourceVersion in the snapshot's header (readable even when the file is cut).
    snapshot_rv: Option<String>,
    /// A restarted informer started with `resume_at`: when its snapshot's objects are in (or
    /// it is found unusable: `None`).
    loading: Option<(Instant, Option<crate::snapshot::Snapshot<SimObject>>)>,
    quiet_since: Option<Instant>,
    next_check: Instant,
    last_sync_seen: u64,
    informer_synced: bool,
    report: Report,
    trace: Vec<String>,
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn rv_of(o: &SimObject) -> u64 {
    o.rv()
}

impl Sim {
    fn new(cfg: SimConfig) -> Self {
        let mut root = SplitMix64::new(cfg.seed);
        let mut rng_work = root.fork();
        let rng_net = root.fork();
        let rng_fault = root.fork();
        let mut rng_handlers = root.fork();
        let informer_seed = root.next_u64();
        let inf = Self::informer(&cfg, informer_seed);
        let mut server = ModelServer::new(cfg.watch_cache, cfg.server_streaming);
        // Some objects exist before the informer starts.
        let initial = rng_work.below(u64::from(cfg.names) + 1);
        for i in 0..initial {
            let ns = if i % 3 == 0 { None } else { Some("ns") };
            server.create(ns, &format!("o{i}"), i, rng_work.below(1000));
        }
        let mut inf = inf;
        let handlers = Self::first_handlers(&cfg, &mut inf, &mut rng_handlers, Instant::ZERO);
        let busy_span = 1 + u64::from(cfg.mutations) * 1500;
        let late_handlers = cfg
            .handlers_late
            .iter()
            .map(|&p| (Instant::ZERO + ms(rng_work.below(busy_span)), p))
            .collect::<Vec<_>>();
        let mut late_handlers: Vec<_> = late_handlers;
        late_handlers.sort_by_key(|(t, _)| *t);
        let removal_at = cfg
            .remove_one
            .then(|| Instant::ZERO + ms(rng_work.below(busy_span)));
        let snapshot_at = cfg.restart.as_ref().map(|r| Instant::ZERO + r.snapshot_at);
        Sim {
            snapshot_at,
            restart_at: None,
            snapshot_rv: None,
            loading: None,
            snapshot: None,
            mutations_left: cfg.mutations,
            next_mutation: Some(Instant::ZERO + ms(rng_work.below(3000))),
            next_compaction: Some(
                Instant::ZERO + ms(1 + rng_work.below(cfg.compaction_every.as_millis() as u64)),
            ),
            late_handlers: late_handlers.into(),
            removal_at,
            cfg,
            now: Instant::ZERO,
            server,
            inf,
            flight: Flight::Idle,
            handlers,
            rng_work,
            rng_handlers,
            rng_net,
            rng_fault,
            quiet_since: None,
            next_check: Instant::ZERO + CHECK_EVERY,
            last_sync_seen: 0,
            informer_synced: false,
            report: Report::default(),
            trace: Vec::new(),
        }
    }

    fn informer(cfg: &SimConfig, seed: u64) -> SharedIndexInformer<SimObject> {
        let mut inf = SharedIndexInformer::new(InformerConfig {
            reflector: ReflectorConfig {
                page_size: cfg.page_size,
                streaming_list: cfg.streaming_list,
                seed,
                ..ReflectorConfig::default()
            },
            resync_check_period: cfg.resync_check_period,
            order: cfg.order,
        });
        if cfg.transform {
            inf.set_transform(alloc::boxed::Box::new(|o: Arc<SimObject>| {
                if o.noise == 0 {
                    o
                } else {
                    let mut c = (*o).clone();
                    c.noise = 0;
                    Arc::new(c)
                }
            }));
        }
        inf
    }

    fn first_handlers(
        cfg: &SimConfig,
        inf: &mut SharedIndexInformer<SimObject>,
        rng_handlers: &mut SplitMix64,
        now: Instant,
    ) -> Vec<SimHandler> {
        let mut handlers = Vec::new();
        for &period in &cfg.handlers_before {
            let (id, _) = inf.add_handler(period, now).expect("not stopped");
            let slowness = Self::pick_slowness(rng_handlers);
            handlers.push(SimHandler {
                id,
                view: BTreeMap::new(),
                last_rv: BTreeMap::new(),
                busy_until: None,
                slowness,
                removed: false,
                synced: false,
            });
        }
        handlers
    }

    /// Takes the snapshot (if the informer has synced), and schedules the restart.
    fn take_snapshot(&mut self) {
        self.snapshot_at = None;
        let Some(restart) = self.cfg.restart.clone() else {
            return;
        };
        self.restart_at = Some(self.now + restart.down_for);
        let Some(snap) = self.inf.snapshot() else {
            self.log(|| "SNAPSHOT none: not synced".into());
            return;
        };
        let mut bytes = Vec::new();
        if let Err(e) = snap.encode(&Self::identity(), &mut bytes) {
            self.log(|| format!("SNAPSHOT failed: {e}"));
            return;
        }
        if restart.truncate {
            bytes.truncate(bytes.len() / 2);
        }
        let (n, rv) = (snap.items.len(), snap.resource_version.clone());
        self.log(|| format!("SNAPSHOT {n} objects at rv {rv}"));
        self.snapshot = Some(bytes);
        self.snapshot_rv = Some(rv);
    }

    fn identity() -> crate::snapshot::SnapshotIdentity {
        crate::snapshot::SnapshotIdentity {
            resource: "sim".into(),
            selectors: protocol::Selectors::default(),
        }
    }

    /// The process dies: the informer, its handlers and the request in flight are gone. A new
    /// informer resumes from the snapshot (or lists, if there is none or it is refused).
    fn restart(&mut self) -> Result<(), String> {
        self.restart_at = None;
        self.loading = None;
        self.inf.stop();
        self.flight = Flight::Idle;
        let seed = self.rng_work.next_u64();
        // Half the restarts load the snapshot as a runtime does: the watch from its
        // resourceVersion starts at once, the objects (or the verdict that the file is
        // unusable) come up to 400 ms later. Drawn from the restart's own seed, so the
        // other draws of a seed stay as they were.
        let mut load_rng = SplitMix64::new(seed ^ 0x9E37_79B9_7F4A_7C15);
        let split = load_rng.chance(0.5);
        let loaded_at = self.now + ms(load_rng.below(400));
        let header_rv = self.snapshot_rv.take();
        self.inf = Self::informer(&self.cfg, seed);
        self.handlers =
            Self::first_handlers(&self.cfg, &mut self.inf, &mut self.rng_handlers, self.now);
        self.informer_synced = false;
        self.last_sync_seen = 0;
        let truncated = self.cfg.restart.as_ref().is_some_and(|r| r.truncate);
        match self
            .snapshot
            .take()
            .map(|b| crate::snapshot::Snapshot::<SimObject>::decode(&b, &Self::identity()))
        {
            Some(Ok(snap)) => {
                if truncated {
                    return Err("a truncated snapshot was accepted".into());
                }
                let rv = snap.resource_version.clone();
                self.log(|| format!("RESTART resuming from rv {rv}"));
                self.fault("warm restart");
                if snap.resource_version.parse::<u64>().unwrap_or(0) < self.server.compacted {
                    self.fault("warm restart, snapshot compacted");
                }
                if split {
                    self.fault("warm restart, objects loaded after start");
                    self.inf.resume(Resume::At(snap.resource_version.clone()));
                    self.loading = Some((loaded_at, Some(snap)));
                } else {
                    self.inf.resume(Resume::Snapshot(snap));
                }
            }
            Some(Err(e)) => {
                if !truncated {
                    return Err(format!("a whole snapshot was refused: {e}"));
                }
                self.log(|| format!("RESTART snapshot refused ({e}): cold start"));
                self.fault("warm restart, snapshot refused");
                if let Some(rv) = header_rv.filter(|_| split) {
                    self.fault("warm restart, refused after start");
                    self.inf.resume(Resume::At(rv));
                    self.loading = Some((loaded_at, None));
                }
            }
            None => {
                self.log(|| "RESTART without a snapshot: cold start".into());
                self.fault("restart, no snapshot");
            }
        }
        self.inf.start(self.now);
        Ok(())
    }

    fn pick_slowness(r: &mut SplitMix64) -> Duration {
        match r.below(4) {
            0 => Duration::ZERO,
            1 => ms(5),
            2 => ms(300),
            _ => ms(5_000),
        }
    }

    fn log(&mut self, what: impl FnOnce() -> String) {
        if self.cfg.trace {
            let line = format!(
                "t={:>10.3}s {}",
                self.now.since_epoch().as_secs_f64(),
                what()
            );
            self.trace.push(line);
        }
    }

    fn faulty(&mut self) -> bool {
        self.quiet_since.is_none() && self.rng_fault.chance(self.cfg.fault_rate)
    }

    fn fault(&mut self, kind: &'static str) {
        *self.report.faults.entry(kind).or_default() += 1;
        self.log(|| format!("FAULT {kind}"));
    }

    fn latency(&mut self) -> Duration {
        ms(1 + self.rng_net.below(40))
    }

    fn run(&mut self) -> Result<(), String> {
        self.report.seed = self.cfg.seed;
        self.inf.start(self.now);
        loop {
            self.drain()?;
            self.report.steps += 1;
            if self.report.steps > STEP_LIMIT {
                return Err("step limit reached".into());
            }
            if self.quiet_since.is_none() && self.busy_done() {
                self.quiet_since = Some(self.now);
                self.log(|| "QUIET".into());
            }
            if self.now >= self.next_check && self.inf.is_watching() {
                self.next_check = self.now + CHECK_EVERY;
                self.consistency_check()?;
            }
            if let Some(q) = self.quiet_since {
                if self.converged()? {
                    // Compacted away (the last synced resourceVersion predates the last
                    // compaction) leaves no verdict: `converged` compared with the state.
                    self.consistency_check()?;
                    self.report.virtual_time = self.now.since_epoch();
                    return Ok(());
                }
                if self.now - q > QUIET_LIMIT {
                    return Err(format!(
                        "no convergence {QUIET_LIMIT:?} after the server went quiet: {}",
                        self.divergence()
                    ));
                }
            }
            self.step()?;
        }
    }

    fn busy_done(&self) -> bool {
        self.mutations_left == 0
            && self.late_handlers.is_empty()
            && self.removal_at.is_none()
            && self.snapshot_at.is_none()
            && self.restart_at.is_none()
            && self.loading.is_none()
    }

    /// The restarted informer's snapshot is loaded (or found unusable).
    fn finish_load(&mut self) {
        let Some((_, snapshot)) = self.loading.take() else {
            return;
        };
        let now = self.now;
        let applied = match snapshot {
            Some(s) => {
                self.log(|| "LOADED the snapshot's objects".into());
                self.inf.handle_snapshot(now, Some(s))
            }
            None => {
                self.log(|| "LOADED: the snapshot is unusable, listing".into());
                self.inf.handle_snapshot(now, None)
            }
        };
        debug_assert!(applied);
    }

    /// After every input: drain the informer's outputs until none are left.
    fn drain(&mut self) -> Result<(), String> {
        let rv: u64 = self.inf.last_sync_resource_version().parse().unwrap_or(0);
        if rv < self.last_sync_seen {
            return Err(format!(
                "last_sync_resource_version went back from {} to {rv}",
                self.last_sync_seen
            ));
        }
        self.last_sync_seen = rv;
        if self.informer_synced && !self.inf.has_synced() {
            return Err("has_synced went back to false".into());
        }
        self.informer_synced = self.inf.has_synced();
        for h in &mut self.handlers {
            if !h.removed && self.inf.handler_has_synced(h.id) {
                h.synced = true;
            }
        }
        while let Some(out) = self.inf.poll() {
            match out {
                Output::Request { id, request } => {
                    self.lint(&request)?;
                    self.issue(id, request)
                }
                Output::WatchError(f) => {
                    self.report.watch_errors += 1;
                    self.log(|| format!("watch error: {f}"));
                }
            }
        }
        // Every handler the simulation ever added is asked, removed and busy ones included:
        // the informer must give those nothing (`notify` checks).
        let mut taken = Vec::with_capacity(1);
        for i in 0..self.handlers.len() {
            let id = self.handlers[i].id;
            if self.inf.poll_notifications(id, 1, &mut taken) > 0 {
                for n in taken.drain(..) {
                    self.notify(id, n)?;
                }
            }
        }
        Ok(())
    }

    /// The request rules of CONFORMANCE 18–20, checked on every request of every run.
    fn lint(&mut self, request: &Request) -> Result<(), String> {
        let first = self.report.lists + self.report.watches == 0;
        let last_sync = self.inf.last_sync_resource_version();
        match request {
            Request::List(l) => {
                if first && l.resource_version.as_deref() != Some("0") {
                    return Err(format!("the first list is not at resourceVersion 0: {l:?}"));
                }
                if l.continue_token.is_some() && l.resource_version.is_some() {
                    return Err(format!("a continue request with a resourceVersion: {l:?}"));
                }
                if l.continue_token.is_none() && !first {
                    // Relists ask for the last synced RV, "0" before any sync, or "" (consistent).
                    let rv = l.resource_version.as_deref().unwrap_or("");
                    let ok =
                        rv.is_empty() || rv == last_sync || (last_sync.is_empty() && rv == "0");
                    if !ok {
                        return Err(format!(
                            "relist at {rv:?} but the last synced RV is {last_sync:?}"
                        ));
                    }
                }
                if let Some(n) = self.cfg.page_size {
                    if l.limit.is_some_and(|l| l != n) {
                        return Err(format!("page size {n} asked, list has {:?}", l.limit));
                    }
                }
            }
            Request::Watch(w) => {
                if !w.allow_watch_bookmarks {
                    return Err("a watch without bookmarks".into());
                }
                if !w.timeout_seconds.is_some_and(|t| (300..600).contains(&t)) {
                    return Err(format!("watch timeout {:?}", w.timeout_seconds));
                }
                if w.send_initial_events {
                    if !self.cfg.streaming_list {
                        return Err("a streaming list that was not configured".into());
                    }
                    if w.resource_version_match
                        != Some(crate::protocol::ResourceVersionMatch::NotOlderThan)
                    {
                        return Err("a streaming list without NotOlderThan".into());
                    }
                } else if w.resource_version != last_sync {
                    return Err(format!(
                        "a watch at {:?} but the last synced RV is {last_sync:?}",
                        w.resource_version
                    ));
                }
            }
        }
        Ok(())
    }

    fn issue(&mut self, id: RequestId, request: Request) {
        let due = self.now + self.latency();
        self.log(|| format!("request {id:?} {request:?}"));
        self.flight = match request {
            Request::List(req) => {
                self.report.lists += 1;
                Flight::List { id, req, due }
            }
            Request::Watch(req) => {
                self.report.watches += 1;
                Flight::Opening { id, req, due }
            }
        };
    }

    fn notify(&mut self, id: HandlerId, n: Notification<SimObject>) -> Result<(), String> {
        self.report.notifications += 1;
        let now = self.now;
        let trace = self.cfg.trace;
        let Some(h) = self.handlers.iter_mut().find(|h| h.id == id) else {
            return Err(format!("notification for unknown handler {id:?}"));
        };
        if h.removed {
            return Err(format!("removed handler {id:?} got {n:?}"));
        }
        if h.busy_until.is_some() {
            return Err(format!("busy handler {id:?} got another notification"));
        }
        let line = trace.then(|| format!("handler {} <- {}", id, describe(&n)));
        let check_rv = |last: &mut BTreeMap<Key, u64>, key: &Key, rv: u64| {
            let prev = last.entry(key.clone()).or_insert(0);
            if rv < *prev {
                return Err(format!(
                    "handler {id:?} saw {key} go back from rv {} to {rv}",
                    *prev
                ));
            }
            *prev = rv;
            Ok(())
        };
        match &n {
            Notification::Add {
                obj,
                in_initial_list,
            } => {
                let key = Key::of(&**obj);
                if *in_initial_list && h.synced {
                    return Err(format!(
                        "handler {id:?} got an initial-list Add of {key} after it had synced"
                    ));
                }
                if h.view.contains_key(&key) {
                    return Err(format!("handler {id:?} got Add for {key} it already has"));
                }
                check_rv(&mut h.last_rv, &key, rv_of(obj))?;
                h.view.insert(key, obj.clone());
            }
            Notification::Update { old, new } => {
                let key = Key::of(&**new);
                match h.view.get(&key) {
                    None => return Err(format!("handler {id:?} got Update for unknown {key}")),
                    Some(seen) if seen.resource_version != old.resource_version => {
                        return Err(format!(
                            "handler {id:?} Update of {key}: old rv {} but it saw {}",
                            old.resource_version, seen.resource_version
                        ));
                    }
                    Some(_) => {}
                }
                check_rv(&mut h.last_rv, &key, rv_of(new))?;
                h.view.insert(key, new.clone());
            }
            Notification::Delete(d) => {
                let obj = d.object();
                let key = match d {
                    crate::object::ObjectOrTombstone::Tombstone(t) => t.key.clone(),
                    crate::object::ObjectOrTombstone::Object(o) => Key::of(&**o),
                };
                if h.view.remove(&key).is_none() {
                    return Err(format!("handler {id:?} got Delete for unknown {key}"));
                }
                // uids are never reused: a delete of an object whose uid still lives on the
                // server is spurious (e.g. a store that applied half a list).
                if live_uid(&self.server, &key, &obj.uid) {
                    return Err(format!(
                        "handler {id:?} got Delete of {key} (uid {}) which still exists",
                        obj.uid
                    ));
                }
                check_rv(&mut h.last_rv, &key, rv_of(obj))?;
            }
        }
        let delay = if h.slowness.is_zero() {
            Duration::ZERO
        } else {
            let nanos = u64::try_from(h.slowness.as_nanos()).unwrap_or(u64::MAX);
            Duration::from_nanos(self.rng_handlers.below(nanos))
        };
        if let Some(h) = self.handlers.iter_mut().find(|h| h.id == id) {
            h.busy_until = Some(now + delay);
        }
        if let Some(line) = line {
            self.log(|| line);
        }
        Ok(())
    }

    fn next_transport(&self) -> Option<Instant> {
        match &self.flight {
            Flight::Idle | Flight::Hung => None,
            Flight::List { due, .. } | Flight::Opening { due, .. } => Some(*due),
            Flight::Watch(w) => {
                let mut t = Some(w.end_at);
                let mut consider = |x: Option<Instant>| {
                    if let Some(x) = x {
                        t = Some(t.map_or(x, |t: Instant| t.min(x)));
                    }
                };
                if !w.queued.is_empty() {
                    consider(Some(self.now));
                }
                consider(w.deliver_at);
                consider(w.next_bookmark);
                consider(w.fault.map(|f| f.0));
                t
            }
        }
    }

    /// Advances the clock to the earliest pending event and runs it.
    fn step(&mut self) -> Result<(), String> {
        // Notifications coalesce per object: a handler never has more pending than there are
        // keys (`names` bounds every key the server ever had).
        for h in self.handlers.iter().filter(|h| !h.removed) {
            let pending = self.inf.pending(h.id);
            if pending > self.cfg.names as usize {
                return Err(format!(
                    "handler {} has {pending} notifications pending for at most {} keys",
                    h.id, self.cfg.names
                ));
            }
        }
        let handler_t = self.handlers.iter().filter_map(|h| h.busy_until).min();
        let work_t = [
            if self.mutations_left > 0 {
                self.next_mutation
            } else {
                None
            },
            self.late_handlers.front().map(|x| x.0),
            self.removal_at,
            self.snapshot_at,
            self.restart_at,
            self.loading.as_ref().map(|l| l.0),
            if self.quiet_since.is_none() {
                self.next_compaction
            } else {
                None
            },
        ]
        .into_iter()
        .flatten()
        .min();
        let net_t = self.next_transport();
        let timer_t = self.inf.poll_timeout();
        let candidates = [handler_t, work_t, net_t, timer_t];
        let Some(next) = candidates.iter().flatten().min().copied() else {
            // Nothing can happen any more.
            return Err(format!("deadlock: nothing pending; {}", self.divergence()));
        };
        if next > self.now {
            self.now = next;
        }
        let now = self.now;
        if handler_t.is_some_and(|t| t <= now) {
            let Some(h) = self
                .handlers
                .iter_mut()
                .find(|h| h.busy_until.is_some_and(|t| t <= now))
            else {
                return Ok(());
            };
            h.busy_until = None;
            let id = h.id;
            self.inf.handler_done(id);
            return Ok(());
        }
        if work_t.is_some_and(|t| t <= now) {
            if self.loading.as_ref().is_some_and(|l| l.0 <= now) {
                self.finish_load();
            } else if self.snapshot_at.is_some_and(|t| t <= now) {
                self.take_snapshot();
            } else if self.restart_at.is_some_and(|t| t <= now) {
                self.restart()?;
            } else {
                self.work();
            }
            return Ok(());
        }
        if net_t.is_some_and(|t| t <= now) {
            let inputs = self.transport();
            for input in inputs {
                self.feed(input);
                self.drain()?;
            }
            return Ok(());
        }
        if timer_t.is_some_and(|t| t <= now) {
            self.log(|| "timeout".into());
            self.inf.handle_timeout(now);
            if self.inf.poll_timeout().is_some_and(|t| t <= now) {
                return Err("poll_timeout did not move past now after handle_timeout".into());
            }
        }
        Ok(())
    }

    fn feed(&mut self, (id, input): Input) {
        let now = self.now;
        self.log(|| match &input {
            protocol::Input::ListPage(p) => format!(
                "page {id:?} rv={} n={} continue={:?}",
                p.resource_version,
                p.items.len(),
                p.continue_token
            ),
            protocol::Input::Event(e) => format!("event {id:?} {}", describe_event(e)),
            protocol::Input::StreamEnd => format!("end {id:?}"),
            protocol::Input::Failed(f) => format!("fail {id:?} {f}"),
        });
        self.inf.handle_input(now, id, input);
    }

    fn work(&mut self) {
        let now = self.now;
        if self.late_handlers.front().is_some_and(|x| x.0 <= now) {
            let Some((_, period)) = self.late_handlers.pop_front() else {
                return;
            };
            let (id, _) = self.inf.add_handler(period, now).expect("not stopped");
            let slowness = Self::pick_slowness(&mut self.rng_handlers);
            self.log(|| format!("add handler {} resync {period:?}", id));
            self.handlers.push(SimHandler {
                id,
                view: BTreeMap::new(),
                last_rv: BTreeMap::new(),
                busy_until: None,
                slowness,
                removed: false,
                synced: false,
            });
            return;
        }
        if self.removal_at.is_some_and(|t| t <= now) {
            self.removal_at = None;
            let live: Vec<usize> = (0..self.handlers.len())
                .filter(|&i| !self.handlers[i].removed)
                .collect();
            if live.len() > 1 {
                let i = live[self.rng_work.below(live.len() as u64) as usize];
                let h = &mut self.handlers[i];
                h.removed = true;
                h.busy_until = None;
                let id = h.id;
                let removed = self.inf.remove_handler(id);
                debug_assert_eq!(removed, Ok(true));
                self.log(|| format!("remove handler {}", id));
            }
            return;
        }
        if self.quiet_since.is_none() && self.next_compaction.is_some_and(|t| t <= now) {
            let window = [0, 3, 10, 50][self.rng_work.below(4) as usize];
            let to = self.server.rv.saturating_sub(window);
            self.server.compact(to);
            self.fault("compaction");
            let every = self.cfg.compaction_every.as_millis() as u64;
            self.next_compaction = Some(now + ms(1 + self.rng_work.below(every)));
            return;
        }
        if self.mutations_left > 0 && self.next_mutation.is_some_and(|t| t <= now) {
            self.mutate();
            self.mutations_left -= 1;
            self.report.mutations += 1;
            let gap = match self.rng_work.below(4) {
                0 => 0,
                1 => self.rng_work.below(50),
                2 => self.rng_work.below(1_000),
                _ => self.rng_work.below(5_000),
            };
            self.next_mutation = Some(now + ms(gap));
            // Wake the open watch.
            let lat = self.latency();
            if let Flight::Watch(w) = &mut self.flight {
                if w.deliver_at.is_none() {
                    w.deliver_at = Some(now + lat);
                }
            }
        }
    }

    fn mutate(&mut self) {
        let r = &mut self.rng_work;
        let i = r.below(u64::from(self.cfg.names));
        let ns = if i % 3 == 0 { None } else { Some("ns") };
        let name = format!("o{i}");
        let key = Key::new(ns, &name);
        let data = r.next_u64() % 1000;
        let noise = r.next_u64() % 1000;
        let exists = self.server.objects().contains_key(&key);
        let what = if !exists {
            self.server.create(ns, &name, data, noise);
            "create"
        } else if r.chance(0.3) {
            self.server.delete(&key);
            "delete"
        } else {
            self.server.update(&key, data, noise);
            "update"
        };
        let rv = self.server.rv;
        self.log(|| format!("server {what} {key} rv={rv}"));
    }

    /// Runs the due part of the request in flight; returns the inputs it produces.
    fn transport(&mut self) -> Vec<Input> {
        let now = self.now;
        let flight = core::mem::replace(&mut self.flight, Flight::Idle);
        let mut out = Vec::new();
        match flight {
            Flight::Idle | Flight::Hung => {}
            Flight::List { id, req, due } if due <= now => {
                out.extend(self.answer_list(id, &req));
            }
            Flight::Opening { id, req, due } if due <= now => {
                self.open_watch(id, &req, &mut out);
            }
            Flight::Watch(mut w) => {
                let mut open = true;
                while let Some(e) = w.queued.pop_front() {
                    out.push((w.id, protocol::Input::Event(e)));
                }
                if w.deliver_at.is_some_and(|t| t <= now) {
                    w.deliver_at = None;
                    for e in self.server.events_after(w.cursor) {
                        let ev = match (&e.prev, &e.next) {
                            (None, Some(_)) => WatchEvent::Added(e.event.clone()),
                            (Some(_), Some(_)) => WatchEvent::Modified(e.event.clone()),
                            _ => WatchEvent::Deleted(e.event.clone()),
                        };
                        out.push((w.id, protocol::Input::Event(ev)));
                    }
                    w.cursor = self.server.rv;
                }
                if w.next_bookmark.is_some_and(|t| t <= now) {
                    if w.deliver_at.is_none() {
                        // Everything is delivered: the bookmark may claim the current RV.
                        w.cursor = w.cursor.max(self.server.rv);
                        out.push((
                            w.id,
                            protocol::Input::Event(WatchEvent::Bookmark {
                                resource_version: w.cursor.to_string(),
                                initial_events_end: false,
                            }),
                        ));
                    }
                    w.next_bookmark = Some(now + ms(1_000 + self.rng_net.below(60_000)));
                }
                if let Some((t, f)) = w.fault {
                    if t <= now {
                        open = false;
                        let ev = match f {
                            MidFault::Drop => None,
                            MidFault::Error410 => Some(Failure::Expired(Status {
                                code: 410,
                                reason: "Expired".into(),
                                message: "too old resource version".into(),
                                ..Status::default()
                            })),
                            MidFault::Error500 => Some(Failure::Other(Status {
                                code: 500,
                                reason: "InternalError".into(),
                                message: "etcd leader changed".into(),
                                ..Status::default()
                            })),
                            MidFault::Error429 => Some(Failure::TooManyRequests(Status {
                                code: 429,
                                reason: "TooManyRequests".into(),
                                message: "slow down".into(),
                                retry_after: Some(Duration::from_secs(self.rng_net.below(4))),
                                ..Status::default()
                            })),
                        };
                        if let Some(f) = ev {
                            out.push((w.id, protocol::Input::Event(WatchEvent::Error(f))));
                        }
                        out.push((w.id, protocol::Input::StreamEnd));
                    }
                }
                if open && w.end_at <= now {
                    open = false;
                    out.push((w.id, protocol::Input::StreamEnd));
                }
                if open {
                    self.flight = Flight::Watch(w);
                }
            }
            other => self.flight = other,
        }
        out
    }

    fn answer_list(&mut self, id: RequestId, req: &ListRequest) -> Option<Input> {
        if self.faulty() {
            let specific = req
                .resource_version
                .as_deref()
                .is_some_and(|r| !r.is_empty() && r != "0");
            let choice = self.rng_fault.below(6);
            if choice == 5 {
                self.fault("hung list");
                self.flight = Flight::Hung;
                return None;
            }
            let f = match choice {
                0 => {
                    self.fault("list connection refused");
                    Failure::ConnectionRefused("connect: connection refused".into())
                }
                1 => {
                    self.fault("list 429");
                    Failure::TooManyRequests(Status {
                        code: 429,
                        reason: "TooManyRequests".into(),
                        retry_after: Some(Duration::from_secs(1 + self.rng_fault.below(5))),
                        ..Status::default()
                    })
                }
                2 if req.continue_token.is_some() => {
                    self.fault("list expired continue");
                    Failure::Expired(Status {
                        code: 410,
                        reason: "Expired".into(),
                        message: "The provided continue parameter is too old".into(),
                        continue_token: Some("inconsistent".into()),
                        ..Status::default()
                    })
                }
                3 if specific => {
                    self.fault("list too large rv");
                    Failure::TooLargeResourceVersion(Status {
                        code: 504,
                        reason: "Timeout".into(),
                        message: "Too large resource version".into(),
                        ..Status::default()
                    })
                }
                _ => {
                    self.fault("list 500");
                    Failure::Other(Status {
                        code: 500,
                        reason: "InternalError".into(),
                        message: "boom".into(),
                        ..Status::default()
                    })
                }
            };
            return Some((id, protocol::Input::Failed(f)));
        }
        Some(match self.server.list(req) {
            Ok(p) => (id, protocol::Input::ListPage(p)),
            Err(f) => (id, protocol::Input::Failed(f)),
        })
    }

    fn open_watch(&mut self, id: RequestId, req: &WatchRequest, out: &mut Vec<Input>) {
        let now = self.now;
        if self.faulty() {
            match self.rng_fault.below(6) {
                5 => {
                    self.fault("hung watch");
                    self.flight = Flight::Hung;
                }
                0 => {
                    self.fault("watch connection refused");
                    out.push((
                        id,
                        protocol::Input::Failed(Failure::ConnectionRefused(
                            "connect: connection refused".into(),
                        )),
                    ));
                }
                1 => {
                    self.fault("watch 429");
                    out.push((
                        id,
                        protocol::Input::Failed(Failure::TooManyRequests(Status {
                            code: 429,
                            reason: "TooManyRequests".into(),
                            retry_after: Some(Duration::from_secs(self.rng_fault.below(3))),
                            ..Status::default()
                        })),
                    ));
                }
                2 => {
                    self.fault("very short watch");
                    out.push((id, protocol::Input::StreamEnd));
                }
                3 => {
                    self.fault("watch ERROR 410 at open");
                    out.push((
                        id,
                        protocol::Input::Event(WatchEvent::Error(Failure::Expired(Status {
                            code: 410,
                            reason: "Expired".into(),
                            message: "too old resource version".into(),
                            ..Status::default()
                        }))),
                    ));
                    out.push((id, protocol::Input::StreamEnd));
                }
                _ => {
                    self.fault("watch request 500");
                    out.push((
                        id,
                        protocol::Input::Failed(Failure::other("stream error: INTERNAL_ERROR")),
                    ));
                }
            }
            return;
        }
        match self.server.watch(req) {
            Err(f) => {
                if matches!(f, Failure::StreamingListUnsupported(_)) {
                    *self
                        .report
                        .faults
                        .entry("streaming list refused")
                        .or_default() += 1;
                }
                out.push((id, protocol::Input::Failed(f)));
            }
            Ok(WatchOpen::ErrorThenEnd(f)) => {
                *self
                    .report
                    .faults
                    .entry("watch 410 (compacted)")
                    .or_default() += 1;
                out.push((id, protocol::Input::Event(WatchEvent::Error(f))));
                out.push((id, protocol::Input::StreamEnd));
            }
            Ok(WatchOpen::Stream { initial, cursor }) => {
                let timeout = Duration::from_secs(u64::from(req.timeout_seconds.unwrap_or(600)));
                let fault = if self.faulty() {
                    let at = now + ms(self.rng_fault.below(120_000));
                    let f = match self.rng_fault.below(4) {
                        0 => MidFault::Drop,
                        1 => MidFault::Error410,
                        2 => MidFault::Error500,
                        _ => MidFault::Error429,
                    };
                    self.fault(match f {
                        MidFault::Drop => "watch dropped",
                        MidFault::Error410 => "watch ERROR 410",
                        MidFault::Error500 => "watch ERROR 500",
                        MidFault::Error429 => "watch ERROR 429",
                    });
                    Some((at, f))
                } else {
                    None
                };
                let pending = self.server.rv > cursor;
                let w = OpenWatch {
                    id,
                    bookmarks: req.allow_watch_bookmarks,
                    cursor,
                    queued: initial.into(),
                    deliver_at: pending.then_some(now),
                    next_bookmark: None,
                    end_at: now + timeout,
                    fault,
                };
                let mut w = w;
                if w.bookmarks {
                    w.next_bookmark = Some(now + ms(1_000 + self.rng_net.below(60_000)));
                }
                self.flight = Flight::Watch(w);
            }
        }
    }

    /// The expected cache: the server's objects after the transform.
    fn expected(&self) -> BTreeMap<Key, (String, u64, u64)> {
        self.server
            .objects()
            .iter()
            .map(|(k, o)| {
                let noise = if self.cfg.transform { 0 } else { o.noise };
                (k.clone(), (o.resource_version.clone(), o.data, noise))
            })
            .collect()
    }

    fn cache(&self) -> BTreeMap<Key, (String, u64, u64)> {
        self.inf
            .indexer()
            .iter()
            .map(|(k, o)| (k.clone(), (o.resource_version.clone(), o.data, o.noise)))
            .collect()
    }

    /// Whether everything has caught up: the cache equals the server's state, every handler's
    /// view equals the cache, everything reports synced. A handler may still be busy with
    /// resyncs (same resourceVersion) when it has caught up.
    fn converged(&self) -> Result<bool, String> {
        if !self.inf.has_synced() {
            return Ok(false);
        }
        let cache = self.cache();
        if cache != self.expected() {
            return Ok(false);
        }
        for h in self.handlers.iter().filter(|h| !h.removed) {
            if view_of(h) != cache || !self.inf.handler_has_synced(h.id) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The consistency check at a quiet moment (see the module documentation): true if it
    /// reached a verdict, false if it could not list (compacted away); a divergence is an error.
    fn consistency_check(&mut self) -> Result<bool, String> {
        if !self.inf.has_synced() {
            return Ok(false);
        }
        let rv = self.inf.last_sync_resource_version().to_string();
        if rv.is_empty() {
            return Ok(false);
        }
        let mut listed: Vec<Arc<SimObject>> = Vec::new();
        let mut continue_token = None;
        loop {
            let req = consistency::list_request(
                &rv,
                continue_token.take(),
                &Default::default(),
                CHECK_PAGE,
            );
            let Ok(page) = self.server.list(&req) else {
                return Ok(false);
            };
            listed.extend(page.items.into_iter().map(|o| self.inf.transform_object(o)));
            match page.continue_token {
                Some(t) if !t.is_empty() => continue_token = Some(t),
                _ => break,
            }
        }
        self.report.consistency_checks += 1;
        let same = |a: &SimObject, b: &SimObject| a == b;
        match consistency::compare(
            &rv,
            self.inf.indexer().list().map(|o| &**o),
            listed.iter().map(|o| &**o),
            Some(&same),
        ) {
            None => {
                self.log(|| format!("consistency check at {rv}: agrees"));
                Ok(true)
            }
            Some(d) => Err(format!("consistency check: {d} ({d:?})")),
        }
    }

    fn divergence(&self) -> String {
        let mut s = format!(
            "server rv {} (compacted {}), informer last sync rv {:?}, synced {}; cache vs server: {}",
            self.server.rv,
            self.server.compacted,
            self.inf.last_sync_resource_version(),
            self.inf.has_synced(),
            diff(&self.cache(), &self.expected())
        );
        let cache = self.cache();
        for h in &self.handlers {
            s.push_str(&format!(
                "; handler {} removed={} busy={:?} pending={} synced={} view vs cache: {}",
                h.id,
                h.removed,
                h.busy_until,
                self.inf.pending(h.id),
                self.inf.handler_has_synced(h.id),
                diff(&view_of(h), &cache)
            ));
        }
        s
    }
}

fn live_uid(server: &ModelServer, key: &Key, uid: &str) -> bool {
    server.objects().get(key).is_some_and(|o| o.uid == uid)
}

fn view_of(h: &SimHandler) -> BTreeMap<Key, (String, u64, u64)> {
    h.view
        .iter()
        .map(|(k, o)| (k.clone(), (o.resource_version.clone(), o.data, o.noise)))
        .collect()
}

fn diff<V: PartialEq + fmt::Debug>(a: &BTreeMap<Key, V>, b: &BTreeMap<Key, V>) -> String {
    let mut out = Vec::new();
    for (k, v) in a {
        match b.get(k) {
            None => out.push(format!("{k}: {v:?} vs missing")),
            Some(w) if w != v => out.push(format!("{k}: {v:?} vs {w:?}")),
            _ => {}
        }
    }
    for (k, w) in b {
        if !a.contains_key(k) {
            out.push(format!("{k}: missing vs {w:?}"));
        }
    }
    if out.is_empty() {
        "equal".to_string()
    } else {
        out.truncate(12);
        out.join(", ")
    }
}

fn describe(n: &Notification<SimObject>) -> String {
    match n {
        Notification::Add {
            obj,
            in_initial_list,
        } => format!(
            "Add {} rv={} initial={in_initial_list}",
            Key::of(&**obj),
            obj.resource_version
        ),
        Notification::Update { old, new } => format!(
            "Update {} rv {}->{}",
            Key::of(&**new),
            old.resource_version,
            new.resource_version
        ),
        Notification::Delete(d) => format!(
            "Delete {} rv={} tombstone={}",
            Key::of(&**d.object()),
            d.object().resource_version,
            d.is_tombstone()
        ),
    }
}

fn describe_event(e: &WatchEvent<SimObject>) -> String {
    match e {
        WatchEvent::Added(o) => format!("ADDED {} rv={}", Key::of(&**o), o.resource_version),
        WatchEvent::Modified(o) => format!("MODIFIED {} rv={}", Key::of(&**o), o.resource_version),
        WatchEvent::Deleted(o) => format!("DELETED {} rv={}", Key::of(&**o), o.resource_version),
        WatchEvent::Bookmark {
            resource_version,
            initial_events_end,
        } => format!("BOOKMARK rv={resource_version} end={initial_events_end}"),
        WatchEvent::Error(f) => format!("ERROR {f}"),
    }
}

/// Object-safe accessor used by the tests: the resourceVersion of an object as a number.
pub fn numeric_rv<K: Object>(o: &K) -> u64 {
    o.resource_version()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}
