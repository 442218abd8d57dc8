//! Project automation for informer-rs.
//!
//! ```text
//! cargo xtask test-all          fmt, clippy, tests, no_std proof, docs, end-to-end suite
//! cargo xtask nostd             only the no_std proof build
//! cargo xtask bench core        the core pipeline benchmark
//! cargo xtask cluster up|down   a local kube-apiserver + etcd (see cluster.rs)
//! ```

mod bench_e2e;
mod cluster;
mod demo;

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

type Result<T = ()> = std::result::Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["test-all"] => test_all(),
        ["nostd"] => nostd(),
        ["bench", "core"] => bench_core(),
        ["bench", "e2e", rest @ ..] => bench_e2e::main(rest),
        ["bench", "conn"] => bench_conn(),
        ["demo", rest @ ..] => demo::main(rest),
        ["sim", "--seeds", n] => sim(n, None),
        ["sim", "--seeds", n, "--base", base] => sim(n, Some(base)),
        ["sim", "--replay", seed] => sim_replay(seed),
        ["cluster", rest @ ..] => cluster::main(rest),
        [] | ["help"] | ["--help"] | ["-h"] => {
            print!("{}", HELP);
            Ok(())
        }
        other => Err(format!("unknown command {other:?}\n\n{HELP}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e}");
            ExitCode::FAILURE
        }
    }
}

const HELP: &str = "\
usage: cargo xtask <command>

  test-all        cargo fmt --check, clippy -D warnings, every crate's tests,
                  the no_std proof build, docs with warnings denied
  nostd           build informer-core into a #![no_std] staticlib (fails on any std use)
  bench core      core pipeline benchmark (100k objects, 1M events)
  bench e2e       end-to-end benchmark against a local kube-apiserver (tokio and smol)
  bench conn      connections and client memory of 20 informers on one client, HTTP/2
                  against HTTP/1.1 (a local kube-apiserver)
  demo            start a local cluster, run an informer, change objects, show what it saw
  sim --seeds N [--base B]
                  run N deterministic simulation seeds (model API server with faults,
                  virtual clock), optimised build; failures print their seed
  sim --replay S  replay one seed with a trace
  cluster up      build (cached) and start kube-apiserver + etcd on loopback
  cluster down    stop it
";

/// The workspace root (xtask lives one level below it).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is inside the workspace")
        .to_path_buf()
}

fn cargo() -> Command {
    let mut c = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

/// Runs a command, failing with its description if it does not succeed.
fn run(step: &str, mut cmd: Command) -> Result {
    eprintln!("\n==> {step}");
    let start = Instant::now();
    let status = cmd
        .status()
        .map_err(|e| format!("{step}: cannot start: {e}"))?;
    eprintln!("<== {step}: {:?} in {:.1?}", status, start.elapsed());
    if status.success() {
        Ok(())
    } else {
        Err(format!("{step} failed ({status})"))
    }
}

fn test_all() -> Result {
    let start = Instant::now();
    let mut c = cargo();
    c.args(["fmt", "--all", "--", "--check"]);
    run("cargo fmt --check", c)?;

    let mut c = cargo();
    c.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    run("cargo clippy --all-targets -D warnings", c)?;

    nostd()?;

    // Each published crate must build on its own: inside the workspace, cargo unifies
    // features across crates and can hide a missing one (informer-tokio once needed tokio's
    // `rt-multi-thread` without asking for it).
    for args in [
        &[
            "-p",
            "informer-http",
            "--no-default-features",
            "--features",
            "tokio",
        ][..],
        &[
            "-p",
            "informer-http",
            "--no-default-features",
            "--features",
            "smol",
        ],
        &["-p", "informer-runtime"],
        &["-p", "informer-tokio"],
        &["-p", "informer-smol"],
    ] {
        let mut c = cargo();
        c.arg("check").args(args);
        run(&format!("cargo check {} (on its own)", args.join(" ")), c)?;
    }

    // The end-to-end tests start their own kube-apiserver + etcd; build (or find cached) the
    // apiserver first so a cold machine shows that step on its own.
    eprintln!("\n==> kube-apiserver + etcd (installed and built once, then cached)");
    let t = Instant::now();
    cluster::main(&["build"])?;
    eprintln!("<== kube-apiserver ready in {:.1?}", t.elapsed());

    let mut totals = Totals::default();
    let mut c = cargo();
    c.args(["test", "--workspace", "--all-targets"]);
    run_counting("cargo test --workspace --all-targets", c, &mut totals)?;

    // kube-rs is heavy to compile: its feature is off in the workspace build and tested once
    // here, against a real apiserver.
    let mut c = cargo();
    c.args([
        "test",
        "-p",
        "informer-tokio",
        "--features",
        "kube",
        "--test",
        "kube_client",
    ]);
    run_counting(
        "cargo test -p informer-tokio --features kube",
        c,
        &mut totals,
    )?;

    let mut c = cargo();
    c.args(["test", "--workspace", "--doc"]);
    run_counting("cargo test --doc", c, &mut totals)?;

    let mut c = cargo();
    c.args(["doc", "--workspace", "--no-deps"])
        .env("RUSTDOCFLAGS", "-D warnings");
    run("cargo doc (warnings denied)", c)?;

    eprintln!("\ntest-all: every step passed in {:.1?}", start.elapsed());
    println!("{} passed, {} failed", totals.passed, totals.failed);
    Ok(())
}

/// Test counts summed over every `test result:` line cargo printed.
#[derive(Default)]
struct Totals {
    passed: u64,
    failed: u64,
}

impl Totals {
    /// Adds the counts of a libtest summary line (`test result: ok. 3 passed; 0 failed; ...`).
    fn add_line(&mut self, line: &str) {
        let Some(rest) = line.trim().strip_prefix("test result: ") else {
            return;
        };
        for part in rest.split([';', '.']) {
            let mut words = part.split_whitespace();
            if let (Some(n), Some(what)) = (words.next(), words.next()) {
                match (n.parse::<u64>(), what) {
                    (Ok(n), "passed") => self.passed += n,
                    (Ok(n), "failed") => self.failed += n,
                    _ => {}
                }
            }
        }
    }
}

/// Like [`run`], passing stdout through while summing the test counts in it.
fn run_counting(step: &str, mut cmd: Command, totals: &mut Totals) -> Result {
    use std::io::{BufRead, BufReader, Write};
    eprintln!("\n==> {step}");
    let start = Instant::now();
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("{step}: cannot start: {e}"))?;
    if let Some(out) = child.stdout.take() {
        let stdout = std::io::stdout();
        for line in BufReader::new(out)
            .lines()
            .map_while(std::result::Result::ok)
        {
            totals.add_line(&line);
            let _ = writeln!(stdout.lock(), "{line}");
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("{step}: cannot wait: {e}"))?;
    eprintln!("<== {step}: {:?} in {:.1?}", status, start.elapsed());
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "{step} failed ({status}); {} passed, {} failed so far",
            totals.passed, totals.failed
        ))
    }
}

/// Builds `nostd-check`, a `#![no_std]` staticlib with its own panic handler and allocator
/// that calls into informer-core without default features. If the core or any dependency links
/// std, rustc fails with "duplicate lang item `panic_impl`" naming the culprit.
fn nostd() -> Result {
    let mut c = cargo();
    c.args([
        "build",
        "--manifest-path",
        "nostd-check/Cargo.toml",
        "--release",
    ]);
    run("no_std proof build (nostd-check staticlib)", c)
}

/// The simulation test, optimised, over `n` seeds.
fn sim(n: &str, base: Option<&str>) -> Result {
    n.parse::<u64>()
        .map_err(|_| format!("sim: --seeds takes a number, not {n:?}"))?;
    let mut c = cargo();
    c.args([
        "test",
        "--release",
        "-p",
        "informer-core",
        "--lib",
        "--",
        "--exact",
        "sim::tests::conformance_25_sim_many_seeds_converge",
        "--nocapture",
    ])
    .env("INFORMER_SIM_SEEDS", n);
    if let Some(b) = base {
        c.env("INFORMER_SIM_SEED_BASE", b);
    }
    run(&format!("simulation over {n} seeds"), c)
}

fn sim_replay(seed: &str) -> Result {
    let mut c = cargo();
    c.args([
        "test",
        "-p",
        "informer-core",
        "--lib",
        "--",
        "--exact",
        "sim::tests::sim_replay_seed",
        "--nocapture",
    ])
    .env("INFORMER_SIM_SEED", seed);
    run(&format!("simulation replay of seed {seed}"), c)
}

fn bench_conn() -> Result {
    let mut c = cargo();
    c.args([
        "run",
        "--release",
        "-p",
        "informer-http",
        "--example",
        "conn_bench",
    ]);
    run("informer-http example conn_bench", c)
}

fn bench_core() -> Result {
    let mut c = cargo();
    c.args(["bench", "-p", "informer-core", "--bench", "pipeline"]);
    run("core pipeline benchmark (system allocator)", c)?;
    let mut c = cargo();
    c.args([
        "bench",
        "-p",
        "informer-core",
        "--bench",
        "pipeline_mimalloc",
    ]);
    run("core pipeline benchmark (mimalloc)", c)
}

#[cfg(test)]
mod tests {
    use super::Totals;

    #[test]
    fn sums_libtest_summaries() {
        let mut t = Totals::default();
        t.add_line("test result: ok. 40 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 6.10s");
        t.add_line(
            "test result: FAILED. 3 passed; 2 failed; 1 ignored; 0 measured; 0 filtered out",
        );
        t.add_line("running 2 tests");
        assert_eq!((t.passed, t.failed), (43, 2));
    }
}
