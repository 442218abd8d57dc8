//! What `cargo xtask demo` runs: a ConfigMap informer with the namespace index and an `app`
//! label index. One ConfigMap exists before the informer starts (its handler gets it in the
//! initial list); after the sync the program itself creates three ConfigMaps in namespace
//! `informer-demo`, updates one and deletes one, waits until its handler has seen all five
//! changes, answers a few index queries, and removes what it created.
//!
//! `cargo xtask demo` starts a local kube-apiserver for it. Against another cluster:
//! `KUBECONFIG=… cargo run -p informer-tokio --example demo` (it writes to `informer-demo`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use informer_tokio::{
    Client, Config, DynamicObject, HandlerFns, Informer, NAMESPACE_INDEX, Object, Resource,
    block_on, client, index_fn, sleep,
};

const NS: &str = "informer-demo";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    block_on(run())?
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let client = client(Config::infer()?)?;
    let cms = format!("/api/v1/namespaces/{NS}/configmaps");
    let _ = send(&client, "POST", "/api/v1/namespaces", &namespace()).await; // may exist
    send(&client, "POST", &cms, &configmap("existing", "db", "1")).await?;

    let informer = Informer::<DynamicObject>::builder_for(&client, Resource::CONFIGMAPS)
        .index(
            "app",
            index_fn(|cm: &DynamicObject| cm.label("app").into_iter().collect()),
        )
        .on_watch_error(|e| eprintln!("watch error (retrying): {e}"))
        .build()?;

    // The handler runs on its own thread; it prints and counts what it sees.
    let seen = Arc::new(AtomicUsize::new(0));
    let (a, u, d) = (seen.clone(), seen.clone(), seen.clone());
    let handler = informer.add_handler(
        HandlerFns::new()
            .on_add(move |cm: Arc<DynamicObject>, initial| {
                let tag = if initial { " (initial list)" } else { "" };
                println!("  handler: add    {}{tag}", key(&cm));
                a.fetch_add(1, Ordering::SeqCst);
            })
            .on_update(move |old: Arc<DynamicObject>, new: Arc<DynamicObject>| {
                let (was, is) = (data(&old), data(&new));
                println!("  handler: update {} data {was:?} -> {is:?}", key(&new));
                u.fetch_add(1, Ordering::SeqCst);
            })
            .on_delete(move |gone| {
                println!("  handler: delete {}", key(gone.object()));
                d.fetch_add(1, Ordering::SeqCst);
            }),
    )?;
    informer.start()?;
    handler.wait_for_sync(Some(Duration::from_secs(60))).await?;
    println!("synced: {} ConfigMaps cached", informer.store().len());

    let before = seen.load(Ordering::SeqCst);
    println!("creating 3 ConfigMaps in {NS}, updating one, deleting one");
    for (name, app) in [
        ("web-config", "web"),
        ("web-flags", "web"),
        ("db-config", "db"),
    ] {
        send(&client, "POST", &cms, &configmap(name, app, "1")).await?;
    }
    let web_config = format!("{cms}/web-config");
    send(
        &client,
        "PUT",
        &web_config,
        &configmap("web-config", "web", "2"),
    )
    .await?;
    send(&client, "DELETE", &format!("{cms}/db-config"), "").await?;
    wait_until(|| seen.load(Ordering::SeqCst) >= before + 5).await?;

    let store = informer.store();
    println!("index queries:");
    println!(
        "  by_index(namespace, {NS}): {:?}",
        keys(&store.by_index(NAMESPACE_INDEX, NS)?)
    );
    println!(
        "  by_index(app, web): {:?}",
        keys(&store.by_index("app", "web")?)
    );
    println!(
        "  by_index(app, db): {:?}",
        keys(&store.by_index("app", "db")?)
    );
    println!("  app values: {:?}", store.list_index_values("app")?);
    println!(
        "  get({NS}/web-config): data {:?}",
        store.get(&format!("{NS}/web-config")).map(|cm| data(&cm))
    );

    println!("cleaning up");
    let before = seen.load(Ordering::SeqCst);
    for name in ["existing", "web-config", "web-flags"] {
        send(&client, "DELETE", &format!("{cms}/{name}"), "").await?;
    }
    wait_until(|| seen.load(Ordering::SeqCst) >= before + 3).await?;
    println!("{:?}", informer.metrics());
    informer.shutdown().await;
    Ok(())
}

/// A ConfigMap's `data`.
fn data(cm: &DynamicObject) -> std::collections::BTreeMap<String, String> {
    cm.field("data").and_then(Result::ok).unwrap_or_default()
}

fn key(cm: &DynamicObject) -> String {
    format!("{}/{}", cm.namespace().unwrap_or(""), cm.name())
}

fn keys(cms: &[Arc<DynamicObject>]) -> Vec<String> {
    let mut keys: Vec<String> = cms.iter().map(|cm| key(cm)).collect();
    keys.sort();
    keys
}

fn namespace() -> String {
    format!(r#"{{"metadata":{{"name":"{NS}"}}}}"#)
}

fn configmap(name: &str, app: &str, version: &str) -> String {
    format!(
        r#"{{"metadata":{{"name":"{name}","labels":{{"app":"{app}"}}}},"data":{{"version":"{version}"}}}}"#
    )
}

/// One API call; a non-2xx answer is an error.
async fn send(
    client: &Client,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let body = (!body.is_empty()).then(|| body.as_bytes().to_vec());
    client.request(method.parse()?, path, body).await?;
    Ok(())
}

/// Polls `done` every 20 ms for up to 30 s.
async fn wait_until(done: impl Fn() -> bool) -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > Duration::from_secs(30) {
            return Err("the handler did not see the changes within 30 s".into());
        }
        sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
