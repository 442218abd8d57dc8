//! Chaos against the real kube-apiserver: informers of both runtimes, at once, reach a
//! kube-apiserver v1.20 (`testcluster`, started with a low `--max-requests-inflight` so that it
//! answers 429s) through a TCP fault proxy (connection resets, stalls, half-closed connections,
//! delayed and split writes), while writers create, update and delete ConfigMaps, the apiserver
//! is restarted and etcd compacted. Each round ends at a quiet point (writers and faults
//! stopped): every informer's cache must equal a fresh list from the server, and every
//! handler's folded view must equal its cache, with no notification lost or doubled (an add of
//! a key the handler has, an update or delete of one it lacks); RSS must stay bounded. The
//! consistency check runs throughout and must find no divergence.
//!
//! `INFORMER_SOAK_SECS` sets the duration (default 120; `cargo xtask soak --minutes N`); the
//! summary (faults injected by kind, relists, convergence times, RSS) is printed at the end.

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
                    match rng.below(10) {
                        0 => Fault::Reset(rng.below(20_000)),
                        1 => Fault::Stall(rng.below(20_000)),
                        2 => Fault::HalfClose(rng.below(20_000)),
                        3 => Fault::Split,
                        _ => Fault::None,
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
    relists: Box<dyn Fn() -> (u64, u64, u64) + Send + Sync>,
    errors: Box<dyn Fn() -> BTreeMap<&'static str, u64> + Send + Sync>,
}

/// Starts an informer of runtime `E` on its own thread; returns its probe and a stop flag.
fn start_informer<E: Env>(config: Config, name: &'static str) -> (Probe, Arc<AtomicBool>) {
    let (tx, rx) = std::sync::mpsc::channel::<Probe>();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    thread::spawn(move || {
        E::block_on(async move {
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
            let errors_inf = inf.clone();
            tx.send(Probe {
                cache: Box::new(move || store.list().iter().map(|o| (key(o), rv(o))).collect()),
                fold,
                relists: Box::new(move || {
                    let m = metrics_inf.metrics();
                    (m.relists, m.consistency_checks, m.divergences)
                }),
                errors: Box::new(move || errors_inf.metrics().watch_errors_by_kind),
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

#[test]
fn soak_against_the_real_apiserver_through_a_fault_proxy() {
    let secs: u64 = std::env::var("INFORMER_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
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
    let upstream = tc.server.trim_start_matches("https://").to_string();
    let proxy = FaultProxy::start(upstream, 0x5eed);
    let mut config = Config::new(format!("https://{}", proxy.addr));
    config.root_ca_pem = Some(tc.ca_pem.clone());
    config.tls_server_name = Some("127.0.0.1".into());
    config.auth = Auth::Token(Secret::new(tc.token.clone()));
    let (tokio_probe, tokio_stop) = start_informer::<TokioEnv>(config.clone(), "tokio");
    let (smol_probe, smol_stop) = start_informer::<SmolEnv>(config, "smol");
    let probes = [("tokio", &tokio_probe), ("smol", &smol_probe)];

    let t0 = Instant::now();
    let mut rng = Rng(0xC4A05);
    let mut writes = 0u64;
    let mut rounds = 0u64;
    let mut restarts = 0u64;
    let mut compactions = 0u64;
    let mut max_convergence = Duration::ZERO;
    let mut max_rss = rss_kib();
    let start_rss = max_rss;
    let mut too_many = 0u64;
    let mut bursts = 0u64;
    while t0.elapsed() < Duration::from_secs(secs) {
        // Busy: faults on, writes, chaos.
        proxy.on.store(true, Ordering::SeqCst);
        let busy = Instant::now();
        while busy.elapsed() < Duration::from_secs(12) {
            for _ in 0..5 {
                if write_op(&tc, &mut rng, writes) == 429 {
                    too_many += 1;
                }
                writes += 1;
            }
            match rng.below(30) {
                0 => {
                    tc.stop_apiserver().unwrap();
                    thread::sleep(Duration::from_millis(500));
                    tc.start_apiserver().unwrap();
                    restarts += 1;
                }
                1..=2 if tc.compact().is_ok() => compactions += 1,
                3..=8 => {
                    proxy.reset_all();
                }
                9..=11 => {
                    // A burst of parallel lists over the inflight limit: 429s for everyone
                    // (the informers' lists included) while it lasts.
                    thread::scope(|s| {
                        let hs: Vec<_> = (0..12)
                            .map(|_| {
                                s.spawn(|| {
                                    tc.request("GET", "/api/v1/configmaps", None)
                                        .map(|(c, _)| c)
                                        .unwrap_or(0)
                                })
                            })
                            .collect();
                        for h in hs {
                            if h.join().unwrap_or(0) == 429 {
                                too_many += 1;
                            }
                        }
                    });
                    bursts += 1;
                }
                _ => {}
            }
            thread::sleep(Duration::from_millis(100));
        }
        // Quiet point: no faults, no writes; every informer converges to the server.
        proxy.on.store(false, Ordering::SeqCst);
        proxy.reset_all(); // stalled or half-closed connections from the busy phase go
        let quiet = Instant::now();
        let want = loop {
            if let Some(s) = server_state(&tc) {
                break s;
            }
            thread::sleep(Duration::from_millis(200));
        };
        for (name, p) in probes {
            let converged = loop {
                let cache = (p.cache)();
                let fold = p.fold.lock().unwrap().view.clone();
                if cache == want && fold == cache {
                    break true;
                }
                if quiet.elapsed() > Duration::from_secs(120) {
                    break false;
                }
                thread::sleep(Duration::from_millis(50));
            };
            let cache = (p.cache)();
            assert!(
                converged,
                "{name}: not converged 120 s after the quiet point; server {} objects, cache {}, diff {:?}",
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
        }
        max_convergence = max_convergence.max(quiet.elapsed());
        max_rss = max_rss.max(rss_kib());
        rounds += 1;
    }
    tokio_stop.store(true, Ordering::SeqCst);
    smol_stop.store(true, Ordering::SeqCst);
    let faults = proxy.faults.lock().unwrap().clone();
    let injected: u64 = faults.values().sum::<u64>() + restarts + compactions + bursts;
    println!("soak summary ({secs} s, {rounds} quiet points, {writes} writes):");
    println!(
        "  faults injected: {injected} (proxy {faults:?}, apiserver restarts {restarts}, compactions {compactions}, request bursts {bursts}); requests answered 429: {too_many}"
    );
    for (name, p) in probes {
        let (relists, checks, divergences) = (p.relists)();
        println!(
            "  {name}: relists {relists}, consistency checks {checks}, divergences {divergences}, failures {:?}",
            (p.errors)()
        );
        assert_eq!(divergences, 0);
    }
    println!(
        "  max convergence after a quiet point: {:.2} s",
        max_convergence.as_secs_f64()
    );
    println!(
        "  RSS: {} MiB at start, {} MiB max",
        start_rss / 1024,
        max_rss / 1024
    );
    assert!(rounds >= 1);
    assert!(injected >= 1, "faults were injected");
    // Bounded: 40 small objects cached twice cannot need hundreds of MiB.
    assert!(max_rss < 512 * 1024, "RSS {max_rss} KiB");
}
