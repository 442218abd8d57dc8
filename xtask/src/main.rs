//! Project automation for informer-rs: `cargo xtask` (or `cargo xtask help`) lists every
//! command (see [`HELP`]).

mod acyclic;
mod bench_e2e;
mod bench_operator;
mod bench_pod_watch;
mod bench_scale;
mod bench_shard;
mod cluster;
mod demo;
mod fuzz;
mod peers;
mod suites;

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

type Result<T = ()> = std::result::Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["test-all"] => test_all(),
        ["acyclic"] => acyclic::check(true),
        ["tests", rest @ ..] => tests(rest),
        ["nostd"] => nostd(),
        ["docs"] => docs(),
        ["package"] => package(),
        ["publish-dry-run"] => publish_dry_run(),
        ["msrv"] => msrv(),
        ["bench", "core"] => bench_core(false),
        ["bench", "core", "--compare"] => bench_core(true),
        ["bench", "e2e", rest @ ..] => bench_e2e::main(rest),
        ["bench", "operator", rest @ ..] => bench_operator::main(rest),
        ["bench", "scale", rest @ ..] => bench_scale::main(rest),
        ["bench", "shard", rest @ ..] => bench_shard::main(rest),
        ["bench", "pod-heap"] => bench_pod_heap(),
        ["bench", "pod-watch", rest @ ..] => bench_pod_watch::main(rest),
        ["bench", "conn"] => bench_conn(),
        ["bench", "readers"] => bench_readers(),
        ["demo", rest @ ..] => demo::main(rest),
        ["sim", "--seeds", n] => sim(n, None),
        ["sim", "--seeds", n, "--base", base] => sim(n, Some(base)),
        ["sim", "--replay", seed] => sim_replay(seed),
        ["cluster", rest @ ..] => cluster::main(rest),
        ["fuzz", rest @ ..] => fuzz::main(rest),
        ["soak"] => soak("2"),
        ["soak", "--minutes", n] => soak(n),
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

/// What `cargo xtask` (no arguments, `help`, `--help`, `-h`) prints: every command.
const HELP: &str = "\
usage: cargo xtask <command>

checks
  test-all        everything CI runs: cargo fmt --check; the module-circle check; clippy
                  -D warnings (which also rejects std APIs newer than rust-version); msrv;
                  package; each published crate checked on its own; the no_std proof
                  build; the benchmark peers' sources parsed (not built); every test,
                  including the end-to-end suites against a real kube-apiserver (the test
                  binaries run two at a time, as `cargo xtask tests` runs them); docs with
                  warnings denied; the fuzz seeds and saved crashes replayed, each fuzz
                  target for 10 s (one per core at a time); then the ten slowest steps
  acyclic         no module import circle in any library crate: under every module, its
                  children must form a DAG under: code in A's subtree names an item in B's
                  (files read with syn; cfg(test) code left out); prints each circle with
                  the lines behind it. test-all fails only for the crates in
                  ACYCLIC_CRATES (xtask/src/acyclic.rs) and warns for the others
  tests [CARGO TEST ARGS]
                  the test binaries of `cargo test ARGS` built, then run the way test-all
                  runs them: INFORMER_TEST_JOBS at a time (default 2), longest first, each
                  one's output printed when it ends; without arguments, all of test-all's
                  tests (the workspace's binaries, the kube and metrics feature tests, the
                  doc tests, the fuzz crate's replay)
  nostd           build informer-core into a #![no_std] staticlib (fails on any std use)
  docs            cargo doc (warnings denied), then check that links resolve and the
                  runtime crates' Informer pages show their methods
  msrv            no dependency of a published crate needs a newer Rust than its
                  rust-version (reads cargo metadata; builds nothing)
  package         cargo package --no-verify of the five published crates: manifests
                  publishable (versions on path dependencies, metadata, README), no warning
  publish-dry-run cargo publish --dry-run --workspace: packages every published crate and
                  builds each from its package against its packaged siblings (needs the
                  crates.io index; not part of test-all)

benchmarks
  bench core [--compare]
                  core pipeline benchmark (100k objects, 1M events); --compare also runs
                  the same workload through client-go v1.20.2 (built once from Debian's
                  kubernetes source, cached) and prints events/s, events per CPU-second
                  and peak RSS side by side with the ratios
  bench e2e [--objects N] [--namespaces N] [--updates N] [--writers N] [--runs N]
            [--runtime tokio|smol] [--transform none|strip|both] [--restart yes|no|only]
            [--metadata yes|no] [--compare]
                  end-to-end benchmark against a local kube-apiserver (tokio and smol);
                  full vs metadata-only informer (bytes from the server, RSS); --compare
                  adds a kube-rs 5 reflector and a client-go v1.20.2 informer to the
                  interleaved runs and prints the ratios ours/peer
  bench operator [--objects N] [--replicas N] [--writers N] [--runs N] [--compare]
                 [--operator NAME=COMMAND]... [--source NAME=PATH]...
                  the Greeting CRD operator (bench/operator) against a local kube-apiserver:
                  1,000 Greetings x 3 ConfigMaps; time to converge, client CPU and RSS,
                  requests by kind (the API server's counters), cleanup, lines of code, and
                  the machine's floor (the same writes from a bare client); --compare adds
                  the kube-rs 5 operator and prints informer-rs / kube-rs
  bench scale [--compare] [--pods N,N,...]
                  realistic Pods (testcluster::pods; 10,000 and 30,000 by default) written to
                  a local kube-apiserver, then a cold sync by informer-rs (DynamicObject,
                  CompactObject, K8s<Pod>, metadata-only) and, with --compare, client-go
                  v1.20.2 and kube-rs 5, one at a time; then a forced relist of all (etcd
                  compacted, kube-apiserver restarted: 410): sync time, client CPU, RSS after
                  the sync, peak RSS during the relist, ratios, slope per 1,000 Pods
  bench shard [--objects N] [--members N,N,...] [--lease-duration SECONDS] [--writers N]
                  one controller sharded over 1..4 member processes (shard-member, labels
                  mode) over 20,000 ConfigMaps on a local kube-apiserver: per member cached
                  objects, RSS and CPU once converged, the sharder's writes; kill -9 of a
                  member and the time to full reassignment; the issue-43 target ratios
  bench pod-heap  heap per realistic Pod (no cluster): today's DynamicObject, CompactObject
                  and the candidates measured to choose it (shared subtrees, LZ4 with a
                  learned dictionary), with and without managedFields: heap/Pod against
                  JSON bytes, decode time, a metadata read, a raw field read
  bench pod-watch [--compare] [--pods N] [--events N]
                  watch throughput on realistic Pods (no cluster): N status-update watch
                  lines (1,000,000) of 10,000 Pods decoded, through the pipeline and one
                  handler, DynamicObject and CompactObject, with the floor (decode and a bare
                  map) and the heap per Pod after the events; --compare runs the same lines
                  through client-go v1.20.2 (JSON watch decoding, typed Pod informer) and
                  prints the ratios (target: >= 8x client-go's events per CPU-second)
  bench conn      connections and client memory of 20 informers on one client, HTTP/2
                  against HTTP/1.1 (a local kube-apiserver)
  bench readers   Store reads while the informer works (no cluster): by_index latency
                  during a relist of 100k objects and during watch events, the driver's
                  throughput with 8 busy reader threads against none, the cache's heap per
                  object

chaos
  soak [--minutes N]
                  informers of both runtimes against a real kube-apiserver through a TCP
                  fault proxy (resets, stalls, half-closes, split writes), with apiserver
                  restarts, compactions, 429s and writers; checks every quiet point and
                  prints a summary (faults, relists, convergence, RSS); default 2 minutes
                  (test-all runs the soak as part of the tests, until every kind of fault
                  has been met, at most 2 minutes)

fuzzing
  fuzz [--secs N] [TARGET]
                  run every fuzz target (or one) for N seconds each (default 60) with
                  cargo-fuzz (installed when missing; RUSTC_BOOTSTRAP=1 on stable); a
                  crash is saved into fuzz/regressions/<target>/ and fails the run

simulation
  sim --seeds N [--base B]
                  run N deterministic simulation seeds (model API server with faults,
                  virtual clock), optimised build; failures print their seed
  sim --replay S  replay one seed with a trace

local cluster (kube-apiserver v1.20.2 + etcd on loopback, built once and cached)
  demo            start a cluster, run an informer, change objects, show what it saw, stop
  cluster build   install (apt) and build kube-apiserver into the cache if needed
  cluster up      build if needed, start it and leave it running (prints KUBECONFIG)
  cluster status  say whether it runs
  cluster down    stop it and remove its files
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

/// `12.3 s`.
fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// `ok`, `failed (exit 101)` or `failed (killed by signal 9)`.
fn outcome(status: ExitStatus) -> String {
    if status.success() {
        return "ok".into();
    }
    if let Some(code) = status.code() {
        return format!("failed (exit {code})");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("failed (killed by signal {signal})");
        }
    }
    format!("failed ({status})")
}

/// Every step's name and duration so far, for the slowest steps printed at the end of test-all.
static STEPS: std::sync::Mutex<Vec<(String, Duration)>> = std::sync::Mutex::new(Vec::new());

/// Notes that `step` took `took` (see [`STEPS`]).
fn record(step: &str, took: Duration) {
    STEPS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((step.to_string(), took));
}

/// The `n` slowest of `steps`, slowest first (the earlier of equal ones first).
fn slowest(steps: &[(String, Duration)], n: usize) -> Vec<(String, Duration)> {
    let mut sorted = steps.to_vec();
    sorted.sort_by_key(|s| std::cmp::Reverse(s.1));
    sorted.truncate(n);
    sorted
}

/// Prints the ten slowest steps recorded so far.
fn print_slowest_steps() {
    let steps = STEPS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if steps.is_empty() {
        return;
    }
    eprintln!(
        "
the ten slowest steps:"
    );
    for (step, took) in slowest(&steps, 10) {
        eprintln!("  {:>7.1} s  {step}", took.as_secs_f64());
    }
}

/// Prints the end of a step: `<== step: ok in 12.3 s`, or an error saying how it failed.
fn finish(step: &str, status: ExitStatus, start: Instant) -> Result {
    let how = outcome(status);
    record(step, start.elapsed());
    eprintln!("<== {step}: {how} in {}", secs(start.elapsed()));
    if status.success() {
        Ok(())
    } else {
        Err(format!("{step}: {how}"))
    }
}

/// Runs a command, its output passed through, failing with its description if it does not
/// succeed.
fn run(step: &str, mut cmd: Command) -> Result {
    eprintln!("\n==> {step}");
    let start = Instant::now();
    let status = cmd
        .status()
        .map_err(|e| format!("{step}: cannot start: {e}"))?;
    finish(step, status, start)
}

/// test-all's test jobs: every test binary, built first (see suites.rs): the workspace's,
/// kube-rs's client test (its feature is heavy to compile, so off in the workspace build) and
/// the metrics export (an optional feature the workspace run does not turn on); then the doc
/// tests, and the fuzz crate's (its own workspace and target directory) replay of its seeds and
/// every saved crash.
fn test_jobs() -> Result<Vec<suites::Binary>> {
    let mut binaries = suites::build(
        "cargo test --workspace --all-targets --no-run",
        &["--workspace", "--all-targets"],
    )?;
    binaries.extend(suites::build(
        "cargo test -p informer-tokio --features kube --test kube_client --no-run",
        &[
            "-p",
            "informer-tokio",
            "--features",
            "kube",
            "--test",
            "kube_client",
        ],
    )?);
    binaries.extend(
        suites::build(
            "cargo test -p informer-runtime --features metrics --test fake --no-run",
            &[
                "-p",
                "informer-runtime",
                "--features",
                "metrics",
                "--test",
                "fake",
            ],
        )?
        .into_iter()
        .map(|b| b.with_args("(--features metrics) metrics_export", &["metrics_export"])),
    );
    // The doc tests, and the fuzz crate (its own workspace and target directory): its seeds
    // and every saved crash replayed.
    binaries.push(suites::Binary::cargo(
        "cargo test --workspace --doc",
        &["test", "--workspace", "--doc"],
    ));
    binaries.push(suites::Binary::cargo(fuzz::REPLAY_STEP, &fuzz::REPLAY_ARGS));
    Ok(binaries)
}

/// `cargo xtask tests [ARGS]`: test-all's run of test binaries, for `cargo test ARGS`; without
/// arguments, test-all's test jobs.
fn tests(args: &[&str]) -> Result {
    let mut totals = Totals::default();
    let binaries = if args.is_empty() {
        test_jobs()?
    } else {
        suites::build(&format!("cargo test {} --no-run", args.join(" ")), args)?
    };
    let result = suites::run_all(binaries, suites::jobs(), &mut totals);
    print_slowest_steps();
    println!("{} passed, {} failed", totals.passed, totals.failed);
    result
}

fn test_all() -> Result {
    let start = Instant::now();
    let result = test_all_steps();
    print_slowest_steps();
    match &result {
        Ok(()) => eprintln!("\ntest-all: every step passed in {}", secs(start.elapsed())),
        Err(_) => eprintln!("\ntest-all: failed after {}", secs(start.elapsed())),
    }
    result
}

fn test_all_steps() -> Result {
    let mut c = cargo();
    c.args(["fmt", "--all", "--", "--check"]);
    run("cargo fmt --check", c)?;
    acyclic::check(false)?;

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

    msrv()?;
    package()?;
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
        &[
            "-p",
            "informer-testkit",
            "--no-default-features",
            "--features",
            "tokio",
        ],
        &[
            "-p",
            "informer-testkit",
            "--no-default-features",
            "--features",
            "smol",
        ],
    ] {
        let mut c = cargo();
        c.arg("check").args(args);
        run(&format!("cargo check {} (on its own)", args.join(" ")), c)?;
    }

    // The end-to-end tests start their own kube-apiserver + etcd; build (or find cached) the
    // apiserver first so a cold machine shows that step on its own.
    let step = "kube-apiserver + etcd (installed and built once, then cached)";
    eprintln!("\n==> {step}");
    let t = Instant::now();
    cluster::main(&["build"])?;
    record(step, t.elapsed());
    eprintln!("<== {step}: ok in {}", secs(t.elapsed()));
    // The benchmark peers (client-go, kube-rs) take minutes to build: only parsed here (gofmt
    // comes with the Go the apiserver build installed).
    peers::check_sources()?;

    let mut totals = Totals::default();
    suites::run_all(test_jobs()?, suites::jobs(), &mut totals)?;

    // Each fuzz target briefly.
    let fuzzed = fuzz::fuzz(fuzz::TARGETS, FUZZ_SECS_IN_TEST_ALL)?;

    docs()?;

    fuzz::print_summary(&fuzzed);
    println!("{} passed, {} failed", totals.passed, totals.failed);
    Ok(())
}

/// Each runtime crate documented on its own with `--no-deps` into an empty doc directory, the
/// way docs.rs builds it, warnings denied, then [`check_docs`]: the alias pages must list their
/// methods there. Then the whole workspace's docs, warnings denied, checked again and left in
/// place for whoever opens them next (built last, so that they need no second build).
fn docs() -> Result {
    let doc = root().join("target/doc");
    for (package, krate) in [
        ("informer-tokio", "informer_tokio"),
        ("informer-smol", "informer_smol"),
    ] {
        // An empty doc directory: nothing left over from another build may make the pages
        // look complete.
        let _ = std::fs::remove_dir_all(&doc);
        let mut c = cargo();
        c.args(["doc", "-p", package, "--no-deps"])
            .env("RUSTDOCFLAGS", "-D warnings");
        run(&format!("cargo doc -p {package} --no-deps (as docs.rs)"), c)?;
        check_docs(&doc, &[krate])?;
    }
    let _ = std::fs::remove_dir_all(&doc);
    let mut c = cargo();
    c.args(["doc", "--workspace", "--no-deps"])
        .env("RUSTDOCFLAGS", "-D warnings");
    run("cargo doc (warnings denied)", c)?;
    check_docs(&doc, &["informer_tokio", "informer_smol"])
}

/// The runtime crates' type aliases and a method each one's page must list.
const ALIAS_METHODS: &[(&str, &str)] = &[
    ("informer/struct.Informer.js", "wait_for_sync"),
    ("builder/struct.InformerBuilder.js", "resync"),
    ("factory/struct.SharedInformerFactory.js", "start"),
    ("handler/struct.HandlerRegistration.js", "has_synced"),
    ("stream/struct.EventStream.js", "has_synced"),
];

/// What rustdoc does not flag itself: a link it resolved to an item whose page it did not
/// write comes out as a literal `href="crate::Path"` (no warning); and the runtime crates'
/// `Informer`, `InformerBuilder`, ... are type aliases, whose pages show the methods only when
/// rustdoc recorded the aliases against the aliased types (`type.impl/`).
fn check_docs(doc: &Path, crates: &[&str]) -> Result {
    eprintln!("\n==> docs of {crates:?}: links resolve, aliases show their methods");
    let mut bad = Vec::new();
    // The crates users read. (Cross-crate links from informer-runtime to informer-core came
    // out literal in one workspace doc build and resolved in the next: rustdoc's cross-crate
    // resolution depends on which units it re-documents, so those crates are not checked.)
    for krate in crates {
        let mut stack = vec![doc.join(krate)];
        while let Some(dir) = stack.pop() {
            let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "html") {
                    let html = std::fs::read_to_string(&path).unwrap_or_default();
                    for (i, _) in html.match_indices("href=\"") {
                        let target = &html[i + 6..];
                        let target = &target[..target.find('"').unwrap_or(0)];
                        // Only our own paths: blanket impls of other crates (tracing's
                        // `Instrument`, say) carry their authors' unresolved links.
                        if target.contains("::") && target.contains("informer_") {
                            bad.push(format!("{}: href=\"{target}\"", path.display()));
                        }
                    }
                }
            }
        }
    }
    for (file, method) in ALIAS_METHODS {
        let impls = doc.join("type.impl/informer_runtime").join(file);
        let js = std::fs::read_to_string(&impls).unwrap_or_default();
        for krate in crates {
            if !(js.contains(krate) && js.contains(&format!("method.{method}"))) {
                bad.push(format!(
                    "{}: {krate}'s alias page would not list `{method}`",
                    impls.display()
                ));
            }
        }
    }
    if bad.is_empty() {
        eprintln!("<== docs: ok");
        Ok(())
    } else {
        Err(format!("docs:\n  {}", bad.join("\n  ")))
    }
}

/// The chaos soak (`informer-runtime/tests/soak.rs`) for `minutes`, its summary printed.
fn soak(minutes: &str) -> Result {
    let m: f64 = minutes
        .parse()
        .map_err(|_| format!("soak: --minutes takes a number, not {minutes:?}"))?;
    cluster::main(&["build"])?;
    let mut c = cargo();
    c.args([
        "test",
        "-p",
        "informer-runtime",
        "--test",
        "soak",
        "--",
        "--nocapture",
    ])
    .env(
        "INFORMER_SOAK_SECS",
        format!("{}", (m * 60.0).round() as u64),
    );
    run(&format!("chaos soak for {minutes} min"), c)
}

/// Seconds each fuzz target runs in `test-all`.
const FUZZ_SECS_IN_TEST_ALL: u64 = 10;

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

/// The crates published to the registry (every other member has `publish = false`).
const PUBLISHED: [&str; 6] = [
    "informer-core",
    "informer-http",
    "informer-runtime",
    "informer-tokio",
    "informer-smol",
    "informer-testkit",
];

/// `cargo package --no-verify` of the published crates: fails if a manifest cannot be
/// published (a path dependency without a version, a missing README) and on any cargo warning
/// (missing description, license, …). Offline, builds nothing: about a second. What it does
/// not do (build each crate from its package) is `cargo xtask publish-dry-run`.
fn package() -> Result {
    let step = "cargo package --no-verify (published crates)";
    eprintln!("\n==> {step}");
    let start = Instant::now();
    let mut c = cargo();
    c.args(["package", "--no-verify", "--offline", "--allow-dirty"]);
    for p in PUBLISHED {
        c.args(["-p", p]);
    }
    let out = c
        .output()
        .map_err(|e| format!("{step}: cannot start: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprint!("{stderr}");
    let warnings = stderr
        .lines()
        .filter(|l| l.trim_start().starts_with("warning"))
        .count();
    if out.status.success() && warnings > 0 {
        record(step, start.elapsed());
        let how = format!("failed ({warnings} cargo warning(s) above)");
        eprintln!("<== {step}: {how} in {}", secs(start.elapsed()));
        return Err(format!("{step}: {how}"));
    }
    finish(step, out.status, start)
}

/// `cargo publish --dry-run --workspace`: packages the published crates and builds each from
/// its package, resolving its unpublished siblings from a local registry of their packages.
fn publish_dry_run() -> Result {
    let mut c = cargo();
    c.args(["publish", "--dry-run", "--workspace", "--allow-dirty"]);
    run("cargo publish --dry-run --workspace", c)
}

/// A `rust-version` as (major, minor, patch).
fn parse_rust_version(v: &str) -> Option<(u64, u64, u64)> {
    let mut parts = v.split('.').map(str::parse::<u64>);
    let major = parts.next()?.ok()?;
    let minor = parts.next().unwrap_or(Ok(0)).ok()?;
    let patch = parts.next().unwrap_or(Ok(0)).ok()?;
    Some((major, minor, patch))
}

/// Checks that no dependency (normal or build, transitively) of a published crate declares a
/// `rust-version` newer than that crate's. Together with clippy's `incompatible_msrv` lint
/// (std APIs newer than `rust-version`, denied in the clippy step), this stands in for a build
/// with the oldest supported toolchain, which this machine does not have. Language features
/// newer than `rust-version` are not caught by either.
fn msrv() -> Result {
    let step = "rust-version: dependencies of the published crates";
    eprintln!("\n==> {step}");
    let start = Instant::now();
    let out = cargo()
        .args(["metadata", "--format-version", "1", "--locked"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("{step}: cannot start cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!("{step}: cargo metadata {}", outcome(out.status)));
    }
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("{step}: cargo metadata output: {e}"))?;
    let problems = msrv_problems(&meta)?;
    record(step, start.elapsed());
    if problems.is_empty() {
        eprintln!("<== {step}: ok in {}", secs(start.elapsed()));
        Ok(())
    } else {
        Err(format!("{step}:\n  {}", problems.join("\n  ")))
    }
}

/// The dependencies of published crates whose `rust-version` exceeds the crate's, from
/// `cargo metadata` output.
fn msrv_problems(meta: &serde_json::Value) -> Result<Vec<String>> {
    use std::collections::{HashMap, HashSet};
    let packages: HashMap<&str, &serde_json::Value> = meta["packages"]
        .as_array()
        .ok_or("cargo metadata: no packages")?
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?, p)))
        .collect();
    let nodes: HashMap<&str, &serde_json::Value> = meta["resolve"]["nodes"]
        .as_array()
        .ok_or("cargo metadata: no resolve graph")?
        .iter()
        .filter_map(|n| Some((n["id"].as_str()?, n)))
        .collect();
    let version = |id: &str| {
        packages
            .get(id)
            .and_then(|p| p["rust_version"].as_str())
            .and_then(parse_rust_version)
    };
    let name = |id: &str| {
        packages.get(id).map_or(id.to_string(), |p| {
            format!(
                "{} {}",
                p["name"].as_str().unwrap_or("?"),
                p["version"].as_str().unwrap_or("?")
            )
        })
    };
    let mut problems = Vec::new();
    for root in meta["workspace_members"].as_array().into_iter().flatten() {
        let Some(root) = root.as_str() else { continue };
        let root_name = packages.get(root).and_then(|p| p["name"].as_str());
        if !root_name.is_some_and(|n| PUBLISHED.contains(&n)) {
            continue;
        }
        let Some(limit) = version(root) else {
            problems.push(format!("{} declares no rust-version", name(root)));
            continue;
        };
        let mut seen = HashSet::from([root]);
        let mut todo = vec![root];
        while let Some(id) = todo.pop() {
            let deps = nodes.get(id).and_then(|n| n["deps"].as_array());
            for dep in deps.into_iter().flatten() {
                let runtime = dep["dep_kinds"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|k| k["kind"].as_str() != Some("dev"));
                let Some(dep_id) = dep["pkg"].as_str() else {
                    continue;
                };
                if runtime && seen.insert(dep_id) {
                    todo.push(dep_id);
                    if version(dep_id).is_some_and(|v| v > limit) {
                        problems.push(format!(
                            "{} (rust-version {}) needs {} (rust-version {})",
                            name(root),
                            packages[root]["rust_version"].as_str().unwrap_or("?"),
                            name(dep_id),
                            packages[dep_id]["rust_version"].as_str().unwrap_or("?"),
                        ));
                    }
                }
            }
        }
    }
    Ok(problems)
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

fn bench_readers() -> Result {
    let mut c = cargo();
    c.args([
        "run",
        "--release",
        "-p",
        "informer-bench",
        "--bin",
        "readers",
    ]);
    run("store readers benchmark", c)
}

fn bench_pod_heap() -> Result {
    let mut c = cargo();
    c.args(["bench", "-p", "informer-core", "--bench", "pod_heap"]);
    run(
        "heap per realistic Pod: today's DynamicObject, CompactObject, the candidates",
        c,
    )
}

fn bench_core(compare: bool) -> Result {
    // Build the peer first, so no build runs while a benchmark measures.
    let peer = if compare {
        Some(peers::client_go()?)
    } else {
        None
    };
    let report = env::temp_dir().join(format!("informer-bench-core-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&report);
    let load_before = load_average();
    for (bench, batch, what) in [
        (
            "pipeline",
            "1",
            "core pipeline benchmark (system allocator)",
        ),
        (
            "pipeline",
            "64",
            "the same, handlers fed after each batch of 64 events (client-go's batch processing)",
        ),
        (
            "pipeline_mimalloc",
            "1",
            "core pipeline benchmark (mimalloc)",
        ),
    ] {
        let mut c = cargo();
        c.args(["bench", "-p", "informer-core", "--bench", bench]);
        c.env("INFORMER_BENCH_BATCH", batch);
        if compare {
            c.env("INFORMER_BENCH_REPORT", &report);
        }
        run(what, c)?;
    }
    metrics_on_off()?;
    let Some(dir) = peer else {
        return Ok(());
    };
    let mut c = Command::new(dir.join("core"));
    c.arg("-report").arg(&report);
    run("client-go v1.20.2: the same workload", c)?;
    let load_after = load_average();
    let text =
        std::fs::read_to_string(&report).map_err(|e| format!("{}: {e}", report.display()))?;
    let _ = std::fs::remove_file(&report);
    let rows: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["workload"] == "configmaps")
        .collect();
    print_core_comparison(&rows, &load_before, &load_after)
}

/// The runtime's delivery (`informer-bench`'s `delivery`: a scripted transport, 200,000 watch
/// updates, one handler) built without the `metrics` feature and with it and the Prometheus
/// recorder installed, one after the other in this run: the cost of exporting every counter,
/// gauge and latency histogram, as the medians of five runs each.
fn metrics_on_off() -> Result {
    let mut figures = Vec::new();
    for (features, what) in [
        (None, "runtime delivery, metrics feature off"),
        (
            Some("metrics"),
            "runtime delivery, metrics exported (Prometheus recorder)",
        ),
    ] {
        let mut c = cargo();
        c.args([
            "run",
            "--release",
            "-q",
            "-p",
            "informer-bench",
            "--bin",
            "delivery",
        ]);
        if let Some(f) = features {
            c.args(["--features", f]);
        }
        c.args(["--", "--runs", "5"]);
        eprintln!("\n==> {what}");
        let out = c
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("{what}: cannot start: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        print!("{text}");
        if !out.status.success() {
            return Err(format!("{what}: {}", out.status));
        }
        let summary = text
            .lines()
            .find_map(|l| l.strip_prefix("summary: "))
            .ok_or_else(|| format!("{what}: no summary line"))?;
        let field = |k: &str| -> Result<f64> {
            summary
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{what}: no {k} in {summary:?}"))
        };
        figures.push((what, field("events")?, field("wall_ms")?, field("cpu_ms")?));
    }
    println!("\nruntime delivery, same run, medians of 5: metrics off vs exported");
    println!("{:<58} {:>12} {:>14}", "", "events/s", "CPU ns/event");
    for (what, events, wall, cpu) in &figures {
        println!(
            "{what:<58} {:>12.0} {:>14.0}",
            events / wall * 1e3,
            cpu * 1e6 / events
        );
    }
    let (off, on) = (&figures[0], &figures[1]);
    println!(
        "metrics exported / off: {:.2}x events/s, {:.2}x CPU per event",
        (on.1 / on.2) / (off.1 / off.2),
        on.3 / off.3
    );
    Ok(())
}

/// Builds one target in release (`args` name the package and target) and returns the path of
/// `target`'s executable, as cargo reports it.
fn build_release(step: &str, args: &[&str], target: &str) -> Result<PathBuf> {
    eprintln!("\n==> {step}");
    let out = cargo()
        .args(["build", "--release"])
        .args(args)
        .arg("--message-format=json-render-diagnostics")
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("{step}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{step}: {}", outcome(out.status)));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|m| m["target"]["name"] == target)
        .and_then(|m| m["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| format!("{step}: cargo built no {target}"))
}

/// `/proc/loadavg`'s three load averages (the machine may be shared: say how busy it was).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// The table of `bench core --compare`: each row's events/s, events per CPU-second and peak
/// RSS, then informer-rs / client-go for each of informer-rs's rows.
fn print_core_comparison(rows: &[serde_json::Value], before: &str, after: &str) -> Result {
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let name = |v: &serde_json::Value| {
        if v["bench"] == "client-go" {
            format!(
                "client-go v1.20.2 (GOMAXPROCS {})",
                v["gomaxprocs"].as_u64().unwrap_or(0)
            )
        } else {
            let batch = v["batch"].as_u64().unwrap_or(1);
            let fed = if batch > 1 {
                format!(", fed per {batch}")
            } else {
                String::new()
            };
            format!(
                "informer-rs, {}{fed}",
                v["allocator"].as_str().unwrap_or("?")
            )
        }
    };
    let peer = rows
        .iter()
        .find(|v| v["bench"] == "client-go")
        .ok_or("bench core --compare: no client-go figures in the report")?;
    let ours: Vec<_> = rows
        .iter()
        .filter(|v| v["bench"] == "informer-rs")
        .collect();
    if ours.is_empty() {
        return Err("bench core --compare: no informer-rs figures in the report".into());
    }
    let events = f(peer, "events");
    println!(
        "\ncore pipeline, same run: {} ConfigMaps of ~1 KB, {} events (60/20/20 modify/add/delete), \
         namespace + app index, 4 handlers\nload average (1/5/15 min) before: {before}; after: {after}",
        f(peer, "objects"),
        events
    );
    println!(
        "{:<40} {:>12} {:>16} {:>12} {:>11}",
        "", "events/s", "events/CPU-s", "peak RSS MB", "replace s"
    );
    for v in ours.iter().copied().chain([peer]) {
        println!(
            "{:<40} {:>12.0} {:>16.0} {:>12.1} {:>11.3}",
            name(v),
            f(v, "events") / f(v, "wall_s"),
            f(v, "events") / f(v, "cpu_s"),
            f(v, "peak_rss_kb") / 1024.0,
            f(v, "replace_s")
        );
    }
    for v in &ours {
        let ratio = |k: &str| (f(v, "events") / f(v, k)) / (f(peer, "events") / f(peer, k));
        println!(
            "{} / client-go: {:.2}x events/s, {:.2}x events per CPU-second, {:.2}x peak RSS",
            name(v),
            ratio("wall_s"),
            ratio("cpu_s"),
            f(v, "peak_rss_kb") / f(peer, "peak_rss_kb")
        );
    }
    // The references run in the same process on the same events: the floor (a bare map: no
    // index, no handler, no notification), which bounds any informer on this machine, and the
    // bare informer (the workload's work written out by hand).
    for v in &ours {
        let allocator = v["allocator"].as_str().unwrap_or("?");
        for (field, name, what) in [
            ("floor_s", "floor", "a bare map, the same events"),
            (
                "bare_s",
                "bare informer",
                "the floor plus two indices and the handlers, by hand",
            ),
        ] {
            let reference = f(v, "events") / f(v, field);
            if reference.is_finite() {
                println!(
                    "{name} with {allocator} ({what}): {:.0} events/s = {:.2}x client-go; \
                     informer-rs reached {:.0}% of it",
                    reference,
                    reference / (f(peer, "events") / f(peer, "wall_s")),
                    100.0 * (f(v, "events") / f(v, "wall_s")) / reference
                );
            }
        }
    }
    println!(
        "events/s: events over the wall time of the timed part (objects built outside it).\n\
         events/CPU-s: informer-rs runs on one thread, its CPU time read from the thread's \
         schedstat; client-go runs its reflector, FIFO loop and each handler in goroutines on \
         every core, its CPU time is the whole process's (getrusage: every thread, GC included).\n\
         peak RSS: VmHWM / ru_maxrss of the benchmark process at the end of the ConfigMap \
         workload (the harness's prebuilt chunk of 20,000 objects included on both sides).\n\
         replace s: the initial 100k-object replace until every handler has every add.\n\
         floor: each event one lookup and one insert or remove in a hashbrown map of Key to \
         Arc, the replaced object dropped there; built and timed as informer-rs's events.\n\
         bare informer: the floor plus the workload's namespace and label indices (value to a \
         set of keys) and its handlers called in turn with each notification, written out by \
         hand; no FIFO, no resourceVersion check, no log for a handler that falls behind."
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Totals, msrv_problems, outcome, parse_rust_version, slowest};
    use serde_json::json;
    use std::time::Duration;

    #[test]
    fn outcomes_read_like_words() {
        use std::process::Command;
        let status = |code: &str| Command::new("sh").args(["-c", code]).status().unwrap();
        assert_eq!(outcome(status("exit 0")), "ok");
        assert_eq!(outcome(status("exit 101")), "failed (exit 101)");
        assert_eq!(outcome(status("kill -9 $$")), "failed (killed by signal 9)");
    }

    #[test]
    fn rust_versions_compare_by_number() {
        assert_eq!(parse_rust_version("1.85"), Some((1, 85, 0)));
        assert_eq!(parse_rust_version("1.85.1"), Some((1, 85, 1)));
        assert!(parse_rust_version("1.9").unwrap() < parse_rust_version("1.85").unwrap());
        assert_eq!(parse_rust_version("x"), None);
    }

    /// A published crate whose normal dependency (through a second one) needs a newer Rust is
    /// reported; a newer dev-dependency and an unpublished member are not.
    #[test]
    fn msrv_follows_normal_dependencies_of_published_crates() {
        let pkg = |id: &str, rv: Option<&str>| json!({"id": id, "name": id.split('@').next().unwrap(), "version": "1.0.0", "rust_version": rv});
        let dep = |id: &str, kind: Option<&str>| json!({"pkg": id, "dep_kinds": [{"kind": kind}]});
        let meta = json!({
            "packages": [
                pkg("informer-core@0", Some("1.85")),
                pkg("xtask@0", None),
                pkg("mid@1", Some("1.70")),
                pkg("new@1", Some("1.88.0")),
                pkg("devonly@1", Some("1.90")),
            ],
            "workspace_members": ["informer-core@0", "xtask@0"],
            "resolve": {"nodes": [
                {"id": "informer-core@0", "deps": [dep("mid@1", None), dep("devonly@1", Some("dev"))]},
                {"id": "mid@1", "deps": [dep("new@1", Some("build"))]},
                {"id": "new@1", "deps": []},
                {"id": "devonly@1", "deps": []},
                {"id": "xtask@0", "deps": [dep("devonly@1", None)]},
            ]},
        });
        let problems = msrv_problems(&meta).unwrap();
        assert_eq!(
            problems,
            ["informer-core 1.0.0 (rust-version 1.85) needs new 1.0.0 (rust-version 1.88.0)"]
        );
    }

    #[test]
    fn the_slowest_steps_come_first_at_most_n() {
        let steps: Vec<(String, Duration)> =
            [("fmt", 1), ("clippy", 70), ("e2e", 300), ("doc", 70)]
                .iter()
                .map(|(n, s)| (n.to_string(), Duration::from_secs(*s)))
                .collect();
        let names: Vec<String> = slowest(&steps, 3).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["e2e", "clippy", "doc"]);
        assert_eq!(slowest(&steps, 10).len(), 4);
    }

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
