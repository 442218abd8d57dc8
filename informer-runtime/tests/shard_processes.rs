//! Sharding end to end with member *processes* (issue 43): the Greeting operator, the sample
//! controller (`examples/greeter.rs`, run by `examples/greeter_main.rs --shard`), as separate
//! processes sharing one ring in the labels mode, against a real kube-apiserver
//! (testcluster), over 1,000 Greetings (every tenth with a ConfigMap;
//! `INFORMER_SHARD_E2E_OBJECTS=N` for another size).
//!
//! Three members start (one of them through a TCP proxy) and the Greetings are created; then,
//! while the test keeps changing Greetings (20 a second, so reconciles are running): one
//! member is killed with SIGKILL (its Lease left to expire); one is added; the proxied one is
//! cut off from the server (it retires at its renew deadline and exits), then the proxy is
//! restored and it starts again under a new name; finally the members are stopped with
//! SIGTERM and leave. After each change the ring must converge: every Greeting labelled for
//! its owner on the ring of the live members with no drain pending, its ConfigMap labelled
//! for the same member, and each live member's cache (its `/metrics`,
//! `informer_store_objects`) holding exactly the Greetings labelled for it, so every object is
//! owned by exactly one live member; at the start and at the end every Greeting is `Ready`.
//! Each member caches 15–55 % of the Greetings with three members. Every reconcile of every
//! process is logged (member, key, start, end: `--reconcile-log`, wall-clock nanoseconds);
//! no two reconciles of one key may overlap, across processes (a killed member's unfinished
//! ones count as running until it was reaped).
//!
//! Why 1,000 and not 3,000: on the 2-core test machine the API server takes a few hundred
//! writes a second, and each Greeting costs about five before the ring has converged (its
//! create, the sharder's label, the finalizer, the status, an event) with three unoptimised
//! member processes beside it: 1,000 run in 50–75 s, 3,000 in 145–150 s (each phase may take
//! 60 s, and 40 ms more per Greeting above 1,500). At 3,000 the sharder's own informer of the
//! Greetings (`informer_store_objects{informer="shard-greeters-greetings"}`, printed with the
//! progress) held 2,049 then 2,786 of them for 20–40 s while every process sat idle: its watch
//! shares the client's one HTTP/2 connection with the member's writes. With HTTP/1.1 (one
//! connection per watch) it saw all 3,000 at once and the run took 115 s.
//!
//! The member processes are this test binary started again: its test `member_process` runs
//! `greeter_main` with the arguments in `INFORMER_SHARD_E2E_MEMBER` (and does nothing
//! without it), so the operator's code is built once, here, with the test. Their output, logs
//! and reconcile logs stay in `target/tmp/shard-processes/`.
//!
//! `tests/shard.rs` runs the same protocol with members in one process (both modes, both
//! runtimes, the `Sharding` handle's own view of what it owns); this one runs the sample
//! controller as it would be deployed, in the labels mode.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use informer_core::controller::shard::ShardTable;
use informer_http::{Client, PostParams};
use informer_runtime::{DynamicObject, Object, Resource, ShardConfig};
use informer_tokio::HasResource;
use serde_json::{Value, json};
use testcluster::TestCluster;

#[path = "support/cut_proxy.rs"]
mod cut_proxy;
use cut_proxy::Proxy;

// The Greeting operator and its process, as the informer-tokio example builds them.
#[allow(dead_code, unused_imports, clippy::duplicate_mod)]
#[path = "../../informer-tokio/examples/greeter.rs"]
mod greeter_tokio;
use greeter_tokio::greeter::Greeting;

/// Set in a member process: the JSON array of `greeter_main`'s arguments.
const MEMBER_ENV: &str = "INFORMER_SHARD_E2E_MEMBER";
const RING: &str = "greeters";
const NS: &str = "shard-processes";
/// Each member's Lease duration (renew deadline ⅔ of it, retry period ⅕).
const LEASE_SECONDS: &str = "5";
/// One Greeting in this many has a ConfigMap (a child, labelled for its owner's member); the
/// others none. All of them would double the writes before the ring has converged.
const CHILD_EVERY: usize = 10;
/// Greetings changed a second while members die, join and are cut off.
const CHURN_PER_SECOND: u32 = 20;
/// How long the ring may take to converge after a change, for `n` Greetings: 60 s, and
/// 40 ms for each above 1,500.
fn converge_limit(n: usize) -> Duration {
    Duration::from_secs(60) + Duration::from_millis(40) * n.saturating_sub(1500) as u32
}

/// The member processes' entry: `greeter_main` with the arguments of [`MEMBER_ENV`], then the
/// process exits with its outcome (0, or 3 with the error on stderr). Without it: nothing.
#[test]
fn member_process() {
    let Ok(args) = std::env::var(MEMBER_ENV) else {
        return;
    };
    let args: Vec<String> = serde_json::from_str(&args).expect("member arguments");
    let code = match greeter_tokio::greeter_main::main_with(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("greeter: {e}");
            3
        }
    };
    std::process::exit(code);
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// One member process.
struct Member {
    /// What the test calls it (`a`, `b`, …): its identity (`POD_NAME`).
    label: String,
    /// Its member name on the ring.
    name: String,
    admin: SocketAddr,
    child: Child,
    log: PathBuf,
    proxy: Option<Proxy>,
    /// When the test saw it exit (wall clock, nanoseconds), and how.
    exited: Option<(u64, Option<i32>)>,
}

impl Member {
    /// Starts member `label`; through a cuttable proxy when `proxy` is given.
    fn start(cluster: &TestCluster, dir: &Path, label: &str, proxy: Option<Proxy>) -> Member {
        let kubeconfig = match &proxy {
            None => cluster.kubeconfig.clone(),
            Some(p) => {
                let text = std::fs::read_to_string(&cluster.kubeconfig).unwrap();
                let proxied = format!("https://127.0.0.1:{}", p.port);
                assert!(
                    text.contains(&cluster.server),
                    "the kubeconfig names the server"
                );
                let path = dir.join(format!("kubeconfig-{label}"));
                std::fs::write(&path, text.replace(&cluster.server, &proxied)).unwrap();
                path
            }
        };
        let log = dir.join(format!("reconciles-{label}.jsonl"));
        let args = json!([
            NS,
            "--shard",
            RING,
            "--lease-duration",
            LEASE_SECONDS,
            "--reconcile-log",
            log.to_str().unwrap(),
        ]);
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "member_process",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(MEMBER_ENV, args.to_string())
            .env("KUBECONFIG", &kubeconfig)
            .env("POD_NAME", label)
            .env("ADMIN_ADDR", "127.0.0.1:0")
            .env("RUST_LOG", "warn,greeter=info,informer_runtime::shard=info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join(format!("{label}.err"))).unwrap())
            .spawn()
            .unwrap();
        // Its output to a file; its member name and admin address from its first log line.
        let stdout = child.stdout.take().unwrap();
        let mut out = std::fs::File::create(dir.join(format!("{label}.out"))).unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = writeln!(out, "{line}");
                // After libtest's `test member_process ... ` on the first line.
                let json = line.find('{').map_or("", |i| &line[i..]);
                if let Ok(v) = serde_json::from_str::<Value>(json) {
                    let f = &v["fields"];
                    if let (Some(m), Some(a)) = (f["member"].as_str(), f["admin"].as_str()) {
                        let _ = tx.send((m.to_string(), a.to_string()));
                    }
                }
            }
        });
        let (name, admin) = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("member {label} did not say its name (see {label}.err)"));
        eprintln!("[shard_processes] started {label}: {name}, admin {admin}");
        Member {
            label: label.to_string(),
            name,
            admin: admin.parse().unwrap(),
            child,
            log,
            proxy,
            exited: None,
        }
    }

    /// True once it exited (noted with the time the test saw it).
    fn has_exited(&mut self) -> bool {
        if self.exited.is_none() {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.exited = Some((now_nanos(), status.code()));
            }
        }
        self.exited.is_some()
    }

    /// True within `limit` once its log shows a reconcile started and not ended (a change
    /// then catches work in flight); false if none was seen.
    fn wait_in_flight(&self, limit: Duration) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let starts = text.lines().filter(|l| l.contains("\"end\":null")).count();
            if starts * 2 > text.lines().count() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    /// SIGKILL, then reaped: nothing of it runs after the time noted.
    fn kill(&mut self) {
        self.child.kill().unwrap();
        let status = self.child.wait().unwrap();
        self.exited = Some((now_nanos(), status.code()));
    }

    /// SIGTERM: the operator stops and the member leaves the ring.
    fn terminate(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -TERM {}", self.label);
    }

    /// The sharder's view when this member is the sharder: the Greetings its informer holds.
    fn sharder_sees(&self) -> Option<usize> {
        let metrics = http_get(self.admin, "/metrics")?;
        let series = format!("informer_store_objects{{informer=\"shard-{RING}-greetings\"}} ");
        let line = metrics
            .lines()
            .find_map(|l| l.strip_prefix(series.as_str()))?;
        Some(line.trim().parse::<f64>().ok()? as usize)
    }

    /// What it caches now: (Greetings, ConfigMaps), from its `/metrics`.
    fn cached(&self) -> Option<(usize, usize)> {
        let metrics = http_get(self.admin, "/metrics")?;
        let mine = format!("{RING}/shard={}", self.name);
        let (mut greetings, mut children) = (None, None);
        for line in metrics.lines() {
            let Some(rest) = line.strip_prefix("informer_store_objects{") else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once("} ") else {
                continue;
            };
            let Some(informer) = labels
                .strip_prefix("informer=\"")
                .and_then(|l| l.strip_suffix('"'))
            else {
                continue;
            };
            let value = value.trim().parse::<f64>().ok()? as usize;
            // Its Greetings (watched with its shard's selector) and the ConfigMaps (all of
            // them); not the sharder's informers (`shard-<ring>-…`) when it is the sharder.
            if informer.starts_with("example.com/greetings") && informer.contains(&mine) {
                greetings = Some(value);
            } else if informer.starts_with("configmaps") {
                children = Some(value);
            }
        }
        Some((greetings?, children?))
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if !self.has_exited() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A plain HTTP/1.1 GET; the body.
fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// The cluster's view: each Greeting's hash, shard label (none while a drain is pending),
/// readiness and whether it has a ConfigMap, and each ConfigMap's label, by owner.
struct View {
    greetings: BTreeMap<String, (u64, Option<String>, bool, bool)>,
    children: BTreeMap<String, Option<String>>,
}

fn shard_of(o: &DynamicObject) -> Option<String> {
    let labels = o.labels();
    if labels.contains_key(format!("{RING}/drain").as_str()) {
        return None;
    }
    labels
        .get(format!("{RING}/shard").as_str())
        .map(|s| s.to_string())
}

async fn view(c: &Client<impl informer_http::Backend>) -> Result<View, String> {
    let greetings = c
        .api::<DynamicObject>(Greeting::resource(), Some(NS))
        .list_page(&Default::default())
        .await
        .map_err(|e| e.to_string())?;
    let cms = c
        .api::<DynamicObject>(Resource::CONFIGMAPS, Some(NS))
        .list_page(&Default::default())
        .await
        .map_err(|e| e.to_string())?;
    let mut v = View {
        greetings: BTreeMap::new(),
        children: BTreeMap::new(),
    };
    for g in &greetings.items {
        let j = serde_json::to_value(&**g).unwrap();
        let ready = j["status"]["phase"] == "Ready"
            && j["status"]["observedGeneration"] == j["metadata"]["generation"];
        let hash = ShardConfig::new(RING, "test").hash_of(&**g);
        let child = j["spec"]["replicas"] != 0;
        v.greetings
            .insert(g.name().to_string(), (hash, shard_of(g), ready, child));
    }
    for cm in &cms.items {
        if let Some(owner) = cm.labels().get("greeting") {
            v.children.insert(owner.to_string(), shard_of(cm));
        }
    }
    Ok(v)
}

/// Converged over `live`: every Greeting labelled for its owner on the ring of the live
/// members (the greeter's 64 virtual nodes) with no drain pending (and `Ready` when `ready`:
/// not while the test keeps changing them), its ConfigMap labelled for the same member, and
/// each member caching exactly the Greetings labelled for it (and every ConfigMap: the greeter
/// watches all of them). `Err` says what is not there yet.
fn converged(v: &View, live: &[&Member], n: usize, ready: bool) -> Result<(), String> {
    if v.greetings.len() != n {
        return Err(format!("{} Greetings", v.greetings.len()));
    }
    let names: Vec<&str> = live.iter().map(|m| m.name.as_str()).collect();
    let ring = ShardTable::ring(&names, ShardConfig::new(RING, "test").vnodes);
    let mut per: BTreeMap<&str, (usize, usize)> = names.iter().map(|n| (*n, (0, 0))).collect();
    let (mut placed, mut not_ready, mut children_placed) = (0, 0, 0);
    let mut first = None;
    for (g, (hash, shard, is_ready, has_child)) in &v.greetings {
        let owner = ring.owner(*hash);
        let child = v.children.get(g).map(|c| c.as_deref());
        let Some(s) = shard.as_deref().filter(|s| Some(*s) == owner) else {
            first.get_or_insert_with(|| format!("{g}: labelled {shard:?}, not for {owner:?}"));
            continue;
        };
        placed += 1;
        if !is_ready {
            not_ready += 1;
            if ready {
                first.get_or_insert_with(|| format!("{g}: not Ready"));
            }
        }
        if *has_child && child != Some(Some(s)) {
            first.get_or_insert_with(|| format!("{g}: on {s}, its ConfigMap on {child:?}"));
            continue;
        }
        children_placed += 1;
        if let Some(e) = per.get_mut(s) {
            e.0 += 1;
        }
    }
    if let Some(first) = first {
        return Err(format!(
            "{first} ({placed} Greetings placed, {not_ready} of them not Ready, \
             {children_placed} with their ConfigMap; {} ConfigMaps)",
            v.children.len()
        ));
    }
    for e in per.values_mut() {
        e.1 = v.children.len();
    }
    for m in live {
        let want = per[m.name.as_str()];
        match m.cached() {
            Some(got) if got == want => {}
            got => {
                return Err(format!(
                    "{} caches {got:?} (Greetings, ConfigMaps), labelled for it {want:?}",
                    m.label
                ));
            }
        }
    }
    Ok(())
}

/// Polls until converged over `live`; how long it took.
fn wait_converged(
    rt: &tokio::runtime::Runtime,
    c: &Client<impl informer_http::Backend>,
    live: &mut [&mut Member],
    n: usize,
    ready: bool,
    what: &str,
) -> Duration {
    let t0 = Instant::now();
    let mut last_note = 0;
    loop {
        for m in live.iter_mut() {
            assert!(
                !m.has_exited(),
                "{what}: member {} exited: {:?} (see {}.err)",
                m.label,
                m.exited,
                m.label
            );
        }
        let members: Vec<&Member> = live.iter().map(|m| &**m).collect();
        // The members' caches first (cheap): the cluster is listed only once they hold all.
        let cached: Option<usize> = members.iter().map(|m| Some(m.cached()?.0)).sum();
        let why = if cached != Some(n) {
            format!("the members cache {cached:?} of {n} Greetings")
        } else {
            match rt.block_on(view(c)) {
                Ok(v) => match converged(&v, &members, n, ready) {
                    Ok(()) => break,
                    Err(e) => e,
                },
                Err(e) => e,
            }
        };
        assert!(
            t0.elapsed() < converge_limit(n),
            "{what}: not converged: {why}"
        );
        if t0.elapsed().as_secs() / 10 != last_note {
            last_note = t0.elapsed().as_secs() / 10;
            let sharder: Vec<(&str, usize)> = live
                .iter()
                .filter_map(|m| Some((m.label.as_str(), m.sharder_sees()?)))
                .collect();
            eprintln!(
                "[shard_processes] {what}: after {:.0?}: {why} (the sharder sees {sharder:?})",
                t0.elapsed()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let took = t0.elapsed();
    eprintln!("[shard_processes] {what}: converged in {took:.1?}");
    took
}

/// Each member's share of the `n` Greetings, checked against `min`–`max` percent.
fn shares(members: &[&Member], n: usize, min: usize, max: usize) {
    for m in members {
        let (g, _) = m.cached().unwrap();
        eprintln!(
            "[shard_processes]   {} caches {g} of {n} Greetings",
            m.label
        );
        assert!(
            g * 100 >= n * min && g * 100 <= n * max,
            "{} caches {g} of {n} Greetings, not {min}–{max} %",
            m.label
        );
    }
}

/// One reconcile as the logs show it.
struct Span {
    member: String,
    key: String,
    start: u64,
    end: u64,
}

/// Every member's reconciles: a start without an end runs until the member was seen exiting.
fn spans(members: &[&Member]) -> Vec<Span> {
    let mut out = Vec::new();
    for m in members {
        let exit = m.exited.expect("every member has exited").0;
        let text = std::fs::read_to_string(&m.log).unwrap_or_default();
        let mut open: BTreeMap<(String, u64), ()> = BTreeMap::new();
        let mut ended = Vec::new();
        for line in text.lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            let key = v["key"].as_str().unwrap().to_string();
            let start = v["start"].as_u64().unwrap();
            assert_eq!(v["member"], m.name.as_str());
            match v["end"].as_u64() {
                None => {
                    open.insert((key, start), ());
                }
                Some(end) => {
                    assert!(open.remove(&(key.clone(), start)).is_some(), "{line}");
                    ended.push((key, start, end));
                }
            }
        }
        let unfinished = open.len();
        for ((key, start), ()) in open {
            ended.push((key, start, exit));
        }
        eprintln!(
            "[shard_processes]   {}: {} reconciles ({unfinished} unfinished at its exit)",
            m.label,
            ended.len()
        );
        out.extend(ended.into_iter().map(|(key, start, end)| Span {
            member: m.name.clone(),
            key,
            start,
            end,
        }));
    }
    out
}

/// No two reconciles of one key overlap.
fn assert_no_overlap(spans: &[Span]) {
    let mut by_key: BTreeMap<&str, Vec<&Span>> = BTreeMap::new();
    for s in spans {
        by_key.entry(&s.key).or_default().push(s);
    }
    for (key, mut v) in by_key {
        v.sort_by_key(|s| s.start);
        for w in v.windows(2) {
            assert!(
                w[0].end <= w[1].start,
                "{key}: {} reconciled it until {} after {} started at {}",
                w[0].member,
                w[0].end,
                w[1].member,
                w[1].start
            );
        }
    }
}

fn dynamic(v: Value) -> DynamicObject {
    serde_json::from_value(v).unwrap()
}

/// The namespace and the CRD.
async fn setup(c: &Client<impl informer_http::Backend>) {
    c.api::<DynamicObject>(Resource::NAMESPACES, None)
        .create(
            &dynamic(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})),
            &PostParams::default(),
        )
        .await
        .unwrap();
    let crds = c.api::<DynamicObject>(Resource::CUSTOMRESOURCEDEFINITIONS, None);
    let crd = informer_http::crd::Crd::of::<Greeting>().to_json().unwrap();
    crds.create(&dynamic(crd), &PostParams::default())
        .await
        .unwrap();
    let greetings = c.api::<DynamicObject>(Greeting::resource(), Some(NS));
    let t0 = Instant::now();
    while greetings.list_page(&Default::default()).await.is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the CRD is not served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `n` Greetings, every [`CHILD_EVERY`]th of one ConfigMap (the others of none), from 32
/// writers.
async fn create_greetings(c: &Client<impl informer_http::Backend + 'static>, n: usize) {
    let greetings = c.api::<DynamicObject>(Greeting::resource(), Some(NS));
    let next = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..32)
        .map(|_| {
            let (greetings, next) = (greetings.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let g = dynamic(json!({
                        "apiVersion": "example.com/v1", "kind": "Greeting",
                        "metadata": {"name": format!("g{i:05}"), "namespace": NS},
                        "spec": {"message": "hello", "replicas": u32::from(i % CHILD_EVERY == 0)},
                    }));
                    greetings.create(&g, &PostParams::default()).await.unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
}

/// Keeps changing Greetings (a new message for one of the `n`, [`CHURN_PER_SECOND`] a
/// second) until `stop`: reconciles are running when members die, join and are cut off.
fn churn(
    c: Client<impl informer_http::Backend + 'static>,
    n: usize,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let greetings = c.api::<DynamicObject>(Greeting::resource(), Some(NS));
            let mut rng = informer_core::rng::SplitMix64::new(now_nanos());
            let mut changed = 0;
            while !stop.load(Ordering::Acquire) {
                let i = rng.next_u64() as usize % n;
                let patch = json!({"spec": {"message": format!("hello {changed}")}});
                let params = informer_http::write::PatchParams::default();
                let name = format!("g{i:05}");
                if greetings
                    .patch(&name, &informer_http::write::Patch::Merge(patch), &params)
                    .await
                    .is_ok()
                {
                    changed += 1;
                }
                tokio::time::sleep(Duration::from_secs(1) / CHURN_PER_SECOND).await;
            }
            changed
        })
    })
}

/// Waits for the ring's `count` member Leases.
fn wait_members(
    rt: &tokio::runtime::Runtime,
    c: &Client<impl informer_http::Backend>,
    count: usize,
) {
    let leases = c.api::<DynamicObject>(Resource::LEASES, Some(NS));
    let t0 = Instant::now();
    loop {
        let page = rt.block_on(leases.list_page(&Default::default())).unwrap();
        let prefix = format!("{RING}-m-");
        if page
            .items
            .iter()
            .filter(|l| l.name().starts_with(&prefix))
            .count()
            >= count
        {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{count} members did not join"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn greeter_members_never_overlap_and_converge() {
    if std::env::var_os(MEMBER_ENV).is_some() {
        return;
    }
    let t0 = Instant::now();
    let n: usize = std::env::var("INFORMER_SHARD_E2E_OBJECTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let cluster = TestCluster::start().expect("start test cluster");
    // Kept after the run (the cluster's own directory is not).
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("shard-processes");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    eprintln!("[shard_processes] logs in {}", dir.display());
    // The API server's and etcd's logs join them when the test ends, passed or not (the
    // cluster's directory goes with it).
    struct KeepLogs(Vec<(PathBuf, PathBuf)>);
    impl Drop for KeepLogs {
        fn drop(&mut self) {
            for (from, to) in &self.0 {
                let _ = std::fs::copy(from, to);
            }
        }
    }
    let _keep = KeepLogs(vec![
        (cluster.apiserver_log(), dir.join("kube-apiserver.log")),
        (cluster.etcd_log(), dir.join("etcd.log")),
    ]);
    let config = informer_http::Config::from_kubeconfig_file(&cluster.kubeconfig, None).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let c = rt.block_on(async { informer_tokio::client(config).unwrap() });
    rt.block_on(setup(&c));

    // Three members, b through the proxy; then the Greetings, labelled as they come.
    let mut a = Member::start(&cluster, &dir, "a", None);
    let mut b = Member::start(&cluster, &dir, "b", Some(Proxy::start(cluster.port())));
    let mut m3 = Member::start(&cluster, &dir, "c", None);
    wait_members(&rt, &c, 3);
    let t = Instant::now();
    rt.block_on(create_greetings(&c, n));
    eprintln!(
        "[shard_processes] {n} Greetings created in {:.1?}",
        t.elapsed()
    );
    wait_converged(
        &rt,
        &c,
        &mut [&mut a, &mut b, &mut m3],
        n,
        true,
        "3 members",
    );
    shares(&[&a, &b, &m3], n, 15, 55);

    // From now on Greetings keep changing.
    let stop_churn = Arc::new(AtomicBool::new(false));
    let churning = churn(c.clone(), n, stop_churn.clone());

    // a killed (with a reconcile in flight if it has one soon): its Lease expires, its
    // objects move at once.
    let busy = a.wait_in_flight(Duration::from_secs(10));
    a.kill();
    eprintln!("[shard_processes] a killed (reconciling: {busy})");
    wait_converged(&rt, &c, &mut [&mut b, &mut m3], n, false, "a killed");

    // d added: objects move to it through the drain.
    let mut d = Member::start(&cluster, &dir, "d", None);
    wait_converged(&rt, &c, &mut [&mut b, &mut m3, &mut d], n, false, "d added");
    shares(&[&d], n, 15, 55);

    // b cut off (likewise): it retires at its renew deadline and exits; its objects move.
    let busy = b.wait_in_flight(Duration::from_secs(10));
    b.proxy.as_ref().unwrap().cut();
    eprintln!("[shard_processes] b cut off (reconciling: {busy})");
    wait_converged(&rt, &c, &mut [&mut m3, &mut d], n, false, "b cut off");
    let t = Instant::now();
    while !b.has_exited() {
        assert!(t.elapsed() < Duration::from_secs(30), "b did not exit");
        std::thread::sleep(Duration::from_millis(100));
    }
    let err = std::fs::read_to_string(dir.join("b.err")).unwrap();
    assert_eq!(b.exited.unwrap().1, Some(3), "b: {err}");
    assert!(err.contains("retired"), "b: {err}");
    shares(&[&m3, &d], n, 25, 75);

    // The proxy restored: b starts again (a new member) through it.
    let proxy = b.proxy.take().unwrap();
    proxy.restore();
    let mut b2 = Member::start(&cluster, &dir, "b2", Some(proxy));
    wait_converged(
        &rt,
        &c,
        &mut [&mut m3, &mut d, &mut b2],
        n,
        false,
        "b started again",
    );
    stop_churn.store(true, Ordering::Release);
    let changed = churning.join().unwrap();
    wait_converged(
        &rt,
        &c,
        &mut [&mut m3, &mut d, &mut b2],
        n,
        true,
        "every change reconciled",
    );
    eprintln!("[shard_processes] {changed} Greetings changed meanwhile");
    shares(&[&m3, &d, &b2], n, 15, 55);

    // SIGTERM: each stops cleanly and leaves.
    for m in [&m3, &d, &b2] {
        m.terminate();
    }
    for m in [&mut m3, &mut d, &mut b2] {
        let t = Instant::now();
        while !m.has_exited() {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{} did not stop",
                m.label
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(
            m.exited.unwrap().1,
            Some(0),
            "{} (see {}.err)",
            m.label,
            m.label
        );
    }

    let all = [&a, &b, &m3, &d, &b2];
    let spans = spans(&all);
    assert_no_overlap(&spans);
    let keys: BTreeSet<&str> = spans.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys.len(), n, "every Greeting was reconciled");
    eprintln!(
        "[shard_processes] {} reconciles of {n} Greetings by 5 processes, none overlapping; took {:.1?}",
        spans.len(),
        t0.elapsed()
    );
}
