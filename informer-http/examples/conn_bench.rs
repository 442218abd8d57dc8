//! `cargo xtask bench conn`: connections and client memory for 20 informers on one client,
//! HTTP/2 against HTTP/1.1, on both backends (reqwest on tokio, and smol), against a local
//! kube-apiserver (testcluster).
//!
//! The parent starts the cluster and seeds 20 namespaces of 50 ConfigMaps; each backend and
//! protocol then runs in a child process of its own (so their memory does not mix): 20
//! list+watch pairs on one client, held open, then the child reports its established
//! connections to the apiserver and its resident memory (VmRSS, VmHWM).

use std::process::Command;

use informer_core::object::DynamicObject;
use informer_core::protocol::{ListRequest, WatchRequest};
use informer_http::{Client, Transport};
use informer_http::{Config, Resource};

const INFORMERS: usize = 20;
const PER_NAMESPACE: usize = 50;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [child, backend, mode, kubeconfig] if child == "--child" => {
            run_child(backend, mode, kubeconfig)
        }
        [] => run_parent(),
        _ => {
            eprintln!("usage: conn_bench");
            std::process::exit(2);
        }
    }
}

fn run_parent() {
    let tc = testcluster::TestCluster::start().expect("start test cluster");
    for i in 0..INFORMERS {
        let ns = format!("bench-{i}");
        let (s, b) = tc
            .request(
                "POST",
                "/api/v1/namespaces",
                Some(&format!(r#"{{"metadata":{{"name":"{ns}"}}}}"#)),
            )
            .unwrap();
        assert!((200..300).contains(&s), "{s} {b}");
        for j in 0..PER_NAMESPACE {
            let (s, b) = tc
                .request(
                    "POST",
                    &format!("/api/v1/namespaces/{ns}/configmaps"),
                    Some(&format!(
                        r#"{{"metadata":{{"name":"cm-{j}"}},"data":{{"v":"{}"}}}}"#,
                        "x".repeat(512)
                    )),
                )
                .unwrap();
            assert!((200..300).contains(&s), "{s} {b}");
        }
    }
    let exe = std::env::current_exe().unwrap();
    println!(
        "{INFORMERS} informers (list + watch, {PER_NAMESPACE} ConfigMaps each) on one client:"
    );
    println!(
        "{:<8} {:<10} {:>12} {:>14} {:>14}",
        "backend", "protocol", "connections", "VmRSS (KiB)", "VmHWM (KiB)"
    );
    for backend in ["reqwest", "smol"] {
        for mode in ["h2", "h1"] {
            let out = Command::new(&exe)
                .args(["--child", backend, mode, &tc.kubeconfig.to_string_lossy()])
                .output()
                .expect("run child");
            assert!(out.status.success(), "{backend} {mode}: {out:?}");
            print!("{}", String::from_utf8_lossy(&out.stdout));
        }
    }
}

fn run_child(backend: &str, mode: &str, kubeconfig: &str) {
    let mut cfg = Config::from_kubeconfig_file(kubeconfig, None).unwrap();
    cfg.http2 = mode == "h2";
    let port: u16 = cfg.server.rsplit(':').next().unwrap().parse().unwrap();
    let name = if mode == "h2" { "HTTP/2" } else { "HTTP/1.1" };
    if backend == "smol" {
        // No tokio runtime in this process.
        let client = Client::smol(cfg).unwrap();
        let watches = smol::block_on(async {
            let tasks: Vec<_> = (0..INFORMERS)
                .map(|i| {
                    let api = client
                        .api::<DynamicObject>(Resource::CONFIGMAPS, Some(&format!("bench-{i}")));
                    smol::spawn(async move {
                        let page = api.list(&ListRequest::default()).await.expect("list");
                        assert_eq!(page.items.len(), PER_NAMESPACE);
                        let w = api
                            .watch(&WatchRequest {
                                resource_version: page.resource_version.clone(),
                                timeout_seconds: Some(300),
                                ..WatchRequest::default()
                            })
                            .await
                            .expect("watch");
                        (page, w)
                    })
                })
                .collect();
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await);
            }
            out
        });
        let conns = testcluster::connections_to(port);
        let (rss, hwm) = memory();
        println!("{backend:<8} {name:<10} {conns:>12} {rss:>14} {hwm:>14}");
        drop(watches);
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = Client::reqwest(cfg).unwrap();
    let watches = rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..INFORMERS {
            let api =
                client.api::<DynamicObject>(Resource::CONFIGMAPS, Some(&format!("bench-{i}")));
            tasks.push(tokio::spawn(async move {
                let page = api.list(&ListRequest::default()).await.expect("list");
                assert_eq!(page.items.len(), PER_NAMESPACE);
                let w = api
                    .watch(&WatchRequest {
                        resource_version: page.resource_version.clone(),
                        timeout_seconds: Some(300),
                        ..WatchRequest::default()
                    })
                    .await
                    .expect("watch");
                (page, w)
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    let conns = testcluster::connections_to(port);
    let (rss, hwm) = memory();
    println!("{backend:<8} {name:<10} {conns:>12} {rss:>14} {hwm:>14}");
    drop(watches);
}

fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let get = |k: &str| {
        status
            .lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (get("VmRSS:"), get("VmHWM:"))
}
