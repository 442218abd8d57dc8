//! An event recorder: `core/v1` Events about objects, correlated as client-go's recorder does
//! (see [`informer_core::controller::events`]), written by a task of its own so that recording
//! never blocks a reconcile.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use informer_core::controller::events::{Correlated, EventCorrelator, EventSpec};
use informer_core::object::{DynamicObject, Object};
use informer_core::time::rfc3339;
use informer_http::write::{Patch, PatchParams, PostParams, WriteError};
use informer_http::{Backend, Client, Resource};
use serde_json::json;

use crate::runtime::{Runtime, SpawnError};

pub use informer_core::controller::events::{CorrelatorConfig, EventType, ObjectReference};

/// Events queued and not yet written, beyond which [`Recorder::publish`] drops (and counts).
pub const QUEUE: usize = 1024;

/// Writes in flight at once (each on a task of its own; one event's writes on one of them).
const LANES: usize = 4;

/// One decided write.
struct Job {
    decided: Correlated,
    wall: Duration,
    event: EventSpec,
}

/// Who reports: the controller's name (`reportingComponent`, `source.component`) and this
/// replica's identity (`reportingInstance`, e.g. the pod name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reporter {
    /// The controller, e.g. `greeter.example.com`.
    pub controller: String,
    /// This replica, e.g. its pod name.
    pub instance: String,
}

impl Reporter {
    /// The controller `controller` (its name) as reported by the replica `instance`.
    pub fn new(controller: impl Into<String>, instance: impl Into<String>) -> Self {
        Reporter {
            controller: controller.into(),
            instance: instance.into(),
        }
    }
}

/// Records Events. Cheap to clone; the writing task ends once every clone is dropped and the
/// queue is written out.
#[derive(Clone, Debug)]
pub struct Recorder {
    tx: async_channel::Sender<EventSpec>,
    counts: Arc<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    dropped: AtomicU64,
    written: AtomicU64,
    failed: AtomicU64,
    spam: AtomicU64,
}

impl Recorder {
    /// A recorder writing through `client` on `runtime`, with client-go's correlation rules.
    pub fn new<R: Runtime, B: Backend>(
        runtime: &R,
        client: Client<B>,
        reporter: Reporter,
    ) -> Result<Recorder, SpawnError> {
        Self::with_config(runtime, client, reporter, CorrelatorConfig::default())
    }

    /// [`new`](Self::new) with other correlation settings.
    pub fn with_config<R: Runtime, B: Backend>(
        runtime: &R,
        client: Client<B>,
        reporter: Reporter,
        config: CorrelatorConfig,
    ) -> Result<Recorder, SpawnError> {
        let (tx, rx) = async_channel::bounded(QUEUE);
        let counts = Arc::new(Counts::default());
        let writer = Arc::new(Writer {
            client,
            reporter,
            counts: counts.clone(),
        });
        // The writes go out on `LANES` tasks: an event's create and its later bumps on the same
        // one (by its name), in order; different events side by side.
        let mut lanes = Vec::with_capacity(LANES);
        for _ in 0..LANES {
            let (lane_tx, lane_rx) = async_channel::bounded::<Job>(QUEUE / LANES);
            let writer = writer.clone();
            runtime.spawn(Box::pin(async move {
                while let Ok(job) = lane_rx.recv().await {
                    writer.perform(job).await;
                }
            }))?;
            lanes.push(lane_tx);
        }
        let mut correlator = EventCorrelator::new(config);
        let start = (runtime.now(), SystemTime::now());
        let clock = runtime.clone();
        let spam = counts.clone();
        runtime.spawn(Box::pin(async move {
            while let Ok(event) = rx.recv().await {
                let mono = clock.now().saturating_duration_since(start.0);
                let now = informer_core::time::Instant::from_epoch(mono);
                let wall = (start.1 + mono)
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default();
                let reporter = (
                    writer.reporter.controller.as_str(),
                    writer.reporter.instance.as_str(),
                );
                let decided = correlator.correlate(now, wall, reporter, &event);
                let name = match &decided {
                    Correlated::Spam => {
                        spam.spam.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    Correlated::Create { name, .. } | Correlated::Bump { name, .. } => name,
                };
                let lane = name
                    .bytes()
                    .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b.into()))
                    % LANES;
                let job = Job {
                    decided,
                    wall,
                    event,
                };
                if lanes[lane].send(job).await.is_err() {
                    return;
                }
            }
        }))?;
        Ok(Recorder { tx, counts })
    }

    /// Queues an event about `regarding`; never waits. Returns false when it was dropped: the
    /// queue is full (the API server is slow or unreachable) or the writing task has ended.
    pub fn publish(
        &self,
        regarding: ObjectReference,
        event_type: EventType,
        reason: &str,
        action: &str,
        message: impl Into<String>,
    ) -> bool {
        let event = EventSpec {
            regarding,
            event_type,
            reason: reason.into(),
            action: action.into(),
            message: message.into(),
        };
        if self.tx.try_send(event).is_ok() {
            true
        } else {
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            false
        }
    }

    /// Events dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.counts.dropped.load(Ordering::Relaxed)
    }

    /// Events dropped by the spam filter (per object: 25, then one per five minutes).
    pub fn spam(&self) -> u64 {
        self.counts.spam.load(Ordering::Relaxed)
    }

    /// Writes (creates and patches) the API server accepted.
    pub fn written(&self) -> u64 {
        self.counts.written.load(Ordering::Relaxed)
    }

    /// Writes that failed (logged, not retried).
    pub fn failed(&self) -> u64 {
        self.counts.failed.load(Ordering::Relaxed)
    }

    /// Events queued and not yet written.
    pub fn queued(&self) -> usize {
        self.tx.len()
    }
}

/// A reference to `obj` for an event, from its resource (apiVersion and kind) and metadata.
pub fn reference_to<K: Object + ?Sized>(resource: &Resource, obj: &K) -> ObjectReference {
    ObjectReference {
        api_version: resource.api_version(),
        kind: resource.kind.to_string(),
        namespace: obj.namespace().map(str::to_owned),
        name: obj.name().to_owned(),
        uid: obj.uid().map(str::to_owned),
        resource_version: None,
    }
}

struct Writer<B: Backend> {
    client: Client<B>,
    reporter: Reporter,
    counts: Arc<Counts>,
}

impl<B: Backend> Writer<B> {
    async fn perform(&self, job: Job) {
        let Job {
            decided,
            wall,
            event,
        } = job;
        let namespace = event
            .regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let api = self
            .client
            .api::<DynamicObject>(Resource::EVENTS, Some(&namespace));
        let result = match &decided {
            Correlated::Spam => return,
            Correlated::Create { name, message } => {
                self.create(&api, &namespace, name, message, 1, wall, &event)
                    .await
            }
            Correlated::Bump {
                name,
                count,
                message,
            } => {
                let patch = json!({
                    "count": count,
                    "lastTimestamp": rfc3339(wall, 0),
                    "message": message,
                });
                match api
                    .patch(name, &Patch::Merge(patch), &PatchParams::default())
                    .await
                {
                    // Expired on the server (an hour by default): written anew.
                    Err(WriteError::NotFound(_)) => {
                        self.create(&api, &namespace, name, message, *count, wall, &event)
                            .await
                    }
                    r => r.map(drop),
                }
            }
        };
        match result {
            Ok(()) => {
                self.counts.written.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                self.counts.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    reason = %event.reason,
                    object = %event.regarding.name,
                    error = %e,
                    "could not write an event"
                );
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn create(
        &self,
        api: &informer_http::Api<DynamicObject, B>,
        namespace: &str,
        name: &str,
        message: &str,
        count: u32,
        wall: Duration,
        event: &EventSpec,
    ) -> Result<(), WriteError> {
        let r = &event.regarding;
        let at = rfc3339(wall, 0);
        let body = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {
                "apiVersion": r.api_version,
                "kind": r.kind,
                "namespace": r.namespace,
                "name": r.name,
                "uid": r.uid,
                "resourceVersion": r.resource_version,
            },
            "type": event.event_type.as_str(),
            "reason": event.reason,
            "action": event.action,
            "message": message,
            "count": count,
            "firstTimestamp": at,
            "lastTimestamp": at,
            "source": {"component": self.reporter.controller},
            "reportingComponent": self.reporter.controller,
            "reportingInstance": self.reporter.instance,
        });
        let obj: DynamicObject =
            serde_json::from_value(body).map_err(|e| WriteError::Encode(e.to_string()))?;
        api.create(&obj, &PostParams::default()).await.map(drop)
    }
}
