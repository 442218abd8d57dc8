//! The greeter sample's RBAC (`deploy/greeter/serviceaccount.yaml` and `rbac.yaml`, the files
//! as shipped) against a real kube-apiserver that writes an audit log: the operator runs as its
//! ServiceAccount (a TokenRequest token, as a pod's projected token) through a Greeting's
//! create, change, scale-down and delete. The audit log lists every request it made: none was
//! refused (no 403), and every verb the Role grants was used (least privilege: the Role is
//! exactly what the code needs, not more).
//!
//! On tokio only: the requests are the shared example's, whatever the runtime.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use informer_http::{Patch, PatchParams, PostParams, Resource};
use informer_runtime::{DynamicObject, Object};
use serde::Deserialize;
use serde_json::{Value, json};
use testcluster::{StartOptions, TestCluster};

#[allow(dead_code, unused_imports, clippy::duplicate_mod)]
#[path = "../../informer-tokio/examples/greeter.rs"]
mod greeter_tokio;

use greeter_tokio::greeter::{self, Greeting};
use informer_tokio::HasResource;

const NS: &str = "greeter";
const SA_USER: &str = "system:serviceaccount:greeter:greeter";
/// The audit log, for a timeout's message.
static AUDIT_LOG: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
const DEADLINE: Duration = Duration::from_secs(60);

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The YAML documents of a manifest file, as JSON.
fn manifests(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(root().join("deploy/greeter").join(file)).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// `(apiGroup, resource[/subresource], verb)` of each permission a Role grants.
fn granted(role: &Value) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        let strings = |k: &str| -> Vec<String> {
            rule[k]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        };
        for group in strings("apiGroups") {
            for resource in strings("resources") {
                for verb in strings("verbs") {
                    out.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    out
}

/// One request of the ServiceAccount, from the audit log.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Request {
    group: String,
    resource: String,
    verb: String,
    code: u16,
    uri: String,
}

fn audited(log: &Path) -> Vec<Request> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["user"]["username"] == SA_USER && e["stage"] != "RequestReceived")
        .map(|e| {
            let r = &e["objectRef"];
            let mut resource = r["resource"].as_str().unwrap_or("").to_string();
            if let Some(sub) = r["subresource"].as_str() {
                resource = format!("{resource}/{sub}");
            }
            Request {
                group: r["apiGroup"].as_str().unwrap_or("").to_string(),
                resource,
                verb: e["verb"].as_str().unwrap_or("").to_string(),
                code: e["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
                uri: e["requestURI"].as_str().unwrap_or("").to_string(),
            }
        })
        .collect()
}

/// `(apiGroup, resource[/subresource], verb)` of each request; an apply that creates its object
/// (201) is authorized as a patch and as a create.
fn used_of(requests: &[Request]) -> BTreeSet<(String, String, String)> {
    requests
        .iter()
        .flat_map(|r| {
            let creates = r.verb == "patch" && r.code == 201;
            [Some(r.verb.clone()), creates.then(|| "create".to_string())]
                .into_iter()
                .flatten()
                .map(|verb| (r.group.clone(), r.resource.clone(), verb))
        })
        .collect()
}

async fn poll<F: std::future::Future<Output = bool>>(what: &str, mut cond: impl FnMut() -> F) {
    let t0 = Instant::now();
    while !cond().await {
        if t0.elapsed() > DEADLINE {
            let failed: Vec<_> = AUDIT_LOG
                .get()
                .map(|l| audited(l).into_iter().filter(|r| r.code >= 300).collect())
                .unwrap_or_default();
            panic!("timed out: {what}; the ServiceAccount's failed requests: {failed:#?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn dynamic(v: Value) -> DynamicObject {
    serde_json::from_value(v).unwrap()
}

#[test]
fn the_greeter_runs_as_its_service_account_with_exactly_the_verbs_its_role_grants() {
    let dir = std::env::temp_dir().join(format!("informer-rbac-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (policy, log) = (dir.join("audit-policy.yaml"), dir.join("audit.log"));
    AUDIT_LOG.set(log.clone()).unwrap();
    // Metadata of the ServiceAccount's requests only.
    std::fs::write(
        &policy,
        format!(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n\
             - level: Metadata\n  users: [\"{SA_USER}\"]\n- level: None\n"
        ),
    )
    .unwrap();
    let cluster = TestCluster::start_with(
        StartOptions::new()
            .apiserver_arg(format!("--audit-policy-file={}", policy.display()))
            .apiserver_arg(format!("--audit-log-path={}", log.display())),
    )
    .expect("start test cluster");
    let admin_config = informer_http::Config::from_kubeconfig_file(&cluster.kubeconfig, None)
        .expect("testcluster kubeconfig");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = informer_tokio::client(admin_config).unwrap();
        // What an administrator applies: the namespace, the CRD, then the shipped manifests.
        c.api::<DynamicObject>(Resource::NAMESPACES, None)
            .create(&dynamic(json!({"metadata": {"name": NS}})), &PostParams::default())
            .await
            .unwrap();
        let crds = c.api::<DynamicObject>(
            Resource::new("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", false),
            None,
        );
        crds.create(&dynamic(informer_http::crd::Crd::of::<greeter::Greeting>().to_json().unwrap()), &PostParams::default()).await.unwrap();
        let greetings = c.api::<DynamicObject>(Greeting::resource(), Some(NS));
        poll("the CRD is served", || async { greetings.list_page(&Default::default()).await.is_ok() }).await;
        let mut role = None;
        for doc in manifests("serviceaccount.yaml").into_iter().chain(manifests("rbac.yaml")) {
            let resource = match doc["kind"].as_str().unwrap() {
                "ServiceAccount" => Resource::new("", "v1", "ServiceAccount", "serviceaccounts", true),
                "Role" => {
                    role = Some(doc.clone());
                    Resource::new("rbac.authorization.k8s.io", "v1", "Role", "roles", true)
                }
                "RoleBinding" => Resource::new("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", true),
                other => panic!("unexpected {other} in deploy/greeter"),
            };
            c.api::<DynamicObject>(resource, Some(NS))
                .create(&dynamic(doc), &PostParams::default())
                .await
                .unwrap();
        }
        let role = role.expect("a Role in rbac.yaml");

        // The ServiceAccount's token, as the kubelet would project it into the pod.
        let token = c
            .request(
                http::Method::POST,
                &format!("/api/v1/namespaces/{NS}/serviceaccounts/greeter/token"),
                Some(serde_json::to_vec(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})).unwrap()),
            )
            .await
            .expect("a TokenRequest");
        let token: Value = serde_json::from_slice(&token).unwrap();
        let token = token["status"]["token"].as_str().expect("a token").to_string();
        let kubeconfig = dir.join("greeter.kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    \
                 certificate-authority: {}\nusers:\n- name: greeter\n  user:\n    token: {token}\n\
                 contexts:\n- name: c\n  context:\n    cluster: c\n    user: greeter\ncurrent-context: c\n",
                cluster.server,
                cluster.ca_file().display()
            ),
        )
        .unwrap();
        let sa = informer_tokio::client(informer_http::Config::from_kubeconfig_file(&kubeconfig, None).unwrap()).unwrap();

        // The operator, as its ServiceAccount.
        let (stop_tx, stop_rx) = async_channel::bounded::<()>(1);
        let (done_tx, done_rx) = async_channel::bounded::<String>(1);
        informer_tokio::spawn(async move {
            let r = greeter::run(sa, NS, "greeter-rbac", None, None, async move {
                let _ = stop_rx.recv().await;
            })
            .await
            .map_err(|e| e.to_string());
            let _ = done_tx.send(format!("{r:?}")).await;
        })
        .unwrap();

        let cms = c.api::<DynamicObject>(Resource::CONFIGMAPS, Some(NS));
        let children = || async {
            let page = cms.list_page(&Default::default()).await.unwrap();
            let mut v: Vec<(String, String)> = page
                .items
                .iter()
                .filter(|o| o.name().starts_with("g1-"))
                .map(|o| {
                    let data = o.field::<Value>("data").unwrap().unwrap();
                    (o.name().to_string(), data["message"].as_str().unwrap_or("").to_string())
                })
                .collect();
            v.sort();
            v
        };
        let pair = |m: &str| vec![("g1-0".to_string(), m.to_string()), ("g1-1".to_string(), m.to_string())];
        greetings
            .create(
                &dynamic(json!({"apiVersion": "example.com/v1", "kind": "Greeting",
                    "metadata": {"name": "g1", "namespace": NS},
                    "spec": {"message": "hello", "replicas": 2}})),
                &PostParams::default(),
            )
            .await
            .unwrap();
        poll("two ConfigMaps", || async { children().await == pair("hello") }).await;
        let ready = |n: u64| {
            let greetings = greetings.clone();
            async move {
                greetings.get_opt("g1").await.unwrap().is_some_and(|g| {
                    let v = serde_json::to_value(&g).unwrap();
                    v["status"]["phase"] == "Ready"
                        && v["status"]["observedGeneration"] == v["metadata"]["generation"]
                        && v["status"]["configMaps"] == n
                })
            }
        };
        poll("status Ready", || ready(2)).await;
        // A new message, the same count: the same event again (its count is bumped: a patch).
        let spec = |s: Value| Patch::Merge(json!({"spec": s}));
        greetings.patch("g1", &spec(json!({"message": "bye"})), &PatchParams::default()).await.unwrap();
        poll("changed", || async { children().await == pair("bye") }).await;
        poll("status follows", || ready(2)).await;
        // Scale down: a surplus ConfigMap is deleted.
        greetings.patch("g1", &spec(json!({"replicas": 1})), &PatchParams::default()).await.unwrap();
        poll("one", || async { children().await == [("g1-0".to_string(), "bye".to_string())] }).await;
        // Deleted: the finalizer's cleanup deletes the rest, then lets the Greeting go.
        greetings.delete("g1", &Default::default()).await.unwrap();
        poll("cleaned up", || async {
            children().await.is_empty() && greetings.get_opt("g1").await.unwrap().is_none()
        })
        .await;
        // Every granted verb used: the lease's update is a renewal, so it is waited for; a
        // watch may be logged only once it ends, so watches are counted after the stop.
        let granted = granted(&role);
        let all_used = |but_watch: bool| {
            let used = used_of(&audited(&log));
            granted.iter().filter(|g| !but_watch || g.2 != "watch").all(|g| used.contains(g))
        };
        let t0 = Instant::now();
        while !all_used(true) && t0.elapsed() < DEADLINE {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        stop_tx.send(()).await.unwrap();
        assert_eq!(done_rx.recv().await.unwrap(), "Ok(())");
        let t0 = Instant::now();
        while !all_used(false) && t0.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        let requests = audited(&log);
        assert!(!requests.is_empty(), "no audited request of {SA_USER}");
        let refused: Vec<_> = requests.iter().filter(|r| r.code == 403).collect();
        assert!(refused.is_empty(), "requests the Role refused: {refused:#?}");
        let used = used_of(&requests);
        let unused: Vec<_> = granted.difference(&used).collect();
        assert!(unused.is_empty(), "granted but never used (not least privilege): {unused:?}\nused: {used:?}");
        let ungranted: Vec<_> = used.difference(&granted).collect();
        assert!(ungranted.is_empty(), "used but not granted: {ungranted:?}");
    });
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}
