//! `sync-kube-rs`: kube-rs's reflector (a `reflector::store()` fed by `watcher`, default
//! `watcher::Config`: paged lists of 500 with `ListSemantic::MostRecent`) of every ConfigMap, on tokio's multi-threaded runtime (what
//! `#[tokio::main]` gives), for `cargo xtask bench e2e --compare`.
//!
//! It speaks the protocol of the project's own `sync-tokio` / `sync-smol` clients: one JSON line
//! `{"event":"synced",...}` once the store is ready (the watcher's `InitDone`), then, after
//! `--updates N` `Apply` events, one `{"event":"updates",...}` line; each with wall time since
//! the process started, user and system CPU, VmRSS and VmHWM. The "handler" is the loop that
//! consumes the reflector's stream (kube-rs has no handler registry). The API server comes from
//! `$KUBECONFIG` (`Client::try_default`).
//!
//! For `cargo xtask bench scale --compare`: `--pods` makes it a reflector of every Pod
//! (k8s-openapi's typed `Pod`) whose watcher lists from the API server's watch cache
//! (`any_semantic()`, as client-go and informer-rs list; what kube-rs advises for big
//! clusters), and `--relist` makes it, after the synced line, reset its peak RSS and wait for
//! the watcher's next `InitDone` (a relist after the watch's 410), then print
//! `{"event":"relisted",...}`: its VmHWM is the peak during the relist.

use std::pin::pin;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};

/// Usage of this process: user and system CPU of every thread (`getrusage`, microseconds),
/// VmRSS and VmHWM from `/proc/self/status` (the same reading as the project's clients).
fn usage() -> (f64, f64, u64, u64) {
    let (mut user, mut sys, mut rss, mut hwm) = (0.0, 0.0, 0, 0);
    // SAFETY: `getrusage` only writes the `rusage` it is given, which is plain data.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable `rusage`.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } == 0 {
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        user = secs(ru.ru_utime);
        sys = secs(ru.ru_stime);
    }
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        for line in status.lines() {
            let kb = || {
                line.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            };
            if line.starts_with("VmRSS:") {
                rss = kb();
            } else if line.starts_with("VmHWM:") {
                hwm = kb();
            }
        }
    }
    (user, sys, rss, hwm)
}

fn report(started: Instant, event: &str, what: &str, n: usize) {
    let (user, sys, rss, hwm) = usage();
    println!(
        "{{\"event\":\"{event}\",\"{what}\":{n},\"wall_s\":{:.3},\"cpu_user_s\":{user:.4},\
         \"cpu_sys_s\":{sys:.4},\"rss_kb\":{rss},\"hwm_kb\":{hwm}}}",
        started.elapsed().as_secs_f64()
    );
}

fn flag(args: &[String], name: &str) -> Option<u64> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1)?.parse().ok()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let updates = flag(&args, "--updates").unwrap_or(0) as usize;
    let timeout = Duration::from_secs(flag(&args, "--timeout").unwrap_or(120));

    let client = Client::try_default().await?;
    if args.iter().any(|a| a == "--pods") {
        let relist = args.iter().any(|a| a == "--relist");
        let api: Api<Pod> = Api::all(client);
        let (reader, writer) = reflector::store();
        let config = watcher::Config::default().any_semantic();
        let mut stream = pin!(reflector(writer, watcher(api, config)).default_backoff());
        let run = async {
            let mut synced = false;
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone) if !synced => {
                        synced = true;
                        report(started, "synced", "objects", reader.state().len());
                        if !relist {
                            return Ok(());
                        }
                        // The peak from here on is the relist's (5 resets VmHWM to VmRSS).
                        std::fs::write("/proc/self/clear_refs", "5").map_err(|e| e.to_string())?;
                    }
                    Ok(watcher::Event::InitDone) => {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        report(started, "relisted", "objects", reader.state().len());
                        return Ok(());
                    }
                    Ok(_) => {}
                    Err(e) => eprintln!("sync-kube-rs: watcher error (retried): {e}"),
                }
            }
            Err("the watch stream ended".to_string())
        };
        tokio::time::timeout(timeout * 2, run)
            .await
            .map_err(|_| format!("timed out after {:?}", timeout * 2))??;
        return Ok(());
    }
    let api: Api<ConfigMap> = Api::all(client);
    let (reader, writer) = reflector::store();
    let mut stream =
        pin!(reflector(writer, watcher(api, watcher::Config::default())).default_backoff());

    let run = async {
        let mut synced = false;
        let mut seen = 0;
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::InitDone) if !synced => {
                    synced = true;
                    report(started, "synced", "objects", reader.state().len());
                    if updates == 0 {
                        return Ok(());
                    }
                }
                Ok(watcher::Event::Apply(_)) if synced => {
                    seen += 1;
                    if seen == updates {
                        report(started, "updates", "updates", updates);
                        return Ok(());
                    }
                }
                Ok(_) => {}
                Err(e) => eprintln!("sync-kube-rs: watcher error (retried): {e}"),
            }
        }
        Err("the watch stream ended".to_string())
    };
    tokio::time::timeout(timeout * 2, run)
        .await
        .map_err(|_| format!("timed out after {:?}", timeout * 2))??;
    Ok(())
}
