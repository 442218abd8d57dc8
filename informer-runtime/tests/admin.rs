//! The admin server (feature `admin`) against a real kube-apiserver (testcluster), on tokio
//! and on smol: `/readyz` 503 until every informer synced and 200 after (the checks listed as
//! Kubernetes' `?verbose` does); `/livez` 503 while an informer's driver is wedged by a
//! blocking transform, 200 again once it is released; `/metrics` parses as Prometheus text and
//! its counters move after changes, a reconcile error shows in
//! `controller_runtime_reconcile_errors_total`; a non-GET is 405, an unknown path 404; the
//! server stops with the controller.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use informer_http::PostParams;
use informer_runtime::{DynamicObject, Object, Resource};
use serde_json::json;
use testcluster::TestCluster;

struct Shared {
    _cluster: TestCluster,
    config: informer_http::Config,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let cluster = TestCluster::start().expect("start test cluster");
        let config = informer_http::Config::from_kubeconfig_file(&cluster.kubeconfig, None)
            .expect("testcluster kubeconfig");
        Shared {
            _cluster: cluster,
            config,
        }
    })
}

fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// One HTTP/1.1 request: (status, headers, body).
fn http(addr: SocketAddr, method: &str, path: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).expect("connect to the admin server");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: admin\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("a response");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_string(), body.to_string())
}

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let (status, _, body) = http(addr, "GET", path);
    (status, body)
}

/// The value of `name` with all of `labels` in a scrape (summed over other labels), parsed
/// by a Prometheus text parser.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("Prometheus text format");
    let mut found = None;
    for s in scrape.samples.iter().filter(|s| s.metric == name) {
        if labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)) {
            let v = match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                prometheus_parse::Value::Histogram(ref h) => {
                    h.iter().map(|b| b.count).fold(0.0, f64::max)
                }
                prometheus_parse::Value::Summary(_) => continue,
            };
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

async fn poll<F: std::future::Future<Output = bool>>(
    what: &str,
    sleep: impl Fn(Duration) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    mut cond: impl FnMut() -> F,
) {
    let t0 = Instant::now();
    while !cond().await {
        assert!(t0.elapsed() < Duration::from_secs(60), "timed out: {what}");
        sleep(Duration::from_millis(100)).await;
    }
}

macro_rules! admin_scenario {
    ($name:ident, $rt:ident, $block_on:expr) => {
        mod $name {
            use super::*;
            use $rt as rt;

            fn sleeper(d: Duration) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
                Box::pin(rt::sleep(d))
            }

            /// Every endpoint, through one controller's life.
            #[test]
            fn admin_server_readyz_livez_metrics_and_refusals() {
                let _serial = serial();
                let sh = shared();
                let rt_name = stringify!($name);
                $block_on(async move {
                    let c = rt::client(sh.config.clone()).unwrap();
                    let ns = format!("admin-{rt_name}");
                    let nss = c.api::<DynamicObject>(Resource::NAMESPACES, None);
                    let _ = nss
                        .create(&serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(), &PostParams::default())
                        .await;
                    // The recorder first, then the informers (their handles bind to it).
                    let admin = rt::Admin::new(SocketAddr::from(([127, 0, 0, 1], 0)));
                    admin.stall_after(Duration::from_secs(1));
                    let server = rt::serve_admin(admin.clone()).unwrap();
                    let addr = server.local_addr();

                    // A transform that blocks while `wedged` is set and the object is `wedge`.
                    let wedged = Arc::new(AtomicBool::new(false));
                    let w = wedged.clone();
                    let informer_name = format!("admin-cms-{rt_name}");
                    let informer = rt::Informer::<DynamicObject>::builder_for(&c, Resource::CONFIGMAPS)
                        .namespace(&ns)
                        .name(&informer_name)
                        .transform(move |o: Arc<DynamicObject>| {
                            let t0 = Instant::now();
                            while o.name() == "wedge" && w.load(Ordering::Acquire) && t0.elapsed() < Duration::from_secs(60) {
                                std::thread::sleep(Duration::from_millis(20));
                            }
                            o
                        })
                        .build()
                        .unwrap();
                    admin.informer(&informer);
                    let check = format!("informer/{informer_name}");
                    // Refusals.
                    let (status, head, _) = http(addr, "POST", "/metrics");
                    assert_eq!(status, 405, "{head}");
                    assert!(head.to_ascii_lowercase().contains("allow: get"), "{head}");
                    assert_eq!(http(addr, "DELETE", "/readyz").0, 405);
                    assert_eq!(get(addr, "/nope").0, 404);
                    assert_eq!(get(addr, "/readyz/no-such-check").0, 404);

                    // Not started: not ready, and the body names the check.
                    let (status, body) = get(addr, "/readyz?verbose");
                    assert_eq!(status, 503, "{body}");
                    assert!(body.contains(&format!("[-]{check} failed")), "{body}");
                    assert!(body.ends_with("readyz check failed\n"), "{body}");
                    assert_eq!(get(addr, &format!("/readyz?exclude={check}")).0, 200);
                    assert_eq!(get(addr, "/livez").0, 200);

                    let controller_name = format!("admin-{rt_name}");
                    let (stop_tx, stop_rx) = async_channel::bounded::<()>(1);
                    let (done_tx, done_rx) = async_channel::bounded::<String>(1);
                    let controller = rt::Controller::new(&c, informer.clone())
                        .name(&controller_name)
                        .admin(server.clone())
                        .shutdown_on(async move { let _ = stop_rx.recv().await; });
                    rt::spawn(async move {
                        let r = controller
                            .run(|cm: Arc<DynamicObject>, _ctx: rt::Context| async move {
                                if cm.name().starts_with("fail") {
                                    Err(format!("{} refused", cm.name()))
                                } else {
                                    Ok(rt::Action::Done)
                                }
                            })
                            .await;
                        let _ = done_tx.send(format!("{r:?}")).await;
                    })
                    .unwrap();
                    poll("ready", sleeper, || async { get(addr, "/readyz").0 == 200 }).await;
                    let (status, body) = get(addr, "/readyz");
                    assert_eq!((status, body.as_str()), (200, "ok"));
                    let (status, body) = get(addr, "/readyz?verbose");
                    assert_eq!(status, 200);
                    assert!(body.contains(&format!("[+]{check} ok")), "{body}");
                    assert!(body.ends_with("readyz check passed\n"), "{body}");
                    assert_eq!(get(addr, &format!("/readyz/{check}")).0, 200);
                    let (status, body) = get(addr, "/livez?verbose");
                    assert_eq!(status, 200, "{body}");
                    assert!(body.contains("[+]ping ok"), "{body}");
                    // Metrics move.
                    let scrape = || get(addr, "/metrics").1;
                    let ctl = [("controller", controller_name.as_str())];
                    let applied = |t: &str| sample(t, "informer_events_applied_total", &[("informer", informer_name.as_str())]).unwrap_or(0.0);
                    let before = scrape();
                    let applied_before = applied(&before);
                    let adds_before = sample(&before, "workqueue_adds_total", &[("name", controller_name.as_str())]).unwrap_or(0.0);
                    let cms = c.api::<DynamicObject>(Resource::CONFIGMAPS, Some(&ns));
                    for n in ["ok-1", "ok-2", "fail-1"] {
                        let _ = cms.delete(n, &Default::default()).await;
                        cms.create(&serde_json::from_value(json!({"metadata": {"name": n}})).unwrap(), &PostParams::default())
                            .await
                            .unwrap();
                    }
                    poll("a reconcile error counted", sleeper, || async {
                        sample(&scrape(), "controller_runtime_reconcile_errors_total", &ctl).unwrap_or(0.0) >= 1.0
                    }).await;
                    poll("successes counted", sleeper, || async {
                        sample(&scrape(), "controller_runtime_reconcile_total", &[ctl[0], ("result", "success")]).unwrap_or(0.0) >= 2.0
                    }).await;
                    let after = scrape();
                    assert!(applied(&after) >= applied_before + 3.0, "{after}");
                    assert!(sample(&after, "workqueue_adds_total", &[("name", controller_name.as_str()), ("controller", controller_name.as_str())]).unwrap() >= adds_before + 3.0, "{after}");
                    assert!(sample(&after, "controller_runtime_reconcile_total", &[ctl[0], ("result", "error")]).unwrap() >= 1.0);
                    assert!(sample(&after, "workqueue_retries_total", &[("name", controller_name.as_str())]).unwrap() >= 1.0, "{after}");
                    assert!(sample(&after, "controller_runtime_reconcile_time_seconds_count", &ctl).unwrap() >= 3.0, "{after}");
                    assert!(sample(&after, "workqueue_queue_duration_seconds_count", &[("name", controller_name.as_str())]).unwrap() >= 3.0, "{after}");
                    assert!(sample(&after, "workqueue_work_duration_seconds_count", &[("name", controller_name.as_str())]).unwrap() >= 3.0, "{after}");
                    for gauge in ["workqueue_depth", "workqueue_unfinished_work_seconds", "workqueue_longest_running_processor_seconds"] {
                        assert!(sample(&after, gauge, &[("name", controller_name.as_str())]).is_some(), "{gauge}: {after}");
                    }
                    assert!(after.contains("# TYPE controller_runtime_reconcile_time_seconds histogram"), "{after}");
                    assert!(after.contains("controller_runtime_reconcile_time_seconds_bucket{controller=\""), "{after}");
                    // Wedge the driver: /livez turns 503 naming it, and back once released.
                    wedged.store(true, Ordering::Release);
                    // Created from a task whose answer is not awaited here: the blocked
                    // transform holds one of the runtime's workers, and what that worker had
                    // queued next (this client's connection, say) waits with it; the admin
                    // server, on its own thread, answers all the same.
                    let (created_tx, created_rx) = async_channel::bounded(1);
                    {
                        let cms = cms.clone();
                        rt::spawn(async move {
                            let r = cms
                                .create(&serde_json::from_value(json!({"metadata": {"name": "wedge"}})).unwrap(), &PostParams::default())
                                .await
                                .map(|_| ());
                            let _ = created_tx.send(r).await;
                        })
                        .unwrap();
                    }
                    let t0 = Instant::now();
                    let body = loop {
                        let (status, body) = get(addr, "/livez");
                        if status == 503 {
                            break body;
                        }
                        assert!(t0.elapsed() < Duration::from_secs(30), "livez never failed: {:?}", get(addr, "/livez?verbose"));
                        std::thread::sleep(Duration::from_millis(100));
                    };
                    assert!(body.contains(&format!("[-]{check} failed: its cache has been locked by one step")), "{body}");
                    assert!(body.contains("[+]ping ok"), "{body}");
                    assert!(body.ends_with("livez check failed\n"), "{body}");
                    wedged.store(false, Ordering::Release);
                    created_rx.recv().await.unwrap().unwrap();
                    poll("live again", sleeper, || async { get(addr, "/livez").0 == 200 }).await;
                    // The controller stops; the admin server with it, last.
                    stop_tx.send(()).await.unwrap();
                    assert_eq!(done_rx.recv().await.unwrap(), "Ok(())");
                    assert!(TcpStream::connect(addr).is_err(), "the admin server still listens");
                    for n in ["ok-1", "ok-2", "fail-1", "wedge"] {
                        let _ = cms.delete(n, &Default::default()).await;
                    }
                });
            }
        }
    };
}

fn tokio_block_on<F: std::future::Future>(f: F) -> F::Output {
    ::tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

admin_scenario!(tokio, informer_tokio, tokio_block_on);
admin_scenario!(smol, informer_smol, ::smol::block_on);
