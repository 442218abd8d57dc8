//! A ConfigMap informer with the built-in namespace index and an `app` label index: prints
//! what its handler sees, then answers a few index queries, and keeps watching for
//! `INFORMER_EXAMPLE_SECS` seconds (default 10).
//!
//! Needs a cluster: `KUBECONFIG` (or `~/.kube/config`, or in-cluster). Try it with
//! `cargo xtask cluster up`, then `KUBECONFIG=… cargo run -p informer-tokio --example configmaps`
//! (or `-p informer-smol --example smol_configmaps`).
//!
//! One source for both runtimes: `informer-tokio/examples/configmaps.rs` and
//! `informer-smol/examples/configmaps.rs` each name their runtime crate `runtime` and include
//! this file as their module `configmaps`; everything below is written against that name.

use std::sync::Arc;
use std::time::Duration;

use super::runtime::{
    Config, DynamicObject, HandlerFns, Informer, NAMESPACE_INDEX, Object, Resource, block_on,
    client, index_fn, sleep,
};

/// The example's `main`.
pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    block_on(run())?
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let client = client(Config::infer()?)?;
    let informer = Informer::<DynamicObject>::builder_for(&client, Resource::CONFIGMAPS)
        .index(
            "app",
            index_fn(|cm: &DynamicObject| cm.label("app").into_iter().collect()),
        )
        .resync(Duration::from_secs(60))
        .on_watch_error(|e| eprintln!("watch error (retrying): {e}"))
        .build()?;
    let handler = informer.add_handler(
        HandlerFns::new()
            .on_add(|cm: Arc<DynamicObject>, initial| {
                if !initial {
                    println!("added   {}/{}", cm.namespace().unwrap_or(""), cm.name())
                }
            })
            .on_update(|old: Arc<DynamicObject>, new: Arc<DynamicObject>| {
                if old.resource_version() != new.resource_version() {
                    println!("updated {}/{}", new.namespace().unwrap_or(""), new.name())
                }
            })
            .on_delete(|gone| {
                let cm = gone.object();
                println!("deleted {}/{}", cm.namespace().unwrap_or(""), cm.name())
            }),
    )?;
    informer.start()?;
    handler.wait_for_sync(Some(Duration::from_secs(60))).await?;

    let store = informer.store();
    println!("{} ConfigMaps cached", store.len());
    for ns in store.list_index_values(NAMESPACE_INDEX)? {
        println!(
            "  namespace {ns}: {}",
            store.by_index(NAMESPACE_INDEX, &ns)?.len()
        );
    }
    for app in store.list_index_values("app")? {
        println!("  app={app}: {:?}", store.index_keys("app", &app)?);
    }

    let secs = std::env::var("INFORMER_EXAMPLE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    sleep(Duration::from_secs(secs)).await;
    println!("{:?}", informer.metrics());
    informer.shutdown().await;
    Ok(())
}
