//! The peers that `cargo xtask bench core --compare`, `cargo xtask bench e2e --compare` and
//! `cargo xtask bench operator --compare` run next to informer-rs, each built once and cached outside the main workspace:
//!
//! - client-go v1.20.2 (`bench/peers/client-go`): Go programs built by its `build.sh` against
//!   the client-go inside Debian's `kubernetes` source tree (the tree the test cluster's
//!   kube-apiserver comes from), with Debian's Go; cached in the testcluster cache directory.
//! - kube-rs 5 (`bench/peers/kube-rs`): its own Cargo workspace and `Cargo.lock`, built in
//!   release into the main target directory (dependencies it shares with the workspace are
//!   compiled once; cargo rebuilds nothing when nothing changed).
//!
//! `cargo xtask test-all` builds neither (minutes of compiling); it only parses their sources
//! ([`check_sources`]).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::Value;

/// Builds (or finds cached) the client-go programs; the directory holding `core`, `sync` and `podwatch`.
pub fn client_go() -> Result<PathBuf, String> {
    let step = "client-go v1.20.2 peer (built once from Debian's kubernetes source, then cached)";
    eprintln!("\n==> {step}");
    let t = Instant::now();
    // The Debian packages (Go, dpkg-dev, reflect2) and the deb-src entry come with the test
    // cluster's own build, cached after the first time.
    testcluster::ensure_built().map_err(|e| format!("{step}: {e}"))?;
    let script = super::root().join("bench/peers/client-go/build.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(testcluster::cache_dir())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("{step}: starting {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!("{step}: {}", super::outcome(out.status)));
    }
    let dir = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(|l| PathBuf::from(l.trim()))
        .ok_or_else(|| format!("{step}: the build script named no directory"))?;
    for prog in ["core", "sync", "podwatch"] {
        if !dir.join(prog).is_file() {
            return Err(format!("{step}: no {prog} in {}", dir.display()));
        }
    }
    eprintln!("<== {step}: ok in {}", super::secs(t.elapsed()));
    Ok(dir)
}

/// Builds the kube-rs peer (release); its `sync-kube-rs` executable.
pub fn kube_rs() -> Result<PathBuf, String> {
    kube_rs_bin("sync-kube-rs")
}

/// Builds the kube-rs peer (release); the executable of its bin `name` (`sync-kube-rs`,
/// `operator`).
pub fn kube_rs_bin(name: &str) -> Result<PathBuf, String> {
    let step = "kube-rs 5 peer (bench/peers/kube-rs, its own workspace, release)";
    eprintln!("\n==> {step}");
    let t = Instant::now();
    let root = super::root();
    let out = super::cargo()
        .args(["build", "--release", "--bins", "--manifest-path"])
        .arg(root.join("bench/peers/kube-rs/Cargo.toml"))
        .arg("--target-dir")
        .arg(root.join("target"))
        .arg("--message-format=json-render-diagnostics")
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("{step}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{step}: {}", super::outcome(out.status)));
    }
    let exe = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|m| m["target"]["name"] == name)
        .and_then(|m| m["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| format!("{step}: cargo built no {name}"))?;
    eprintln!("<== {step}: ok in {}", super::secs(t.elapsed()));
    Ok(exe)
}

/// For `test-all`: the peers' sources parse and are formatted (`gofmt -e -l`, `rustfmt
/// --check`), in about a second, without building them.
pub fn check_sources() -> super::Result {
    let step = "peer benchmark sources parse (gofmt, rustfmt; not built)";
    eprintln!("\n==> {step}");
    let t = Instant::now();
    let root = super::root();
    let go_dir = root.join("bench/peers/client-go");
    let out = Command::new("gofmt")
        .arg("-e")
        .arg("-l")
        .arg(&go_dir)
        .output()
        .map_err(|e| format!("{step}: gofmt (Debian's golang-go): {e}"))?;
    let unformatted = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || !unformatted.is_empty() {
        return Err(format!(
            "{step}: gofmt {}: {}{unformatted}",
            super::outcome(out.status),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let status = Command::new("rustfmt")
        .args(["--check", "--edition", "2024"])
        .arg(root.join("bench/peers/kube-rs/src/main.rs"))
        .arg(root.join("bench/peers/kube-rs/src/operator.rs"))
        .status()
        .map_err(|e| format!("{step}: rustfmt: {e}"))?;
    super::finish(step, status, t)
}
