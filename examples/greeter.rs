//! The Greeting operator: a custom resource defined in Rust, reconciled by a `Controller`.
//!
//! For each `Greeting` (`example.com/v1`, namespaced; spec `message` and `replicas`) it keeps
//! `replicas` ConfigMaps `<name>-<i>` holding the message, owned by the Greeting, and deletes
//! the surplus; writes `status` (phase, observedGeneration, configMaps) through the status
//! subresource only when it changed; records an event when it changed something; holds the
//! finalizer `example.com/cleanup` to delete the ConfigMaps when the Greeting goes (a cluster
//! without a garbage collector keeps them otherwise); runs behind the Lease `greeter`; stops on
//! SIGTERM or Ctrl-C. Its CRD comes from the Rust types: `greeter crd` prints it.
//!
//! `KUBECONFIG=… cargo run -p informer-tokio --features admin --example greeter -- NAMESPACE`
//! (or `-p informer-smol`). One source for both runtimes: each runtime crate's
//! `examples/greeter.rs` names its crate `runtime` and includes this file.
//!
//! Ready for a container (`deploy/greeter/`: Dockerfile, Deployment, ServiceAccount, RBAC):
//!
//! - the admin server on `ADMIN_ADDR` (default `0.0.0.0:8080`): `/livez` and `/readyz` for
//!   the kubelet's probes, `/metrics` for Prometheus (controller-runtime's metric names);
//! - logs as JSON lines, one object per event with its spans (`reconcile{controller, key,
//!   attempt, result, duration_seconds}`, `informer{informer}`), filtered by `RUST_LOG`
//!   (default `info`): tracing-subscriber's JSON layer, set up in `main` below;
//! - in a pod it reads its ServiceAccount's token (`Config::infer`), takes its namespace
//!   from the argument (the Deployment passes `POD_NAMESPACE`) and its identity from
//!   `POD_NAME`.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::runtime::core::object::ObjectMeta;
use super::runtime::http::{DeleteParams, Patch, PatchParams, WriteError, crd::Crd};
use super::runtime::{
    Action, Client, Context, Controller, DynamicObject, EventType, FinalizerEvent, HasResource,
    Informer, LeaderElectionConfig, Object, Reporter, Resource, Store, events::reference_to,
    finalizer, impl_object,
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

/// The custom resource.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Greeting {
    /// Name, namespace, generation, finalizers...
    pub metadata: ObjectMeta,
    /// What it asks for.
    pub spec: GreetingSpec,
    /// What the operator did (written through the status subresource only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<GreetingStatus>,
}
impl_object!(Greeting);

impl HasResource for Greeting {
    fn resource() -> Resource {
        Resource::new("example.com", "v1", "Greeting", "greetings", true)
    }
}

/// The CRD, from the types above.
pub fn crd() -> serde_json::Value {
    let crd = Crd::new(&Greeting::resource()).spec::<GreetingSpec>();
    crd.status::<GreetingStatus>()
        .short_names(["gr"])
        .to_json()
        .expect("structural")
}

const FINALIZER: &str = "example.com/cleanup";
const MANAGER: &str = "greeter";

/// Runs the operator in `namespace` until SIGTERM or Ctrl-C (or `stop` resolves).
pub async fn run(
    client: Client,
    namespace: &str,
    identity: &str,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Box<dyn std::error::Error>> {
    run_with_admin(client, namespace, identity, None, stop).await
}

/// [`run`], reporting to an admin server (stopped last, when the operator stops).
pub async fn run_with_admin(
    client: Client,
    namespace: &str,
    identity: &str,
    admin: Option<super::runtime::AdminServer>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Box<dyn std::error::Error>> {
    let greetings = Informer::<Greeting>::builder_for(&client, Greeting::resource())
        .namespace(namespace)
        .build()?;
    let children = Informer::<DynamicObject>::builder_for(&client, Resource::CONFIGMAPS)
        .namespace(namespace)
        .label_selector("greeting")
        .label_index("greeting")
        .build()?;
    let store = children.store();
    let reporter = Reporter {
        controller: MANAGER.into(),
        instance: identity.into(),
    };
    let mut controller = Controller::new(&client, greetings).name(MANAGER);
    if let Some(admin) = admin {
        controller = controller.admin(admin);
    }
    controller
        .owns(children)
        .concurrency(16)
        .leader_election(namespace, MANAGER, LeaderElectionConfig::new(identity))
        .events(reporter)
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

fn child_name(g: &Greeting, i: u32) -> String {
    format!("{}-{i}", g.name())
}

/// ConfigMaps as the spec says, surplus ones deleted, status and an event if anything changed.
async fn apply(
    g: &Greeting,
    ctx: &Context,
    store: &Store<DynamicObject>,
) -> Result<Action, WriteError> {
    let cms = ctx
        .client()
        .api::<DynamicObject>(Resource::CONFIGMAPS, g.namespace());
    let owner = Greeting::resource()
        .controller_of(g)
        .map_err(|e| WriteError::Encode(e.to_string()))?;
    let mut changed = false;
    for i in 0..g.spec.replicas {
        let name = child_name(g, i);
        let current = store.get(&format!("{}/{name}", g.namespace().unwrap_or_default()));
        let up_to_date = current.as_ref().is_some_and(|cm| {
            let data = cm.field::<serde_json::Value>("data").and_then(Result::ok);
            data.is_some_and(|d| d["message"] == g.spec.message.as_str())
        });
        if !up_to_date {
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "labels": {"greeting": g.name()}, "ownerReferences": [owner]},
                "data": {"message": g.spec.message}});
            cms.patch(
                &name,
                &Patch::Apply(cm),
                &PatchParams::apply(MANAGER).force(),
            )
            .await?;
            changed = true;
        }
    }
    for cm in store
        .by_index("label:greeting", g.name())
        .unwrap_or_default()
    {
        let index = cm
            .name()
            .rsplit('-')
            .next()
            .and_then(|i| i.parse::<u32>().ok());
        if index.is_some_and(|i| i >= g.spec.replicas) {
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
        api.patch_status(
            g.name(),
            &Patch::Merge(json!({"status": status})),
            &PatchParams::default(),
        )
        .await?;
        changed = true;
    }
    if let (true, Some(recorder)) = (changed, ctx.recorder()) {
        let about = reference_to(&Greeting::resource(), g);
        recorder.publish(
            about,
            EventType::Normal,
            "Reconciled",
            "Reconcile",
            format!("{} ConfigMaps", g.spec.replicas),
        );
    }
    Ok(Action::Done)
}

/// The Greeting is going: its ConfigMaps go first.
async fn cleanup(
    g: &Greeting,
    ctx: &Context,
    store: &Store<DynamicObject>,
) -> Result<Action, WriteError> {
    let cms = ctx
        .client()
        .api::<DynamicObject>(Resource::CONFIGMAPS, g.namespace());
    for cm in store
        .by_index("label:greeting", g.name())
        .unwrap_or_default()
    {
        cms.delete(cm.name(), &DeleteParams::default()).await?;
    }
    Ok(Action::Done)
}

/// The example's `main`: `greeter crd` prints the CRD; `greeter [NAMESPACE]` runs the operator
/// (the namespace from `OPERATOR_NAMESPACE` when not given; `default` without either).
pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("OPERATOR_NAMESPACE").ok())
        .unwrap_or_else(|| "default".into());
    if arg == "crd" {
        println!("{}", super::runtime::http::crd::to_yaml(&crd()));
        return Ok(());
    }
    // JSON logs: one line per event, with the fields of its spans; RUST_LOG filters.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_current_span(true)
        .with_span_list(true)
        .with_env_filter(filter)
        .try_init();
    // The admin server first: it installs the metrics recorder the informers report to.
    let addr: std::net::SocketAddr = std::env::var("ADMIN_ADDR")
        .unwrap_or_else(|_| "0.0.0.0:8080".into())
        .parse()?;
    let admin = super::runtime::serve_admin(super::runtime::Admin::new(addr))?;
    super::runtime::block_on(async move {
        let client = super::runtime::client(super::runtime::Config::infer()?)?;
        let identity = std::env::var("POD_NAME")
            .unwrap_or_else(|_| format!("{MANAGER}-{}", std::process::id()));
        run_with_admin(client, &arg, &identity, Some(admin), std::future::pending()).await
    })?
}
