//! The Greeting operator (`examples/greeter.rs`, unchanged: informers, Controller, finalizer,
//! status subresource, server-side apply, events, leader election) against FakeCluster with
//! faults, one seed after another, in virtual time (tokio's paused clock). Beside its
//! real-apiserver e2e (informer-runtime `tests/controller.rs`).
//!
//! Each seed: create a Greeting, scale and change it, delete it, while watches drop and hang,
//! lists and watches get 410, 429 and 500, answers are slow, a tenth of the operator's writes
//! conflict and the server restarts every virtual minute. The operator must converge after
//! each step; a seed that does not fails the test naming it (`GREETER_SEED=N` replays one).

use std::time::Duration;

use informer_testkit::{FakeCluster, Faults};
use informer_tokio::http::{DeleteParams, Patch, PatchParams, PostParams};
use informer_tokio::{Client, DynamicObject, HasResource, Resource};
use serde_json::{Value, json};

/// The runtime crate the shared source is written against.
use informer_tokio as runtime;

#[allow(dead_code)]
#[path = "../../examples/greeter.rs"]
mod greeter;

use greeter::Greeting;

const NS: &str = "greet";

/// How long (virtual) each step may take to converge: a hung watch holds its informer back
/// until the watch's own timeout (the reflector asks for 5 to 10 minutes), and two can come
/// in a row.
const STEP: Duration = Duration::from_secs(2400);

fn faults() -> Faults {
    Faults::none()
        .drop_watch(0.3)
        .hang_watch(0.02)
        .gone(0.05)
        .too_many_requests(0.05, 1)
        .server_error(0.05)
        .errors_on_writes(false)
        .slow(0.1, Duration::from_secs(1))
        .conflict(0.1)
        .restart_every(Duration::from_secs(60), Duration::ZERO)
}

fn children(fake: &FakeCluster) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = fake
        .list(&Resource::CONFIGMAPS, Some(NS))
        .into_iter()
        .filter(|c| c["metadata"]["labels"]["greeting"] == "g1")
        .map(|c| {
            (
                c["metadata"]["name"].as_str().unwrap_or("").to_string(),
                c["data"]["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

fn ready(fake: &FakeCluster, replicas: u64) -> bool {
    fake.get(&Greeting::resource(), Some(NS), "g1")
        .is_some_and(|g| {
            let s = &g["status"];
            s["phase"] == "Ready"
                && s["observedGeneration"] == g["metadata"]["generation"]
                && s["configMaps"] == replicas
                && g["metadata"]["finalizers"] == json!(["example.com/cleanup"])
        })
}

async fn until(seed: u64, what: &str, fake: &FakeCluster, check: impl Fn() -> bool) {
    let start = tokio::time::Instant::now();
    while !check() {
        if start.elapsed() > STEP {
            let trace = fake.trace();
            let file = std::env::temp_dir().join(format!("greeter-seed-{seed}.trace"));
            let all: Vec<String> = trace
                .iter()
                .map(|t| format!("{} {} {}", t.code, t.request, t.note))
                .collect();
            let _ = std::fs::write(&file, all.join("\n"));
            let tail: Vec<String> = trace
                .iter()
                .rev()
                .filter(|t| !t.request.contains("/leases/"))
                .take(30)
                .map(|t| format!("{} {} {}", t.code, t.request, t.note))
                .collect();
            panic!(
                "seed {seed}: not converged after {STEP:?} (virtual): {what}\n\
                 replay: GREETER_SEED={seed} cargo test -p informer-testkit --test greeter\n\
                 the whole trace: {}\nchildren {:?}\nlast requests but Lease renewals (newest first):\n{}",
                file.display(),
                children(fake),
                tail.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if std::env::var_os("GREETER_VERBOSE").is_some() {
        eprintln!("seed {seed}: {what} after {:?} (virtual)", start.elapsed());
    }
}

fn dynamic(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("an object")
}

/// What one seed went through: requests served, faults injected, virtual time taken.
struct Summary {
    requests: usize,
    faults: usize,
    virtual_time: Duration,
}

async fn one_seed(seed: u64) -> Summary {
    let fake = FakeCluster::builder().seed(seed).faults(faults()).build();
    // The test's own writes and reads are not faulted; the operator's are.
    let setup: Client = fake.unfaulted().client().unwrap();
    let crds = setup.api::<DynamicObject>(Resource::CUSTOMRESOURCEDEFINITIONS, None);
    crds.create(
        &dynamic(
            informer_http::crd::Crd::of::<greeter::Greeting>()
                .to_json()
                .unwrap(),
        ),
        &PostParams::default(),
    )
    .await
    .unwrap();
    setup
        .api::<DynamicObject>(Resource::NAMESPACES, None)
        .create(
            &dynamic(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})),
            &PostParams::default(),
        )
        .await
        .unwrap();
    let client: Client = fake.client().unwrap();
    let (stop_tx, stop_rx) = futures_channel::oneshot::channel::<()>();
    let operator = tokio::spawn(async move {
        greeter::run(client, NS, "greeter-a", None, None, async move {
            let _ = stop_rx.await;
        })
        .await
        .map_err(|e| e.to_string())
    });

    let greetings = setup.api::<DynamicObject>(Greeting::resource(), Some(NS));
    greetings
        .create(
            &dynamic(json!({"apiVersion": "example.com/v1", "kind": "Greeting",
                "metadata": {"name": "g1"}, "spec": {"message": "hello", "replicas": 2}})),
            &PostParams::default(),
        )
        .await
        .unwrap();
    let all = |m: &str, n: u32| -> Vec<(String, String)> {
        (0..n).map(|i| (format!("g1-{i}"), m.to_string())).collect()
    };
    until(seed, "two ConfigMaps and Ready", &fake, || {
        children(&fake) == all("hello", 2) && ready(&fake, 2)
    })
    .await;
    let spec = |s: Value| Patch::Merge(json!({"spec": s}));
    greetings
        .patch("g1", &spec(json!({"replicas": 4})), &PatchParams::default())
        .await
        .unwrap();
    until(seed, "four", &fake, || {
        children(&fake) == all("hello", 4) && ready(&fake, 4)
    })
    .await;
    greetings
        .patch(
            "g1",
            &spec(json!({"replicas": 1, "message": "bye"})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    until(seed, "one, changed", &fake, || {
        children(&fake) == all("bye", 1) && ready(&fake, 1)
    })
    .await;
    greetings
        .delete("g1", &DeleteParams::default())
        .await
        .unwrap();
    until(seed, "gone with its ConfigMaps", &fake, || {
        fake.get(&Greeting::resource(), Some(NS), "g1").is_none() && children(&fake).is_empty()
    })
    .await;
    let _ = stop_tx.send(());
    let stopping = tokio::time::Instant::now();
    let before = fake.trace().len();
    let outcome = operator.await.expect("the operator task");
    if std::env::var_os("GREETER_VERBOSE").is_some() {
        eprintln!(
            "seed {seed}: stopped after {:?} (virtual)",
            stopping.elapsed()
        );
        if stopping.elapsed() > Duration::from_secs(60) {
            for t in &fake.trace()[before..] {
                eprintln!("   after stop: {} {} {}", t.code, t.request, t.note);
            }
            eprintln!("   open watches {}", fake.open_watches());
        }
    }
    assert_eq!(outcome, Ok(()), "seed {seed}: the operator stops cleanly");
    // Only the operator's own Lease holder ever wrote: the Lease names it.
    let lease = fake.get(&Resource::LEASES, Some(NS), "greeter");
    assert!(
        lease.is_some_and(|l| l["spec"]["holderIdentity"] == "greeter-a"
            || l["spec"]["holderIdentity"].is_null()
            || l["spec"]["holderIdentity"] == ""),
        "seed {seed}: the Lease"
    );
    let trace = fake.trace();
    Summary {
        requests: trace.len(),
        faults: trace.iter().filter(|t| !t.note.is_empty()).count(),
        virtual_time: fake.elapsed(),
    }
}

fn run_seed(seed: u64) -> Summary {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime")
        .block_on(one_seed(seed))
}

/// 200 seeds (or the one in `GREETER_SEED`).
#[test]
fn greeter_converges_under_seeded_faults() {
    if let Some(seed) = std::env::var("GREETER_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        let s = run_seed(seed);
        eprintln!(
            "seed {seed}: {} requests, {} faulted, {:?} virtual",
            s.requests, s.faults, s.virtual_time
        );
        return;
    }
    let seeds: u64 = std::env::var("GREETER_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let (mut requests, mut faulted, mut virtual_time) = (0, 0, Duration::ZERO);
    let started = std::time::Instant::now();
    for seed in 0..seeds {
        let s = run_seed(seed);
        requests += s.requests;
        faulted += s.faults;
        virtual_time += s.virtual_time;
    }
    eprintln!(
        "{seeds} seeds: {requests} requests, {faulted} faulted, {virtual_time:?} virtual in {:?}",
        started.elapsed()
    );
}
