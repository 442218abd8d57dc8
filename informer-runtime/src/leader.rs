//! Leader election driven on a [`Runtime`]: informer-core's
//! [`LeaderElector`](informer_core::controller::leaderelection::LeaderElector) decides, this task performs
//! the Lease GET / CREATE / UPDATE (at a resourceVersion) through a [`Client`] and publishes
//! the outcome in a [`Leadership`] handle.
//!
//! A controller runs its work while [`Leadership::is_leader`] and stops it when
//! [`Leadership::lost`] resolves. The elector stops leading `renew_deadline` after its last
//! successful renewal began, which is before any other candidate may take over
//! (`lease_duration`, counted from when it saw that renewal): work stopped promptly on
//! `lost` — and writes guarded by `is_leader` — never overlap another leader's.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use event_listener::Event;
use futures_util::future::{Either, select};
use informer_core::controller::leaderelection::{
    ConfigError, GetOutcome, LeaderElectionConfig, LeaderElector, LeaderEvent, LeaseRecord,
    LeaseRequest, LeaseWrite, WriteOutcome,
};
use informer_core::object::DynamicObject;
use informer_core::time::Instant as CoreInstant;
use informer_http::write::{PostParams, WriteError};
use informer_http::{Api, Backend, Client, Resource};

use crate::runtime::Runtime;

struct State {
    leader: AtomicBool,
    stop: AtomicBool,
    abandon: AtomicBool,
    exited: AtomicBool,
    changed: Event,
    holder: Mutex<Option<String>>,
}

/// The handle of a running election (cloneable).
#[derive(Clone)]
pub struct Leadership {
    state: Arc<State>,
    identity: Arc<str>,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("identity", &self.identity)
            .field("leader", &self.is_leader())
            .finish()
    }
}

impl Leadership {
    /// Starts campaigning for the Lease `namespace/name` on `rt` through `client`.
    pub fn spawn<R: Runtime, B: Backend>(
        rt: R,
        client: &Client<B>,
        namespace: &str,
        name: &str,
        config: LeaderElectionConfig,
    ) -> Result<Leadership, LeaderElectionError> {
        let elector = LeaderElector::new(config).map_err(LeaderElectionError::Config)?;
        let identity: Arc<str> = elector.config().identity.as_str().into();
        let state = Arc::new(State {
            leader: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            abandon: AtomicBool::new(false),
            exited: AtomicBool::new(false),
            changed: Event::new(),
            holder: Mutex::new(None),
        });
        let api: Api<DynamicObject, B> = client.api(Resource::LEASES, Some(namespace));
        let driver = Driver {
            rt: rt.clone(),
            api,
            name: name.to_string(),
            namespace: namespace.to_string(),
            elector,
            state: state.clone(),
            base: rt.now(),
            master_status: crate::metrics::Gauge::exported(
                "leader_election_master_status",
                &[("name", name.to_string())],
            ),
        };
        driver.master_status.set(0);
        rt.spawn(Box::pin(driver.run()))
            .map_err(LeaderElectionError::Spawn)?;
        Ok(Leadership { state, identity })
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// True while this candidate leads.
    pub fn is_leader(&self) -> bool {
        self.state.leader.load(Ordering::Acquire)
    }

    /// True until the election task has ended (after [`shutdown`](Self::shutdown) or
    /// [`abandon`](Self::abandon)): leading or campaigning.
    pub fn is_running(&self) -> bool {
        !self.state.exited.load(Ordering::Acquire)
    }

    /// The Lease's holder as last seen.
    pub fn holder(&self) -> Option<String> {
        self.state
            .holder
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    async fn wait_until(&self, f: impl Fn(&State) -> bool) {
        loop {
            let l = self.state.changed.listen();
            if f(&self.state) {
                return;
            }
            l.await;
        }
    }

    /// Resolves once this candidate leads (never, if it is shut down first).
    pub async fn leading(&self) {
        self.wait_until(|s| s.leader.load(Ordering::Acquire)).await
    }

    /// Resolves once this candidate does not lead (at once if it does not).
    pub async fn lost(&self) {
        self.wait_until(|s| !s.leader.load(Ordering::Acquire)).await
    }

    /// Stops campaigning without writing the Lease free, as a crashed process would: another
    /// candidate takes over once the Lease expires. Returns once the election task has ended.
    pub async fn abandon(&self) {
        self.state.abandon.store(true, Ordering::Release);
        self.shutdown().await
    }

    /// Stops campaigning: stops leading at once, writes the Lease free if held (so a standby
    /// takes over at its next try), and returns once the election task has ended.
    pub async fn shutdown(&self) {
        self.state.stop.store(true, Ordering::Release);
        self.state.changed.notify(usize::MAX);
        self.wait_until(|s| s.exited.load(Ordering::Acquire)).await
    }
}

/// Why an election could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum LeaderElectionError {
    /// The timings or identity are unusable.
    Config(ConfigError),
    /// The task could not be spawned.
    Spawn(crate::SpawnError),
}

impl fmt::Display for LeaderElectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaderElectionError::Config(e) => write!(f, "leader election: {e}"),
            LeaderElectionError::Spawn(e) => write!(f, "leader election: {e}"),
        }
    }
}

impl std::error::Error for LeaderElectionError {}

struct Driver<R, B> {
    rt: R,
    api: Api<DynamicObject, B>,
    name: String,
    namespace: String,
    elector: LeaderElector,
    state: Arc<State>,
    base: std::time::Instant,
    /// client-go's `leader_election_master_status{name}`: 1 while leading, else 0.
    master_status: crate::metrics::Gauge,
}

impl<R: Runtime, B: Backend> Driver<R, B> {
    fn now(&self) -> CoreInstant {
        // The runtime's clock, not std's: under a paused test clock the elector's deadlines
        // must move with the sleeps that wait for them.
        CoreInstant::from_epoch(self.rt.now().saturating_duration_since(self.base))
    }

    /// Publishes the elector's events.
    fn publish(&mut self) {
        while let Some(ev) = self.elector.poll_event() {
            match ev {
                LeaderEvent::StartedLeading => {
                    tracing::info!(identity = %self.elector.config().identity, lease = %self.name, "started leading");
                    self.state.leader.store(true, Ordering::Release);
                    self.master_status.set(1);
                }
                LeaderEvent::StoppedLeading => {
                    // A deliberate stop (shutdown, abandon) is no news; a lost lease is.
                    if self.state.stop.load(Ordering::Acquire) {
                        tracing::info!(identity = %self.elector.config().identity, lease = %self.name, "stopped leading: shut down");
                    } else {
                        tracing::warn!(identity = %self.elector.config().identity, lease = %self.name, "stopped leading");
                    }
                    self.state.leader.store(false, Ordering::Release);
                    self.master_status.set(0);
                }
                LeaderEvent::NewLeader(who) => {
                    tracing::info!(leader = %who, lease = %self.name, "new leader");
                    *self.state.holder.lock().unwrap_or_else(|p| p.into_inner()) = Some(who);
                }
            }
            self.state.changed.notify(usize::MAX);
        }
    }

    fn sleep_until(&self, at: Option<CoreInstant>) -> crate::BoxFuture<'static, ()> {
        let wait = match at {
            Some(at) => at.saturating_duration_since(self.now()),
            None => Duration::from_secs(3600),
        };
        self.rt.sleep(wait)
    }

    async fn run(mut self) {
        loop {
            if self.state.stop.load(Ordering::Acquire) {
                if !self.state.abandon.load(Ordering::Acquire) {
                    self.release().await;
                }
                break;
            }
            let now = self.now();
            self.elector.handle_timeout(now);
            self.publish();
            if let Some((id, req)) = self.elector.poll_request() {
                let api = self.api.clone();
                let (name, ns) = (self.name.clone(), self.namespace.clone());
                let mut fut = Box::pin(perform(api, name, ns, req));
                // Keep the clock running while the request is out: a hung renewal must still
                // end the leadership at its deadline.
                let outcome = loop {
                    let stop = self.state.changed.listen();
                    if self.state.stop.load(Ordering::Acquire) {
                        break None;
                    }
                    let timer = self.sleep_until(self.elector.poll_timeout());
                    match select(fut, select(timer, stop)).await {
                        Either::Left((o, _)) => break Some(o),
                        Either::Right((_, f)) => {
                            fut = f;
                            let now = self.now();
                            self.elector.handle_timeout(now);
                            self.publish();
                            if self.elector.in_flight() != Some(id) {
                                break None;
                            }
                        }
                    }
                };
                let now = self.now();
                match outcome {
                    Some(Outcome::Get(g)) => self.elector.handle_get(id, now, g),
                    Some(Outcome::Write(w)) => self.elector.handle_write(id, now, w),
                    None => {}
                }
                self.publish();
                continue;
            }
            let stop = self.state.changed.listen();
            if self.state.stop.load(Ordering::Acquire) {
                continue;
            }
            let timer = self.sleep_until(self.elector.poll_timeout());
            select(timer, stop).await;
        }
        self.state.leader.store(false, Ordering::Release);
        self.master_status.set(0);
        self.state.exited.store(true, Ordering::Release);
        self.state.changed.notify(usize::MAX);
    }

    async fn release(&mut self) {
        let now = self.now();
        self.elector.release(now);
        self.state.leader.store(false, Ordering::Release);
        self.publish();
        if let Some((id, req)) = self.elector.poll_request() {
            let fut = perform(
                self.api.clone(),
                self.name.clone(),
                self.namespace.clone(),
                req,
            );
            let timer = self.rt.sleep(self.elector.config().renew_deadline);
            if let Either::Left((Outcome::Write(w), _)) = select(Box::pin(fut), timer).await {
                let now = self.now();
                self.elector.handle_write(id, now, w);
            }
        }
    }
}

enum Outcome {
    Get(GetOutcome),
    Write(WriteOutcome),
}

async fn perform<B: Backend>(
    api: Api<DynamicObject, B>,
    name: String,
    namespace: String,
    req: LeaseRequest,
) -> Outcome {
    match req {
        LeaseRequest::Get => Outcome::Get(match api.get(&name).await {
            Ok(obj) => GetOutcome::Found {
                record: record_of(&obj),
                resource_version: obj.metadata.resource_version().unwrap_or_default().into(),
            },
            Err(WriteError::NotFound(_)) => GetOutcome::NotFound,
            Err(e) => {
                tracing::warn!(lease = %name, error = %e, "reading the lease failed");
                GetOutcome::Failed
            }
        }),
        LeaseRequest::Create(spec) => {
            let obj = lease_object(&name, &namespace, &spec, None);
            Outcome::Write(written(
                &name,
                api.create(&obj, &PostParams::default()).await,
            ))
        }
        LeaseRequest::Update {
            spec,
            resource_version,
        } => {
            let obj = lease_object(&name, &namespace, &spec, Some(&resource_version));
            Outcome::Write(written(
                &name,
                api.replace(&obj, &PostParams::default()).await,
            ))
        }
    }
}

/// A Lease write's answer, as the election's state machines take it (shared with sharding's
/// member Leases).
pub(crate) fn written(name: &str, r: Result<DynamicObject, WriteError>) -> WriteOutcome {
    match r {
        Ok(obj) => WriteOutcome::Written {
            record: record_of(&obj),
            resource_version: obj.metadata.resource_version().unwrap_or_default().into(),
        },
        Err(WriteError::Conflict { .. }) => WriteOutcome::Conflict,
        Err(e) => {
            tracing::warn!(lease = %name, error = %e, "writing the lease failed");
            WriteOutcome::Failed
        }
    }
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct LeaseSpec {
    holder_identity: Option<String>,
    lease_duration_seconds: Option<u32>,
    acquire_time: Option<String>,
    renew_time: Option<String>,
    lease_transitions: Option<u32>,
}

/// The election record a Lease holds.
pub(crate) fn record_of(obj: &DynamicObject) -> LeaseRecord {
    let spec: LeaseSpec = obj
        .fields
        .field("spec")
        .and_then(Result::ok)
        .unwrap_or_default();
    LeaseRecord {
        holder_identity: spec.holder_identity,
        lease_duration_seconds: spec.lease_duration_seconds,
        acquire_time: spec.acquire_time,
        renew_time: spec.renew_time,
        lease_transitions: spec.lease_transitions,
    }
}

fn lease_object(name: &str, namespace: &str, spec: &LeaseWrite, rv: Option<&str>) -> DynamicObject {
    let mut metadata = serde_json::json!({"name": name, "namespace": namespace});
    if let Some(rv) = rv {
        metadata["resourceVersion"] = rv.into();
    }
    lease_with(metadata, spec)
}

/// A Lease with `metadata` holding `spec`, renewed now (acquired now unless `spec` says when).
pub(crate) fn lease_with(metadata: serde_json::Value, spec: &LeaseWrite) -> DynamicObject {
    let now = micro_time(SystemTime::now());
    let mut s = serde_json::json!({
        "leaseDurationSeconds": spec.lease_duration_seconds,
        "leaseTransitions": spec.lease_transitions,
        "acquireTime": spec.acquire_time.clone().unwrap_or_else(|| now.clone()),
        "renewTime": now,
    });
    if !spec.holder_identity.is_empty() {
        s["holderIdentity"] = spec.holder_identity.as_str().into();
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": s,
    }))
    .unwrap_or_default()
}

/// `metav1.MicroTime` as RFC 3339 with microseconds (`2006-01-02T15:04:05.000000Z`).
fn micro_time(t: SystemTime) -> String {
    informer_core::time::rfc3339(t.duration_since(UNIX_EPOCH).unwrap_or_default(), 6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_time_formats_rfc3339_micro() {
        let t = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(micro_time(t), "2023-11-14T22:13:20.123456Z");
        assert_eq!(micro_time(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(micro_time(t), "2000-02-29T00:00:00.000000Z");
    }

    #[test]
    fn lease_object_round_trips_the_record() {
        let spec = LeaseWrite {
            holder_identity: "me".into(),
            lease_duration_seconds: 4,
            lease_transitions: 2,
            acquire_time: Some("2020-01-01T00:00:00.000000Z".into()),
        };
        let obj = lease_object("l", "ns", &spec, Some("9"));
        assert_eq!(obj.metadata.resource_version(), Some("9"));
        let r = record_of(&obj);
        assert_eq!(r.holder_identity.as_deref(), Some("me"));
        assert_eq!(r.lease_duration_seconds, Some(4));
        assert_eq!(r.lease_transitions, Some(2));
        assert_eq!(
            r.acquire_time.as_deref(),
            Some("2020-01-01T00:00:00.000000Z")
        );
        assert!(r.renew_time.is_some());
    }
}
