//! `cargo xtask cluster build|up|down|status`: a local kube-apiserver v1.20.2 + etcd on loopback.
//!
//! `up` leaves the cluster running with its files (logs, certificates, kubeconfig, and a `state`
//! file with the pids) in `<workspace>/.cluster/cluster`; `down` stops it by those pids.

use std::path::PathBuf;
use std::time::Instant;

use testcluster::{StartOptions, TestCluster};

const USAGE: &str = "\
usage: cargo xtask cluster <build|up|down|status>
  build    install (apt) and build kube-apiserver v1.20.2 into the cache if needed
  up       build if needed, start etcd + kube-apiserver on loopback, leave them running
  down     stop the cluster started by `up` and remove its files
  status   say whether it runs
";

/// Entry point of `cargo xtask cluster`.
pub fn main(args: &[&str]) -> super::Result {
    match args {
        ["build"] => build(),
        ["up"] => up(),
        ["down"] => down(),
        ["status"] => status(),
        [] | ["help"] | ["--help"] | ["-h"] => {
            print!("{USAGE}");
            Ok(())
        }
        other => Err(format!("cluster: unknown arguments {other:?}\n\n{USAGE}")),
    }
}

fn cluster_dir() -> PathBuf {
    super::root().join(".cluster").join("cluster")
}

fn build() -> super::Result {
    let start = Instant::now();
    let b = testcluster::ensure_built().map_err(|e| e.to_string())?;
    println!("kube-apiserver: {}", b.kube_apiserver.display());
    println!("etcd:           {}", b.etcd.display());
    println!("etcdctl:        {}", b.etcdctl.display());
    eprintln!("cluster build: ready in {}", super::secs(start.elapsed()));
    Ok(())
}

fn print_info(c: &TestCluster) {
    println!("server:     {}", c.server);
    println!("kubeconfig: {}", c.kubeconfig.display());
    println!("token:      {}", c.token);
    println!("logs:       {}", c.dir.display());
    println!("\nexport KUBECONFIG={}", c.kubeconfig.display());
}

fn up() -> super::Result {
    let dir = cluster_dir();
    if dir.exists() {
        match TestCluster::attach(&dir) {
            Ok(mut c) => {
                if c.apiserver_running() {
                    println!("cluster already running");
                    print_info(&c);
                    c.detach();
                    return Ok(());
                }
                // Half alive (etcd only): stop it and start afresh.
                drop(c);
            }
            Err(e) => eprintln!("cluster up: cleaning up a stale {}: {e}", dir.display()),
        }
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .map_err(|e| format!("removing {}: {e}", dir.display()))?;
        }
    }
    let start = Instant::now();
    let c = TestCluster::start_with(StartOptions::new().dir(&dir).new_process_group(true))
        .map_err(|e| e.to_string())?;
    eprintln!("cluster up: ready in {}", super::secs(start.elapsed()));
    print_info(&c);
    c.detach();
    Ok(())
}

fn down() -> super::Result {
    let dir = cluster_dir();
    if !dir.exists() {
        println!("no cluster is running ({} does not exist)", dir.display());
        return Ok(());
    }
    match TestCluster::attach(&dir) {
        Ok(c) => {
            drop(c);
            println!("cluster stopped");
        }
        Err(e) => {
            println!("{e}");
            if dir.exists() {
                std::fs::remove_dir_all(&dir)
                    .map_err(|e| format!("removing {}: {e}", dir.display()))?;
            }
        }
    }
    Ok(())
}

fn status() -> super::Result {
    let dir = cluster_dir();
    if !dir.join("state").exists() {
        println!("not running");
        return Ok(());
    }
    match TestCluster::attach(&dir) {
        Ok(mut c) => {
            let running = c.apiserver_running();
            println!(
                "{}",
                if running {
                    "running"
                } else {
                    "etcd running, kube-apiserver stopped"
                }
            );
            print_info(&c);
            c.detach();
            Ok(())
        }
        Err(e) => {
            println!("not running ({e})");
            Ok(())
        }
    }
}
