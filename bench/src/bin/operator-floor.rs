//! `operator-floor`: the writes `cargo xtask bench operator`'s workload needs, sent straight by
//! a bare informer-http client (tokio, release build), `--writers` at a time: per Greeting its
//! create, the finalizer (a JSON patch testing the list it replaces), `--replicas` server-side
//! applies of a ConfigMap, the status (a merge patch of the subresource) and an event. No
//! informer, no queue, no reconcile: what the operators' writes cost the client (CPU) and the
//! API server (time) on this machine.
//!
//! `KUBECONFIG=… operator-floor --namespace NS --objects N --replicas R --writers W` prints one
//! JSON line when every write was answered:
//!
//! ```text
//! {"event":"floor","writes":6000,"wall_s":11.9,"cpu_user_s":0.41,"cpu_sys_s":0.12,"rss_kb":9000}
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use informer_bench::Usage;
use informer_http::{Patch, PatchParams, PostParams, WriteError};
use informer_tokio::{Config, DynamicObject, Object, Resource, client};
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = |name: &str, default: &str| {
        informer_bench::arg_value(name).unwrap_or_else(|| default.to_string())
    };
    let ns = arg("--namespace", "op-floor");
    let objects: usize = arg("--objects", "1000").parse()?;
    let replicas: usize = arg("--replicas", "3").parse()?;
    let writers: usize = arg("--writers", "32").parse()?;
    let rt = tokio::runtime::Runtime::new()?;
    let wall = rt.block_on(async move {
        let client = client(Config::infer()?)?;
        let greeting = Resource::new("example.com", "v1", "Greeting", "greetings", true);
        let next = Arc::new(AtomicUsize::new(0));
        let t = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..writers {
            let (client, ns, next, greeting) =
                (client.clone(), ns.clone(), next.clone(), greeting.clone());
            tasks.push(tokio::spawn(async move {
                let greetings = client.api::<DynamicObject>(greeting, Some(&ns));
                let cms = client.api::<DynamicObject>(Resource::CONFIGMAPS, Some(&ns));
                let events = client.api::<DynamicObject>(
                    Resource::new("events.k8s.io", "v1", "Event", "events", true),
                    Some(&ns),
                );
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= objects {
                        return Ok::<_, WriteError>(());
                    }
                    let name = format!("g-{i}");
                    let g = dynamic(json!({
                        "apiVersion": "example.com/v1", "kind": "Greeting",
                        "metadata": {"name": name, "namespace": ns},
                        "spec": {"message": format!("hello {i}"), "replicas": replicas},
                    }));
                    let g = greetings.create(&g, &PostParams::default()).await?;
                    let uid = g.uid().unwrap_or_default().to_string();
                    let finalizer = json!([
                        {"op": "test", "path": "/metadata/finalizers", "value": null},
                        {"op": "add", "path": "/metadata/finalizers", "value": ["example.com/cleanup"]},
                    ]);
                    greetings
                        .patch(&name, &Patch::Json(finalizer), &PatchParams::default())
                        .await?;
                    let owner = json!({
                        "apiVersion": "example.com/v1", "kind": "Greeting", "name": name,
                        "uid": uid, "controller": true, "blockOwnerDeletion": true,
                    });
                    for k in 0..replicas {
                        let cm = json!({
                            "apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": format!("{name}-{k}"), "labels": {"greeting": name},
                                         "ownerReferences": [owner]},
                            "data": {"message": format!("hello {i}")},
                        });
                        let params = PatchParams::apply("greeter").force();
                        cms.patch(&format!("{name}-{k}"), &Patch::Apply(cm), &params)
                            .await?;
                    }
                    let status = json!({"phase": "Ready", "observedGeneration": 1, "configMaps": replicas});
                    greetings.set_status(&name, &status).await?;
                    let event = dynamic(json!({
                        "apiVersion": "events.k8s.io/v1", "kind": "Event",
                        "metadata": {"name": format!("{name}.floor"), "namespace": ns},
                        "eventTime": "2026-01-01T00:00:00.000000Z",
                        "reportingController": "greeter", "reportingInstance": "greeter",
                        "action": "Reconcile", "reason": "Reconciled", "type": "Normal",
                        "note": format!("{replicas} ConfigMaps"),
                        "regarding": {"apiVersion": "example.com/v1", "kind": "Greeting",
                                      "name": name, "namespace": ns, "uid": uid},
                    }));
                    events.create(&event, &PostParams::default()).await?;
                }
            }));
        }
        for task in tasks {
            task.await??;
        }
        Ok::<_, Box<dyn std::error::Error>>(t.elapsed().as_secs_f64())
    })?;
    let u = Usage::now();
    println!(
        "{}",
        json!({
            "event": "floor", "writes": objects * (replicas + 3), "wall_s": wall,
            "cpu_user_s": u.user_s, "cpu_sys_s": u.sys_s, "rss_kb": u.rss_kb,
        })
    );
    Ok(())
}

fn dynamic(v: serde_json::Value) -> DynamicObject {
    serde_json::from_value(v).expect("a valid object")
}
