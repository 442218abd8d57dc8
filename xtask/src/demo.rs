//! `cargo xtask demo`: a local kube-apiserver + etcd, an informer on tokio watching it while
//! ConfigMaps are created, updated and deleted, what its handler saw, a few index queries; then
//! the cluster is stopped.
//!
//! The informer is `informer-tokio/examples/demo.rs`, run with the cluster's kubeconfig. On a
//! fresh machine the first run also installs etcd and builds kube-apiserver (see `testcluster`;
//! cached afterwards).

use std::time::Instant;

use testcluster::TestCluster;

/// Entry point.
pub fn main(args: &[&str]) -> super::Result {
    if !args.is_empty() {
        return Err(format!("demo takes no arguments, got {args:?}"));
    }
    let start = Instant::now();

    let mut c = super::cargo();
    c.args(["build", "-p", "informer-tokio", "--example", "demo"]);
    super::run("build the demo (informer-tokio/examples/demo.rs)", c)?;

    eprintln!("\n==> local kube-apiserver v1.20.2 + etcd (installed and built once, then cached)");
    let t = Instant::now();
    let cluster = TestCluster::start().map_err(|e| e.to_string())?;
    eprintln!(
        "<== up at {}: ok in {}",
        cluster.server,
        super::secs(t.elapsed())
    );

    let mut c = super::cargo();
    c.args(["run", "-p", "informer-tokio", "--example", "demo"])
        .env("KUBECONFIG", &cluster.kubeconfig);
    let result = super::run("informer-tokio demo", c);

    eprintln!("\n==> stopping the cluster");
    drop(cluster);
    result?;
    eprintln!("demo: done in {}", super::secs(start.elapsed()));
    Ok(())
}
