//! `operator`: the Greeting operator of `cargo xtask bench operator`, written with kube-rs 5 —
//! kube-runtime's `Controller`, its `finalizer` helper and events `Recorder`, kube-derive's
//! `CustomResource`. kube-rs 5 has no leader election built in: this runs as a single replica.
//!
//! A `Greeting` (`example.com/v1`, namespaced) wants `spec.replicas` ConfigMaps `<name>-<i>`,
//! labelled `greeting=<name>`, holding `message: <spec.message>`, controlled by it (server-side
//! apply, field manager `greeter`). Children at index `replicas` and beyond are deleted. The
//! status (`phase: Ready`, `observedGeneration`, `configMaps`) is written through the status
//! subresource only when it differs, and a `Normal` event `Reconciled` is recorded only when the
//! reconcile changed something. On delete (finalizer `example.com/cleanup`) the children are
//! deleted first, one by one (a bare API server has no garbage collector). Errors requeue the object with
//! client-go's per-item backoff (5 ms, doubled per failure, at most 1000 s).
//!
//! The children are read from a reflector store of the owned ConfigMaps, fed by the same watch
//! that triggers the controller (`owns_stream`, kube's `unstable-runtime` feature), so an
//! unchanged child costs no request. Namespace from `OPERATOR_NAMESPACE`, API server from
//! `KUBECONFIG`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{self, finalizer};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, CustomResource, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "Greeting",
    plural = "greetings"
)]
#[kube(namespaced, status = "GreetingStatus")]
pub struct GreetingSpec {
    pub message: String,
    pub replicas: u32,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GreetingStatus {
    pub phase: String,
    pub observed_generation: i64,
    pub config_maps: u32,
}

const FINALIZER: &str = "example.com/cleanup";
const MANAGER: &str = "greeter";

struct Ctx {
    client: Client,
    recorder: Recorder,
    children: Store<ConfigMap>,
    failures: Mutex<HashMap<String, u32>>,
}

type Error = finalizer::Error<kube::Error>;

async fn reconcile(g: Arc<Greeting>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let api: Api<Greeting> = Api::namespaced(ctx.client.clone(), &g.namespace().unwrap());
    let key = g.name_any();
    let c = &*ctx;
    let action = finalizer(&api, FINALIZER, g, |event| async move {
        match event {
            finalizer::Event::Apply(g) => apply(&g, c).await,
            finalizer::Event::Cleanup(g) => cleanup(&g, c).await,
        }
    })
    .await?;
    ctx.failures.lock().unwrap().remove(&key);
    Ok(action)
}

/// Whether `cm` is the child `g` wants.
fn up_to_date(cm: &ConfigMap, g: &Greeting, owner: &OwnerReference) -> bool {
    cm.labels().get("greeting") == Some(&g.name_any())
        && cm.data.as_ref().and_then(|d| d.get("message")) == Some(&g.spec.message)
        && cm.owner_references().contains(owner)
}

async fn apply(g: &Greeting, ctx: &Ctx) -> Result<Action, kube::Error> {
    let (ns, name) = (g.namespace().unwrap(), g.name_any());
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let owner = g.controller_owner_ref(&()).unwrap();
    let cached = |i: u32| {
        ctx.children
            .get(&ObjectRef::new(&format!("{name}-{i}")).within(&ns))
    };
    let mut changed = false;
    for i in 0..g.spec.replicas {
        if cached(i).is_some_and(|cm| up_to_date(&cm, g, &owner)) {
            continue;
        }
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("{name}-{i}")),
                labels: Some(BTreeMap::from([("greeting".into(), name.clone())])),
                owner_references: Some(vec![owner.clone()]),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([("message".into(), g.spec.message.clone())])),
            ..ConfigMap::default()
        };
        let params = PatchParams::apply(MANAGER).force();
        cms.patch(&format!("{name}-{i}"), &params, &Patch::Apply(&cm))
            .await?;
        changed = true;
    }
    // Extra children: the indexes from `replicas` up, to the first one missing.
    for i in g.spec.replicas.. {
        match cached(i) {
            Some(cm) if cm.labels().get("greeting") == Some(&name) => {
                cms.delete(&cm.name_any(), &DeleteParams::default()).await?;
                changed = true;
            }
            _ => break,
        }
    }
    let status = GreetingStatus {
        phase: "Ready".into(),
        observed_generation: g.metadata.generation.unwrap_or_default(),
        config_maps: g.spec.replicas,
    };
    if g.status.as_ref() != Some(&status) {
        let api: Api<Greeting> = Api::namespaced(ctx.client.clone(), &ns);
        let patch = Patch::Merge(json!({ "status": status }));
        api.patch_status(&name, &PatchParams::default(), &patch)
            .await?;
        changed = true;
    }
    if changed {
        let event = Event {
            type_: EventType::Normal,
            reason: "Reconciled".into(),
            note: Some(format!("{} ConfigMaps", g.spec.replicas)),
            action: "Reconcile".into(),
            secondary: None,
        };
        ctx.recorder.publish(&event, &g.object_ref(&())).await?;
    }
    Ok(Action::await_change())
}

async fn cleanup(g: &Greeting, ctx: &Ctx) -> Result<Action, kube::Error> {
    let (ns, name) = (g.namespace().unwrap(), g.name_any());
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    // The children the spec names (even if not cached yet), then the cached ones beyond.
    for i in 0.. {
        let child = format!("{name}-{i}");
        if i >= g.spec.replicas
            && ctx
                .children
                .get(&ObjectRef::new(&child).within(&ns))
                .is_none()
        {
            break;
        }
        match cms.delete(&child, &DeleteParams::default()).await {
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => return Err(e),
            Ok(_) => {}
        }
    }
    Ok(Action::await_change())
}

fn error_policy(g: Arc<Greeting>, error: &Error, ctx: Arc<Ctx>) -> Action {
    eprintln!("operator: {}: {error} (requeued)", g.name_any());
    let mut failures = ctx.failures.lock().unwrap();
    let n = failures.entry(g.name_any()).or_default();
    *n = (*n + 1).min(40);
    Action::requeue(Duration::from_millis(5u64 << (*n - 1).min(18)).min(Duration::from_secs(1000)))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ns = std::env::var("OPERATOR_NAMESPACE")?;
    let client = Client::try_default().await?;
    let (children, writer) = reflector::store();
    let owned = watcher(
        Api::<ConfigMap>::namespaced(client.clone(), &ns),
        watcher::Config::default().labels("greeting"),
    )
    .default_backoff()
    .reflect(writer)
    .touched_objects();
    let reporter = Reporter {
        controller: MANAGER.into(),
        instance: None,
    };
    let ctx = Arc::new(Ctx {
        recorder: Recorder::new(client.clone(), reporter),
        client: client.clone(),
        children,
        failures: Mutex::default(),
    });
    Controller::new(
        Api::<Greeting>::namespaced(client, &ns),
        watcher::Config::default(),
    )
    .owns_stream(owned)
    .run(reconcile, error_policy, ctx)
    .for_each(|result| async move {
        if let Err(e) = result {
            eprintln!("operator: {e}");
        }
    })
    .await;
    Ok(())
}
