//! The Greeting operator: a custom resource defined in Rust, reconciled by a `Controller`.
//!
//! For each `Greeting` (`example.com/v1`, namespaced; spec `message` and `replicas`) it keeps
//! `replicas` ConfigMaps `<name>-<i>` holding the message, owned by the Greeting, and deletes
//! the surplus; writes `status` (phase, observedGeneration, configMaps) through the status
//! subresource only when it changed; records an event when it changed something; holds the
//! finalizer `example.com/cleanup` to delete the ConfigMaps when the Greeting goes (a cluster
//! without a garbage collector keeps them otherwise); runs behind the Lease `greeter`, or as one
//! member of a sharded ring (each member watches and reconciles only the Greetings labelled
//! for it); stops on SIGTERM or Ctrl-C.
//!
//! This file is the operator; `greeter_main.rs` beside it is the process around it (the `crd`
//! subcommand, JSON logs, the admin server, the client from the environment):
//! `KUBECONFIG=… cargo run -p informer-tokio --features admin --example greeter -- NAMESPACE`
//! (or `-p informer-smol`). One source for both runtimes: each runtime crate's
//! `examples/greeter.rs` names its crate `runtime` and includes both files.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::runtime::http::{DeleteParams, Patch, PatchParams, WriteError};
use super::runtime::{
    Action, AdminServer, Client, Context, Controller, DynamicObject, EventType, FinalizerEvent,
    HasResource, Informer, LeaderElectionConfig, Object, Reporter, Resource, Sharding, Store,
    custom_resource, finalizer,
};

/// What a Greeting asks for.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct GreetingSpec {
    /// The text every ConfigMap holds.
    pub message: String,
    /// How many ConfigMaps.
    pub replicas: u32,
}

/// What the operator last did for it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GreetingStatus {
    /// `Ready` once its ConfigMaps match the spec.
    pub phase: String,
    /// The generation that was reconciled.
    pub observed_generation: i64,
    /// ConfigMaps kept.
    pub config_maps: u32,
}

custom_resource! {
    /// The custom resource (its CRD: `Crd::of::<Greeting>()`).
    pub struct Greeting("example.com", "v1", "greetings", namespaced) {
        spec: GreetingSpec,
        status: GreetingStatus,
    }
}

const FINALIZER: &str = "example.com/cleanup";
const MANAGER: &str = "greeter";

/// Runs the operator in `namespace` until SIGTERM or Ctrl-C (or `stop` resolves), reporting
/// to `admin` if given (stopped last, with the operator): behind the Lease, or as the member
/// `shard` of a ring (labels mode: it watches only the Greetings labelled for it; the
/// ConfigMaps it writes reach its selector only once the sharder labelled them, too late for
/// the next reconcile's read-your-writes wait, so it watches all of them).
pub async fn run(
    client: Client,
    namespace: &str,
    identity: &str,
    admin: Option<AdminServer>,
    shard: Option<Sharding>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Box<dyn std::error::Error>> {
    let mine = shard.as_ref().and_then(Sharding::label_selector);
    let greetings = Informer::<Greeting>::builder(&client)
        .namespace(namespace)
        .label_selector(mine.unwrap_or_default())
        .build()?;
    let children = Informer::<DynamicObject>::builder_for(&client, Resource::CONFIGMAPS)
        .namespace(namespace)
        .label_selector("greeting")
        .label_index("greeting")
        .build()?;
    let store = children.store();
    let controller = Controller::new(&client, greetings)
        .name(MANAGER)
        .admin(admin)
        .owns(children)
        .concurrency(64);
    let controller = match shard {
        Some(shard) => controller.shard(shard),
        None => controller.leader_election(namespace, MANAGER, LeaderElectionConfig::new(identity)),
    };
    controller
        .events(Reporter::new(MANAGER, identity))
        .shutdown_on_signal()
        .shutdown_on(stop)
        .run(move |g: Arc<Greeting>, ctx: Context| {
            let store = store.clone();
            async move {
                let api = ctx.client().api_for::<Greeting>(g.namespace());
                finalizer(&api, FINALIZER, g, |event| async {
                    match event {
                        FinalizerEvent::Apply(g) => apply(&g, &ctx, &store).await,
                        FinalizerEvent::Cleanup(g) => cleanup(&g, &ctx, &store).await,
                    }
                })
                .await
            }
        })
        .await?;
    Ok(())
}

/// ConfigMaps as the spec says, surplus ones deleted, status and an event if anything changed.
async fn apply(
    g: &Greeting,
    ctx: &Context,
    children: &Store<DynamicObject>,
) -> Result<Action, WriteError> {
    let cms = ctx
        .client()
        .api::<DynamicObject>(Resource::CONFIGMAPS, g.namespace());
    let ns = g.namespace().unwrap_or_default();
    let owner = Greeting::resource().controller_of(g)?;
    let names: Vec<String> = (0..g.spec.replicas)
        .map(|i| format!("{}-{i}", g.name()))
        .collect();
    let mut changed = false;
    for name in &names {
        let current = children.get(&format!("{ns}/{name}"));
        let data = current.and_then(|cm| cm.field::<serde_json::Value>("data")?.ok());
        if data.is_none_or(|d| d["message"] != g.spec.message.as_str()) {
            let cm = json!({
                "apiVersion": "v1", "kind": "ConfigMap", "data": {"message": g.spec.message},
                "metadata": {"name": name, "labels": {"greeting": g.name()}, "ownerReferences": [owner]},
            });
            let params = PatchParams::apply(MANAGER).force();
            cms.patch(name, &Patch::Apply(cm), &params).await?;
            changed = true;
        }
    }
    for cm in children
        .by_index("label:greeting", g.name())
        .unwrap_or_default()
    {
        if !names.iter().any(|n| n == cm.name()) {
            cms.delete(cm.name(), &DeleteParams::default()).await?;
            changed = true;
        }
    }
    let status = GreetingStatus {
        phase: "Ready".into(),
        observed_generation: g.generation().ok().flatten().unwrap_or(0),
        config_maps: g.spec.replicas,
    };
    if g.status.as_ref() != Some(&status) {
        let api = ctx.client().api_for::<Greeting>(g.namespace());
        api.set_status(g.name(), &status).await?;
        changed = true;
    }
    if changed {
        let note = format!("{} ConfigMaps", g.spec.replicas);
        ctx.publish(g, EventType::Normal, "Reconciled", "Reconcile", note);
    }
    Ok(Action::Done)
}

/// The Greeting is going: its ConfigMaps go first.
async fn cleanup(
    g: &Greeting,
    ctx: &Context,
    children: &Store<DynamicObject>,
) -> Result<Action, WriteError> {
    let cms = ctx
        .client()
        .api::<DynamicObject>(Resource::CONFIGMAPS, g.namespace());
    for cm in children
        .by_index("label:greeting", g.name())
        .unwrap_or_default()
    {
        cms.delete(cm.name(), &DeleteParams::default()).await?;
    }
    Ok(Action::Done)
}
