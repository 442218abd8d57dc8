//! `scale`: an informer of every Pod on tokio, for `cargo xtask bench scale`: cold sync, then
//! a forced relist.
//!
//! `--object dynamic|compact|metadata|typed` picks what the cache holds: `DynamicObject`,
//! `CompactObject`, `PartialObjectMetadata` (the server sends metadata only) or `K8s<Pod>`
//! (k8s-openapi's typed Pod; built with the `k8s-openapi` feature). No transform.
//!
//! Prints `{"event":"synced","objects":N,...}` once its handler has synced (wall time since
//! the process started, CPU, VmRSS, VmHWM, as the other clients), then resets its peak RSS
//! (`/proc/self/clear_refs`), and once the informer has relisted (the watch ended with 410
//! after the API server was restarted on a compacted etcd, so a full list was made and at
//! least as many objects applied as the first list had), prints
//! `{"event":"relisted",...}`: its VmHWM then is the peak during the relist.

use std::time::{Duration, Instant};

use informer_bench::Usage;
use informer_tokio::{
    CompactObject, Config, DynamicObject, HandlerFns, Informer, Object, PartialObjectMetadata,
    Resource, client,
};

fn report(started: Instant, event: &str, objects: usize) {
    let u = Usage::now();
    println!(
        "{{\"event\":\"{event}\",\"objects\":{objects},\"wall_s\":{:.3},\"cpu_user_s\":{:.4},\
         \"cpu_sys_s\":{:.4},\"rss_kb\":{},\"hwm_kb\":{}}}",
        started.elapsed().as_secs_f64(),
        u.user_s,
        u.sys_s,
        u.rss_kb,
        u.hwm_kb
    );
}

fn run<K>(started: Instant, timeout: Duration) -> Result<(), Box<dyn std::error::Error>>
where
    K: Object + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let rt = tokio::runtime::Runtime::new()?;
    let informer = rt.block_on(async {
        let client = client(Config::infer()?)?;
        let informer = Informer::<K>::builder_for(&client, Resource::PODS).build()?;
        let handler = informer.add_handler(HandlerFns::new())?;
        informer.start()?;
        handler.wait_for_sync(Some(timeout)).await?;
        Ok::<_, Box<dyn std::error::Error>>(informer)
    })?;
    let objects = informer.store().len();
    report(started, "synced", objects);
    let applied = informer.metrics().events_applied;
    // The peak from here on is the relist's (Linux: 5 resets VmHWM to VmRSS).
    std::fs::write("/proc/self/clear_refs", "5")?;
    let deadline = Instant::now() + timeout;
    loop {
        let m = informer.metrics();
        if m.relists >= 1 && m.events_applied >= applied + objects as u64 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("no relist within {timeout:?} ({m:?})").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // What the relist left behind is freed as the new list replaces it: let that settle.
    std::thread::sleep(Duration::from_secs(1));
    report(started, "relisted", informer.store().len());
    rt.block_on(informer.shutdown());
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let object = informer_bench::arg_value("--object").unwrap_or_else(|| "dynamic".into());
    let timeout = Duration::from_secs(
        informer_bench::arg_value("--timeout")
            .and_then(|v| v.parse().ok())
            .unwrap_or(900),
    );
    match object.as_str() {
        "dynamic" => run::<DynamicObject>(started, timeout),
        "compact" => run::<CompactObject>(started, timeout),
        "metadata" => run::<PartialObjectMetadata>(started, timeout),
        #[cfg(feature = "k8s-openapi")]
        "typed" => {
            run::<informer_tokio::http::K8s<k8s_openapi::api::core::v1::Pod>>(started, timeout)
        }
        other => Err(format!(
            "--object {other}: dynamic, compact, metadata or typed (with the k8s-openapi feature)"
        )
        .into()),
    }
}
