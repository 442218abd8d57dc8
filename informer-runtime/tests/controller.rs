//! End-to-end, against a real kube-apiserver (testcluster), on tokio and on smol: the writes
//! (every verb, every typed error) and the sample controller
//! (`examples/configmap_copier.rs`, through `informer-{tokio,smol}/examples/configmap_copier.rs`
//! compiled in here as they are):
//! convergence after creates, updates and deletes of sources and targets, after an apiserver
//! restart with a compaction (a 410 relist), and leader election between two replicas.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use informer_http::{
    Backend, Client, DeleteParams, Patch, PatchParams, PostParams, Preconditions,
    PropagationPolicy, WriteError,
};
use informer_runtime::{DynamicObject, Object, Resource};
use serde::{Deserialize, Serialize};
use serde_json::json;
use testcluster::TestCluster;

// The two examples include the same shared source: once for each runtime, on purpose.
#[allow(dead_code, unused_imports, clippy::duplicate_mod)]
#[path = "../../informer-tokio/examples/configmap_copier.rs"]
mod copier_tokio;

#[allow(dead_code, unused_imports, clippy::duplicate_mod)]
#[path = "../../informer-smol/examples/configmap_copier.rs"]
mod copier_smol;

// The Greeting operator (a CRD from Rust types on the `Controller`), likewise.
#[allow(dead_code, unused_imports, clippy::duplicate_mod)]
#[path = "../../informer-tokio/examples/greeter.rs"]
mod greeter_tokio;

#[allow(dead_code, unused_imports, clippy::duplicate_mod)]
#[path = "../../informer-smol/examples/greeter.rs"]
mod greeter_smol;

const DEADLINE: Duration = Duration::from_secs(60);

struct Shared {
    cluster: Mutex<TestCluster>,
    config: informer_http::Config,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let cluster = TestCluster::start().expect("start test cluster");
        let config = informer_http::Config::from_kubeconfig_file(&cluster.kubeconfig, None)
            .expect("testcluster kubeconfig");
        Shared {
            cluster: Mutex::new(cluster),
            config,
        }
    })
}

fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A typed ConfigMap: any serde type with metadata works.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Cm {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    metadata: Meta,
    #[serde(default)]
    data: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Meta {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
    #[serde(rename = "resourceVersion", skip_serializing_if = "Option::is_none")]
    resource_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    uid: Option<String>,
}

impl Object for Cm {
    fn name(&self) -> &str {
        &self.metadata.name
    }
    fn namespace(&self) -> Option<&str> {
        self.metadata.namespace.as_deref()
    }
    fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }
    fn uid(&self) -> Option<&str> {
        self.metadata.uid.as_deref()
    }
}

fn cm(ns: &str, name: &str, data: &[(&str, &str)]) -> Cm {
    Cm {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        metadata: Meta {
            name: name.into(),
            namespace: Some(ns.into()),
            ..Meta::default()
        },
        data: data
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn dynamic(v: serde_json::Value) -> DynamicObject {
    serde_json::from_value(v).unwrap()
}

/// Creates namespace `name` with `labels` (or sets them if it exists).
async fn namespace<B: Backend>(c: &Client<B>, name: &str, labels: &[(&str, &str)]) {
    let labels: BTreeMap<_, _> = labels.iter().copied().collect();
    let api = c.api::<DynamicObject>(Resource::NAMESPACES, None);
    let obj = dynamic(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}),
    );
    match api.create(&obj, &PostParams::default()).await {
        Ok(_) => {}
        Err(WriteError::Conflict { .. }) => {
            api.patch(
                name,
                &Patch::Merge(json!({"metadata": {"labels": labels}})),
                &PatchParams::default(),
            )
            .await
            .unwrap();
        }
        Err(e) => panic!("namespace {name}: {e}"),
    }
}

async fn data_of<B: Backend>(
    c: &Client<B>,
    ns: &str,
    name: &str,
) -> Option<BTreeMap<String, String>> {
    c.api::<Cm>(Resource::CONFIGMAPS, Some(ns))
        .get_opt(name)
        .await
        .unwrap()
        .map(|c| c.data)
}

/// Each verb and each typed error, typed and dynamic.
async fn writes<B: Backend>(c: Client<B>, rt: &str) {
    let ns = format!("writes-{rt}");
    namespace(&c, &ns, &[]).await;
    let api = c.api::<Cm>(Resource::CONFIGMAPS, Some(&ns));
    let dynapi = c.api::<DynamicObject>(Resource::CONFIGMAPS, Some(&ns));
    let _ = api.delete("w", &DeleteParams::default()).await;

    // get / create / AlreadyExists.
    assert!(matches!(api.get("w").await, Err(WriteError::NotFound(s)) if s.code == 404));
    let created = api
        .create(&cm(&ns, "w", &[("a", "1")]), &PostParams::default())
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    assert!(matches!(
        api.create(&cm(&ns, "w", &[]), &PostParams::default()).await,
        Err(WriteError::Conflict { reason, .. }) if reason == "AlreadyExists"
    ));
    // A dry run changes nothing.
    let mut dry = created.clone();
    dry.data.insert("dry".into(), "run".into());
    api.replace(
        &dry,
        &PostParams {
            dry_run: true,
            ..PostParams::default()
        },
    )
    .await
    .unwrap();
    assert!(!data_of(&c, &ns, "w").await.unwrap().contains_key("dry"));

    // replace, and a replace at a stale resourceVersion.
    let mut next = created.clone();
    next.data.insert("b".into(), "2".into());
    let replaced = api.replace(&next, &PostParams::default()).await.unwrap();
    assert_eq!(replaced.data.get("b").map(String::as_str), Some("2"));
    assert!(matches!(
        api.replace(&created, &PostParams::default()).await,
        Err(WriteError::Conflict { reason, status }) if reason == "Conflict" && status.code == 409
    ));

    // 422 with its causes.
    let Err(WriteError::Invalid { causes, status }) = api
        .create(&cm(&ns, "Not_A_Name", &[]), &PostParams::default())
        .await
    else {
        panic!("expected Invalid")
    };
    assert_eq!(status.code, 422);
    assert!(
        causes
            .iter()
            .any(|c| c.field.as_deref() == Some("metadata.name")),
        "{causes:?}"
    );

    // Merge patch (was a 415 when sent as application/json), JSON patch.
    let p = api
        .patch(
            "w",
            &Patch::Merge(json!({"data": {"c": "3"}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    assert_eq!(p.data.get("c").map(String::as_str), Some("3"));
    let p = api
        .patch(
            "w",
            &Patch::Json(json!([{"op": "add", "path": "/data/d", "value": "4"}, {"op": "remove", "path": "/data/a"}])),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    assert_eq!(p.data.get("d").map(String::as_str), Some("4"));
    assert!(!p.data.contains_key("a"));
    // A JSON patch whose test fails changes nothing.
    assert!(
        api.patch(
            "w",
            &Patch::Json(json!([{"op": "test", "path": "/data/d", "value": "nope"}])),
            &PatchParams::default(),
        )
        .await
        .is_err()
    );

    // Server-side apply: field managers, conflicts, force.
    let mine = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w", "namespace": ns}, "data": {"e": "5"}});
    dynapi
        .patch("w", &Patch::Apply(&mine), &PatchParams::apply("manager-a"))
        .await
        .unwrap();
    let theirs = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w", "namespace": ns}, "data": {"e": "6"}});
    assert!(matches!(
        dynapi.patch("w", &Patch::Apply(&theirs), &PatchParams::apply("manager-b")).await,
        Err(WriteError::Conflict { reason, .. }) if reason == "Conflict"
    ));
    let forced = dynapi
        .patch(
            "w",
            &Patch::Apply(&theirs),
            &PatchParams::apply("manager-b").force(),
        )
        .await
        .unwrap();
    assert_eq!(
        forced
            .field::<BTreeMap<String, String>>("data")
            .unwrap()
            .unwrap()["e"],
        "6"
    );
    assert!(forced.metadata.other().as_json().contains("manager-b"));

    // Delete: a failed precondition, then with a propagation policy, then of nothing.
    let current = api.get("w").await.unwrap();
    let wrong = DeleteParams {
        preconditions: Preconditions {
            uid: Some("00000000-0000-0000-0000-000000000000".into()),
            resource_version: None,
        },
        ..DeleteParams::default()
    };
    assert!(matches!(
        api.delete("w", &wrong).await,
        Err(WriteError::Conflict { .. })
    ));
    let right = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: Preconditions {
            uid: current.metadata.uid.clone(),
            resource_version: current.metadata.resource_version.clone(),
        },
        ..DeleteParams::default()
    };
    assert!(api.delete("w", &right).await.unwrap().is_none());
    assert!(api.get_opt("w").await.unwrap().is_none());
    assert!(matches!(
        api.delete("w", &DeleteParams::default()).await,
        Err(WriteError::NotFound(_))
    ));

    // The status subresource (a Service: ConfigMaps have none).
    let svcs = c.api::<DynamicObject>(Resource::SERVICES, Some(&ns));
    let _ = svcs.delete("s", &DeleteParams::default()).await;
    let svc = dynamic(
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": ns}, "spec": {"ports": [{"port": 80}]}}),
    );
    svcs.create(&svc, &PostParams::default()).await.unwrap();
    let lb = json!({"status": {"loadBalancer": {"ingress": [{"ip": "10.9.8.7"}]}}});
    // Through the main resource the status is not written...
    let main = svcs
        .patch("s", &Patch::Merge(&lb), &PatchParams::default())
        .await
        .unwrap();
    assert!(!main.fields.as_json().contains("10.9.8.7"));
    // ...through /status it is.
    let st = svcs
        .patch_status("s", &Patch::Merge(&lb), &PatchParams::default())
        .await
        .unwrap();
    assert!(st.fields.as_json().contains("10.9.8.7"));
    let mut obj = svcs.get("s").await.unwrap();
    let mut fields = obj.fields.to_map();
    fields["status"] = json!({"loadBalancer": {"ingress": [{"ip": "10.6.5.4"}]}});
    obj.fields = informer_core::object::RawFields::from_map(&fields);
    let st = svcs
        .replace_status(&obj, &PostParams::default())
        .await
        .unwrap();
    assert!(st.fields.as_json().contains("10.6.5.4"));
    assert!(matches!(
        svcs.patch_status("missing", &Patch::Merge(&lb), &PatchParams::default())
            .await,
        Err(WriteError::NotFound(_))
    ));
    svcs.delete("s", &DeleteParams::default()).await.unwrap();
}

async fn poll<F: Future<Output = bool>>(
    what: &str,
    limit: Duration,
    sleep: impl Fn(Duration) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>>,
    mut cond: impl FnMut() -> F,
) {
    let t0 = Instant::now();
    while !cond().await {
        assert!(t0.elapsed() < limit, "timed out: {what}");
        sleep(Duration::from_millis(100)).await;
    }
}

macro_rules! scenarios {
    ($name:ident, $rt:ident, $copier:ident, $greeter:ident, $block_on:expr) => {
        mod $name {
            use super::*;
            use $copier::copier::{COPIED_TO, Copier, Options, TARGET_LABEL, SOURCE_LABEL};
            use $rt as rt;

            fn sleeper(d: Duration) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
                Box::pin(rt::sleep(d))
            }

            fn run<F: Future<Output = ()>>(f: impl FnOnce(rt::Client) -> F) {
                let _serial = serial();
                let sh = shared();
                let t0 = Instant::now();
                $block_on(async { f(rt::client(sh.config.clone()).unwrap()).await });
                eprintln!("[{}] took {:?}", stringify!($name), t0.elapsed());
            }

            #[test]
            fn writes_every_verb_and_typed_error() {
                run(|c| writes(c, stringify!($name)));
            }

            /// Each write: who wrote, and whether another replica believed it led then.
            type Log = Arc<Mutex<Vec<(String, bool)>>>;
            type Replicas = Arc<Mutex<Vec<rt::Leadership>>>;

            fn options(src: &str, id: &str, log: &Log, replicas: &Replicas) -> Options {
                let mut o = Options::new(src, id);
                o.election.lease_duration = Duration::from_secs(3);
                o.election.renew_deadline = Duration::from_secs(2);
                o.election.retry_period = Duration::from_millis(500);
                o.election.seed = id.len() as u64;
                let (log, replicas) = (log.clone(), replicas.clone());
                o.on_act = Arc::new(move |who: &str| {
                    let others = replicas
                        .lock()
                        .unwrap()
                        .iter()
                        .any(|l| l.identity() != who && l.is_leader());
                    log.lock().unwrap().push((who.to_string(), others));
                });
                o
            }

            async fn copies(c: &rt::Client, name: &str, nss: &[&str]) -> Vec<Option<BTreeMap<String, String>>> {
                let mut out = Vec::new();
                for ns in nss {
                    out.push(data_of(c, ns, name).await);
                }
                out
            }

            async fn annotation(c: &rt::Client, ns: &str, name: &str) -> Option<String> {
                let o = c
                    .api::<DynamicObject>(Resource::CONFIGMAPS, Some(ns))
                    .get_opt(name)
                    .await
                    .unwrap()?;
                o.metadata.annotations().get(COPIED_TO).map(str::to_string)
            }

            #[test]
            fn sample_controller_converges_and_two_replicas_never_both_act() {
                run(|c| async move {
                    let rt_name = stringify!($name);
                    let src = format!("cp-{rt_name}-src");
                    let t1 = format!("cp-{rt_name}-t1");
                    let t2 = format!("cp-{rt_name}-t2");
                    let n3 = format!("cp-{rt_name}-n3");
                    // Targets left over by another run are no longer targets.
                    let nss = c.api::<DynamicObject>(Resource::NAMESPACES, None);
                    for o in c
                        .api::<DynamicObject>(Resource::NAMESPACES, None)
                        .list_page(&informer_core::protocol::ListRequest {
                            selectors: informer_core::protocol::Selectors {
                                label: Some(format!("{TARGET_LABEL}=true")),
                                field: None,
                                shard: None,
                            },
                            ..Default::default()
                        })
                        .await
                        .unwrap()
                        .items
                    {
                        namespace(&c, o.name(), &[(TARGET_LABEL, "false")]).await;
                    }
                    drop(nss);
                    namespace(&c, &src, &[]).await;
                    namespace(&c, &t1, &[(TARGET_LABEL, "true")]).await;
                    namespace(&c, &t2, &[(TARGET_LABEL, "true")]).await;
                    namespace(&c, &n3, &[]).await;
                    let srcapi = c.api::<DynamicObject>(Resource::CONFIGMAPS, Some(&src));
                    for n in ["s1", "s2", "s3", "s4"] {
                        let _ = srcapi.delete(n, &DeleteParams::default()).await;
                    }
                    let source = |name: &str, label: bool, v: &str| {
                        let labels = if label { json!({SOURCE_LABEL: "true"}) } else { json!({}) };
                        dynamic(json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": name, "namespace": src, "labels": labels}, "data": {"k": v}}))
                    };
                    let log: Log = Arc::default();
                    let replicas: Replicas = Arc::default();
                    let a = Copier::start(&c, options(&src, "replica-a", &log, &replicas)).await.unwrap();
                    replicas.lock().unwrap().push(a.leadership().clone());
                    poll("a leads", DEADLINE, sleeper, || async { a.leadership().is_leader() }).await;
                    let b = Copier::start(&c, options(&src, "replica-b", &log, &replicas)).await.unwrap();
                    replicas.lock().unwrap().push(b.leadership().clone());

                    let v = |s: &str| Some(BTreeMap::from([("k".to_string(), s.to_string())]));
                    // Create.
                    srcapi.create(&source("s1", true, "v1"), &PostParams::default()).await.unwrap();
                    srcapi.create(&source("s2", false, "x"), &PostParams::default()).await.unwrap();
                    let both = [t1.as_str(), t2.as_str()];
                    poll("copies of s1", DEADLINE, sleeper, || async {
                        copies(&c, "s1", &both).await == [v("v1"), v("v1")]
                    }).await;
                    let want = format!("{t1},{t2}");
                    poll("status of s1", DEADLINE, sleeper, || async {
                        annotation(&c, &src, "s1").await.as_deref() == Some(want.as_str())
                    }).await;
                    assert_eq!(copies(&c, "s2", &both).await, [None, None]);
                    assert_eq!(copies(&c, "s1", &[&n3]).await, [None]);

                    // Update of the source.
                    srcapi.patch("s1", &Patch::Merge(json!({"data": {"k": "v2"}})), &PatchParams::default()).await.unwrap();
                    poll("copies updated", DEADLINE, sleeper, || async {
                        copies(&c, "s1", &both).await == [v("v2"), v("v2")]
                    }).await;
                    // A new target namespace.
                    namespace(&c, &n3, &[(TARGET_LABEL, "true")]).await;
                    poll("copy in the new target", DEADLINE, sleeper, || async {
                        copies(&c, "s1", &[&n3]).await == [v("v2")]
                    }).await;
                    // A copy deleted, another edited by hand: both put back.
                    c.api::<DynamicObject>(Resource::CONFIGMAPS, Some(&t1)).delete("s1", &DeleteParams::default()).await.unwrap();
                    c.api::<DynamicObject>(Resource::CONFIGMAPS, Some(&t2))
                        .patch("s1", &Patch::Merge(json!({"data": {"k": "hacked"}})), &PatchParams::default()).await.unwrap();
                    poll("copies repaired", DEADLINE, sleeper, || async {
                        copies(&c, "s1", &both).await == [v("v2"), v("v2")]
                    }).await;
                    // A target no longer a target.
                    namespace(&c, &t2, &[(TARGET_LABEL, "false")]).await;
                    poll("copy removed from the former target", DEADLINE, sleeper, || async {
                        copies(&c, "s1", &[&t2]).await == [None]
                    }).await;
                    let want = format!("{n3},{t1}"); // sorted
                    poll("status follows", DEADLINE, sleeper, || async {
                        annotation(&c, &src, "s1").await.as_deref() == Some(want.as_str())
                    }).await;
                    // The source deleted.
                    srcapi.delete("s1", &DeleteParams::default()).await.unwrap();
                    poll("copies deleted", DEADLINE, sleeper, || async {
                        copies(&c, "s1", &[&t1, &n3]).await == [None, None]
                    }).await;

                    // kube-apiserver restarted over a compaction: the informers' watches come back
                    // to a 410 and relist.
                    let relists = a.relists();
                    {
                        let mut tc = shared().cluster.lock().unwrap();
                        tc.stop_apiserver().expect("stop apiserver");
                        tc.compact().expect("compact");
                        tc.start_apiserver().expect("start apiserver");
                    }
                    srcapi.create(&source("s3", true, "v3"), &PostParams::default()).await.unwrap();
                    poll("copies after restart", DEADLINE, sleeper, || async {
                        copies(&c, "s3", &[&t1, &n3]).await == [v("v3"), v("v3")]
                    }).await;
                    poll("relisted", DEADLINE, sleeper, || async { a.relists() > relists }).await;

                    // Two replicas: while a leads, b never acts.
                    {
                        let log = log.lock().unwrap();
                        let first_b = log.iter().position(|(w, _)| w == "replica-b").unwrap_or(log.len());
                        assert!(first_b > 0, "{log:?}");
                        assert!(log[..first_b].iter().all(|(w, _)| w == "replica-a"), "{log:?}");
                    }

                    // The leader dies without releasing (after the restart above either may
                    // lead: a lease not renewed for renew_deadline moves on): the standby takes
                    // over once the lease expires, and from then on only it acts.
                    poll("someone leads", DEADLINE, sleeper, || async {
                        a.leadership().is_leader() || b.leadership().is_leader()
                    }).await;
                    let (leader, standby) = if a.leadership().is_leader() { (a, b) } else { (b, a) };
                    let standby_id = standby.leadership().identity().to_string();
                    let killed = Instant::now();
                    leader.kill().await;
                    // Counted once the kill has returned: the dying leader may still finish a
                    // write it had in flight (it still held the lease, so that is no overlap);
                    // from here on only the standby may act.
                    let acted_before_kill = log.lock().unwrap().len();
                    poll("the standby takes over", DEADLINE, sleeper, || async { standby.leadership().is_leader() }).await;
                    let took = killed.elapsed();
                    // Lease duration (3 s) plus a jittered retry (at most 1.1 s), with room for
                    // a loaded machine.
                    assert!(took < Duration::from_secs(3 + 2 + 5), "takeover took {took:?}");
                    srcapi.create(&source("s4", true, "v4"), &PostParams::default()).await.unwrap();
                    poll("the new leader copies", DEADLINE, sleeper, || async {
                        copies(&c, "s4", &[&t1, &n3]).await == [v("v4"), v("v4")]
                    }).await;
                    {
                        let log = log.lock().unwrap();
                        assert!(log.len() > acted_before_kill);
                        assert!(log[acted_before_kill..].iter().all(|(w, _)| *w == standby_id), "{log:?}");
                        // No write was ever made while another replica believed it led.
                        assert!(log.iter().all(|(_, others)| !others), "{log:?}");
                    }
                    // Graceful shutdown releases the lease.
                    standby.shutdown().await;
                    let lease = c
                        .api::<DynamicObject>(Resource::LEASES, Some(&src))
                        .get("configmap-copier")
                        .await
                        .unwrap();
                    let holder = lease
                        .field::<serde_json::Value>("spec")
                        .unwrap()
                        .unwrap()
                        .get("holderIdentity")
                        .cloned();
                    assert!(holder.is_none() || holder == Some(json!("")), "{holder:?}");
                    for n in ["s2", "s3", "s4"] {
                        let _ = srcapi.delete(n, &DeleteParams::default()).await;
                    }
                    namespace(&c, &t1, &[(TARGET_LABEL, "false")]).await;
                    namespace(&c, &n3, &[(TARGET_LABEL, "false")]).await;
                });
            }

            /// The Greeting operator (`examples/greeter.rs`) end to end: its CRD from the Rust
            /// types; create, scale up and down, change, delete (the finalizer deletes the
            /// ConfigMaps); two replicas, of which only the leader writes (every event names
            /// it); the leader stopped mid-way and the standby carrying on; kube-apiserver
            /// restarted over a compaction.
            #[test]
            fn greeter_operator_converges_and_only_the_leader_writes() {
                use $greeter::greeter::{self as greeter, Greeting};
                use rt::HasResource;
                run(|c| async move {
                    let ns = format!("greet-{}", stringify!($name));
                    namespace(&c, &ns, &[]).await;
                    let crds = c.api::<DynamicObject>(
                        Resource::new("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", false),
                        None,
                    );
                    match crds.create(&dynamic(informer_http::crd::Crd::of::<greeter::Greeting>().to_json().unwrap()), &PostParams::default()).await {
                        Ok(_) => {}
                        Err(e) if e.is_conflict() => {}
                        Err(e) => panic!("CRD refused: {e}"),
                    }
                    let greetings = c.api::<DynamicObject>(Greeting::resource(), Some(&ns));
                    poll("the CRD is served", DEADLINE, sleeper, || async {
                        greetings.list_page(&Default::default()).await.is_ok()
                    }).await;
                    let cms = c.api::<DynamicObject>(Resource::CONFIGMAPS, Some(&ns));
                    let children = || async {
                        let page = cms
                            .list_page(&informer_core::protocol::ListRequest {
                                selectors: informer_core::protocol::Selectors {
                                    label: Some("greeting=g1".into()),
                                    field: None,
                                    shard: None,
                                },
                                ..Default::default()
                            })
                            .await
                            .unwrap();
                        let mut v: Vec<(String, String)> = page
                            .items
                            .iter()
                            .map(|o| {
                                let data = o.field::<serde_json::Value>("data").unwrap().unwrap();
                                (o.name().to_string(), data["message"].as_str().unwrap_or("").to_string())
                            })
                            .collect();
                        v.sort();
                        v
                    };
                    let status = || async {
                        greetings.get_opt("g1").await.unwrap().map(|g| {
                            let v = serde_json::to_value(&g).unwrap();
                            (v["metadata"]["generation"].as_i64().unwrap_or(0), v["status"].clone(), v["metadata"]["finalizers"].clone())
                        })
                    };
                    let start = |id: &'static str| {
                        let (tx, rx) = async_channel::bounded::<()>(1);
                        let c = c.clone();
                        let ns = ns.clone();
                        let (done_tx, done_rx) = async_channel::bounded::<String>(1);
                        rt::spawn(async move {
                            let r = greeter::run(c, &ns, id, None, None, async move { let _ = rx.recv().await; })
                                .await
                                .map_err(|e| e.to_string());
                            let _ = done_tx.send(format!("{r:?}")).await;
                        }).unwrap();
                        (tx, done_rx)
                    };
                    let holder = || async {
                        c.api::<DynamicObject>(Resource::LEASES, Some(&ns))
                            .get_opt("greeter")
                            .await
                            .unwrap()
                            .and_then(|l| serde_json::to_value(&l).unwrap()["spec"]["holderIdentity"].as_str().map(str::to_string))
                    };
                    let (stop_a, a_done) = start("greeter-a");
                    poll("a leads", DEADLINE, sleeper, || async { holder().await.as_deref() == Some("greeter-a") }).await;
                    let (stop_b, b_done) = start("greeter-b");

                    // Create.
                    let g1 = dynamic(json!({"apiVersion": "example.com/v1", "kind": "Greeting",
                        "metadata": {"name": "g1", "namespace": ns},
                        "spec": {"message": "hello", "replicas": 2}}));
                    greetings.create(&g1, &PostParams::default()).await.unwrap();
                    let two = |m: &str| vec![("g1-0".to_string(), m.to_string()), ("g1-1".to_string(), m.to_string())];
                    poll("two ConfigMaps", DEADLINE, sleeper, || async { children().await == two("hello") }).await;
                    poll("status and finalizer", DEADLINE, sleeper, || async {
                        status().await.is_some_and(|(generation, s, f)| {
                            s["phase"] == "Ready" && s["observedGeneration"] == generation && s["configMaps"] == 2
                                && f == json!(["example.com/cleanup"])
                        })
                    }).await;
                    // Scale up, then down, then change the message.
                    let spec = |s: serde_json::Value| Patch::Merge(json!({"spec": s}));
                    greetings.patch("g1", &spec(json!({"replicas": 4})), &PatchParams::default()).await.unwrap();
                    poll("four", DEADLINE, sleeper, || async { children().await.len() == 4 }).await;
                    greetings.patch("g1", &spec(json!({"replicas": 1})), &PatchParams::default()).await.unwrap();
                    poll("one", DEADLINE, sleeper, || async {
                        children().await == [("g1-0".to_string(), "hello".to_string())]
                    }).await;
                    greetings.patch("g1", &spec(json!({"message": "bye"}))
                        , &PatchParams::default()).await.unwrap();
                    poll("changed", DEADLINE, sleeper, || async {
                        children().await == [("g1-0".to_string(), "bye".to_string())]
                    }).await;
                    poll("status follows", DEADLINE, sleeper, || async {
                        status().await.is_some_and(|(generation, s, _)| s["observedGeneration"] == generation && s["configMaps"] == 1)
                    }).await;

                    // kube-apiserver restarted over a compaction: watches come back to a 410.
                    {
                        let mut tc = shared().cluster.lock().unwrap();
                        tc.stop_apiserver().expect("stop apiserver");
                        tc.compact().expect("compact");
                        tc.start_apiserver().expect("start apiserver");
                    }
                    greetings.patch("g1", &spec(json!({"replicas": 2})), &PatchParams::default()).await.unwrap();
                    poll("two after the restart", DEADLINE, sleeper, || async { children().await == two("bye") }).await;

                    // The leader stops; the standby (the lease released at once) carries on.
                    poll("someone leads", DEADLINE, sleeper, || async { holder().await.is_some_and(|h| !h.is_empty()) }).await;
                    let first = holder().await.unwrap();
                    let (stop_first, first_done, second) = if first == "greeter-a" {
                        (&stop_a, &a_done, "greeter-b")
                    } else {
                        (&stop_b, &b_done, "greeter-a")
                    };
                    stop_first.send(()).await.unwrap();
                    assert_eq!(first_done.recv().await.unwrap(), "Ok(())");
                    poll("the standby leads", DEADLINE, sleeper, || async { holder().await.as_deref() == Some(second) }).await;
                    greetings.patch("g1", &spec(json!({"replicas": 3})), &PatchParams::default()).await.unwrap();
                    poll("three", DEADLINE, sleeper, || async { children().await.len() == 3 }).await;

                    // Delete: the finalizer takes the ConfigMaps first.
                    greetings.delete("g1", &DeleteParams::default()).await.unwrap();
                    poll("gone with its ConfigMaps", DEADLINE, sleeper, || async {
                        status().await.is_none() && children().await.is_empty()
                    }).await;

                    // Only the leader wrote: every event names the replica leading then.
                    let events = c.api::<DynamicObject>(Resource::EVENTS, Some(&ns)).list_page(&Default::default()).await.unwrap();
                    let mut by: Vec<String> = events
                        .items
                        .iter()
                        .map(|e| serde_json::to_value(&**e).unwrap())
                        .filter(|v| v["reason"] == "Reconciled")
                        .map(|v| v["reportingInstance"].as_str().unwrap_or("").to_string())
                        .collect();
                    by.dedup();
                    assert!(!by.is_empty());
                    assert_eq!(by.last().map(String::as_str), Some(second), "{by:?}");
                    let (stop_second, second_done) = if second == "greeter-b" { (&stop_b, &b_done) } else { (&stop_a, &a_done) };
                    stop_second.send(()).await.unwrap();
                    assert_eq!(second_done.recv().await.unwrap(), "Ok(())");
                });
            }
        }
    };
}

fn tokio_block_on<F: Future>(f: F) -> F::Output {
    ::tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

scenarios!(
    tokio,
    informer_tokio,
    copier_tokio,
    greeter_tokio,
    tokio_block_on
);
scenarios!(
    smol,
    informer_smol,
    copier_smol,
    greeter_smol,
    ::smol::block_on
);

/// The Greeting CRD the sample generates from its Rust types is the one the operator bench
/// applies (`bench/operator/greetings.crd.yaml`, which the kube-rs peer also serves): the same
/// names, scope, version, status subresource and schema, descriptions aside.
#[test]
fn the_greeter_crd_from_rust_types_is_the_benchs() {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                m.remove("description");
                m.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut ours = informer_http::crd::Crd::of::<greeter_tokio::greeter::Greeting>()
        .to_json()
        .unwrap();
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../bench/operator/greetings.crd.yaml"
    ))
    .unwrap();
    let mut bench: serde_json::Value = serde_norway::from_str(&text).unwrap();
    strip(&mut ours);
    strip(&mut bench);
    assert_eq!(ours, bench);
}
