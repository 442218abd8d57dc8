//! Sharding one controller across replicas through Leases, driven on a [`Runtime`]:
//! informer-core's [`Member`] and [`Sharder`](informer_core::controller::shard::Sharder) decide
//! (see [`informer_core::controller::shard`] for the protocol and its guarantees), these tasks
//! perform the Lease and object requests and publish the outcome in a [`Sharding`] handle.
//!
//! - The **member task** holds this member's Lease `<ring>-m-<member>` (labelled
//!   `informer-rs.io/ring=<ring>`, its acknowledged table version in the `<ring>/ack`
//!   annotation) and writes the label acknowledgements of drained objects (labels mode); in
//!   the filter, server and buckets modes an informer of the table's Lease hands every
//!   published table to the member as it is written.
//! - The **sharder task** campaigns for the ring's Lease `<ring>`; every retry period it reads
//!   the ring's member Leases (a quorum LIST); while elected it labels, drains and relabels
//!   objects (labels mode, from informers of [`ShardView`]s over all objects of the primary and
//!   owned kinds; [`ShardConfig::writes_in_flight`] patches out at once, a sliding window),
//!   publishes the table on the Lease `<ring>-table` (filter and server modes), or both
//!   (buckets mode: each object labelled once with its bucket, the table moving buckets).
//! - The [`Sharding`] handle answers [`try_start`](Sharding::try_start) and
//!   [`finish`](Sharding::finish) around each reconcile: [`Controller::shard`] wires it in, so
//!   the same reconcile runs sharded or not.
//!
//! The server mode is the filter mode with the member's ranges sent as the primary informer's
//! `shardSelector` ([`Sharding::shard_selector`], set by [`Controller::shard`] as the table
//! changes); the member still filters what it gets, so a server that ignores the selector
//! (before 1.36, or with the feature off) costs memory, never correctness, and once that is
//! seen the controller stops sending it. No 1.36 server runs on this project's test machine:
//! the decisions are simulated (`shard_10`) and the requests checked against a scripted
//! server (`informer-testkit/tests/shard_selectors.rs`). The buckets mode's selector
//! (`<ring>/bucket in (…)`, [`Sharding::label_selector`]) is set the same way on the primary
//! informer and on the `owns` informers.
//!
//! A member that loses its Lease is retired for good: [`retired`](Sharding::retired) resolves,
//! the controller cancels its reconciles at once and returns
//! [`ControllerError::ShardRetired`](crate::ControllerError::ShardRetired); the process
//! rejoins by starting again under a new member name ([`member_name`]).
//!
//! [`Controller::shard`]: crate::Controller::shard

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use event_listener::Event;
use futures_util::future::{Either, select};
use futures_util::{FutureExt, StreamExt};
use informer_core::controller::leaderelection::{
    GetOutcome, LeaderElectionConfig, LeaseRequest, LeaseWrite, WriteOutcome,
};
use informer_core::controller::shard::{
    LabelAck, Member, MemberEvent, MemberLease, Mode, ShardConfig, ShardError, ShardTable,
    ShardView, ShardWrite, Sharder, WriteId, WriteResult,
};
use informer_core::object::{DynamicObject, Object, ObjectOrTombstone};
use informer_core::protocol::{ListRequest, Selectors};
use informer_core::time::Instant as CoreInstant;
use informer_http::write::{
    DeleteParams, Patch, PatchParams, PostParams, Preconditions, WriteError,
};
use informer_http::{Api, Backend, Client, Resource};

use crate::handler::HandlerFns;
use crate::informer::Informer;
use crate::leader::{Leadership, lease_with, record_of, written};
use crate::runtime::Runtime;

/// A member name unique per incarnation: `prefix` (cut to 48 characters, lowercased, other
/// characters than alphanumerics and `-` dropped) and 8 random hex digits.
pub fn member_name(prefix: &str) -> String {
    let mut p: String = prefix
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
        .take(48)
        .collect();
    let p2 = p.trim_matches('-').to_string();
    p = if p2.is_empty() { "member".into() } else { p2 };
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut rng = informer_core::rng::SplitMix64::new(
        nanos ^ u64::from(std::process::id()) << 32 ^ COUNTER.fetch_add(1, Ordering::Relaxed),
    );
    format!("{p}-{:08x}", rng.next_u64() as u32)
}

/// `own` and `more` as one label selector (both must match).
pub(crate) fn join_selectors(own: Option<&str>, more: &str) -> String {
    match own {
        Some(own) if !own.is_empty() => format!("{own},{more}"),
        _ => more.to_string(),
    }
}

/// Which objects the ring shares out (the sharder labels them in the labels mode): those the
/// controller's informers see. Default: every namespace, every object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardScope {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only primary objects matching this label selector (the primary informer's own).
    pub label_selector: Option<String>,
}

impl ShardScope {
    /// The objects of one namespace.
    pub fn namespace(namespace: impl Into<String>) -> Self {
        ShardScope {
            namespace: Some(namespace.into()),
            label_selector: None,
        }
    }
}

/// Why sharding could not start, or stopped.
#[derive(Debug)]
#[non_exhaustive]
pub enum ShardingError {
    /// The configuration is unusable.
    Config(ShardError),
    /// A task could not be spawned.
    Spawn(crate::SpawnError),
    /// An informer of the sharder could not start.
    Informer(crate::Error),
}

impl fmt::Display for ShardingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShardingError::Config(e) => write!(f, "{e}"),
            ShardingError::Spawn(e) => write!(f, "sharding: {e}"),
            ShardingError::Informer(e) => write!(f, "sharding: {e}"),
        }
    }
}

impl std::error::Error for ShardingError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ShardingError::Config(e) => Some(e),
            ShardingError::Spawn(e) => Some(e),
            ShardingError::Informer(e) => Some(e),
        }
    }
}

impl From<crate::SpawnError> for ShardingError {
    fn from(e: crate::SpawnError) -> Self {
        ShardingError::Spawn(e)
    }
}

struct Inner {
    cfg: ShardConfig,
    member: Mutex<Member>,
    sharder: Mutex<Sharder>,
    working: AtomicBool,
    retired: AtomicBool,
    leading: AtomicBool,
    stop: AtomicBool,
    abandon: AtomicBool,
    /// Any change of state or table (wakes waiters and the tasks).
    changed: Event,
    table_version: AtomicU64,
    tasks: AtomicUsize,
    base: std::time::Instant,
    /// Label acknowledgements to write (labels mode), by the ack task: never in the way of the
    /// Lease renewals.
    acks: Mutex<Vec<LabelAck>>,
    /// The scope's own label selector (joined to the buckets' in the buckets mode).
    scope_selector: Option<String>,
}

impl Inner {
    fn now(&self) -> CoreInstant {
        CoreInstant::from_epoch(self.base.elapsed())
    }
    fn member(&self) -> MutexGuard<'_, Member> {
        self.member.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn sharder(&self) -> MutexGuard<'_, Sharder> {
        self.sharder.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn notify(&self) {
        self.changed.notify(usize::MAX);
    }
    async fn wait_until(&self, f: impl Fn(&Inner) -> bool) {
        loop {
            let l = self.changed.listen();
            if f(self) {
                return;
            }
            l.await;
        }
    }
}

/// The handle of a running member (cloneable): what the controller asks before and after
/// each reconcile.
#[derive(Clone)]
pub struct Sharding {
    inner: Arc<Inner>,
}

impl fmt::Debug for Sharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sharding")
            .field("ring", &self.inner.cfg.ring)
            .field("member", &self.inner.cfg.member)
            .field("working", &self.is_working())
            .field("sharder", &self.is_sharder())
            .finish()
    }
}

impl Sharding {
    /// Joins the ring of `config` in `namespace` (where the Leases live) on `rt`: starts the
    /// member and sharder tasks. `primary` is the reconciled resource; `owned` the kinds
    /// hashed by their controller owner (labelled too, in the labels mode); `scope` the
    /// objects of them the controller sees.
    pub fn spawn<R: Runtime, B: Backend>(
        rt: R,
        client: &Client<B>,
        namespace: &str,
        config: ShardConfig,
        primary: Resource,
        owned: Vec<Resource>,
        scope: ShardScope,
    ) -> Result<Sharding, ShardingError> {
        let member = Member::new(config.clone()).map_err(ShardingError::Config)?;
        let sharder = Sharder::new(config.clone()).map_err(ShardingError::Config)?;
        let inner = Arc::new(Inner {
            cfg: config,
            member: Mutex::new(member),
            sharder: Mutex::new(sharder),
            working: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            leading: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            abandon: AtomicBool::new(false),
            changed: Event::new(),
            table_version: AtomicU64::new(0),
            tasks: AtomicUsize::new(3),
            base: std::time::Instant::now(),
            acks: Mutex::new(Vec::new()),
            scope_selector: scope.label_selector.clone(),
        });
        let leases: Api<DynamicObject, B> = client.api(Resource::LEASES, Some(namespace));
        let mut kinds = vec![primary];
        kinds.extend(owned);
        let apis: Vec<Resource> = kinds;
        // Filter, server and buckets modes: the table is watched, so a new one applies within
        // the watch's latency, not at the next of periodic reads.
        let table = match inner.cfg.mode {
            Mode::Labels => None,
            Mode::Filter | Mode::Server | Mode::Buckets => Some(
                start_table_informer(&rt, client, namespace, &inner)
                    .map_err(ShardingError::Informer)?,
            ),
        };
        rt.spawn(Box::pin(member_task(
            rt.clone(),
            inner.clone(),
            leases.clone(),
            table,
        )))?;
        rt.spawn(Box::pin(ack_task(
            rt.clone(),
            inner.clone(),
            client.clone(),
            apis[0].clone(),
        )))?;
        rt.spawn(Box::pin(sharder_task(
            rt.clone(),
            inner.clone(),
            client.clone(),
            leases,
            namespace.to_string(),
            apis,
            scope,
        )))?;
        Ok(Sharding { inner })
    }

    /// The configuration.
    pub fn config(&self) -> &ShardConfig {
        &self.inner.cfg
    }

    /// This member's name.
    pub fn member(&self) -> &str {
        &self.inner.cfg.member
    }

    /// The label selector this member's primary informer watches with: in the labels mode
    /// `<ring>/shard=<member>`; in the buckets mode the buckets of the table it applied
    /// (`<ring>/bucket in (…)`, one that matches nothing before the first table), joined to
    /// the scope's own selector, which [`Controller::shard`](crate::Controller::shard) sets
    /// again on the primary informer ([`Informer::set_selectors`]) as the table changes;
    /// `None` in the filter and server modes, which watch everything.
    pub fn label_selector(&self) -> Option<String> {
        match self.inner.cfg.mode {
            Mode::Labels => Some(self.inner.cfg.label_selector()),
            Mode::Buckets => {
                let buckets = self.inner.member().label_selector()?;
                Some(join_selectors(
                    self.inner.scope_selector.as_deref(),
                    &buckets,
                ))
            }
            Mode::Filter | Mode::Server => None,
        }
    }

    /// Buckets mode: the label selector of this member's buckets alone
    /// (`<ring>/bucket in (…)`), for the owned kinds' informers; `None` in the other modes.
    pub fn bucket_selector(&self) -> Option<String> {
        self.inner.member().label_selector()
    }

    /// The `shardSelector` (Kubernetes 1.36+, KEP-5866) of this member's ranges in the table it
    /// applied: server mode only (`None` in the others, before the first table and while it
    /// owns nothing). [`Controller::shard`](crate::Controller::shard) sets it on the primary
    /// informer ([`Informer::set_selectors`]) as the table changes.
    pub fn shard_selector(&self) -> Option<String> {
        if self.inner.cfg.mode != Mode::Server {
            return None;
        }
        self.inner.member().selector()
    }

    /// True while this member holds its Lease.
    pub fn is_working(&self) -> bool {
        self.inner.working.load(Ordering::Acquire)
    }

    /// True once this member lost its Lease (or left): it never works again.
    pub fn is_retired(&self) -> bool {
        self.inner.retired.load(Ordering::Acquire)
    }

    /// True while this member is the elected sharder.
    pub fn is_sharder(&self) -> bool {
        self.inner.leading.load(Ordering::Acquire)
    }

    /// Resolves once this member works (or is retired).
    pub async fn working(&self) {
        self.inner
            .wait_until(|i| i.working.load(Ordering::Acquire) || i.retired.load(Ordering::Acquire))
            .await
    }

    /// Resolves once this member is retired.
    pub async fn retired(&self) {
        self.inner
            .wait_until(|i| i.retired.load(Ordering::Acquire))
            .await
    }

    /// The version of the table applied (filter and server modes; 0 before any).
    pub fn table_version(&self) -> u64 {
        self.inner.table_version.load(Ordering::Acquire)
    }

    /// Resolves once the table version differs from `seen` or the member stops working.
    pub async fn table_changed(&self, seen: u64) {
        self.inner
            .wait_until(|i| {
                i.table_version.load(Ordering::Acquire) != seen
                    || i.retired.load(Ordering::Acquire)
                    || i.stop.load(Ordering::Acquire)
            })
            .await
    }

    /// The writes this member's sharder made (labels, drains, tables).
    pub fn sharder_writes(&self) -> u64 {
        self.inner.sharder().writes()
    }

    /// True when this member owns `obj` now.
    pub fn owns<O: Object + ?Sized>(&self, obj: &O) -> bool {
        let s = self.inner.cfg.object_shard(obj);
        self.inner.member().owns(s)
    }

    /// Starts work on `key` (whose object is `obj`) if this member owns it; true when
    /// started, and then [`finish`](Self::finish) must follow.
    pub fn try_start<O: Object + ?Sized>(&self, key: &str, obj: &O) -> bool {
        let s = self.inner.cfg.object_shard(obj);
        self.inner.member().try_start(key, s)
    }

    /// The work on `key` ended.
    pub fn finish(&self, key: &str) {
        self.inner.member().finish(key);
        // Wakes the member task: an acknowledgement may be due.
        self.inner.notify();
    }

    /// Labels mode: `obj` (key `key`) as this member's informer shows it; a drained one is
    /// acknowledged (its labels removed) once its work ends.
    pub fn observe<O: Object + ?Sized>(&self, key: &str, obj: &O) {
        let s = self.inner.cfg.object_shard(obj);
        let rv = obj.resource_version().unwrap_or("");
        self.inner.member().observe_object(key, s, rv);
        self.inner.notify();
    }

    /// Labels mode: `key` left this member's informer.
    pub fn forget(&self, key: &str) {
        self.inner.member().forget_object(key);
    }

    /// Leaves the ring: stops working at once, writes the Lease free (its keys move at the
    /// sharder's next read, not after the lease duration) and stops the tasks.
    pub async fn shutdown(&self) {
        self.inner.stop.store(true, Ordering::Release);
        self.inner.notify();
        self.inner
            .wait_until(|i| i.tasks.load(Ordering::Acquire) == 0)
            .await
    }

    /// Stops as a crashed process would: no Lease written; the others reassign this member's
    /// keys once its Lease expires.
    pub async fn abandon(&self) {
        self.inner.abandon.store(true, Ordering::Release);
        self.shutdown().await
    }
}

/// Ends a task: counts it out, and marks the member stopped.
struct TaskExit(Arc<Inner>);

impl Drop for TaskExit {
    fn drop(&mut self) {
        self.0.tasks.fetch_sub(1, Ordering::AcqRel);
        self.0.notify();
    }
}

fn sleep_until<R: Runtime>(
    rt: &R,
    inner: &Inner,
    at: Option<CoreInstant>,
) -> crate::BoxFuture<'static, ()> {
    let wait = match at {
        Some(at) => at.saturating_duration_since(inner.now()),
        None => Duration::from_secs(3600),
    };
    rt.sleep(wait)
}

/// `namespace/name` (or `name`) split.
fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((ns, name)) if !ns.is_empty() => (Some(ns), name),
        Some((_, name)) => (None, name),
        None => (None, key),
    }
}

/// Writes the label acknowledgements (labels mode): removes both labels at the version seen.
async fn ack_task<R: Runtime, B: Backend>(
    rt: R,
    inner: Arc<Inner>,
    client: Client<B>,
    primary: Resource,
) {
    let _exit = TaskExit(inner.clone());
    let cfg = inner.cfg.clone();
    let mut retry: Vec<LabelAck> = Vec::new();
    loop {
        let listen = inner.changed.listen();
        if inner.stop.load(Ordering::Acquire) {
            break;
        }
        let mut batch = std::mem::take(&mut *inner.acks.lock().unwrap_or_else(|p| p.into_inner()));
        batch.append(&mut retry);
        if batch.is_empty() {
            listen.await;
            continue;
        }
        // As the sharder's writes: a sliding window of `writes_in_flight`.
        let mut done = futures_util::stream::iter(batch.into_iter().map(|a| {
            let (client, primary, cfg) = (&client, &primary, &cfg);
            async move {
                let (ns, name) = split_key(&a.key);
                let api: Api<DynamicObject, B> = client.api(primary.clone(), ns);
                let patch = serde_json::json!({"metadata": {
                    "resourceVersion": a.resource_version,
                    "labels": {cfg.shard_label(): null, cfg.drain_label(): null},
                }});
                let r = api
                    .patch(name, &Patch::Merge(&patch), &PatchParams::default())
                    .await;
                (a, r)
            }
        }))
        .buffer_unordered(cfg.writes_in_flight.max(1));
        while let Some((a, r)) = done.next().await {
            match r {
                Ok(_) => {
                    tracing::debug!(key = %a.key, member = %cfg.member, "drained: acknowledged")
                }
                // Changed meanwhile: acknowledged again when the newer version is seen.
                Err(WriteError::Conflict { .. }) | Err(WriteError::NotFound(_)) => {}
                Err(e) => {
                    tracing::warn!(key = %a.key, error = %e, "acknowledging a drain failed; retrying");
                    retry.push(a);
                }
            }
        }
        drop(done);
        if !retry.is_empty() {
            rt.sleep(cfg.retry_period).await;
        }
    }
}

/// Filter, server and buckets modes: an informer of the table's Lease (by a field selector on its
/// name) whose every version goes to the member: the core applies it if newer than the one
/// applied. A relist or a reconnection only delivers it again.
fn start_table_informer<R: Runtime, B: Backend>(
    rt: &R,
    client: &Client<B>,
    namespace: &str,
    inner: &Arc<Inner>,
) -> Result<Informer<DynamicObject, R>, crate::Error> {
    let cfg = &inner.cfg;
    let informer =
        crate::InformerBuilder::<DynamicObject, R>::new(rt.clone(), client, Resource::LEASES)
            .name(format!("shard-{}-table", cfg.ring))
            .namespace(namespace)
            .field_selector(format!("metadata.name={}", cfg.table_lease()))
            .build()?;
    let apply = |inner: &Inner, obj: &DynamicObject| {
        let Some(t) = table_of(&inner.cfg, obj) else {
            return;
        };
        let applied = {
            let mut m = inner.member();
            m.handle_table(t);
            m.table().map_or(0, |t| t.version)
        };
        if inner.table_version.swap(applied, Ordering::AcqRel) != applied {
            inner.notify();
        }
    };
    let (added, updated) = (inner.clone(), inner.clone());
    informer.add_handler(
        HandlerFns::new()
            .on_add(move |o: Arc<DynamicObject>, _| apply(&added, &o))
            .on_update(move |_, o: Arc<DynamicObject>| apply(&updated, &o)),
    )?;
    informer.start()?;
    Ok(informer)
}

async fn member_task<R: Runtime, B: Backend>(
    rt: R,
    inner: Arc<Inner>,
    leases: Api<DynamicObject, B>,
    table: Option<Informer<DynamicObject, R>>,
) {
    let _exit = TaskExit(inner.clone());
    let cfg = inner.cfg.clone();
    let lease_name = cfg.member_lease();
    loop {
        let listen = inner.changed.listen();
        if inner.stop.load(Ordering::Acquire) {
            let now = inner.now();
            let req = {
                let mut m = inner.member();
                if inner.abandon.load(Ordering::Acquire) {
                    None
                } else {
                    m.leave(now);
                    m.poll_lease_request()
                }
            };
            inner.working.store(false, Ordering::Release);
            inner.retired.store(true, Ordering::Release);
            if let Some(r) = req {
                let fut = perform_lease(leases.clone(), &cfg, lease_name.clone(), r.request, r.ack);
                let _ = select(Box::pin(fut), rt.sleep(cfg.renew_deadline)).await;
            }
            break;
        }
        let now = inner.now();
        let req = {
            let mut m = inner.member();
            m.handle_timeout(now);
            publish_events(&inner, &mut m);
            let mut acks = Vec::new();
            while let Some(a) = m.poll_ack() {
                acks.push(a);
            }
            if !acks.is_empty() {
                inner
                    .acks
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .append(&mut acks);
                inner.notify();
            }
            m.poll_lease_request()
        };
        if let Some(r) = req {
            // The clock keeps running while the request is out: a hung renewal must still
            // retire the member at its deadline.
            let mut fut = Box::pin(perform_lease(
                leases.clone(),
                &cfg,
                lease_name.clone(),
                r.request,
                r.ack,
            ));
            let outcome = loop {
                let timer = sleep_until(&rt, &inner, inner.member().poll_timeout());
                match select(fut, timer).await {
                    Either::Left((o, _)) => break Some(o),
                    Either::Right((_, f)) => {
                        fut = f;
                        let now = inner.now();
                        let mut m = inner.member();
                        m.handle_timeout(now);
                        publish_events(&inner, &mut m);
                        if inner.retired.load(Ordering::Acquire) {
                            break None;
                        }
                    }
                }
            };
            let now = inner.now();
            let mut m = inner.member();
            match outcome {
                Some(LeaseOutcome::Get(g)) => m.handle_lease_get(r.id, now, g),
                Some(LeaseOutcome::Write(w)) => m.handle_lease_write(r.id, now, w),
                None => {}
            }
            publish_events(&inner, &mut m);
            continue;
        }
        let at = inner.member().poll_timeout();
        select(sleep_until(&rt, &inner, at), listen).await;
    }
    if let Some(t) = table {
        t.shutdown().await;
    }
}

fn publish_events(inner: &Inner, m: &mut Member) {
    while let Some(ev) = m.poll_event() {
        match ev {
            MemberEvent::Joined => {
                tracing::info!(member = %inner.cfg.member, ring = %inner.cfg.ring, "joined the ring");
                inner.working.store(true, Ordering::Release);
            }
            MemberEvent::Retired => {
                if !inner.stop.load(Ordering::Acquire) {
                    tracing::warn!(member = %inner.cfg.member, ring = %inner.cfg.ring, "lost its lease: retired");
                }
                inner.working.store(false, Ordering::Release);
                inner.retired.store(true, Ordering::Release);
            }
        }
        inner.notify();
    }
}

enum LeaseOutcome {
    Get(GetOutcome),
    Write(WriteOutcome),
}

async fn perform_lease<B: Backend>(
    api: Api<DynamicObject, B>,
    cfg: &ShardConfig,
    name: String,
    req: LeaseRequest,
    ack: Option<u64>,
) -> LeaseOutcome {
    match req {
        LeaseRequest::Get => LeaseOutcome::Get(match api.get(&name).await {
            Ok(obj) => GetOutcome::Found {
                record: record_of(&obj),
                resource_version: obj.resource_version().unwrap_or_default().into(),
            },
            Err(WriteError::NotFound(_)) => GetOutcome::NotFound,
            Err(e) => {
                tracing::warn!(lease = %name, error = %e, "reading the member lease failed");
                GetOutcome::Failed
            }
        }),
        LeaseRequest::Create(spec) => {
            let obj = member_lease_object(cfg, &name, api.namespace(), &spec, None, ack);
            LeaseOutcome::Write(written(
                &name,
                api.create(&obj, &PostParams::default()).await,
            ))
        }
        LeaseRequest::Update {
            spec,
            resource_version,
        } => {
            let obj = member_lease_object(
                cfg,
                &name,
                api.namespace(),
                &spec,
                Some(&resource_version),
                ack,
            );
            LeaseOutcome::Write(written(
                &name,
                api.replace(&obj, &PostParams::default()).await,
            ))
        }
    }
}

fn member_lease_object(
    cfg: &ShardConfig,
    name: &str,
    namespace: Option<&str>,
    spec: &LeaseWrite,
    rv: Option<&str>,
    ack: Option<u64>,
) -> DynamicObject {
    let mut metadata = serde_json::json!({
        "name": name,
        "labels": {ShardConfig::RING_LABEL: cfg.ring},
    });
    if let Some(ns) = namespace {
        metadata["namespace"] = ns.into();
    }
    if let Some(rv) = rv {
        metadata["resourceVersion"] = rv.into();
    }
    if let Some(ack) = ack {
        metadata["annotations"] = serde_json::json!({cfg.ack_annotation(): ack.to_string()});
    }
    lease_with(metadata, spec)
}

/// The published table and its Lease's resourceVersion (`None`: none yet); `Err`: the read
/// failed, or what it read does not parse (the sharder reads again later rather than take
/// either for "no table").
async fn read_table<B: Backend>(
    leases: &Api<DynamicObject, B>,
    cfg: &ShardConfig,
) -> Result<Option<(ShardTable, String)>, ()> {
    let obj = match leases.get(&cfg.table_lease()).await {
        Ok(o) => o,
        Err(WriteError::NotFound(_)) => return Ok(None),
        Err(e) => {
            tracing::warn!(error = %e, "reading the shard table failed");
            return Err(());
        }
    };
    let t = table_of(cfg, &obj).ok_or(())?;
    Ok(Some((t, obj.resource_version().unwrap_or_default().into())))
}

/// The table a table Lease carries (`None`: none, or it does not parse).
fn table_of(cfg: &ShardConfig, obj: &DynamicObject) -> Option<ShardTable> {
    let text = obj.annotations().get(&cfg.table_annotation())?.to_string();
    match ShardTable::decode(&text) {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!(error = %e, "the published shard table does not parse");
            None
        }
    }
}

/// A quorum LIST of the ring's member Leases.
async fn list_members<B: Backend>(
    leases: &Api<DynamicObject, B>,
    cfg: &ShardConfig,
) -> Option<Vec<MemberLease>> {
    let req = ListRequest {
        selectors: Selectors {
            label: Some(format!("{}={}", ShardConfig::RING_LABEL, cfg.ring)),
            field: None,
            shard: None,
        },
        ..ListRequest::default()
    };
    let page = match leases.list_page(&req).await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "listing the ring's leases failed");
            return None;
        }
    };
    let prefix = format!("{}-m-", cfg.ring);
    Some(
        page.items
            .iter()
            .filter_map(|l| {
                let member = l.name().strip_prefix(&prefix)?.to_string();
                let rec = record_of(l);
                Some(MemberLease {
                    member,
                    resource_version: l.resource_version().unwrap_or_default().into(),
                    held: rec
                        .holder_identity
                        .as_deref()
                        .is_some_and(|h| !h.is_empty()),
                    ack: l
                        .annotations()
                        .get(&cfg.ack_annotation())
                        .and_then(|a| a.parse().ok()),
                })
            })
            .collect(),
    )
}

/// The sharder's view of every object (labels and buckets modes): informers over the primary
/// and owned kinds in the scope, started when this member is elected and stopped when it is
/// not (so a member that is not the sharder caches only its own share). Each object is a
/// [`ShardView`]: key, uid, resourceVersion, labels and owner references, the rest skipped as
/// it is decoded.
fn start_informers<R: Runtime, B: Backend>(
    rt: &R,
    client: &Client<B>,
    inner: &Arc<Inner>,
    kinds: &[Resource],
    scope: &ShardScope,
) -> Result<Vec<Informer<ShardView, R>>, crate::Error> {
    let mut informers = Vec::new();
    for (i, kind) in kinds.iter().enumerate() {
        let mut b = crate::InformerBuilder::<ShardView, R>::new(rt.clone(), client, kind.clone())
            .name(format!("shard-{}-{}", inner.cfg.ring, kind.plural));
        if let Some(ns) = &scope.namespace {
            b = b.namespace(ns.clone());
        }
        if let (0, Some(sel)) = (i, &scope.label_selector) {
            b = b.label_selector(sel.clone());
        }
        let informer = b.build()?;
        let observe = move |inner: &Inner, o: &ShardView| {
            let key = format!("{i}/{}", o.key_ref());
            let s = if i == 0 {
                inner.cfg.object_shard(o)
            } else {
                inner.cfg.owned_object_shard(o)
            };
            let rv = o.resource_version().unwrap_or("");
            let mut sharder = inner.sharder();
            if i == 0 {
                sharder.handle_object(&key, s.hash, s.label, s.draining, rv);
            } else {
                sharder.handle_owned_object(&key, s.hash, s.label, rv);
            }
            drop(sharder);
            inner.notify();
        };
        let (seen, upd, gone) = (inner.clone(), inner.clone(), inner.clone());
        informer.add_handler(
            HandlerFns::new()
                .on_add(move |o: Arc<ShardView>, _| observe(&seen, &o))
                .on_update(move |_, o: Arc<ShardView>| observe(&upd, &o))
                .on_delete(move |o: ObjectOrTombstone<ShardView>| {
                    let key = format!("{i}/{}", o.object().key_ref());
                    gone.sharder().forget_object(&key);
                }),
        )?;
        informer.start()?;
        informers.push(informer);
    }
    Ok(informers)
}

async fn sharder_task<R: Runtime, B: Backend>(
    rt: R,
    inner: Arc<Inner>,
    client: Client<B>,
    leases: Api<DynamicObject, B>,
    namespace: String,
    kinds: Vec<Resource>,
    scope: ShardScope,
) {
    let mut informers: Vec<Informer<ShardView, R>> = Vec::new();
    let _exit = TaskExit(inner.clone());
    let cfg = inner.cfg.clone();
    let election = LeaderElectionConfig {
        identity: cfg.member.clone(),
        lease_duration: cfg.lease_duration,
        renew_deadline: cfg.renew_deadline,
        retry_period: cfg.retry_period,
        seed: cfg.seed ^ 0x5eed,
    };
    let leadership = match Leadership::spawn(
        rt.clone(),
        &client,
        &namespace,
        &cfg.election_lease(),
        election,
    ) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "the sharder's election could not start");
            return;
        }
    };
    let mut next_list = CoreInstant::ZERO;
    let mut next_collect = CoreInstant::ZERO;
    // The object writes out (labels mode), each answered as it comes.
    let mut out = futures_util::stream::FuturesUnordered::new();
    loop {
        let listen = inner.changed.listen();
        if inner.stop.load(Ordering::Acquire) {
            break;
        }
        if inner.now() >= next_list {
            next_list = inner.now() + cfg.retry_period;
            if let Some(members) = list_members(&leases, &cfg).await {
                let now = inner.now();
                inner.sharder().handle_members(now, members);
            }
        }
        let leading = leadership.is_leader();
        if inner.leading.swap(leading, Ordering::AcqRel) != leading {
            tracing::info!(member = %cfg.member, leading, "sharder");
            if matches!(cfg.mode, Mode::Labels | Mode::Buckets) {
                for i in informers.drain(..) {
                    i.shutdown().await;
                }
                inner.sharder().forget_objects();
                if leading {
                    match start_informers(&rt, &client, &inner, &kinds, &scope) {
                        Ok(i) => informers = i,
                        Err(e) => {
                            tracing::error!(error = %e, "the sharder's informers could not start")
                        }
                    }
                }
            }
        }
        if leading && inner.now() >= next_collect {
            // Leases of members gone for good (names are per incarnation): deleted at the
            // resourceVersion seen, so a renewal meanwhile keeps its Lease.
            next_collect = inner.now() + cfg.lease_duration;
            let gone = inner.sharder().collectable(inner.now(), cfg.lease_duration);
            for m in gone {
                let name = format!("{}-m-{m}", cfg.ring);
                let rv = inner.sharder().membership().resource_version(&m);
                let params = DeleteParams {
                    preconditions: Preconditions {
                        resource_version: rv,
                        uid: None,
                    },
                    ..DeleteParams::default()
                };
                match leases.delete(&name, &params).await {
                    Ok(_) => tracing::info!(member = %m, "collected the lease of a gone member"),
                    Err(WriteError::NotFound(_)) | Err(WriteError::Conflict { .. }) => {}
                    Err(e) => tracing::warn!(member = %m, error = %e, "collecting a lease failed"),
                }
            }
        }
        if !leading {
            // A term that ended stops its writes at once (the next one decides again from
            // what it sees); the core forgot them as it stopped leading.
            out.clear();
        }
        let writes = {
            let now = inner.now();
            let mut s = inner.sharder();
            s.set_leading(leading);
            s.handle_timeout(now);
            let mut w = Vec::new();
            while let Some(x) = s.poll_write() {
                w.push(x);
            }
            w
        };
        for (id, w) in writes {
            match w {
                ShardWrite::ReadTable => match read_table(&leases, &cfg).await {
                    Ok(read) => inner.sharder().handle_table_read(id, read),
                    Err(()) => {
                        let now = inner.now();
                        inner.sharder().handle_write(id, now, WriteResult::Failed);
                    }
                },
                ShardWrite::PublishTable {
                    table,
                    resource_version,
                } => {
                    let r = publish_table(&leases, &cfg, &table, resource_version).await;
                    if let WriteResult::Done(_) = &r {
                        tracing::info!(version = table.version, members = ?table.members, "published the shard table");
                    }
                    let now = inner.now();
                    inner.sharder().handle_write(id, now, r);
                }
                ShardWrite::Label {
                    key,
                    member,
                    resource_version,
                } => {
                    let l = serde_json::json!({
                        cfg.shard_label(): member,
                        cfg.drain_label(): null,
                    });
                    out.push(label_write(&client, &kinds, id, key, resource_version, l));
                }
                ShardWrite::Drain {
                    key,
                    resource_version,
                } => {
                    let l = serde_json::json!({cfg.drain_label(): "true"});
                    out.push(label_write(&client, &kinds, id, key, resource_version, l));
                }
                ShardWrite::Bucket {
                    key,
                    bucket,
                    resource_version,
                } => {
                    let l = serde_json::json!({
                        cfg.bucket_label(): informer_core::controller::shard::bucket_label(bucket),
                    });
                    out.push(label_write(&client, &kinds, id, key, resource_version, l));
                }
            }
        }
        // A sliding window: the core hands out at most `writes_in_flight` object writes at
        // once and the next as soon as one is answered (the loop goes round on each answer),
        // so the writes decided but not yet made never pile up.
        let at = {
            let now = inner.now();
            let t = inner.sharder().poll_timeout(now);
            Some(t.map_or(next_list, |t| t.min(next_list)))
        };
        let wait = select(sleep_until(&rt, &inner, at), listen);
        if out.is_empty() {
            wait.await;
        } else if let Either::Left((Some(first), _)) = select(out.next(), wait).await {
            // With it, every other answer already in: one decision for all of them.
            let mut answers = vec![first];
            while let Some(Some(a)) = out.next().now_or_never() {
                answers.push(a);
            }
            let now = inner.now();
            let mut s = inner.sharder();
            for (id, r) in answers {
                s.handle_write(id, now, r);
            }
        }
    }
    inner.leading.store(false, Ordering::Release);
    if inner.abandon.load(Ordering::Acquire) {
        leadership.abandon().await;
    } else {
        leadership.shutdown().await;
    }
    for i in &informers {
        i.shutdown().await;
    }
}

/// One object write of the sharder's, with its id.
async fn label_write<B: Backend>(
    client: &Client<B>,
    kinds: &[Resource],
    id: WriteId,
    key: String,
    resource_version: String,
    labels: serde_json::Value,
) -> (WriteId, WriteResult) {
    (
        id,
        patch_labels(client, kinds, &key, &resource_version, labels).await,
    )
}

async fn patch_labels<B: Backend>(
    client: &Client<B>,
    kinds: &[Resource],
    key: &str,
    resource_version: &str,
    labels: serde_json::Value,
) -> WriteResult {
    let Some((idx, rest)) = key.split_once('/') else {
        return WriteResult::Failed;
    };
    let Some(kind) = idx.parse::<usize>().ok().and_then(|i| kinds.get(i)) else {
        return WriteResult::Failed;
    };
    let (ns, name) = split_key(rest);
    let api: Api<DynamicObject, B> = client.api(kind.clone(), ns);
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": resource_version,
        "labels": labels,
    }});
    match api
        .patch(name, &Patch::Merge(&patch), &PatchParams::default())
        .await
    {
        Ok(o) => WriteResult::Done(o.resource_version().unwrap_or_default().into()),
        Err(WriteError::Conflict { .. }) => WriteResult::Conflict,
        // Deleted: its informer's deletion follows; nothing to decide until then.
        Err(WriteError::NotFound(_)) => WriteResult::Done(String::new()),
        Err(e) => {
            tracing::warn!(key, error = %e, "labelling failed");
            WriteResult::Failed
        }
    }
}

async fn publish_table<B: Backend>(
    leases: &Api<DynamicObject, B>,
    cfg: &ShardConfig,
    table: &ShardTable,
    resource_version: Option<String>,
) -> WriteResult {
    let mut metadata = serde_json::json!({
        "name": cfg.table_lease(),
        "annotations": {cfg.table_annotation(): table.encode()},
    });
    if let Some(ns) = leases.namespace() {
        metadata["namespace"] = ns.into();
    }
    if let Some(rv) = &resource_version {
        metadata["resourceVersion"] = rv.as_str().into();
    }
    let obj: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {},
    }))
    .unwrap_or_default();
    let r = match resource_version {
        None => leases.create(&obj, &PostParams::default()).await,
        Some(_) => leases.replace(&obj, &PostParams::default()).await,
    };
    match r {
        Ok(o) => WriteResult::Done(o.resource_version().unwrap_or_default().into()),
        Err(WriteError::Conflict { .. }) => WriteResult::Conflict,
        Err(e) => {
            tracing::warn!(error = %e, "publishing the shard table failed");
            WriteResult::Failed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_names_are_dns_labels_and_unique() {
        let a = member_name("Greeter_Pod-7");
        let b = member_name("Greeter_Pod-7");
        assert_ne!(a, b);
        assert!(a.starts_with("greeterpod-7-"), "{a}");
        let c = ShardConfig::new("ring", a);
        assert!(c.validate().is_ok());
        assert!(member_name("___").starts_with("member-"));
        let long = member_name(&"x".repeat(100));
        assert!(ShardConfig::new("ring", long).validate().is_ok());
    }

    #[test]
    fn member_lease_carries_the_ring_label_and_the_ack() {
        let cfg = ShardConfig::new("ring", "m1");
        let spec = LeaseWrite {
            holder_identity: "m1".into(),
            lease_duration_seconds: 15,
            lease_transitions: 0,
            acquire_time: None,
        };
        let o = member_lease_object(&cfg, "ring-m-m1", Some("ns"), &spec, Some("5"), Some(3));
        assert_eq!(o.labels().get(ShardConfig::RING_LABEL), Some("ring"));
        assert_eq!(o.annotations().get("ring/ack"), Some("3"));
        assert_eq!(o.resource_version(), Some("5"));
        assert_eq!(record_of(&o).holder_identity.as_deref(), Some("m1"));
        assert_eq!(split_key("ns/a"), (Some("ns"), "a"));
        assert_eq!(split_key("a"), (None, "a"));
    }
}
