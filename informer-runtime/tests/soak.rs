//! Chaos against the real kube-apiserver: informers of both runtimes, at once, reach a
//! kube-apiserver v1.20 (`testcluster`) through a TCP fault proxy (connection resets, stalls,
//! half-closed connections, delayed and split writes), while writers create, update and delete
//! ConfigMaps, the apiserver is restarted and etcd compacted. Each round ends at a quiet point
//! (writers and faults stopped): every informer's cache must equal a fresh list from the
//! server, and every handler's folded view must equal its cache, with no notification lost or
//! doubled (an add of a key the handler has, an update or delete of one it lacks); RSS must
//! stay bounded. The consistency check (content included) runs throughout and must find no
//! divergence.
//!
//! 429s for real: the apiserver runs with `--max-requests-inflight=6` (APF off), and the
//! informers authenticate as a plain user (v1.20's max-in-flight filter never rejects
//! `system:masters`, and never counts watches, which are long-running). Once per busy phase a
//! burst of that user's slow lists (at a resourceVersion from the future, which the watch cache
//! holds for 3 s before answering 504) fills every read slot while the apiserver is restarted:
//! its new watch cache cannot resume the informers' watches (410), so they relist into the full
//! server and get 429 with `Retry-After`; the burst lasts until each informer has met one. The
//! test asserts that the informers received 429s (their watch-error hook and metrics count them
//! by kind).
//!
//! `INFORMER_SOAK_SECS` sets the duration (`cargo xtask soak --minutes N`). Without it (`cargo
//! test`, `cargo xtask test-all`), the soak ends at the first quiet point by which every kind
//! of fault has been injected at least once (each proxy fault, a reset of every connection, an
//! apiserver restart, a compaction, a burst that made each informer meet a 429), and at the
//! latest at the first quiet point after 120 s. The summary (faults injected by kind, relists,
//! convergence times, RSS) is printed at the end.

mod support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use informer_http::Config;
use informer_http::config::{Auth, Secret};
use informer_runtime::{
    ConsistencyCheck, DynamicObject, HandlerFns, InformerBuilder, Object, Resource, Runtime,
};
use support::{Env, SmolEnv, TokioEnv};
use testcluster::{StartOptions, TestCluster};

const NS: &str = "soak";
const NAMES: u64 = 40;

/// A xorshift generator (deterministic per seed).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The fault a new proxied connection gets.
#[derive(Clone, Copy, Debug)]
enum Fault {
    None,
    /// Reset after this many bytes from the server.
    Reset(u64),
    /// Forward this many bytes, then stop forwarding for a while (the connection stays open).
    Stall(u64),
    /// Half-close towards the client after this many bytes (the server side stays open).
    HalfClose(u64),
    /// Forward in writes of at most 7 bytes, each delayed by a millisecond.
    Split,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Reset(_) => "reset",
            Fault::Stall(_) => "stall",
            Fault::HalfClose(_) => "half_close",
            Fault::Split => "split_writes",
        }
    }
}

/// A TCP proxy on loopback to `upstream`, injecting faults into new connections while on.
struct FaultProxy {
    addr: String,
    on: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    faults: Arc<Mutex<BTreeMap<&'static str, u64>>>,
    /// Open connections, to reset them all at once.
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl FaultProxy {
    fn start(upstream: String, seed: u64) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let proxy = FaultProxy {
            addr,
            on: Arc::new(AtomicBool::new(false)),
            stop: Arc::new(AtomicBool::new(false)),
            faults: Arc::default(),
            conns: Arc::default(),
        };
        let (on, stop, faults, conns) = (
            proxy.on.clone(),
            proxy.stop.clone(),
            proxy.faults.clone(),
            proxy.conns.clone(),
        );
        thread::spawn(move || {
            let mut rng = Rng(seed | 1);
            while !stop.load(Ordering::SeqCst) {
                let Ok((client, _)) = listener.accept() else {
                    thread::sleep(Duration::from_millis(2));
                    continue;
                };
                client.set_nonblocking(false).unwrap();
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue; // the apiserver is restarting: the client sees a reset
                };
                let fault = if on.load(Ordering::SeqCst) {
                    // Each kind once first, in turn, so that even a short soak meets them
                    // all; then at random.
                    let kinds = [
                        Fault::Reset(rng.below(20_000)),
                        Fault::Stall(rng.below(20_000)),
                        Fault::HalfClose(rng.below(20_000)),
                        Fault::Split,
                    ];
                    let met = faults.lock().unwrap().clone();
                    match kinds.iter().find(|k| !met.contains_key(k.name())) {
                        Some(&unmet) => unmet,
                        None => match rng.below(10) {
                            0 => Fault::Reset(rng.below(20_000)),
                            1 => Fault::Stall(rng.below(20_000)),
                            2 => Fault::HalfClose(rng.below(20_000)),
                            3 => Fault::Split,
                            _ => Fault::None,
                        },
                    }
                } else {
                    Fault::None
                };
                if !matches!(fault, Fault::None) {
                    *faults.lock().unwrap().entry(fault.name()).or_default() += 1;
                }
                conns.lock().unwrap().push(client.try_clone().unwrap());
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                // Client to server: plain.
                thread::spawn(move || pump(c2, s2, Fault::None));
                // Server to client: the fault.
                let stop = stop.clone();
                thread::spawn(move || {
                    pump(server, client, fault);
                    let _ = stop;
                });
            }
        });
        proxy
    }

    /// Resets every open connection (and forgets them).
    fn reset_all(&self) -> u64 {
        let conns: Vec<TcpStream> = std::mem::take(&mut *self.conns.lock().unwrap());
        let n = conns.len() as u64;
        for c in conns {
            let _ = socket2::SockRef::from(&c).set_linger(Some(Duration::ZERO));
            let _ = c.shutdown(Shutdown::Both);
        }
        *self.faults.lock().unwrap().entry("reset_all").or_default() += 1;
        n
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, fault: Fault) {
    let mut buf = [0u8; 16 * 1024];
    let mut sent = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let data = &buf[..n];
        let ok = match fault {
            Fault::Split => data.chunks(7).all(|c| {
                thread::sleep(Duration::from_millis(1));
                to.write_all(c).is_ok()
            }),
            _ => to.write_all(data).is_ok(),
        };
        if !ok {
            break;
        }
        sent += n as u64;
        match fault {
            Fault::Reset(at) if sent >= at => {
                let _ = socket2::SockRef::from(&to).set_linger(Some(Duration::ZERO));
                let _ = to.shutdown(Shutdown::Both);
                let _ = from.shutdown(Shutdown::Both);
                return;
            }
            Fault::HalfClose(at) if sent >= at => {
                let _ = to.shutdown(Shutdown::Write);
                // Keep reading from the server so it never notices.
                while matches!(from.read(&mut buf), Ok(n) if n > 0) {}
                return;
            }
            Fault::Stall(at) if sent >= at => {
                thread::sleep(Duration::from_secs(8));
            }
            _ => {}
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// A handler's folded view, and the inconsistencies it saw.
#[derive(Default)]
struct Fold {
    view: BTreeMap<String, String>,
    errors: Vec<String>,
}

fn key(o: &DynamicObject) -> String {
    format!("{}/{}", o.namespace().unwrap_or(""), o.name())
}

fn rv(o: &DynamicObject) -> String {
    o.resource_version().unwrap_or("").to_string()
}

/// `key → resourceVersion` from a fresh list.
fn server_state(tc: &TestCluster) -> Option<BTreeMap<String, String>> {
    let (code, body) = tc
        .request("GET", &format!("/api/v1/namespaces/{NS}/configmaps"), None)
        .ok()?;
    if code != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    Some(
        v["items"]
            .as_array()?
            .iter()
            .map(|i| {
                (
                    format!("{NS}/{}", i["metadata"]["name"].as_str().unwrap_or("")),
                    i["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                )
            })
            .collect(),
    )
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// What one runtime's informer does at quiet points: report its cache, fold and metrics.
struct Probe {
    cache: Box<dyn Fn() -> BTreeMap<String, String> + Send + Sync>,
    fold: Arc<Mutex<Fold>>,
    metrics: Box<dyn Fn() -> informer_runtime::Metrics + Send + Sync>,
    /// Every failure the watch-error hook saw, with its time.
    failures: Arc<Mutex<Vec<(Instant, String)>>>,
}

/// Starts an informer of runtime `E` on its own thread; returns its probe and a stop flag.
fn start_informer<E: Env>(config: Config, name: &'static str) -> (Probe, Arc<AtomicBool>) {
    let (tx, rx) = std::sync::mpsc::channel::<Probe>();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    thread::spawn(move || {
        E::block_on(async move {
            let failures: Arc<Mutex<Vec<(Instant, String)>>> = Arc::default();
            let hook_failures = failures.clone();
            let client = E::client(config);
            let inf = InformerBuilder::<DynamicObject, E::R>::new(
                E::R::default(),
                &client,
                Resource::CONFIGMAPS,
            )
            .namespace(NS)
            .consistency_check(ConsistencyCheck::every(Duration::from_secs(3)), move |d| {
                eprintln!("{name}: {d}")
            })
            .consistency_content(|a, b| a == b)
            .on_watch_error(move |f| {
                hook_failures
                    .lock()
                    .unwrap()
                    .push((Instant::now(), f.to_string()))
            })
            .build()
            .unwrap();
            let fold: Arc<Mutex<Fold>> = Arc::default();
            let (fa, fu, fd) = (fold.clone(), fold.clone(), fold.clone());
            inf.add_handler(
                HandlerFns::new()
                    .on_add(move |o: Arc<DynamicObject>, _| {
                        let mut f = fa.lock().unwrap();
                        if f.view.insert(key(&o), rv(&o)).is_some() {
                            f.errors.push(format!("add of {} it has", key(&o)));
                        }
                    })
                    .on_update(move |_, o: Arc<DynamicObject>| {
                        let mut f = fu.lock().unwrap();
                        if f.view.insert(key(&o), rv(&o)).is_none() {
                            f.errors.push(format!("update of {} it lacks", key(&o)));
                        }
                    })
                    .on_delete(move |o| {
                        let mut f = fd.lock().unwrap();
                        let k = key(o.object());
                        if f.view.remove(&k).is_none() {
                            f.errors.push(format!("delete of {k} it lacks"));
                        }
                    }),
            )
            .unwrap();
            inf.start().unwrap();
            let store = inf.store();
            let metrics_inf = inf.clone();
            tx.send(Probe {
                cache: Box::new(move || store.list().iter().map(|o| (key(o), rv(o))).collect()),
                fold,
                metrics: Box::new(move || metrics_inf.metrics()),
                failures,
            })
            .unwrap();
            while !s.load(Ordering::SeqCst) {
                <E::R as Default>::default()
                    .sleep(Duration::from_millis(100))
                    .await;
            }
            inf.shutdown().await;
        });
    });
    (rx.recv().unwrap(), stop)
}

/// One write; returns the HTTP status.
fn write_op(tc: &TestCluster, rng: &mut Rng, n: u64) -> u16 {
    let name = format!("cm-{}", rng.below(NAMES));
    let path = format!("/api/v1/namespaces/{NS}/configmaps");
    let body = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}},"data":{{"n":"{n}"}}}}"#
    );
    let code = |r: Result<(u16, String), testcluster::Error>| r.map(|(c, _)| c).unwrap_or(0);
    match rng.below(4) {
        0 => code(tc.request("DELETE", &format!("{path}/{name}"), None)),
        _ => match code(tc.request("PUT", &format!("{path}/{name}"), Some(&body))) {
            404 => code(tc.request("POST", &path, Some(&body))),
            c => c,
        },
    }
}

/// Lets the plain user (the informers' identity) read ConfigMaps in the soak namespace.
fn grant_reader(tc: &TestCluster) {
    let rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/soak";
    for (path, body) in [
        (
            format!("{rbac}/roles"),
            r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"cm-reader"},"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","list","watch"]}]}"#,
        ),
        (
            format!("{rbac}/rolebindings"),
            r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"cm-reader"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"cm-reader"},"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"user"}]}"#,
        ),
    ] {
        let (code, body) = tc.request("POST", &path, Some(body)).unwrap();
        assert!(code == 201 || code == 409, "{code} {body}");
    }
    // The authorizer's cache picks the binding up shortly.
    let path = format!("/api/v1/namespaces/{NS}/configmaps");
    let t0 = Instant::now();
    while tc
        .request_as(tc.extra_token(), "GET", &path, None)
        .map(|r| r.0)
        .ok()
        != Some(200)
    {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the binding never took effect"
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// Burst clients: `n` threads of the plain user, each listing ConfigMaps at a resourceVersion
/// from the future again and again (the watch cache holds such a list for 3 s, then answers
/// 504), so that every read slot of the apiserver is taken while `on`. Counts their 429s.
struct Burst {
    on: Arc<AtomicBool>,
    too_many: Arc<std::sync::atomic::AtomicU64>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Burst {
    fn start(n: usize, server: &str, ca: &std::path::Path, token: &str) -> Burst {
        let on = Arc::new(AtomicBool::new(true));
        let too_many = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let url = format!("{server}/api/v1/namespaces/{NS}/configmaps?resourceVersion=999999999");
        let threads = (0..n)
            .map(|_| {
                let (on, too_many, url) = (on.clone(), too_many.clone(), url.clone());
                let (ca, auth) = (ca.to_path_buf(), format!("Authorization: Bearer {token}"));
                thread::spawn(move || {
                    while on.load(Ordering::SeqCst) {
                        let out = std::process::Command::new("curl")
                            .args([
                                "-s",
                                "-o",
                                "/dev/null",
                                "-w",
                                "%{http_code}",
                                "--max-time",
                                "10",
                            ])
                            .arg("--cacert")
                            .arg(&ca)
                            .args(["-H", &auth, &url])
                            .output();
                        let code = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
                        match code.as_deref() {
                            Ok("429") => {
                                too_many.fetch_add(1, Ordering::SeqCst);
                                thread::sleep(Duration::from_millis(20));
                            }
                            Ok("504") => {}
                            // Down (restarting) or anything else: try again shortly.
                            _ => thread::sleep(Duration::from_millis(50)),
                        }
                    }
                })
            })
            .collect();
        Burst {
            on,
            too_many,
            threads,
        }
    }

    /// Stops the clients (each finishes its request) and returns their 429 count.
    fn stop(self) -> u64 {
        self.on.store(false, Ordering::SeqCst);
        for t in self.threads {
            let _ = t.join();
        }
        self.too_many.load(Ordering::SeqCst)
    }
}

/// The `q`-quantile of sorted `xs`.
fn quantile(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs[((xs.len() - 1) as f64 * q).round() as usize]
}

#[test]
fn soak_against_the_real_apiserver_through_a_fault_proxy() {
    let fixed: Option<u64> = std::env::var("INFORMER_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok());
    let secs = fixed.unwrap_or(120);
    let mut tc = TestCluster::start_with(
        StartOptions::new()
            .apiserver_arg("--max-requests-inflight=6")
            .apiserver_arg("--enable-priority-and-fairness=false"),
    )
    .unwrap();
    let (code, body) = tc
        .request(
            "POST",
            "/api/v1/namespaces",
            Some(&format!(
                r#"{{"apiVersion":"v1","kind":"Namespace","metadata":{{"name":"{NS}"}}}}"#
            )),
        )
        .unwrap();
    assert!(code == 201 || code == 409, "{code} {body}");
    grant_reader(&tc);
    let upstream = tc.server.trim_start_matches("https://").to_string();
    let proxy = FaultProxy::start(upstream, 0x5eed);
    let mut config = Config::new(format!("https://{}", proxy.addr));
    config.root_ca_pem = Some(tc.ca_pem.clone());
    config.tls_server_name = Some("127.0.0.1".into());
    // Not system:masters: the max-in-flight filter answers this user 429.
    config.auth = Auth::Token(Secret::new(tc.extra_token().to_string()));
    let (tokio_probe, tokio_stop) = start_informer::<TokioEnv>(config.clone(), "tokio");
    let (smol_probe, smol_stop) = start_informer::<SmolEnv>(config, "smol");
    let probes = [("tokio", &tokio_probe), ("smol", &smol_probe)];

    let t0 = Instant::now();
    let mut rng = Rng(0xC4A05);
    let mut writes = 0u64;
    let mut rounds = 0u64;
    let mut restarts = 0u64;
    let mut compactions = 0u64;
    let mut convergence: Vec<f64> = Vec::new();
    let mut max_rss = rss_kib();
    let start_rss = max_rss;
    let mut writes_429 = 0u64;
    let mut bursts = 0u64;
    let mut burst_429 = 0u64;
    while t0.elapsed() < Duration::from_secs(secs) {
        // Busy: faults on, writes, chaos.
        proxy.on.store(true, Ordering::SeqCst);
        let busy = Instant::now();
        let burst_at = Duration::from_millis(1000 + rng.below(4000));
        let mut burst: Option<(Instant, Burst, Vec<u64>)> = None;
        let mut burst_done = false;
        let got_429 = |p: &Probe| {
            (p.metrics)()
                .watch_errors_by_kind
                .get("too_many_requests")
                .copied()
                .unwrap_or(0)
        };
        while busy.elapsed() < Duration::from_secs(12) || burst.is_some() {
            if !burst_done && burst.is_none() && busy.elapsed() >= burst_at {
                // Fill the read slots, then restart the apiserver under the burst: the
                // informers relist into a full server. A write elsewhere first moves etcd's
                // revision past the informers' resourceVersion, so that the new watch cache
                // (which starts at the current revision) cannot resume their watches: 410.
                let before: Vec<u64> = probes.iter().map(|(_, p)| got_429(p)).collect();
                let b = Burst::start(10, &tc.server, &tc.ca_file(), tc.extra_token());
                let _ = tc.request(
                    "POST",
                    "/api/v1/namespaces/default/configmaps",
                    Some(r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"elsewhere-"}}"#),
                );
                thread::sleep(Duration::from_millis(500));
                tc.stop_apiserver().unwrap();
                tc.start_apiserver().unwrap();
                restarts += 1;
                bursts += 1;
                burst = Some((Instant::now(), b, before));
            }
            // The burst lasts at least 8 s, and until every informer met a 429 (its relist
            // comes after its backoff, up to 60 s), at most 90 s.
            if burst.as_ref().is_some_and(|(t, _, before)| {
                let all = probes.iter().zip(before).all(|((_, p), n)| got_429(p) > *n);
                (all && t.elapsed() > Duration::from_secs(8))
                    || t.elapsed() > Duration::from_secs(90)
            }) {
                burst_429 += burst.take().unwrap().1.stop();
                burst_done = true;
            }
            for _ in 0..5 {
                if write_op(&tc, &mut rng, writes) == 429 {
                    writes_429 += 1;
                }
                writes += 1;
            }
            match rng.below(30) {
                0 if burst.is_none() => {
                    tc.stop_apiserver().unwrap();
                    thread::sleep(Duration::from_millis(500));
                    tc.start_apiserver().unwrap();
                    restarts += 1;
                }
                1..=2 if tc.compact().is_ok() => compactions += 1,
                3..=8 => {
                    proxy.reset_all();
                }
                _ => {}
            }
            thread::sleep(Duration::from_millis(100));
        }
        // Quiet point: no faults, no writes; every informer converges to the server.
        proxy.on.store(false, Ordering::SeqCst);
        proxy.reset_all(); // stalled or half-closed connections from the busy phase go
        let quiet = Instant::now();
        let before: Vec<informer_runtime::Metrics> =
            probes.iter().map(|(_, p)| (p.metrics)()).collect();
        let want = loop {
            if let Some(s) = server_state(&tc) {
                break s;
            }
            thread::sleep(Duration::from_millis(200));
        };
        let mut took: [Option<Duration>; 2] = [None, None];
        while took.iter().any(Option::is_none) && quiet.elapsed() < Duration::from_secs(150) {
            for (i, (_, p)) in probes.iter().enumerate() {
                if took[i].is_none() {
                    let cache = (p.cache)();
                    let fold = p.fold.lock().unwrap().view.clone();
                    if cache == want && fold == cache {
                        took[i] = Some(quiet.elapsed());
                    }
                }
            }
            thread::sleep(Duration::from_millis(50));
        }
        for (i, (name, p)) in probes.iter().enumerate() {
            let m = (p.metrics)();
            let b = &before[i];
            // What the informer did around this quiet point: its failures since 60 s before.
            let failures: Vec<String> = p
                .failures
                .lock()
                .unwrap()
                .iter()
                .filter(|(t, _)| *t + Duration::from_secs(60) >= quiet)
                .map(|(t, f)| {
                    let at = if *t >= quiet {
                        (*t - quiet).as_secs_f64()
                    } else {
                        -(quiet - *t).as_secs_f64()
                    };
                    format!("{at:+.1}s {}", f.chars().take(100).collect::<String>())
                })
                .collect();
            let secs = took[i].map_or(f64::INFINITY, |d| d.as_secs_f64());
            println!(
                "quiet point {rounds} {name}: converged in {secs:.2} s (relists +{}, watch restarts +{}, backoffs +{}, failures in the 60 s before and after: {})",
                m.relists - b.relists,
                m.watch_restarts - b.watch_restarts,
                m.backoffs - b.backoffs,
                failures.len()
            );
            if secs > 10.0 {
                for f in &failures {
                    println!("    {f}");
                }
            }
            let cache = (p.cache)();
            assert!(
                took[i].is_some(),
                "{name}: not converged 150 s after the quiet point; server {} objects, cache {}, diff {:?}",
                want.len(),
                cache.len(),
                want.iter()
                    .filter(|(k, v)| cache.get(*k) != Some(v))
                    .take(5)
                    .collect::<Vec<_>>()
            );
            let errors = p.fold.lock().unwrap().errors.clone();
            assert!(
                errors.is_empty(),
                "{name}: notifications lost or doubled: {errors:?}"
            );
            convergence.push(secs);
        }
        max_rss = max_rss.max(rss_kib());
        rounds += 1;
        // Without a set duration: done once every kind of fault has been met.
        let met_429 = probes.iter().all(|(_, p)| {
            (p.metrics)()
                .watch_errors_by_kind
                .get("too_many_requests")
                .is_some_and(|&n| n > 0)
        });
        let faults = proxy.faults.lock().unwrap().clone();
        let every_proxy_fault = ["reset", "stall", "half_close", "split_writes", "reset_all"]
            .iter()
            .all(|k| faults.get(k).is_some_and(|&n| n > 0));
        if fixed.is_none()
            && every_proxy_fault
            && restarts > 0
            && compactions > 0
            && burst_429 > 0
            && met_429
        {
            println!(
                "every kind of fault met after {rounds} quiet point(s), {:.0} s",
                t0.elapsed().as_secs_f64()
            );
            break;
        }
    }
    tokio_stop.store(true, Ordering::SeqCst);
    smol_stop.store(true, Ordering::SeqCst);
    let faults = proxy.faults.lock().unwrap().clone();
    let injected: u64 = faults.values().sum::<u64>() + restarts + compactions + bursts;
    println!(
        "soak summary ({:.0} s of at most {secs} s, {rounds} quiet points, {writes} writes):",
        t0.elapsed().as_secs_f64()
    );
    println!(
        "  faults injected: {injected} (proxy {faults:?}, apiserver restarts {restarts}, compactions {compactions}, bursts of slow lists {bursts})"
    );
    println!(
        "  429s answered: {burst_429} to the burst clients, {writes_429} to the writers (system:masters: expected 0)"
    );
    let mut informer_429 = 0;
    for (name, p) in probes {
        let m = (p.metrics)();
        let got_429 = m
            .watch_errors_by_kind
            .get("too_many_requests")
            .copied()
            .unwrap_or(0);
        informer_429 += got_429;
        println!(
            "  {name}: 429s received {got_429}, relists {}, watch restarts {}, backoffs {}, consistency checks {}, divergences {}, failures by kind {:?}",
            m.relists,
            m.watch_restarts,
            m.backoffs,
            m.consistency_checks,
            m.divergences,
            m.watch_errors_by_kind
        );
        assert_eq!(
            m.divergences, 0,
            "{name}: the consistency check found a divergence"
        );
    }
    convergence.sort_by(f64::total_cmp);
    println!(
        "  convergence after a quiet point ({} informer quiet points): min {:.2} s, median {:.2} s, p90 {:.2} s, max {:.2} s",
        convergence.len(),
        quantile(&convergence, 0.0),
        quantile(&convergence, 0.5),
        quantile(&convergence, 0.9),
        quantile(&convergence, 1.0),
    );
    println!(
        "  RSS: {} MiB at start, {} MiB max",
        start_rss / 1024,
        max_rss / 1024
    );
    assert!(rounds >= 1);
    assert!(injected >= 1, "faults were injected");
    assert!(
        burst_429 >= 1,
        "the burst filled the apiserver's read slots"
    );
    assert!(
        informer_429 >= 1,
        "the informers received 429s (relisting into a full apiserver)"
    );
    // Bounded: 40 small objects cached twice cannot need hundreds of MiB.
    assert!(max_rss < 512 * 1024, "RSS {max_rss} KiB");
}
