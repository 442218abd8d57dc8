//! `cargo xtask bench scale`: cold sync of realistic Pods from a real kube-apiserver, and a
//! forced relist, by informer-rs and (with `--compare`) client-go v1.20.2 and kube-rs 5.
//!
//! For each size (`--pods 10000,30000` by default):
//! 1. starts a fresh kube-apiserver v1.20.2 + etcd and writes the Pods of
//!    `testcluster::pods::Workload::new(42, N)` (each created with field manager
//!    `kube-controller-manager`, then its status written with field manager `kubelet`);
//! 2. runs one client process after another, each an informer of every Pod with one handler
//!    and no transform, and takes its `synced` line (wall time since it started, its CPU,
//!    VmRSS, VmHWM):
//!    - `scale --object dynamic|compact|typed|metadata` (informer-bench, tokio):
//!      `DynamicObject`, `CompactObject`, `K8s<Pod>`, `PartialObjectMetadata`;
//!    - client-go's `sync -resource pods -relist` (a typed Pod SharedIndexInformer);
//!    - kube-rs's `sync-kube-rs --pods --relist` (a reflector of `Pod` whose watcher lists
//!      from the watch cache, `any_semantic()`);
//! 3. right after each client's sync, forces its relist: 100 status updates, etcd compacted,
//!    kube-apiserver restarted (its watch cache no longer reaches back: the watch gets 410);
//!    the client reset its peak RSS after its sync and prints a `relisted` line once it has
//!    listed again, whose VmHWM is its peak during the relist; then the client is stopped and
//!    the next one starts;
//! 4. prints, per size and client, sync wall time, client CPU, RSS after sync, the peak during
//!    the relist, its ratio to the RSS after sync and the time from the restart to the
//!    `relisted` line; with `--compare`, informer-rs / peer for CPU and RSS; and with two sizes
//!    or more, the slope per 1,000 Pods (RSS and CPU) between consecutive sizes, and between
//!    the smallest and the largest.
//!
//! Only one client is up at a time, for its sync and for its relist: at 100,000 Pods
//! client-go holds ~3 GB and kube-rs ~5 GB, each about twice that while relisting, beside
//! kube-apiserver's watch cache and etcd; all of them up and relisting at once would not fit
//! a 23 GB machine. Each relist being alone, its time is printed too.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use serde_json::Value;
use testcluster::TestCluster;
use testcluster::pods::{Churn, Workload, churn, write_pods};

use crate::bench_e2e::{lines_of, next_line};

const USAGE: &str = "usage: cargo xtask bench scale [--compare] [--pods N,N,...]\n";

struct Options {
    pods: Vec<usize>,
    compare: bool,
}

fn parse(args: &[&str]) -> Result<Options, String> {
    let mut o = Options {
        pods: vec![10_000, 30_000],
        compare: false,
    };
    let mut args = args.iter();
    while let Some(a) = args.next() {
        match *a {
            "--compare" => o.compare = true,
            "--pods" => {
                let v = args.next().ok_or(USAGE)?;
                o.pods = v
                    .split(',')
                    .map(|n| n.trim().replace('_', "").parse::<usize>())
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("--pods {v}: {e}\n{USAGE}"))?;
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if o.pods.is_empty() || o.pods.contains(&0) {
        return Err(format!("--pods needs sizes above 0\n{USAGE}"));
    }
    Ok(o)
}

/// One client's figures at one size.
struct Row {
    pods: usize,
    client: String,
    objects: u64,
    sync_wall: f64,
    sync_cpu: f64,
    rss_mb: f64,
    relist_peak_mb: f64,
    /// From the API server's restart to the client's `relisted` line.
    relist_s: f64,
}

/// A client to run: its name in the table and its command.
struct Client {
    name: &'static str,
    cmd: Command,
}

fn clients(scale: &PathBuf, peers: Option<&(PathBuf, PathBuf)>) -> Vec<Client> {
    let mut out = Vec::new();
    for (name, object) in [
        ("informer-rs DynamicObject", "dynamic"),
        ("informer-rs CompactObject", "compact"),
        ("informer-rs K8s<Pod>", "typed"),
        ("informer-rs metadata-only", "metadata"),
    ] {
        let mut cmd = Command::new(scale);
        cmd.args(["--object", object, "--timeout", "1800"]);
        out.push(Client { name, cmd });
    }
    if let Some((client_go, kube_rs)) = peers {
        let mut cmd = Command::new(client_go);
        cmd.args(["-resource", "pods", "-relist", "-timeout", "1800"]);
        out.push(Client {
            name: "client-go v1.20.2",
            cmd,
        });
        let mut cmd = Command::new(kube_rs);
        cmd.args(["--pods", "--relist", "--timeout", "1800"]);
        out.push(Client {
            name: "kube-rs 5",
            cmd,
        });
    }
    out
}

/// Builds `scale` (informer-bench, release, with `K8s<Pod>`); its executable.
fn build_scale() -> Result<PathBuf, String> {
    super::build_release(
        "build the scale client (informer-bench, release, feature k8s-openapi)",
        &[
            "-p",
            "informer-bench",
            "--bin",
            "scale",
            "--features",
            "k8s-openapi",
        ],
        "scale",
    )
}

/// Waits until the API server answers a list of Pods from its watch cache.
fn wait_watch_cache(cluster: &TestCluster) -> Result<(), String> {
    let start = Instant::now();
    loop {
        match cluster.request("GET", "/api/v1/pods?limit=1&resourceVersion=0", None) {
            Ok((200, _)) => return Ok(()),
            _ if start.elapsed() > Duration::from_secs(300) => {
                return Err("the API server's watch cache was not ready in 300 s".into());
            }
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(f64::NAN)
}

fn one_size(
    n: usize,
    scale: &PathBuf,
    peers: Option<&(PathBuf, PathBuf)>,
) -> Result<Vec<Row>, String> {
    eprintln!("\n==> {n} realistic Pods: a fresh cluster");
    let mut cluster = TestCluster::start().map_err(|e| e.to_string())?;
    let workload = Workload::new(42, n);
    let t = Instant::now();
    let written = write_pods(&cluster, &workload, 0..n, 16).map_err(|e| e.to_string())?;
    if !written.failed.is_empty() {
        return Err(format!(
            "{} writes failed, first {:?}",
            written.failed.len(),
            written.failed.first()
        ));
    }
    eprintln!(
        "    {} writes in {:.1} s ({:.0}/s)",
        written.ok,
        t.elapsed().as_secs_f64(),
        written.ok as f64 / t.elapsed().as_secs_f64()
    );
    wait_watch_cache(&cluster)?;

    let mut rows = Vec::new();
    for mut c in clients(scale, peers) {
        eprintln!(
            "==> {} ({n} Pods): cold sync (MemAvailable {})",
            c.name,
            mem_available()
        );
        let mut child = c
            .cmd
            .env("KUBECONFIG", &cluster.kubeconfig)
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", c.name))?;
        let lines = lines_of(&mut child);
        let row = sync_and_relist(&mut cluster, &workload, n, c.name, &lines);
        // One client at a time: this one ends before the next starts.
        let _ = child.kill();
        let _ = child.wait();
        rows.push(row?);
    }
    Ok(rows)
}

/// One client's cold sync, then its forced relist alone: 100 status updates, etcd compacted,
/// kube-apiserver restarted (its watch cache no longer reaches back: the watch gets 410).
fn sync_and_relist(
    cluster: &mut TestCluster,
    workload: &Workload,
    n: usize,
    name: &str,
    lines: &Receiver<String>,
) -> Result<Row, String> {
    let synced = next_line(lines, "synced").map_err(|e| format!("{name}: {e}"))?;
    eprintln!("    {synced}");
    eprintln!(
        "    forced relist: 100 status updates, etcd compacted, kube-apiserver restarted \
         (MemAvailable {})",
        mem_available()
    );
    let rate = Churn {
        status_updates: 100,
        recreates: 0,
        parallel: 8,
    };
    churn(cluster, workload, n, rate, Duration::from_secs(1)).map_err(|e| e.to_string())?;
    cluster.compact().map_err(|e| e.to_string())?;
    cluster.stop_apiserver().map_err(|e| e.to_string())?;
    cluster.start_apiserver().map_err(|e| e.to_string())?;
    let restarted = Instant::now();
    let relisted = next_line(lines, "relisted").map_err(|e| format!("{name}: {e}"))?;
    let relist_s = restarted.elapsed().as_secs_f64();
    eprintln!(
        "    {relisted} ({relist_s:.1} s after the restart; MemAvailable {})",
        mem_available()
    );
    Ok(Row {
        pods: n,
        client: name.to_string(),
        objects: synced["objects"].as_u64().unwrap_or(0),
        sync_wall: f(&synced, "wall_s"),
        sync_cpu: f(&synced, "cpu_user_s") + f(&synced, "cpu_sys_s"),
        rss_mb: f(&synced, "rss_kb") / 1024.0,
        relist_peak_mb: f(&relisted, "hwm_kb") / 1024.0,
        relist_s,
    })
}

/// The machine's `MemAvailable` (from `/proc/meminfo`), for the log.
fn mem_available() -> String {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map_or_else(
            || "?".into(),
            |kb| format!("{:.1} GB", kb as f64 / 1048576.0),
        )
}

pub fn main(args: &[&str]) -> super::Result {
    let o = parse(args)?;
    let scale = build_scale()?;
    let peers = if o.compare {
        let dir = super::peers::client_go()?;
        Some((dir.join("sync"), super::peers::kube_rs()?))
    } else {
        None
    };
    testcluster::ensure_built().map_err(|e| e.to_string())?;
    let load_before = super::load_average();
    let mut rows = Vec::new();
    for &n in &o.pods {
        rows.extend(one_size(n, &scale, peers.as_ref())?);
    }
    print(&rows, &o.pods, &load_before, &super::load_average());
    Ok(())
}

fn print(rows: &[Row], sizes: &[usize], before: &str, after: &str) {
    println!("\nbench scale: realistic Pods (testcluster::pods), cold sync and a forced relist");
    println!("load average before {before}, after {after}\n");
    println!(
        "{:>7}  {:<27} {:>8} {:>8} {:>8} {:>10} {:>12} {:>8} {:>8}",
        "Pods",
        "client",
        "objects",
        "sync s",
        "CPU s",
        "RSS MB",
        "relist peak",
        "peak/RSS",
        "relist s"
    );
    for r in rows {
        println!(
            "{:>7}  {:<27} {:>8} {:>8.2} {:>8.2} {:>10.1} {:>12.1} {:>8.2} {:>8.1}",
            r.pods,
            r.client,
            r.objects,
            r.sync_wall,
            r.sync_cpu,
            r.rss_mb,
            r.relist_peak_mb,
            r.relist_peak_mb / r.rss_mb,
            r.relist_s
        );
    }
    let peers: Vec<&Row> = rows
        .iter()
        .filter(|r| !r.client.starts_with("informer-rs"))
        .collect();
    if !peers.is_empty() {
        println!("\ninformer-rs / peer, same size (CPU for the sync; RSS after the sync):");
        for r in rows.iter().filter(|r| r.client.starts_with("informer-rs")) {
            for p in peers.iter().filter(|p| p.pods == r.pods) {
                println!(
                    "{:>7}  {:<27} / {:<18} CPU {:>5.2}x   RSS {:>5.2}x",
                    r.pods,
                    r.client,
                    p.client,
                    r.sync_cpu / p.sync_cpu,
                    r.rss_mb / p.rss_mb
                );
            }
        }
    }
    // The slope between each pair of consecutive sizes, then between the smallest and the
    // largest when there are three or more.
    let mut sizes: Vec<usize> = sizes.to_vec();
    sizes.sort_unstable();
    sizes.dedup();
    let mut pairs: Vec<(usize, usize)> = sizes.windows(2).map(|w| (w[0], w[1])).collect();
    if sizes.len() > 2 {
        pairs.push((sizes[0], sizes[sizes.len() - 1]));
    }
    for (small, large) in pairs {
        println!("\nslope per 1,000 Pods, {small} to {large}:");
        let clients: Vec<&str> = rows
            .iter()
            .filter(|r| r.pods == small)
            .map(|r| r.client.as_str())
            .collect();
        for c in clients {
            let at = |n: usize| rows.iter().find(|r| r.pods == n && r.client == c);
            if let (Some(a), Some(b)) = (at(small), at(large)) {
                let k = (large - small) as f64 / 1000.0;
                println!(
                    "         {:<27} RSS {:>7.2} MB   CPU {:>6.3} s   sync {:>6.3} s",
                    c,
                    (b.rss_mb - a.rss_mb) / k,
                    (b.sync_cpu - a.sync_cpu) / k,
                    (b.sync_wall - a.sync_wall) / k
                );
            }
        }
    }
}
