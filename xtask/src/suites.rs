//! test-all's run of the workspace's test binaries: built by one `cargo test --no-run`, then run
//! by xtask several at a time, longest first, instead of one after another by `cargo test`
//! (the doc tests and the fuzz crate's replay, cargo commands that build as they run, are jobs
//! of the same pool).
//!
//! Each binary that needs a kube-apiserver starts its own (testcluster); none shares a cluster,
//! a port or a file with another, so binaries can overlap: most of their time is spent waiting
//! on the apiserver, on watch timeouts and on deadlines, not on the CPU. Each binary runs as
//! `cargo test` runs it (in its package's directory, with cargo's environment, no arguments)
//! and its output is printed whole when it ends, so outputs do not interleave. After a failure
//! no new binary starts; the running ones finish and are reported.
//!
//! The order comes from the durations measured last time (`target/xtask/test-durations.tsv`),
//! or from [`PRIOR`] on a first run: the longest start first, so that the short ones fill in
//! around them.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Result, Totals, cargo, outcome, record, root, secs};

/// Binaries run at once unless `INFORMER_TEST_JOBS` says otherwise.
pub const DEFAULT_JOBS: usize = 2;

/// Seconds a binary took, for the order of a first run (no measured durations yet): the
/// binaries that take long, as measured two at a time on a 2-core machine; any other counts
/// as short.
const PRIOR: &[(&str, f64)] = &[
    ("informer-runtime tests/shard_processes.rs", 80.0),
    ("informer-runtime tests/e2e.rs", 62.0),
    ("informer-runtime tests/controller.rs", 48.0),
    ("informer-runtime tests/soak.rs", 45.0),
    ("informer-runtime tests/shard.rs", 45.0),
    ("informer-core src/lib.rs", 40.0),
    ("informer-smol tests/http2.rs", 34.0),
    ("informer-http tests/http2.rs", 30.0),
    ("informer-http tests/exec_plugin.rs", 29.0),
    ("informer-runtime tests/hostile.rs", 28.0),
    ("testcluster tests/cluster.rs", 26.0),
    ("informer-http tests/e2e.rs", 16.0),
    ("informer-http tests/oidc.rs", 15.0),
    ("informer-runtime tests/readers.rs", 12.0),
    ("informer-runtime tests/snapshot.rs", 12.0),
    ("cargo test --workspace --doc", 20.0),
    ("informer-tokio tests/kube_client.rs", 11.0),
    ("fuzz: replay seeds and saved crashes", 10.0),
    ("informer-http tests/blocking_example.rs", 7.0),
    ("informer-http tests/proxy.rs", 6.0),
];

/// One test binary, as `cargo test` would run it.
#[derive(Clone, Debug)]
pub struct Binary {
    /// `package path/of/target.rs`, the way test-all names it.
    pub name: String,
    exe: PathBuf,
    package_dir: PathBuf,
    package: String,
    version: String,
    /// Arguments for the test harness (a filter, say).
    args: Vec<String>,
    /// A cargo command rather than a test binary.
    is_cargo: bool,
}

impl Binary {
    /// A cargo command run as one of the jobs (in the workspace's directory), named `name`:
    /// the doc tests, say, which cargo compiles as it runs them.
    pub fn cargo(name: &str, args: &[&str]) -> Binary {
        Binary {
            name: name.to_string(),
            exe: PathBuf::from(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())),
            package_dir: root(),
            package: String::new(),
            version: String::new(),
            args: args.iter().map(|a| a.to_string()).collect(),
            is_cargo: true,
        }
    }

    /// How test-all names the step: `test <binary>`, or the cargo command's name.
    fn step(&self) -> String {
        if self.is_cargo {
            self.name.clone()
        } else {
            format!("test {}", self.name)
        }
    }

    /// The same binary run with these harness arguments, named with `note` after its name.
    pub fn with_args(mut self, note: &str, args: &[&str]) -> Binary {
        self.name = format!("{} {note}", self.name);
        self.args = args.iter().map(|a| a.to_string()).collect();
        self
    }
}

/// Builds the test binaries of `cargo test <args>` (without running them) and lists them.
pub fn build(step: &str, args: &[&str]) -> Result<Vec<Binary>> {
    eprintln!("\n==> {step}");
    let start = Instant::now();
    let mut c = cargo();
    c.arg("test")
        .args(args)
        .args(["--no-run", "--message-format=json-render-diagnostics"])
        .stderr(Stdio::inherit());
    let out = c
        .output()
        .map_err(|e| format!("{step}: cannot start: {e}"))?;
    let took = start.elapsed();
    record(step, took);
    if !out.status.success() {
        let how = outcome(out.status);
        eprintln!("<== {step}: {how} in {}", secs(took));
        return Err(format!("{step}: {how}"));
    }
    let binaries = binaries_in(&String::from_utf8_lossy(&out.stdout));
    eprintln!(
        "<== {step}: ok in {} ({} test binaries)",
        secs(took),
        binaries.len()
    );
    Ok(binaries)
}

/// The test executables in cargo's JSON messages (units built with the test profile, as
/// `cargo test` runs them: unit tests, integration tests, benches), each once.
fn binaries_in(json_lines: &str) -> Vec<Binary> {
    let mut out: Vec<Binary> = Vec::new();
    for line in json_lines.lines() {
        let Ok(m) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if m["reason"] != "compiler-artifact" || m["profile"]["test"] != true {
            continue;
        }
        let (Some(exe), Some(manifest), Some(src)) = (
            m["executable"].as_str(),
            m["manifest_path"].as_str(),
            m["target"]["src_path"].as_str(),
        ) else {
            continue;
        };
        let package_dir = Path::new(manifest).parent().unwrap_or(Path::new(""));
        // `informer-core 0.1.0 (path+file:///…)` or `path+file:///…/informer-core#0.1.0`.
        let id = m["package_id"].as_str().unwrap_or("");
        let (package, version) = package_of(id, package_dir);
        let src = Path::new(src)
            .strip_prefix(package_dir)
            .unwrap_or(Path::new(src));
        let name = format!("{package} {}", src.display());
        if out.iter().any(|b| b.exe == Path::new(exe)) {
            continue;
        }
        out.push(Binary {
            name,
            exe: PathBuf::from(exe),
            package_dir: package_dir.to_path_buf(),
            package,
            version,
            args: Vec::new(),
            is_cargo: false,
        });
    }
    out
}

/// The package name and version in a cargo package id (either format), the directory's name
/// when the id says no name.
fn package_of(id: &str, dir: &Path) -> (String, String) {
    if let Some((url, version)) = id.rsplit_once('#') {
        // `path+file:///dir/name#0.1.0` or `…#name@0.1.0`.
        return match version.split_once('@') {
            Some((name, v)) => (name.to_string(), v.to_string()),
            None => (
                url.rsplit('/').next().unwrap_or("").to_string(),
                version.to_string(),
            ),
        };
    }
    let mut words = id.split_whitespace();
    match (words.next(), words.next()) {
        (Some(n), Some(v)) => (n.to_string(), v.to_string()),
        _ => (
            dir.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            String::new(),
        ),
    }
}

/// Where the durations of the last run are kept.
fn durations_file() -> PathBuf {
    root().join("target/xtask/test-durations.tsv")
}

fn load_durations(path: &Path) -> BTreeMap<String, f64> {
    let mut known: BTreeMap<String, f64> = PRIOR.iter().map(|(n, s)| (n.to_string(), *s)).collect();
    if let Ok(text) = std::fs::read_to_string(path) {
        for line in text.lines() {
            let parsed = line
                .rsplit_once('\t')
                .and_then(|(name, s)| Some((name, s.parse::<f64>().ok()?)));
            if let Some((name, s)) = parsed {
                known.insert(name.to_string(), s);
            }
        }
    }
    known
}

fn save_durations(path: &Path, durations: &BTreeMap<String, f64>) {
    let text: String = durations
        .iter()
        .map(|(n, s)| format!("{n}\t{s:.1}\n"))
        .collect();
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(path, text);
}

/// The binaries, longest expected first (unknown ones count as short; ties by name).
fn schedule(mut binaries: Vec<Binary>, known: &BTreeMap<String, f64>) -> Vec<Binary> {
    let expected = |b: &Binary| known.get(&b.name).copied().unwrap_or(1.0);
    binaries.sort_by(|a, b| {
        expected(b)
            .total_cmp(&expected(a))
            .then_with(|| a.name.cmp(&b.name))
    });
    binaries
}

/// The number of binaries to run at once: `INFORMER_TEST_JOBS`, else [`DEFAULT_JOBS`].
pub fn jobs() -> usize {
    std::env::var("INFORMER_TEST_JOBS")
        .ok()
        .and_then(|j| j.parse().ok())
        .filter(|&j| j > 0)
        .unwrap_or(DEFAULT_JOBS)
}

struct Running {
    binary: Binary,
    child: Child,
    log: PathBuf,
    start: Instant,
}

/// Runs the binaries, `jobs` at a time, longest first; adds their counts to `totals`.
pub fn run_all(binaries: Vec<Binary>, jobs: usize, totals: &mut Totals) -> Result {
    let path = durations_file();
    let mut known = load_durations(&path);
    let mut queue: std::collections::VecDeque<Binary> = schedule(binaries, &known).into();
    let logs = root().join("target/xtask/test-logs");
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    eprintln!(
        "\n==> {} test binaries, {jobs} at a time, longest first (each one's output when it ends)",
        queue.len()
    );
    let start = Instant::now();
    let mut running: Vec<Running> = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    loop {
        while failed.is_empty() && running.len() < jobs {
            let Some(binary) = queue.pop_front() else {
                break;
            };
            running.push(spawn(binary, &logs)?);
        }
        if running.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        let mut i = 0;
        while i < running.len() {
            let status = running[i]
                .child
                .try_wait()
                .map_err(|e| format!("{}: cannot wait: {e}", running[i].binary.step()))?;
            let Some(status) = status else {
                i += 1;
                continue;
            };
            let r = running.swap_remove(i);
            let took = r.start.elapsed();
            let mut text = String::new();
            if let Ok(mut f) = File::open(&r.log) {
                let _ = f.read_to_string(&mut text);
            }
            let _ = std::fs::remove_file(&r.log);
            let step = r.binary.step();
            eprintln!("\n==> {step}");
            // The binary's own output (stdout and stderr, in order), then its end.
            print!("{text}");
            for line in text.lines() {
                totals.add_line(line);
            }
            let how = outcome(status);
            eprintln!("<== {step}: {how} in {}", secs(took));
            record(&step, took);
            known.insert(r.binary.name.clone(), took.as_secs_f64());
            if !status.success() {
                failed.push(format!("{step}: {how}"));
            }
        }
    }
    save_durations(&path, &known);
    eprintln!(
        "<== test binaries: {} in {}",
        if failed.is_empty() { "ok" } else { "failed" },
        secs(start.elapsed())
    );
    if failed.is_empty() {
        Ok(())
    } else {
        let skipped = queue.len();
        Err(format!(
            "{}{}; {} passed, {} failed so far",
            failed.join("; "),
            if skipped > 0 {
                format!(" ({skipped} binaries not started)")
            } else {
                String::new()
            },
            totals.passed,
            totals.failed
        ))
    }
}

/// Starts a binary the way `cargo test` does, its output into a file.
fn spawn(binary: Binary, logs: &Path) -> Result<Running> {
    let log = logs.join(
        binary
            .name
            .replace(|c: char| !c.is_ascii_alphanumeric(), "_"),
    );
    let out = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out
        .try_clone()
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let mut c = Command::new(&binary.exe);
    c.args(&binary.args)
        .current_dir(&binary.package_dir)
        .env(
            "CARGO",
            std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()),
        )
        .env("CARGO_MANIFEST_DIR", &binary.package_dir)
        .env("CARGO_PKG_NAME", &binary.package)
        .env("CARGO_PKG_VERSION", &binary.version)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    eprintln!("--> {} (started)", binary.step());
    let child = c
        .spawn()
        .map_err(|e| format!("{}: cannot start: {e}", binary.step()))?;
    Ok(Running {
        binary,
        child,
        log,
        start: Instant::now(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_units_are_read_from_cargo_json() {
        let lines = [
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/informer-core#0.1.0","manifest_path":"/w/informer-core/Cargo.toml","target":{"kind":["lib"],"name":"informer_core","src_path":"/w/informer-core/src/lib.rs"},"profile":{"test":true},"executable":"/w/target/debug/deps/informer_core-1"}"#,
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/bench#informer-bench@0.1.0","manifest_path":"/w/bench/Cargo.toml","target":{"kind":["test"],"name":"e2e","src_path":"/w/bench/tests/e2e.rs"},"profile":{"test":true},"executable":"/w/target/debug/deps/e2e-2"}"#,
            // Built, not run: a library, an example.
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/informer-core#0.1.0","manifest_path":"/w/informer-core/Cargo.toml","target":{"kind":["lib"],"name":"informer_core","src_path":"/w/informer-core/src/lib.rs"},"profile":{"test":false},"executable":null}"#,
            r#"{"reason":"compiler-artifact","package_id":"informer-tokio 0.1.0 (path+file:///w/informer-tokio)","manifest_path":"/w/informer-tokio/Cargo.toml","target":{"kind":["example"],"name":"demo","src_path":"/w/informer-tokio/examples/demo.rs"},"profile":{"test":false},"executable":"/w/target/debug/examples/demo"}"#,
            r#"{"reason":"build-finished","success":true}"#,
        ]
        .join("\n");
        let b = binaries_in(&lines);
        let names: Vec<_> = b.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(
            names,
            ["informer-core src/lib.rs", "informer-bench tests/e2e.rs"]
        );
        assert_eq!(b[1].package_dir, Path::new("/w/bench"));
        assert_eq!(
            (b[1].package.as_str(), b[1].version.as_str()),
            ("informer-bench", "0.1.0")
        );
        assert_eq!(
            package_of(
                "informer-tokio 0.1.0 (path+file:///w/informer-tokio)",
                Path::new("/w")
            ),
            ("informer-tokio".to_string(), "0.1.0".to_string())
        );
    }

    #[test]
    fn the_longest_expected_start_first() {
        let bin = |name: &str| Binary {
            name: name.into(),
            exe: PathBuf::from(name),
            package_dir: PathBuf::new(),
            package: String::new(),
            version: String::new(),
            args: Vec::new(),
            is_cargo: false,
        };
        let known: BTreeMap<String, f64> = [("a".to_string(), 5.0), ("c".to_string(), 50.0)].into();
        let order: Vec<String> = schedule(vec![bin("a"), bin("b"), bin("c"), bin("d")], &known)
            .into_iter()
            .map(|b| b.name)
            .collect();
        assert_eq!(order, ["c", "a", "b", "d"]);
    }
}
