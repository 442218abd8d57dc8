//! A sample controller (in the spirit of Kubernetes' sample-controller), built only from
//! informer-rs parts: informers feeding a work queue, reconcile workers, typed writes and
//! leader election.
//!
//! For every ConfigMap labelled `informer-rs.io/copy=true` in the source namespace, it keeps a
//! copy (same name, same data, labelled with where it came from) in every namespace labelled
//! `informer-rs.io/copy-target=true`, deletes copies whose source or target is gone, and writes
//! the list of namespaces it copied to back onto the source (annotation
//! `informer-rs.io/copied-to`; ConfigMaps have no status subresource). Copies are written with
//! server-side apply (field manager `configmap-copier`, forced), so a copy edited by hand is put
//! back. Several replicas may run: only the holder of the Lease `configmap-copier` in the
//! source namespace acts.
//!
//! Needs a cluster: `KUBECONFIG` (or `~/.kube/config`, or in-cluster). Try it with
//! `cargo xtask cluster up`, then
//! `KUBECONFIG=… cargo run -p informer-tokio --example configmap_copier -- SOURCE_NAMESPACE`
//! (or `-p informer-smol --example smol_configmap_copier`).
//!
//! One source for both runtimes: `informer-tokio/examples/configmap_copier.rs` and
//! `informer-smol/examples/configmap_copier.rs` each name their runtime crate `runtime` and
//! include this file as their module `copier`; everything below is written against that name.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::runtime::http::{DeleteParams, Patch, PatchParams, Preconditions, WriteError};
use super::runtime::{
    Action, Client, Config, DynamicObject, HandlerFns, Informer, Key, LeaderElectionConfig,
    Leadership, Object, Priority, Resource, WorkQueue, Workers, block_on, client, leader_election,
    sleep, spawn,
};

/// Sources carry this label (value `true`).
pub const SOURCE_LABEL: &str = "informer-rs.io/copy";
/// Target namespaces carry this label (value `true`).
pub const TARGET_LABEL: &str = "informer-rs.io/copy-target";
/// Copies name their source's namespace in this label...
pub const FROM_NAMESPACE: &str = "informer-rs.io/source-namespace";
/// ... and its name in this one.
pub const FROM_NAME: &str = "informer-rs.io/source-name";
/// The annotation the controller writes back on each source: the namespaces holding a copy.
pub const COPIED_TO: &str = "informer-rs.io/copied-to";
/// The field manager of every write.
pub const MANAGER: &str = "configmap-copier";

/// The example's `main`: a replica copying out of the namespace named by the first argument
/// (default `default`) until Ctrl-C, or for `INFORMER_EXAMPLE_SECS` seconds.
pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    block_on(async {
        let source_namespace = std::env::args().nth(1).unwrap_or_else(|| "default".into());
        let client = client(Config::infer()?)?;
        let identity = format!("{MANAGER}-{}", std::process::id());
        let copier = Copier::start(&client, Options::new(&source_namespace, &identity)).await?;
        println!("{identity}: copying labelled ConfigMaps out of {source_namespace}; Ctrl-C stops");
        let secs = std::env::var("INFORMER_EXAMPLE_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(u64::MAX);
        sleep(Duration::from_secs(secs)).await;
        copier.shutdown().await;
        Ok(())
    })?
}

/// How a replica runs.
#[derive(Clone)]
pub struct Options {
    /// Where the sources (and the Lease) are.
    pub source_namespace: String,
    /// Leader election timings and this replica's identity.
    pub election: LeaderElectionConfig,
    /// Concurrent reconciles.
    pub workers: usize,
    /// Called with this replica's identity right before each write (for audit logs, and for
    /// the end-to-end test proving that two replicas never act at once).
    pub on_act: Arc<dyn Fn(&str) + Send + Sync>,
}

impl Options {
    /// client-go's election timings, 2 workers, no write hook.
    pub fn new(source_namespace: &str, identity: &str) -> Options {
        Options {
            source_namespace: source_namespace.into(),
            election: LeaderElectionConfig::new(identity),
            workers: 2,
            on_act: Arc::new(|_| {}),
        }
    }
}

/// What a reconcile reads and writes with.
struct Ctx {
    client: Client,
    source_namespace: String,
    sources: Informer<DynamicObject>,
    copies: Informer<DynamicObject>,
    namespaces: Informer<DynamicObject>,
    leadership: Leadership,
    on_act: Arc<dyn Fn(&str) + Send + Sync>,
}

/// A running replica.
pub struct Copier {
    ctx: Arc<Ctx>,
    stop: Arc<AtomicBool>,
    stopped: Arc<AtomicBool>,
}

/// Why a reconcile failed (it is retried with backoff).
#[derive(Debug)]
enum ReconcileError {
    Write(Box<WriteError>),
    NotLeader,
}

impl std::fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReconcileError::Write(e) => write!(f, "{e}"),
            ReconcileError::NotLeader => f.write_str("no longer the leader"),
        }
    }
}

impl From<WriteError> for ReconcileError {
    fn from(e: WriteError) -> Self {
        ReconcileError::Write(Box::new(e))
    }
}

/// The source key a copy belongs to.
fn source_of(copy: &DynamicObject) -> Option<Key> {
    Some(Key::new(
        Some(copy.label(FROM_NAMESPACE)?),
        copy.label(FROM_NAME)?,
    ))
}

impl Copier {
    /// Starts the informers (every replica keeps its caches warm) and the election; the
    /// replica that leads runs the workers.
    pub async fn start(
        client: &Client,
        options: Options,
    ) -> Result<Copier, Box<dyn std::error::Error>> {
        let sources = Informer::<DynamicObject>::builder_for(client, Resource::CONFIGMAPS)
            .namespace(options.source_namespace.as_str())
            .label_selector(format!("{SOURCE_LABEL}=true"))
            .build()?;
        let copies = Informer::<DynamicObject>::builder_for(client, Resource::CONFIGMAPS)
            .label_selector(format!("{FROM_NAMESPACE}={}", options.source_namespace))
            .build()?;
        let namespaces = Informer::<DynamicObject>::builder_for(client, Resource::NAMESPACES)
            .label_selector(format!("{TARGET_LABEL}=true"))
            .build()?;
        let leadership = leader_election(
            client,
            &options.source_namespace,
            MANAGER,
            options.election.clone(),
        )?;
        let ctx = Arc::new(Ctx {
            client: client.clone(),
            source_namespace: options.source_namespace.clone(),
            sources,
            copies,
            namespaces,
            leadership,
            on_act: options.on_act.clone(),
        });

        // The queue of the current term (none while following); handlers feed it.
        let slot: Arc<Mutex<Option<WorkQueue>>> = Arc::default();
        let enqueue = |slot: &Arc<Mutex<Option<WorkQueue>>>, keys: Vec<Key>| {
            if let Some(q) = slot.lock().unwrap().as_ref() {
                for k in keys {
                    q.add(k);
                }
            }
        };
        let (s1, s2, s3) = (slot.clone(), slot.clone(), slot.clone());
        // A source changed: reconcile it.
        ctx.sources
            .add_handler(relay_handler(move |o: &DynamicObject| {
                enqueue(&s1, vec![Key::of(o)])
            }))?;
        // A copy changed: reconcile its source.
        ctx.copies
            .add_handler(relay_handler(move |o: &DynamicObject| {
                enqueue(&s2, source_of(o).into_iter().collect())
            }))?;
        // A target namespace came or went: reconcile every source.
        let sources_store = ctx.sources.store();
        ctx.namespaces
            .add_handler(relay_handler(move |_: &DynamicObject| {
                enqueue(&s3, sources_store.keys())
            }))?;
        for inf in [&ctx.sources, &ctx.copies, &ctx.namespaces] {
            inf.start()?;
        }

        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::new(AtomicBool::new(false));
        let (c, st, sd) = (ctx.clone(), stop.clone(), stopped.clone());
        spawn(async move {
            lead(c, slot, options.workers, st).await;
            sd.store(true, Ordering::Release);
        })?;
        Ok(Copier { ctx, stop, stopped })
    }

    /// The election handle.
    pub fn leadership(&self) -> &Leadership {
        &self.ctx.leadership
    }

    /// Relists done by this replica's informers (after a 410, a restart, ...).
    pub fn relists(&self) -> u64 {
        [&self.ctx.sources, &self.ctx.copies, &self.ctx.namespaces]
            .iter()
            .map(|i| i.metrics().relists)
            .sum()
    }

    async fn stop(&self, release: bool) {
        if release {
            self.ctx.leadership.shutdown().await;
        } else {
            self.ctx.leadership.abandon().await;
        }
        self.stop.store(true, Ordering::Release);
        while !self.stopped.load(Ordering::Acquire) {
            sleep(Duration::from_millis(20)).await;
        }
        for inf in [&self.ctx.sources, &self.ctx.copies, &self.ctx.namespaces] {
            inf.shutdown().await;
        }
    }

    /// Graceful stop: in-flight reconciles finish, the Lease is released (a standby takes over
    /// at its next try), informers stop.
    pub async fn shutdown(self) {
        self.stop(true).await
    }

    /// Stops like a crashed process: the Lease is not released (a standby takes over once it
    /// expires).
    pub async fn kill(self) {
        self.stop(false).await
    }
}

/// A handler calling `f` with every added, updated (old and new) and deleted object.
fn relay_handler(f: impl Fn(&DynamicObject) + Send + Sync + 'static) -> HandlerFns<DynamicObject> {
    let f = Arc::new(f);
    let (f1, f2, f3) = (f.clone(), f.clone(), f);
    HandlerFns::new()
        .on_add(move |o, _| f1(&o))
        .on_update(move |old, new| {
            f2(&old);
            f2(&new)
        })
        .on_delete(move |gone| f3(gone.object()))
}

/// Follows the election: while leading, a fresh queue is filled with every source and
/// workers reconcile; on losing the lease, the queue is detached and the workers drained.
async fn lead(ctx: Arc<Ctx>, slot: Arc<Mutex<Option<WorkQueue>>>, n: usize, stop: Arc<AtomicBool>) {
    loop {
        while !ctx.leadership.is_leader() {
            if stop.load(Ordering::Acquire) {
                return;
            }
            sleep(Duration::from_millis(50)).await;
        }
        let queue = WorkQueue::new();
        *slot.lock().unwrap() = Some(queue.clone());
        // Everything once, at low priority: a change arriving meanwhile goes first.
        for k in ctx.sources.store().keys() {
            queue.add_with_priority(k, Priority::LOW);
        }
        // Copies whose source is no longer cached (deleted while no one led).
        for c in ctx.copies.store().list() {
            if let Some(k) = source_of(&c) {
                queue.add_with_priority(k, Priority::LOW);
            }
        }
        let c = ctx.clone();
        let workers = Workers::spawn(Default::default(), &queue, n, move |key: Key| {
            let c = c.clone();
            async move { c.reconcile(key).await }
        });
        let workers = match workers {
            Ok(w) => w,
            Err(e) => {
                eprintln!("cannot start workers: {e}");
                return;
            }
        };
        while ctx.leadership.is_leader() && !stop.load(Ordering::Acquire) {
            sleep(Duration::from_millis(50)).await;
        }
        *slot.lock().unwrap() = None;
        workers.shutdown().await;
        if stop.load(Ordering::Acquire) {
            return;
        }
    }
}

impl Ctx {
    /// Every write goes through here: only the leader writes.
    fn act(&self) -> Result<(), ReconcileError> {
        if !self.leadership.is_leader() {
            return Err(ReconcileError::NotLeader);
        }
        (self.on_act)(self.leadership.identity());
        Ok(())
    }

    /// Makes the copies of source `key` match it.
    async fn reconcile(&self, key: Key) -> Result<Action, ReconcileError> {
        if !self.leadership.is_leader() {
            return Ok(Action::Done);
        }
        let (ns, name) = (key.namespace().unwrap_or(""), key.name());
        if ns != self.source_namespace {
            return Ok(Action::Done);
        }
        let source = self.sources.store().get(key.as_str());
        let mut targets: Vec<String> = match &source {
            Some(_) => self
                .namespaces
                .store()
                .list()
                .iter()
                .map(|n| n.name().to_string())
                .filter(|t| t != ns)
                .collect(),
            None => Vec::new(),
        };
        targets.sort();
        let existing: Vec<_> = self
            .copies
            .store()
            .list()
            .into_iter()
            .filter(|c| source_of(c).as_ref() == Some(&key))
            .collect();

        // Copies no longer wanted.
        for copy in existing
            .iter()
            .filter(|c| !targets.iter().any(|t| Some(t.as_str()) == c.namespace()))
        {
            self.act()?;
            let api = self
                .client
                .api::<DynamicObject>(Resource::CONFIGMAPS, copy.namespace());
            let params = DeleteParams {
                preconditions: Preconditions {
                    uid: copy.uid().map(Into::into),
                    resource_version: None,
                },
                ..DeleteParams::default()
            };
            match api.delete(copy.name(), &params).await {
                Ok(_) | Err(WriteError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }

        let Some(source) = source else {
            return Ok(Action::Done);
        };
        let data: serde_json::Value = source
            .field("data")
            .and_then(Result::ok)
            .unwrap_or(serde_json::Value::Null);
        for t in &targets {
            let current = existing.iter().find(|c| c.namespace() == Some(t.as_str()));
            let current_data = current.and_then(|c| c.field::<serde_json::Value>("data")?.ok());
            if current.is_some() && current_data.unwrap_or(serde_json::Value::Null) == data {
                continue;
            }
            self.act()?;
            let copy = serde_json::json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": name,
                    "namespace": t,
                    "labels": { FROM_NAMESPACE: ns, FROM_NAME: name },
                },
                "data": data,
            });
            let api = self
                .client
                .api::<DynamicObject>(Resource::CONFIGMAPS, Some(t));
            match api
                .patch(
                    name,
                    &Patch::Apply(&copy),
                    &PatchParams::apply(MANAGER).force(),
                )
                .await
            {
                // The namespace is going away.
                Ok(_) | Err(WriteError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }

        // Status, written back on the source.
        let copied_to = targets.join(",");
        if source.metadata.annotations().get(COPIED_TO) != Some(copied_to.as_str()) {
            self.act()?;
            let patch = serde_json::json!({"metadata": {"annotations": {COPIED_TO: copied_to}}});
            let api = self
                .client
                .api::<DynamicObject>(Resource::CONFIGMAPS, Some(ns));
            match api
                .patch(name, &Patch::Merge(&patch), &PatchParams::default())
                .await
            {
                Ok(_) | Err(WriteError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Action::Done)
    }
}
