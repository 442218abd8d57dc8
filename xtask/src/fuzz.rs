//! `cargo xtask fuzz [--secs N] [TARGET]`: the cargo-fuzz targets of `fuzz/`.
//!
//! The fuzz crate is its own workspace (libFuzzer and the sanitizer flags stay out of the main
//! build). cargo-fuzz needs nightly flags; on the stable toolchain they are allowed with
//! `RUSTC_BOOTSTRAP=1`. cargo-fuzz itself is installed into `~/.cargo/bin` when missing.
//!
//! Each target starts from its committed seeds (`fuzz/seeds/<target>`) and a local corpus
//! (`fuzz/corpus/<target>`, not committed). A crash is copied into
//! `fuzz/regressions/<target>/`, where the fuzz crate's replay test runs it from then on: commit
//! it with the fix.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::{Result, cargo, record, root, run};

/// The targets, in the order they run.
pub const TARGETS: &[&str] = &[
    "watch_decoder",
    "list_decoder",
    "kubeconfig",
    "incluster",
    "h1_response",
    "informer_core",
    "selector",
    "workqueue",
    "snapshot_decode",
];

/// One target's figures.
pub struct Outcome {
    /// The target.
    pub target: &'static str,
    /// Executions libFuzzer reported.
    pub runs: u64,
    /// Seconds it ran.
    pub secs: f64,
}

pub fn main(args: &[&str]) -> Result {
    let mut secs = 60;
    let mut only = None;
    let mut rest = args;
    while let Some((first, tail)) = rest.split_first() {
        match (*first, tail) {
            ("--secs", [n, tail @ ..]) => {
                secs = n
                    .parse()
                    .map_err(|_| format!("fuzz: --secs takes a number, not {n:?}"))?;
                rest = tail;
            }
            (t, tail) if TARGETS.contains(&t) => {
                only = Some(t);
                rest = tail;
            }
            (other, _) => {
                return Err(format!(
                    "fuzz: unknown argument {other:?} (targets: {})",
                    TARGETS.join(", ")
                ));
            }
        }
    }
    let targets: Vec<&'static str> = match only {
        Some(t) => TARGETS.iter().copied().filter(|x| *x == t).collect(),
        None => TARGETS.to_vec(),
    };
    let outcomes = fuzz(&targets, secs)?;
    print_summary(&outcomes);
    Ok(())
}

/// Installs cargo-fuzz when `cargo fuzz` is not there (a fresh CI machine).
pub fn ensure_cargo_fuzz() -> Result {
    let present = cargo()
        .args(["fuzz", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if present {
        return Ok(());
    }
    let mut c = cargo();
    c.args(["install", "cargo-fuzz", "--locked"]);
    run("cargo install cargo-fuzz (once, into ~/.cargo/bin)", c)
}

fn fuzz_cmd() -> Command {
    let mut c = cargo();
    c.env("RUSTC_BOOTSTRAP", "1");
    c
}

/// Replays the seeds and every saved crash through the targets (plain `cargo test` of the fuzz
/// crate, no libFuzzer).
pub fn replay() -> Result {
    let mut c = cargo();
    c.args(["test", "--manifest-path", "fuzz/Cargo.toml", "--lib"]);
    run("fuzz: replay seeds and saved crashes", c)
}

/// Runs each target for `secs` seconds; a crash is saved as a regression and fails the run.
pub fn fuzz(targets: &[&'static str], secs: u64) -> Result<Vec<Outcome>> {
    ensure_cargo_fuzz()?;
    let mut c = fuzz_cmd();
    c.args(["fuzz", "build", "-O"]);
    run("cargo fuzz build -O (RUSTC_BOOTSTRAP=1)", c)?;
    let root = root();
    let mut outcomes = Vec::new();
    for &target in targets {
        let corpus = root.join("fuzz/corpus").join(target);
        std::fs::create_dir_all(&corpus).map_err(|e| format!("{}: {e}", corpus.display()))?;
        let artifacts = root.join("fuzz/artifacts").join(target);
        std::fs::create_dir_all(&artifacts).map_err(|e| format!("{}: {e}", artifacts.display()))?;
        let mut c = fuzz_cmd();
        c.args(["fuzz", "run", "-O", target])
            .arg(&corpus)
            .arg(root.join("fuzz/seeds").join(target))
            .arg("--")
            .arg(format!("-max_total_time={secs}"))
            .arg("-rss_limit_mb=2048")
            .arg("-max_len=65536")
            .arg("-print_final_stats=1")
            .arg(format!("-artifact_prefix={}/", artifacts.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        eprintln!("\n==> fuzz {target} for {secs} s");
        let start = Instant::now();
        let out = c
            .output()
            .map_err(|e| format!("fuzz {target}: cannot start: {e}"))?;
        let log = String::from_utf8_lossy(&out.stderr);
        let runs = log
            .lines()
            .rev()
            .filter_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
            .find_map(|n| n.trim().parse().ok())
            .unwrap_or(0);
        record(&format!("fuzz {target}"), start.elapsed());
        let elapsed = start.elapsed().as_secs_f64();
        eprintln!("<== fuzz {target}: {runs} executions in {elapsed:.1} s");
        if !out.status.success() {
            let saved = save_crashes(target, &artifacts, &root)?;
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(format!(
                "fuzz {target} found a failure ({}); saved as regressions: {}\n{}",
                out.status,
                saved.join(", "),
                tail.join("\n")
            ));
        }
        outcomes.push(Outcome {
            target,
            runs,
            secs: elapsed,
        });
    }
    Ok(outcomes)
}

/// Moves libFuzzer's crash, timeout and OOM artifacts into `fuzz/regressions/<target>/`.
fn save_crashes(target: &str, artifacts: &Path, root: &Path) -> Result<Vec<String>> {
    let dest = root.join("fuzz/regressions").join(target);
    std::fs::create_dir_all(&dest).map_err(|e| format!("{}: {e}", dest.display()))?;
    let mut saved = Vec::new();
    for entry in std::fs::read_dir(artifacts).map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            continue;
        };
        let to = dest.join(&name);
        std::fs::copy(&path, &to).map_err(|e| format!("{}: {e}", to.display()))?;
        let _ = std::fs::remove_file(&path);
        saved.push(to.display().to_string());
    }
    Ok(saved)
}

pub fn print_summary(outcomes: &[Outcome]) {
    println!("fuzz summary:");
    for o in outcomes {
        println!(
            "  {:<14} {:>10} executions in {:>5.1} s ({:.0}/s)",
            o.target,
            o.runs,
            o.secs,
            o.runs as f64 / o.secs.max(0.001)
        );
    }
}
