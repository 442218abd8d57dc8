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

/// The step that replays the seeds and every saved crash through the targets: a plain `cargo
/// test` of the fuzz crate (no libFuzzer) with these arguments; test-all runs it among its test
/// jobs.
pub const REPLAY_STEP: &str = "fuzz: replay seeds and saved crashes";
/// See [`REPLAY_STEP`].
pub const REPLAY_ARGS: [&str; 4] = ["test", "--manifest-path", "fuzz/Cargo.toml", "--lib"];

/// Runs each target for `secs` seconds; a crash is saved as a regression and fails the run.
///
/// libFuzzer runs on one thread: the targets run [`jobs`] at a time, each on a core of its
/// own, so that every target still gets its `secs` of a core while the run takes a fraction
/// of the time. Each target's lines are printed when it ends, in the order of `targets`.
pub fn fuzz(targets: &[&'static str], secs: u64) -> Result<Vec<Outcome>> {
    ensure_cargo_fuzz()?;
    let mut c = fuzz_cmd();
    c.args(["fuzz", "build", "-O"]);
    run("cargo fuzz build -O (RUSTC_BOOTSTRAP=1)", c)?;
    let root = root();
    let jobs = jobs().min(targets.len()).max(1);
    eprintln!(
        "\n==> fuzz {} targets for {secs} s each, {jobs} at a time",
        targets.len()
    );
    let queue = std::sync::Mutex::new(targets.iter().copied().enumerate());
    let done: std::sync::Mutex<Vec<(usize, &'static str, Result<Ran>)>> = Default::default();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    let next = queue.lock().unwrap().next();
                    let Some((i, target)) = next else { break };
                    let ran = run_target(&root, target, secs);
                    done.lock().unwrap().push((i, target, ran));
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap();
    done.sort_by_key(|(i, ..)| *i);
    let mut outcomes = Vec::new();
    let mut failure = None;
    for (_, target, ran) in done {
        let ran = ran?;
        eprintln!("\n==> fuzz {target} for {secs} s");
        record(&format!("fuzz {target}"), ran.took);
        let elapsed = ran.took.as_secs_f64();
        eprintln!(
            "<== fuzz {target}: {} executions in {elapsed:.1} s",
            ran.runs
        );
        if !ran.status.success() && failure.is_none() {
            let artifacts = root.join("fuzz/artifacts").join(target);
            let saved = save_crashes(target, &artifacts, &root)?;
            let tail: Vec<&str> = ran.log.lines().rev().take(40).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            failure = Some(format!(
                "fuzz {target} found a failure ({}); saved as regressions: {}\n{}",
                ran.status,
                saved.join(", "),
                tail.join("\n")
            ));
        }
        outcomes.push(Outcome {
            target,
            runs: ran.runs,
            secs: elapsed,
        });
    }
    match failure {
        Some(f) => Err(f),
        None => Ok(outcomes),
    }
}

/// Targets fuzzed at once: the machine's cores.
fn jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// How one target's run went.
struct Ran {
    status: std::process::ExitStatus,
    /// libFuzzer's output.
    log: String,
    runs: u64,
    took: std::time::Duration,
}

/// Fuzzes `target` for `secs` seconds from its corpus and seeds.
fn run_target(root: &Path, target: &str, secs: u64) -> Result<Ran> {
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
    let start = Instant::now();
    let out = c
        .output()
        .map_err(|e| format!("fuzz {target}: cannot start: {e}"))?;
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    let runs = log
        .lines()
        .rev()
        .filter_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
        .find_map(|n| n.trim().parse().ok())
        .unwrap_or(0);
    Ok(Ran {
        status: out.status,
        log,
        runs,
        took: start.elapsed(),
    })
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
