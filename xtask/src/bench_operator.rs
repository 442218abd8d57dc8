//! `cargo xtask bench operator [--compare]`: the same CRD operator (the `Greeting` operator of
//! `bench/operator/README.md`) on each library, against a local kube-apiserver v1.20.2 + etcd
//! (`testcluster`).
//!
//! 1. Starts the test cluster and applies `bench/operator/greetings.crd.yaml`.
//! 2. For each run and each operator, in turn (interleaved, so a busy moment of the machine hits
//!    everyone; the order alternates from run to run), in a namespace of its own: starts the operator process (`OPERATOR_NAMESPACE`,
//!    `KUBECONFIG`), creates `--objects` Greetings with `spec.replicas = --replicas` from
//!    `--writers` threads, and waits until it has converged: every Greeting's
//!    `status.observedGeneration` equals its `metadata.generation`, its `status.phase` is
//!    `Ready` (seen on a watch of the Greetings), and exactly `replicas` ConfigMaps labelled
//!    `greeting=<name>` exist for each (a list). Then it reads the process's CPU (utime + stime
//!    of `/proc/PID/stat`, every thread) and RSS (`VmRSS`, `VmHWM`), waits 2 s for writes made
//!    after convergence, deletes every Greeting (one `deletecollection`) and times the cleanup
//!    (the finalizer's: until no Greeting and no child is left), then kills the process.
//!    Requests are the API server's own count (`apiserver_request_total` of `/metrics` before
//!    and after, for `configmaps`, `greetings` and `events`; the harness's own requests are taken
//!    off), so nothing in the operator has to count or report anything.
//! 3. The machine's floor, once per run and first (it warms the API server's paths for the
//!    operators): the workload's requests sent straight by a bare informer-http client
//!    (`operator-floor`, release, `--writers` tasks), per Greeting its create, then the writes
//!    an operator must send (the finalizer patch, `replicas` server-side applies of a
//!    ConfigMap, a status patch, an event), timed from the first request to the last answer,
//!    with the CPU the client spent: whether the API server bounds the operators' times, and
//!    what the writes alone cost a client.
//! 4. Prints a table (converge time, CPU, RSS, writes by kind, failed writes, reads, cleanup,
//!    lines of code of the operator's source), then informer-rs / kube-rs of the same run and
//!    each operator's time against the floor.
//!
//! The operators: informer-rs (`examples/greeter.rs`, built as `cargo build --release -p
//! informer-tokio --example greeter`; its row is reported missing while that file does not
//! exist) and, with `--compare`, kube-rs 5 (`bench/peers/kube-rs/src/operator.rs`, built once by
//! [`super::peers`]). `--operator NAME=COMMAND` runs COMMAND (through `sh -c 'exec COMMAND'`, so
//! the process measured is the operator; `env K=V program` sets more environment) instead of
//! the built one named NAME, or as one more operator; `--source NAME=PATH` names the source
//! whose lines are counted.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use testcluster::TestCluster;

use super::bench_e2e::{Api, parallel};

const USAGE: &str = "\
usage: cargo xtask bench operator [--objects N] [--replicas N] [--writers N] [--runs N]
                                  [--compare] [--operator NAME=COMMAND]... [--source NAME=PATH]...
";

/// How long an operator may take to converge or to clean up.
const PATIENCE: Duration = Duration::from_secs(600);
/// Writes made after convergence are counted for this long.
const SETTLE: Duration = Duration::from_secs(2);
const GREETINGS: &str = "/apis/example.com/v1/namespaces";

struct Options {
    objects: usize,
    replicas: usize,
    writers: usize,
    runs: usize,
    compare: bool,
    commands: Vec<(String, String)>,
    sources: Vec<(String, PathBuf)>,
}

fn parse(args: &[&str]) -> Result<Options, String> {
    let mut o = Options {
        objects: 1000,
        replicas: 3,
        writers: 32,
        runs: 1,
        compare: false,
        commands: Vec::new(),
        sources: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(&flag) = it.next() {
        if flag == "--compare" {
            o.compare = true;
            continue;
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n\n{USAGE}"))?;
        let n = || {
            value
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{flag}: not a positive number: {value}"))
        };
        let pair = || {
            value
                .split_once('=')
                .filter(|(k, v)| !k.is_empty() && !v.is_empty())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("{flag}: NAME=VALUE, not {value}"))
        };
        match flag {
            "--objects" => o.objects = n()?,
            "--replicas" => o.replicas = n()?,
            "--writers" => o.writers = n()?,
            "--runs" => o.runs = n()?,
            "--operator" => o.commands.push(pair()?),
            "--source" => {
                let (k, v) = pair()?;
                o.sources.push((k, v.into()));
            }
            _ => return Err(format!("unknown option {flag}\n\n{USAGE}")),
        }
    }
    Ok(o)
}

/// An operator to run.
struct Operator {
    name: String,
    /// A command line, run as `sh -c 'exec COMMAND'`.
    command: String,
    /// The source whose lines are counted.
    source: Option<PathBuf>,
}

/// The operators to run: informer-rs (built, or `--operator informer-rs=…`), kube-rs with
/// `--compare`, then the other `--operator`s; and why the informer-rs one is missing, if it is.
fn operators(o: &Options) -> Result<(Vec<Operator>, Option<String>), String> {
    let root = super::root();
    let given = |name: &str| {
        o.commands
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c.clone())
    };
    let source = |name: &str, default: Option<PathBuf>| {
        o.sources
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| root.join(p))
            .or(default)
    };
    let mut ops = Vec::new();
    let mut missing = None;
    let ours = root.join("examples/greeter.rs");
    if let Some(command) = given("informer-rs") {
        ops.push(Operator {
            name: "informer-rs".into(),
            command,
            source: source("informer-rs", Some(ours)),
        });
    } else if ours.is_file() {
        ops.push(Operator {
            name: "informer-rs".into(),
            // The admin server on a free loopback port: several runs, or a busy 8080, must not collide.
            command: format!(
                "env ADMIN_ADDR=127.0.0.1:0 {}",
                shell_quote(&build_greeter()?)
            ),
            source: source("informer-rs", Some(ours)),
        });
    } else {
        missing = Some(format!(
            "the informer-rs row is missing: {} does not exist yet (or pass --operator \
             informer-rs=COMMAND)",
            ours.display()
        ));
    }
    if o.compare {
        let command = match given("kube-rs") {
            Some(c) => c,
            None => shell_quote(&super::peers::kube_rs_bin("operator")?),
        };
        let default = root.join("bench/peers/kube-rs/src/operator.rs");
        ops.push(Operator {
            name: "kube-rs".into(),
            command,
            source: source("kube-rs", Some(default)),
        });
    }
    for (name, command) in &o.commands {
        if name != "informer-rs" && name != "kube-rs" {
            ops.push(Operator {
                name: name.clone(),
                command: command.clone(),
                source: source(name, None),
            });
        }
    }
    Ok((ops, missing))
}

/// Builds the informer-rs operator (`informer-tokio`'s example `greeter`, release).
fn build_greeter() -> Result<PathBuf, String> {
    super::build_release(
        "build the informer-rs operator (informer-tokio --example greeter, release)",
        &[
            "-p",
            "informer-tokio",
            "--features",
            "admin",
            "--example",
            "greeter",
        ],
        "greeter",
    )
}

fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

/// Entry point.
pub fn main(args: &[&str]) -> super::Result {
    let o = parse(args)?;
    let t_all = Instant::now();
    // Everything is built before anything is measured.
    let (ops, missing) = operators(&o)?;
    let floor = super::build_release(
        "build the floor's client (informer-bench --bin operator-floor, release)",
        &["-p", "informer-bench", "--bin", "operator-floor"],
        "operator-floor",
    )
    .map_err(|e| e.to_string())?;
    if let Some(m) = &missing {
        eprintln!("NOTE: {m}");
    }

    eprintln!("\n==> local kube-apiserver + etcd");
    let cluster = TestCluster::start().map_err(|e| e.to_string())?;
    let api = Arc::new(Api::new(&cluster)?);
    apply_crd(&api)?;

    let mut rows = Vec::new();
    for run in 0..o.runs {
        // The floor first: it also warms the API server's paths (the CRD's handlers, apply,
        // events) that the first operator would otherwise pay for. The operators' order
        // alternates from run to run.
        rows.push(floor_run(&api, &cluster, &floor, &o, run)?);
        let mut order: Vec<&Operator> = ops.iter().collect();
        if run % 2 == 1 {
            order.reverse();
        }
        for op in order {
            rows.push(operator_run(&api, &cluster, &o, op, run)?);
        }
    }
    print_table(&o, &ops, &rows, missing.as_deref());
    eprintln!("\nbench operator: done in {}", super::secs(t_all.elapsed()));
    Ok(())
}

/// Creates the Greeting CRD from `bench/operator/greetings.crd.yaml`; returns once it is
/// established and served.
fn apply_crd(api: &Api) -> super::Result {
    let path = super::root().join("bench/operator/greetings.crd.yaml");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let crd: Value =
        serde_norway::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!("==> the Greeting CRD ({})", path.display());
    api.send(
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd.to_string(),
    )?;
    let t = Instant::now();
    loop {
        let established = api
            .get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/greetings.example.com")
            .ok()
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            .and_then(|v| v["status"]["conditions"].as_array().cloned())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            });
        if established && api.get("/apis/example.com/v1/greetings").is_ok() {
            return Ok(());
        }
        if t.elapsed() > Duration::from_secs(60) {
            return Err("the Greeting CRD was not established within 60 s".into());
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// One operator's (or the floor's) figures.
struct Row {
    name: String,
    run: usize,
    /// Operator start (floor: first write) until converged (floor: every write answered).
    converge_s: f64,
    /// The operator's CPU (none for the floor: the harness is a debug build).
    cpu_s: Option<f64>,
    rss_mb: Option<f64>,
    hwm_mb: Option<f64>,
    /// The API server's count over the convergence (the harness's own taken off).
    counts: Counts,
    /// Writes in the `SETTLE` after convergence.
    trailing_writes: f64,
    cleanup_s: Option<f64>,
    cleanup_writes: Option<f64>,
    loc: Option<usize>,
}

/// Requests by (resource, subresource, verb, succeeded) from `apiserver_request_total`.
#[derive(Clone, Default)]
struct Counts(HashMap<(String, String, String, bool), f64>);

/// The write verbs as kube-apiserver v1.20 labels them: the HTTP method, `APPLY` for a
/// server-side apply (a `deletecollection` is a `DELETE`).
const WRITES: [&str; 5] = ["POST", "PUT", "PATCH", "APPLY", "DELETE"];

impl Counts {
    /// The API server's counters for the resources the operators touch.
    fn read(api: &Api) -> Result<Counts, String> {
        let text = api.get("/metrics")?;
        let mut c = Counts::default();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once("} ") else {
                continue;
            };
            let label = |k: &str| {
                labels
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(k)?.strip_prefix("=\""))
                    .map(|v| v.trim_end_matches('"').to_string())
                    .unwrap_or_default()
            };
            let resource = label("resource");
            if !matches!(resource.as_str(), "configmaps" | "greetings" | "events") {
                continue;
            }
            let ok = label("code").starts_with('2');
            let value: f64 = value.trim().parse().unwrap_or(0.0);
            *c.0.entry((resource, label("subresource"), label("verb"), ok))
                .or_default() += value;
        }
        Ok(c)
    }

    fn minus(&self, before: &Counts) -> Counts {
        let mut c = self.clone();
        for (k, v) in &before.0 {
            *c.0.entry(k.clone()).or_default() -= v;
        }
        c
    }

    fn sum(&self, f: impl Fn(&str, &str, &str, bool) -> bool) -> f64 {
        let n: f64 = self
            .0
            .iter()
            .filter(|((r, s, v, ok), _)| f(r, s, v, *ok))
            .map(|(_, n)| n)
            .sum();
        // No -0 in the table.
        n + 0.0
    }

    fn writes(&self) -> f64 {
        self.sum(|_, _, v, _| WRITES.contains(&v))
    }

    fn failed_writes(&self) -> f64 {
        self.sum(|_, _, v, ok| WRITES.contains(&v) && !ok)
    }

    /// Writes of `resource` (`subresource` "" for the object itself).
    fn writes_of(&self, resource: &str, subresource: &str) -> f64 {
        self.sum(|r, s, v, _| r == resource && s == subresource && WRITES.contains(&v))
    }

    /// GETs and LISTs (a watch is counted when it ends, so not here).
    fn reads(&self) -> f64 {
        self.sum(|_, _, v, _| v == "GET" || v == "LIST")
    }

    /// Takes off requests the harness made itself.
    fn take(&mut self, resource: &str, verb: &str, n: f64) {
        *self
            .0
            .entry((resource.into(), String::new(), verb.into(), true))
            .or_default() -= n;
    }
}

/// A Greeting as the operator should leave it: its status written for its generation.
fn ready(g: &Value) -> bool {
    g["status"]["phase"] == "Ready"
        && g["metadata"]["generation"].is_i64()
        && g["status"]["observedGeneration"] == g["metadata"]["generation"]
}

/// A watch of the Greetings of one namespace, on a thread: which exist and which are ready.
struct Watch {
    shared: Arc<(Mutex<WatchState>, Condvar)>,
    stop: Arc<AtomicBool>,
    /// Lists the watch made (the harness's own reads).
    lists: Arc<AtomicUsize>,
}

#[derive(Default)]
struct WatchState {
    ready: HashMap<String, bool>,
    /// When the last event was received.
    changed: Option<Instant>,
    error: Option<String>,
}

impl Watch {
    fn start(api: &Arc<Api>, ns: &str) -> Result<Watch, String> {
        let shared = Arc::new((Mutex::new(WatchState::default()), Condvar::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let lists = Arc::new(AtomicUsize::new(0));
        let path = format!("{GREETINGS}/{ns}/greetings");
        let path2 = path.clone();
        let list =
            move |api: &Api, shared: &(Mutex<WatchState>, Condvar)| -> Result<String, String> {
                let v: Value = serde_json::from_str(&api.get(&path)?).map_err(|e| e.to_string())?;
                let mut s = shared.0.lock().unwrap();
                s.ready = v["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|g| {
                        (
                            g["metadata"]["name"].as_str().unwrap_or("").to_string(),
                            ready(g),
                        )
                    })
                    .collect();
                s.changed = Some(Instant::now());
                shared.1.notify_all();
                Ok(v["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or("0")
                    .to_string())
            };
        let mut rv = list(api, &shared)?;
        lists.fetch_add(1, Ordering::Relaxed);
        let (api, shared2, stop2, lists2) =
            (api.clone(), shared.clone(), stop.clone(), lists.clone());
        thread::spawn(move || {
            let mut failures = 0;
            while !stop2.load(Ordering::Relaxed) {
                let url = format!(
                    "{path2}?watch=1&allowWatchBookmarks=true&timeoutSeconds=60&resourceVersion={rv}"
                );
                let mut relist = false;
                match api.stream(&url) {
                    Ok(body) => {
                        for line in body.lines() {
                            let Ok(line) = line else { break };
                            let Ok(ev) = serde_json::from_str::<Value>(&line) else {
                                continue;
                            };
                            let obj = &ev["object"];
                            if let Some(v) = obj["metadata"]["resourceVersion"].as_str() {
                                rv = v.to_string();
                            }
                            let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
                            let mut s = shared2.0.lock().unwrap();
                            match ev["type"].as_str() {
                                Some("ADDED" | "MODIFIED") => {
                                    s.ready.insert(name, ready(obj));
                                }
                                Some("DELETED") => {
                                    s.ready.remove(&name);
                                }
                                Some("ERROR") => {
                                    relist = true;
                                    break;
                                }
                                _ => continue,
                            }
                            s.changed = Some(Instant::now());
                            shared2.1.notify_all();
                        }
                        failures = 0;
                    }
                    Err(e) => {
                        failures += 1;
                        relist = true;
                        if failures > 10 {
                            shared2.0.lock().unwrap().error = Some(e);
                            shared2.1.notify_all();
                            return;
                        }
                        thread::sleep(Duration::from_millis(100));
                    }
                }
                if relist {
                    lists2.fetch_add(1, Ordering::Relaxed);
                    match list(&api, &shared2) {
                        Ok(v) => rv = v,
                        Err(e) => {
                            shared2.0.lock().unwrap().error = Some(e);
                            shared2.1.notify_all();
                            return;
                        }
                    }
                }
            }
        });
        Ok(Watch {
            shared,
            stop,
            lists,
        })
    }

    /// Waits until `done` holds; when the event that made it hold was received.
    fn wait(&self, what: &str, done: impl Fn(&WatchState) -> bool) -> Result<Instant, String> {
        let deadline = Instant::now() + PATIENCE;
        let mut s = self.shared.0.lock().unwrap();
        loop {
            if let Some(e) = &s.error {
                return Err(format!("watching the Greetings: {e}"));
            }
            if done(&s) {
                return Ok(s.changed.unwrap_or_else(Instant::now));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let ready = s.ready.values().filter(|r| **r).count();
                return Err(format!(
                    "{what}: not within {PATIENCE:?} ({} Greetings, {ready} ready)",
                    s.ready.len()
                ));
            }
            s = self.shared.1.wait_timeout(s, left).unwrap().0;
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // The thread ends when its current watch does (at most 60 s later).
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The children of the Greetings of `ns`: how many each Greeting has (by the `greeting` label).
fn children(api: &Api, ns: &str) -> Result<HashMap<String, usize>, String> {
    let v: Value = serde_json::from_str(&api.get(&format!(
        "/api/v1/namespaces/{ns}/configmaps?labelSelector=greeting"
    ))?)
    .map_err(|e| e.to_string())?;
    let mut per = HashMap::new();
    for cm in v["items"].as_array().into_iter().flatten() {
        let owner = cm["metadata"]["labels"]["greeting"].as_str().unwrap_or("");
        *per.entry(owner.to_string()).or_default() += 1;
    }
    Ok(per)
}

/// Greeting number `i`.
fn greeting(i: usize, replicas: usize) -> String {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Greeting",
        "metadata": {"name": format!("g-{i}")},
        "spec": {"message": format!("hello {i}"), "replicas": replicas},
    })
    .to_string()
}

fn create_namespace(api: &Api, ns: &str) -> super::Result {
    api.send(
        "POST",
        "/api/v1/namespaces",
        &json!({"metadata": {"name": ns}}).to_string(),
    )
}

/// CPU (utime + stime, every thread), VmRSS and VmHWM (MB) of process `pid`.
fn proc_usage(pid: u32) -> Result<(f64, f64, f64), String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| e.to_string())?;
    // The fields after the command's closing parenthesis: state is the first, utime the 12th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    // USER_HZ is 100 on Linux.
    let cpu = (ticks(11) + ticks(12)) / 100.0;
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| e.to_string())?;
    let kb = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    Ok((cpu, kb("VmRSS:") / 1024.0, kb("VmHWM:") / 1024.0))
}

/// One operator through the workload and the cleanup.
fn operator_run(
    api: &Arc<Api>,
    cluster: &TestCluster,
    o: &Options,
    op: &Operator,
    run: usize,
) -> Result<Row, String> {
    eprintln!("==> {} (run {})", op.name, run + 1);
    let ns = format!(
        "op-{}-{}",
        op.name
            .to_lowercase()
            .replace(|c: char| !c.is_ascii_alphanumeric(), "-"),
        run + 1
    );
    create_namespace(api, &ns)?;
    let watch = Watch::start(api, &ns)?;
    let log = std::env::temp_dir().join(format!("informer-bench-operator-{ns}.log"));
    let stderr = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let before = Counts::read(api.as_ref())?;
    let t0 = Instant::now();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("exec {}", op.command))
        .env("KUBECONFIG", &cluster.kubeconfig)
        .env("OPERATOR_NAMESPACE", &ns)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", op.command))?;
    let pid = child.id();
    let result = (|| -> Result<Row, String> {
        parallel(o.objects, o.writers, |i| {
            api.send(
                "POST",
                &format!("{GREETINGS}/{ns}/greetings"),
                &greeting(i, o.replicas),
            )
        })?;
        eprintln!(
            "    {} Greetings created in {}",
            o.objects,
            super::secs(t0.elapsed())
        );
        let mut done = watch.wait("convergence", |s| {
            s.ready.len() == o.objects && s.ready.values().all(|r| *r)
        })?;
        // Every Greeting ready; its children exactly `replicas` (listed until they are).
        let mut lists = 0;
        loop {
            lists += 1;
            let per = children(api, &ns)?;
            if per.len() == o.objects && per.values().all(|n| *n == o.replicas) {
                break;
            }
            if t0.elapsed() > PATIENCE {
                return Err(format!(
                    "{}: the children never came to {} each",
                    op.name, o.replicas
                ));
            }
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                return Err(format!("{}: {}", op.name, super::outcome(status)));
            }
            thread::sleep(Duration::from_millis(100));
            done = Instant::now();
        }
        let converge_s = done.duration_since(t0).as_secs_f64();
        let (cpu_s, rss_mb, hwm_mb) = proc_usage(pid)?;
        let converged = Counts::read(api.as_ref())?;
        eprintln!("    converged in {converge_s:.2} s, CPU {cpu_s:.2} s, RSS {rss_mb:.1} MB");
        thread::sleep(SETTLE);
        let settled = Counts::read(api.as_ref())?;
        let trailing_writes = settled.minus(&converged).writes();
        let mut counts = converged.minus(&before);
        counts.take("greetings", "POST", o.objects as f64);
        counts.take(
            "greetings",
            "LIST",
            (watch.lists.load(Ordering::Relaxed) - 1) as f64,
        );
        counts.take("configmaps", "LIST", lists as f64);

        // The cleanup: every Greeting deleted at once; the finalizers delete the children.
        let lists_before = watch.lists.load(Ordering::Relaxed);
        let t = Instant::now();
        api.send("DELETE", &format!("{GREETINGS}/{ns}/greetings"), "{}")?;
        watch.wait("cleanup", |s| s.ready.is_empty())?;
        let mut lists = 0;
        while !children(api, &ns)?.is_empty() {
            lists += 1;
            if t.elapsed() > PATIENCE {
                return Err(format!("{}: children left after the cleanup", op.name));
            }
            thread::sleep(Duration::from_millis(100));
        }
        let cleanup_s = t.elapsed().as_secs_f64();
        let mut cleanup = Counts::read(api.as_ref())?.minus(&settled);
        cleanup.take("greetings", "DELETE", 1.0);
        cleanup.take(
            "greetings",
            "LIST",
            (watch.lists.load(Ordering::Relaxed) - lists_before) as f64,
        );
        cleanup.take("configmaps", "LIST", lists as f64 + 1.0);
        eprintln!("    cleaned up in {cleanup_s:.2} s");
        Ok(Row {
            name: op.name.clone(),
            run,
            converge_s,
            cpu_s: Some(cpu_s),
            rss_mb: Some(rss_mb),
            hwm_mb: Some(hwm_mb),
            counts,
            trailing_writes,
            cleanup_s: Some(cleanup_s),
            cleanup_writes: Some(cleanup.writes()),
            loc: op.source.as_deref().and_then(|p| lines_of_code(p).ok()),
        })
    })();
    let _ = child.kill();
    let _ = child.wait();
    if result.is_err() {
        eprintln!("    the operator's stderr: {}", log.display());
    } else {
        let _ = std::fs::remove_file(&log);
    }
    result
}

/// The machine's floor: the writes the workload needs, sent straight by a bare informer-http
/// client (`bench/src/bin/operator-floor.rs`, release): the API server's time for them and
/// what they alone cost a client's CPU.
fn floor_run(
    api: &Api,
    cluster: &TestCluster,
    floor: &Path,
    o: &Options,
    run: usize,
) -> Result<Row, String> {
    eprintln!(
        "==> the floor: the same writes from a bare client (run {})",
        run + 1
    );
    let ns = format!("op-floor-{}", run + 1);
    create_namespace(api, &ns)?;
    let before = Counts::read(api)?;
    let out = Command::new(floor)
        .env("KUBECONFIG", &cluster.kubeconfig)
        .args(["--namespace", &ns])
        .args(["--objects", &o.objects.to_string()])
        .args(["--replicas", &o.replicas.to_string()])
        .args(["--writers", &o.writers.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("operator-floor: {e}"))?;
    if !out.status.success() {
        return Err(format!("operator-floor: {}", super::outcome(out.status)));
    }
    let line: Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .ok_or("operator-floor printed no figures")?;
    let f = |k: &str| line[k].as_f64().unwrap_or(f64::NAN);
    let (converge_s, cpu_s) = (f("wall_s"), f("cpu_user_s") + f("cpu_sys_s"));
    let mut counts = Counts::read(api)?.minus(&before);
    counts.take("greetings", "POST", o.objects as f64);
    eprintln!(
        "    {} Greetings created and {:.0} writes in {converge_s:.2} s",
        o.objects,
        counts.writes()
    );
    Ok(Row {
        name: "floor".into(),
        run,
        converge_s,
        cpu_s: Some(cpu_s),
        rss_mb: None,
        hwm_mb: None,
        counts,
        trailing_writes: 0.0,
        cleanup_s: None,
        cleanup_writes: None,
        loc: None,
    })
}

/// Lines of a Rust source that are neither blank nor only a comment.
fn lines_of_code(path: &Path) -> Result<usize, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(count_code(&text))
}

fn count_code(text: &str) -> usize {
    let mut in_block = false;
    let mut n = 0;
    for line in text.lines() {
        let mut l = line.trim();
        if in_block {
            match l.find("*/") {
                Some(end) => {
                    in_block = false;
                    l = l[end + 2..].trim();
                }
                None => continue,
            }
        }
        if let Some(rest) = l.strip_prefix("/*") {
            if !rest.contains("*/") {
                in_block = true;
            }
            continue;
        }
        if !l.is_empty() && !l.starts_with("//") {
            n += 1;
        }
    }
    n
}

fn print_table(o: &Options, ops: &[Operator], rows: &[Row], missing: Option<&str>) {
    println!();
    println!(
        "workload: {} Greetings x {} ConfigMaps each, created by {} writers after the operator \
         starts; then all deleted at once",
        o.objects, o.replicas, o.writers
    );
    println!(
        "{:<12} {:>3} | {:>10} {:>6} {:>7} {:>7} | {:>6} {:>22} {:>6} {:>6} {:>6} | {:>9} {:>7} | {:>5}",
        "operator",
        "run",
        "converge s",
        "CPU s",
        "RSS MB",
        "HWM MB",
        "writes",
        "(cm+final+status+ev)",
        "failed",
        "late",
        "reads",
        "cleanup s",
        "writes",
        "LOC"
    );
    let opt = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
    for r in rows {
        let c = &r.counts;
        println!(
            "{:<12} {:>3} | {:>10.2} {:>6} {:>7} {:>7} | {:>6.0} {:>22} {:>6.0} {:>6.0} {:>6.0} | {:>9} {:>7} | {:>5}",
            r.name,
            r.run + 1,
            r.converge_s,
            opt(r.cpu_s, 2),
            opt(r.rss_mb, 1),
            opt(r.hwm_mb, 1),
            c.writes(),
            format!(
                "{:.0}+{:.0}+{:.0}+{:.0}",
                c.writes_of("configmaps", ""),
                c.writes_of("greetings", ""),
                c.writes_of("greetings", "status"),
                c.writes_of("events", "")
            ),
            c.failed_writes(),
            r.trailing_writes,
            c.reads(),
            opt(r.cleanup_s, 2),
            opt(r.cleanup_writes, 0),
            r.loc.map_or("-".to_string(), |n| n.to_string()),
        );
    }
    println!(
        "converge s: operator process start until every Greeting is Ready at its generation (the \
         watch event's arrival) with exactly {} children (a list); CPU s: utime + stime of the \
         operator process (/proc/PID/stat, every thread, 10 ms ticks) then; RSS/HWM: VmRSS/VmHWM \
         then. writes: the API server's apiserver_request_total for configmaps, greetings and \
         events until convergence, the harness's own requests taken off (cm: ConfigMap applies \
         and deletes; final: writes to Greetings themselves, the finalizer; status: the status \
         subresource; ev: events), failed: writes answered non-2xx (conflicts, retried); late: \
         writes in the {SETTLE:?} after convergence; reads: GETs and LISTs (watches are counted \
         when they end: not here). cleanup: every Greeting deleted at once until no Greeting and \
         no child is left, and the writes it took. LOC: non-blank, non-comment lines of the \
         operator's source (informer-rs: examples/greeter.rs, the operator with its leader \
         election, signal handling and optional admin server; not its process setup in \
         examples/greeter_main.rs, the `crd` subcommand, JSON logs and the admin server, \
         which the kube-rs peer has no counterpart of; kube-rs: its whole file, main included, \
         which builds its client and controller). floor: a bare informer-http client (operator-floor, release) \
         sending the workload straight from {} tasks, from its first request to its last \
         answer, and its CPU: per Greeting its create (not counted in writes, as for the \
         operators), then the finalizer, {} applies, the status, the event.",
        o.replicas, o.writers, o.replicas
    );
    for op in ops {
        println!(
            "  {}: {} ({})",
            op.name,
            op.command,
            op.source
                .as_deref()
                .map_or("source not given".to_string(), |p| p.display().to_string())
        );
    }
    if ops.iter().any(|op| op.name == "kube-rs") {
        println!(
            "  kube-rs: kube 5 (kube-runtime Controller with owns_stream over a reflector of the \
         children, finalizer helper, events Recorder; kube-derive CustomResource), tokio \
         multi-threaded runtime, the Controller's default concurrency (unbounded). No leader \
         election in kube-rs 5: one replica, the same for every operator."
        );
    }
    if let Some(m) = missing {
        println!("NOTE: {m}");
    }
    let runs = rows.iter().map(|r| r.run).max().map_or(0, |r| r + 1);
    for run in 0..runs {
        let row = |n: &str| rows.iter().find(|r| r.run == run && r.name == n);
        let floor = row("floor");
        if let (Some(ours), Some(peer)) = (row("informer-rs"), row("kube-rs")) {
            let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) => format!("{:.2}x", a / b),
                _ => "-".into(),
            };
            println!(
                "  run {}: informer-rs / kube-rs: converge {}, CPU {}, RSS {}, HWM {}, writes {}, \
                 reads {}, cleanup {}, LOC {}",
                run + 1,
                ratio(Some(ours.converge_s), Some(peer.converge_s)),
                ratio(ours.cpu_s, peer.cpu_s),
                ratio(ours.rss_mb, peer.rss_mb),
                ratio(ours.hwm_mb, peer.hwm_mb),
                ratio(Some(ours.counts.writes()), Some(peer.counts.writes())),
                ratio(Some(ours.counts.reads()), Some(peer.counts.reads())),
                ratio(ours.cleanup_s, peer.cleanup_s),
                ratio(ours.loc.map(|n| n as f64), peer.loc.map(|n| n as f64)),
            );
        }
        if let Some(floor) = floor {
            for r in rows.iter().filter(|r| r.run == run && r.name != "floor") {
                println!(
                    "  run {}: {} converged in {:.2}x the floor's time ({:.2} s for {} creates and \
                     {:.0} writes; {:.0} writes per second from the floor, {:.0} from {})",
                    run + 1,
                    r.name,
                    r.converge_s / floor.converge_s,
                    floor.converge_s,
                    o.objects,
                    floor.counts.writes(),
                    floor.counts.writes() / floor.converge_s,
                    r.counts.writes() / r.converge_s,
                    r.name
                );
                if let (Some(cpu), Some(floor_cpu)) = (r.cpu_s, floor.cpu_s) {
                    println!(
                        "  run {}: {} spent {:.2}x the floor's CPU ({cpu:.2} s against {floor_cpu:.2} s \
                         for the same writes from a bare client)",
                        run + 1,
                        r.name,
                        cpu / floor_cpu,
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_code_lines_only() {
        let src = "//! doc\n\nfn main() {\n    // note\n    /* a\n       b */\n    let x = 1; // trailing\n}\n";
        assert_eq!(count_code(src), 3);
    }

    #[test]
    fn operators_and_sources_are_name_value_pairs() {
        let o = parse(&[
            "--operator",
            "informer-rs=./greeter --x",
            "--source",
            "informer-rs=a.rs",
        ])
        .unwrap();
        assert_eq!(
            o.commands,
            vec![("informer-rs".into(), "./greeter --x".into())]
        );
        assert_eq!(
            o.sources,
            vec![("informer-rs".into(), PathBuf::from("a.rs"))]
        );
        assert!(parse(&["--operator", "nothing"]).is_err());
        assert_eq!(parse(&[]).unwrap().objects, 1000);
    }
}
