//! Realistic Pods, as a Deployment's ReplicaSet creates them and the kubelet then updates them,
//! for benchmarks and scale tests.
//!
//! Every figure the project printed before this module was for 1 KB ConfigMaps; the informers
//! that cost users memory are Pod informers on big clusters, whose objects are 4–8 KB of JSON
//! with a lot repeated across Pods of one ReplicaSet (the spec, label keys and values, owner
//! references, the field sets of `managedFields`) and a little unique to each (name, uid, IPs,
//! timestamps, container ids). A [`Workload`] makes such Pods, seeded and deterministic: Pod
//! `i` of a workload is the same on every run and machine.
//!
//! Each Pod comes in three forms:
//! - [`Workload::create_body`]: what kube-controller-manager POSTs (metadata with
//!   `generateName`, the `app` and `pod-template-hash` labels, the controller owner reference;
//!   the spec with the defaults the apiserver fills in already written out, the
//!   service-account token volume, the default tolerations and the node name, since this
//!   cluster has neither a scheduler nor the admission plugins that add them);
//! - [`Workload::status_body`]: the status the kubelet writes through the `status`
//!   subresource (conditions, host and Pod IPs, start time, container statuses);
//! - [`Workload::stored_json`]: the whole object as the apiserver would answer it, with
//!   `uid`, `resourceVersion`, `creationTimestamp` and `managedFields` entries of
//!   kube-controller-manager and the kubelet, for benchmarks and tests that need no cluster.
//!
//! [`write_pods`] writes Pods to a [`TestCluster`] (create with field manager
//! `kube-controller-manager`, then the status with field manager `kubelet`, so the server's
//! own `managedFields` look like a real cluster's) through `curl` batches with bounded
//! parallelism; [`churn`] then updates statuses and deletes and recreates Pods at a set rate.

use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::{Error, TestCluster, io_err};

/// The alphabet of Kubernetes' generated name suffixes and template hashes
/// (`k8s.io/apimachinery/pkg/util/rand.SafeEncodeString`: no vowels, no look-alikes).
const SAFE: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Application names; a Deployment is `<name>-<n>`.
const APPS: &[&str] = &[
    "checkout",
    "payments",
    "catalog",
    "search",
    "frontend",
    "cart",
    "ledger",
    "gateway",
    "inventory",
    "shipping",
    "auth",
    "notifications",
    "recommender",
    "profile",
    "billing",
];

/// Images of a Deployment's main container.
const IMAGES: &[&str] = &[
    "registry.local/shop/app",
    "registry.local/shop/worker",
    "registry.local/shop/api-server",
];

/// Images of sidecars; the container is named after its image, so each is at most once in
/// a Pod.
const SIDECARS: &[&str] = &[
    "registry.local/platform/envoy-sidecar",
    "registry.local/observability/log-shipper",
    "registry.local/platform/oauth2-proxy",
];

/// A seeded generator (splitmix64): the same seed gives the same numbers everywhere.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64, stream: u64, index: u64) -> Self {
        // Each input mixed in turn: streams and indices start at unrelated points of the
        // sequence (a plain xor of them would let two streams run into each other).
        let mut r = Rng(seed);
        for x in [stream, index] {
            r.0 = r.next() ^ x;
        }
        r.0 = r.next();
        r
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn safe(&mut self, len: usize) -> String {
        (0..len)
            .map(|_| SAFE[self.below(SAFE.len() as u64) as usize] as char)
            .collect()
    }

    fn hex(&mut self, len: usize) -> String {
        let mut s = String::with_capacity(len);
        while s.len() < len {
            let _ = write!(s, "{:016x}", self.next());
        }
        s.truncate(len);
        s
    }

    fn uuid(&mut self) -> String {
        let h = self.hex(32);
        format!(
            "{}-{}-4{}-a{}-{}",
            &h[0..8],
            &h[8..12],
            &h[13..16],
            &h[17..20],
            &h[20..32]
        )
    }
}

/// RFC 3339 in UTC, seconds precision, as Kubernetes writes `metav1.Time`.
fn rfc3339(unix: i64) -> String {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// 2021-03-01T00:00:00Z: when the workload's Pods start being created.
const EPOCH: i64 = 1_614_556_800;

/// A set of realistic Pods: `pods` Pods of Deployments of `replicas` Pods each, spread over
/// `namespaces` namespaces and `nodes` nodes, all derived from `seed`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// What every number is derived from.
    pub seed: u64,
    /// How many Pods.
    pub pods: usize,
    /// Pods per Deployment (per ReplicaSet).
    pub replicas: usize,
    /// Namespaces the Deployments are spread over (`pods-0` … ).
    pub namespaces: usize,
    /// Nodes the Pods are spread over.
    pub nodes: usize,
}

/// One Deployment's ReplicaSet: what all of its Pods share.
struct ReplicaSet {
    namespace: String,
    app: String,
    hash: String,
    uid: String,
    containers: Vec<ContainerTemplate>,
    token_volume: String,
}

struct ContainerTemplate {
    name: String,
    image: String,
    image_id: String,
    port: u64,
    env: Vec<(String, String)>,
    cpu_request: String,
    memory_request: String,
    cpu_limit: String,
    memory_limit: String,
    probe_path: String,
    /// The main container (the first): sidecars have no port and no probe.
    main: bool,
    /// Whether it has a readiness probe: the main container has one unless the Pod has two
    /// sidecars (which keeps every Pod within 8 KB).
    readiness: bool,
}

impl Workload {
    /// `pods` Pods with the defaults: 20 replicas per Deployment, 20 namespaces, 500 nodes.
    pub fn new(seed: u64, pods: usize) -> Self {
        Workload {
            seed,
            pods,
            replicas: 20,
            namespaces: 20,
            nodes: 500,
        }
    }

    /// Namespaces the workload's Pods live in.
    pub fn namespace_names(&self) -> Vec<String> {
        let deployments = self.pods.div_ceil(self.replicas.max(1));
        (0..self.namespaces.min(deployments).max(1))
            .map(|n| format!("pods-{n}"))
            .collect()
    }

    fn replica_set(&self, deployment: usize) -> ReplicaSet {
        let mut r = Rng::new(self.seed, 1, deployment as u64);
        let app = format!("{}-{deployment}", APPS[deployment % APPS.len()]);
        // One container in half of the Deployments, two in a third, three in the rest.
        let containers = [1, 1, 1, 2, 2, 3][r.below(6) as usize];
        let main_image = IMAGES[r.below(IMAGES.len() as u64) as usize];
        let first_sidecar = r.below(SIDECARS.len() as u64) as usize;
        let containers = (0..containers)
            .map(|c| {
                let image = match c {
                    0 => main_image,
                    _ => SIDECARS[(first_sidecar + c) % SIDECARS.len()],
                };
                let short = image.rsplit('/').next().unwrap_or(image);
                let tag = format!("v1.{}.{}", r.below(30), r.below(10));
                // Fewer variables where there are sidecars: Pods stay within 4–8 KB.
                let env_vars = if c == 0 {
                    2 + r.below(5 - containers as u64)
                } else {
                    0
                };
                let env = (0..env_vars)
                    .map(|e| {
                        let name = [
                            "LOG_LEVEL",
                            "PORT",
                            "REGION",
                            "FEATURE_FLAGS",
                            "DB_HOST",
                            "CACHE_TTL",
                            "OTEL_EXPORTER_OTLP_ENDPOINT",
                            "JAVA_OPTS",
                            "GOMAXPROCS",
                        ][(e as usize + c) % 9];
                        let value = match name {
                            "LOG_LEVEL" => "info".to_string(),
                            "PORT" => format!("{}", 8080 + c),
                            "REGION" => "eu-west-1".to_string(),
                            "DB_HOST" => format!(
                                "{app}-db.{}.svc.cluster.local",
                                deployment % self.namespaces.max(1)
                            ),
                            "OTEL_EXPORTER_OTLP_ENDPOINT" => {
                                "http://otel-collector.observability:4317".to_string()
                            }
                            "JAVA_OPTS" => "-XX:MaxRAMPercentage=75 -XX:+UseG1GC".to_string(),
                            _ => format!("{}", r.below(1000)),
                        };
                        (name.to_string(), value)
                    })
                    .collect();
                ContainerTemplate {
                    name: if c == 0 {
                        "app".to_string()
                    } else {
                        short.to_string()
                    },
                    image: format!("{image}:{tag}"),
                    image_id: format!("{image}@sha256:{}", r.hex(64)),
                    port: 8080 + c as u64,
                    env,
                    cpu_request: format!("{}m", 50 * (1 + r.below(8))),
                    memory_request: format!("{}Mi", 64 * (1 + r.below(8))),
                    // As the server writes quantities back: whole cores and GiB without a
                    // suffix's smaller unit.
                    cpu_limit: ["500m", "1", "1500m", "2"][r.below(4) as usize].to_string(),
                    // At least the largest request (512Mi): the server refuses less.
                    memory_limit: ["512Mi", "768Mi", "1Gi", "1280Mi", "1536Mi", "2Gi"]
                        [r.below(6) as usize]
                        .to_string(),
                    probe_path: ["/healthz", "/ready", "/livez"][c % 3].to_string(),
                    main: c == 0,
                    readiness: c == 0 && containers < 3,
                }
            })
            .collect();
        ReplicaSet {
            namespace: format!("pods-{}", deployment % self.namespaces.max(1)),
            hash: r.safe(10),
            uid: r.uuid(),
            token_volume: format!("default-token-{}", r.safe(5)),
            app,
            containers,
        }
    }

    /// Pod `i`'s namespace and name.
    pub fn key(&self, i: usize) -> (String, String) {
        let rs = self.replica_set(i / self.replicas.max(1));
        let name = self.name(&rs, i);
        (rs.namespace, name)
    }

    fn name(&self, rs: &ReplicaSet, i: usize) -> String {
        let mut r = Rng::new(self.seed, 2, i as u64);
        format!("{}-{}-{}", rs.app, rs.hash, r.safe(5))
    }

    fn node(&self, i: usize) -> usize {
        Rng::new(self.seed, 3, i as u64).below(self.nodes.max(1) as u64) as usize
    }

    /// The Pod as kube-controller-manager creates it (POST to `/api/v1/namespaces/NS/pods`).
    pub fn create_body(&self, i: usize) -> String {
        self.create_value(i).to_string()
    }

    fn create_value(&self, i: usize) -> Value {
        let rs = self.replica_set(i / self.replicas.max(1));
        let name = self.name(&rs, i);
        let containers: Vec<Value> = rs
            .containers
            .iter()
            .map(|c| {
                let probe = |delay: u64| {
                    json!({"httpGet": {"path": c.probe_path, "port": c.port, "scheme": "HTTP"},
                        "initialDelaySeconds": delay, "timeoutSeconds": 1, "periodSeconds": 10,
                        "successThreshold": 1, "failureThreshold": 3})
                };
                let mut container = json!({
                    "name": c.name,
                    "image": c.image,
                    "resources": {
                        "limits": {"cpu": c.cpu_limit, "memory": c.memory_limit},
                        "requests": {"cpu": c.cpu_request, "memory": c.memory_request}
                    },
                    "volumeMounts": [{"name": rs.token_volume, "readOnly": true,
                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent"
                });
                if !c.env.is_empty() {
                    container["env"] = c
                        .env
                        .iter()
                        .map(|(k, v)| json!({"name": k, "value": v}))
                        .collect();
                }
                // Sidecars (a log shipper, a proxy) have no port and no probe.
                if c.main {
                    container["ports"] =
                        json!([{"name": "http", "containerPort": c.port, "protocol": "TCP"}]);
                    container["livenessProbe"] = probe(15);
                    if c.readiness {
                        container["readinessProbe"] = probe(5);
                    }
                }
                container
            })
            .collect();
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "generateName": format!("{}-{}-", rs.app, rs.hash),
                "namespace": rs.namespace,
                "labels": {"app": rs.app, "pod-template-hash": rs.hash},
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": format!("{}-{}", rs.app, rs.hash), "uid": rs.uid,
                    "controller": true, "blockOwnerDeletion": true
                }]
            },
            "spec": {
                "volumes": [{"name": rs.token_volume,
                    "secret": {"secretName": rs.token_volume, "defaultMode": 420}}],
                "containers": containers,
                "restartPolicy": "Always",
                "terminationGracePeriodSeconds": 30,
                "dnsPolicy": "ClusterFirst",
                "serviceAccountName": "default",
                "serviceAccount": "default",
                "nodeName": format!("node-{}", self.node(i)),
                "securityContext": {},
                "schedulerName": "default-scheduler",
                "tolerations": [
                    {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                        "effect": "NoExecute", "tolerationSeconds": 300},
                    {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                        "effect": "NoExecute", "tolerationSeconds": 300}
                ],
                "priority": 0,
                "enableServiceLinks": true,
                "preemptionPolicy": "PreemptLowerPriority"
            }
        })
    }

    /// The status the kubelet writes for Pod `i` (through the `status` subresource); `round`
    /// is how many status updates the Pod has had (0: the first, when it started). Later
    /// rounds move the probe times and restart counts, as a kubelet's updates do.
    pub fn status_body(&self, i: usize, round: u64) -> String {
        json!({"status": self.status_value(i, round)}).to_string()
    }

    fn pod_ip(&self, i: usize) -> String {
        format!("10.{}.{}.{}", 64 + (i >> 16) % 64, (i >> 8) & 255, i & 255)
    }

    fn status_value(&self, i: usize, round: u64) -> Value {
        let rs = self.replica_set(i / self.replicas.max(1));
        let mut r = Rng::new(self.seed, 4, i as u64);
        let created = EPOCH + i as i64;
        let started = created + 1 + r.below(5) as i64;
        let ready = started + 5 + r.below(20) as i64 + round as i64 * 60;
        let node = self.node(i);
        let host_ip = format!("192.168.{}.{}", node / 250, 10 + node % 250);
        let pod_ip = self.pod_ip(i);
        let condition = |t: &str, at: i64| {
            json!({"type": t, "status": "True", "lastProbeTime": null,
                "lastTransitionTime": rfc3339(at)})
        };
        let statuses: Vec<Value> = rs
            .containers
            .iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "state": {"running": {"startedAt": rfc3339(started + 1)}},
                    "lastState": {},
                    "ready": true,
                    "restartCount": round / 4,
                    "image": c.image,
                    "imageID": format!("docker-pullable://{}", c.image_id),
                    "containerID": format!("containerd://{}", r.hex(64)),
                    "started": true
                })
            })
            .collect();
        json!({
            "phase": "Running",
            "conditions": [
                condition("Initialized", started),
                condition("Ready", ready),
                condition("ContainersReady", ready),
                condition("PodScheduled", created)
            ],
            "hostIP": host_ip,
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": rfc3339(started),
            "containerStatuses": statuses,
            "qosClass": "Burstable"
        })
    }

    /// Pod `i` as the apiserver answers it after creation and one status update: the create
    /// body plus `uid`, `resourceVersion` (`resource_version`), `creationTimestamp`, the
    /// status, and (when `managed_fields`) the `managedFields` entries of
    /// kube-controller-manager and the kubelet, shaped as v1.20 writes them.
    pub fn stored_json(&self, i: usize, resource_version: u64, managed_fields: bool) -> String {
        let mut pod = self.create_value(i);
        let rs = self.replica_set(i / self.replicas.max(1));
        let mut r = Rng::new(self.seed, 5, i as u64);
        let created = EPOCH + i as i64;
        let status = self.status_value(i, 0);
        if let Some(meta) = pod.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("uid".into(), r.uuid().into());
            meta.insert(
                "resourceVersion".into(),
                resource_version.to_string().into(),
            );
            meta.insert("creationTimestamp".into(), rfc3339(created).into());
            if managed_fields {
                let kubelet_at = status["conditions"][1]["lastTransitionTime"].clone();
                meta.insert(
                    "managedFields".into(),
                    json!([
                        {"manager": "kube-controller-manager", "operation": "Update",
                            "apiVersion": "v1", "time": rfc3339(created), "fieldsType": "FieldsV1",
                            "fieldsV1": controller_fields(&rs)},
                        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                            "time": kubelet_at, "fieldsType": "FieldsV1",
                            "fieldsV1": kubelet_fields(&self.pod_ip(i))}
                    ]),
                );
            }
        }
        if let Some(obj) = pod.as_object_mut() {
            obj.insert("status".into(), status);
        }
        pod.to_string()
    }
}

/// `{}` for a leaf of a field set.
fn leaf() -> Value {
    Value::Object(Map::new())
}

/// A field set node: `.` (the node itself) plus `f:<name>` leaves.
fn node(leaves: &[&str]) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(".".into(), leaf());
    for l in leaves {
        m.insert(format!("f:{l}"), leaf());
    }
    m
}

/// kube-controller-manager's field set for a Pod it created from `rs`'s template.
fn controller_fields(rs: &ReplicaSet) -> Value {
    let mut containers = Map::new();
    for c in &rs.containers {
        let mut f = node(&[
            "image",
            "imagePullPolicy",
            "name",
            "terminationMessagePath",
            "terminationMessagePolicy",
        ]);
        if !c.env.is_empty() {
            let mut env = node(&[]);
            for (k, _) in &c.env {
                env.insert(
                    format!("k:{{\"name\":\"{k}\"}}"),
                    Value::Object(node(&["name", "value"])),
                );
            }
            f.insert("f:env".into(), Value::Object(env));
        }
        let probe = || {
            let mut p = node(&[
                "failureThreshold",
                "initialDelaySeconds",
                "periodSeconds",
                "successThreshold",
                "timeoutSeconds",
            ]);
            p.insert(
                "f:httpGet".into(),
                Value::Object(node(&["path", "port", "scheme"])),
            );
            Value::Object(p)
        };
        if c.main {
            f.insert("f:livenessProbe".into(), probe());
            if c.readiness {
                f.insert("f:readinessProbe".into(), probe());
            }
            let mut ports = node(&[]);
            ports.insert(
                format!("k:{{\"containerPort\":{},\"protocol\":\"TCP\"}}", c.port),
                Value::Object(node(&["containerPort", "name", "protocol"])),
            );
            f.insert("f:ports".into(), Value::Object(ports));
        }
        let mut resources = node(&[]);
        resources.insert("f:limits".into(), Value::Object(node(&["cpu", "memory"])));
        resources.insert("f:requests".into(), Value::Object(node(&["cpu", "memory"])));
        f.insert("f:resources".into(), Value::Object(resources));
        let mut mounts = node(&[]);
        mounts.insert(
            "k:{\"mountPath\":\"/var/run/secrets/kubernetes.io/serviceaccount\"}".into(),
            Value::Object(node(&["mountPath", "name", "readOnly"])),
        );
        f.insert("f:volumeMounts".into(), Value::Object(mounts));
        containers.insert(format!("k:{{\"name\":\"{}\"}}", c.name), Value::Object(f));
    }
    let mut owner = node(&[
        "apiVersion",
        "blockOwnerDeletion",
        "controller",
        "kind",
        "name",
        "uid",
    ]);
    owner.remove(".");
    owner.insert(".".into(), leaf());
    json!({
        "f:metadata": {
            "f:generateName": {},
            "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
            "f:ownerReferences": {".": {}, format!("k:{{\"uid\":\"{}\"}}", rs.uid): owner}
        },
        "f:spec": {
            "f:containers": containers,
            "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:nodeName": {},
            "f:preemptionPolicy": {}, "f:priority": {}, "f:restartPolicy": {},
            "f:schedulerName": {}, "f:securityContext": {}, "f:serviceAccount": {},
            "f:serviceAccountName": {}, "f:terminationGracePeriodSeconds": {},
            "f:tolerations": {},
            "f:volumes": {".": {}, format!("k:{{\"name\":\"{}\"}}", rs.token_volume): {
                ".": {}, "f:name": {}, "f:secret": {".": {}, "f:defaultMode": {}, "f:secretName": {}}
            }}
        }
    })
}

/// The kubelet's field set for a Pod's status.
fn kubelet_fields(pod_ip: &str) -> Value {
    let condition = || {
        Value::Object(node(&[
            "lastProbeTime",
            "lastTransitionTime",
            "status",
            "type",
        ]))
    };
    json!({
        "f:status": {
            "f:conditions": {
                ".": {},
                "k:{\"type\":\"ContainersReady\"}": condition(),
                "k:{\"type\":\"Initialized\"}": condition(),
                "k:{\"type\":\"PodScheduled\"}": condition(),
                "k:{\"type\":\"Ready\"}": condition()
            },
            "f:containerStatuses": {},
            "f:hostIP": {},
            "f:phase": {},
            "f:podIP": {},
            "f:podIPs": {".": {}, format!("k:{{\"ip\":\"{pod_ip}\"}}"): {".": {}, "f:ip": {}}},
            "f:startTime": {}
        }
    })
}

/// One request of a batch.
struct Request {
    method: &'static str,
    path: String,
    content_type: &'static str,
    body: Option<String>,
}

/// What a batch of writes did: requests answered 2xx, and the others (status and path).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Requests answered 2xx.
    pub ok: usize,
    /// The others: HTTP status and what the request was.
    pub failed: Vec<(u16, String)>,
}

/// The create of Pod `i`, as the ReplicaSet controller sends it.
fn create_request(workload: &Workload, i: usize) -> Request {
    let (ns, _) = workload.key(i);
    Request {
        method: "POST",
        path: format!("/api/v1/namespaces/{ns}/pods?fieldManager=kube-controller-manager"),
        content_type: "application/json",
        body: Some(workload.create_body(i)),
    }
}

/// Runs `requests` through one `curl` with up to `parallel` transfers at once (connections
/// reused), as the admin user.
fn run_batch(
    cluster: &TestCluster,
    requests: &[Request],
    parallel: usize,
) -> Result<Written, Error> {
    let dir = cluster
        .dir
        .join(format!("pods-batch-{}", std::process::id()));
    fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
    let mut config = String::new();
    let ca = cluster.ca_file_path();
    for (n, req) in requests.iter().enumerate() {
        if n > 0 {
            config.push_str("next\n");
        }
        let _ = writeln!(config, "url = \"{}{}\"", cluster.server, req.path);
        let _ = writeln!(config, "request = \"{}\"", req.method);
        let _ = writeln!(config, "cacert = \"{}\"", ca.display());
        let _ = writeln!(
            config,
            "header = \"Authorization: Bearer {}\"",
            cluster.token
        );
        let _ = writeln!(config, "header = \"Accept: application/json\"");
        let _ = writeln!(config, "user-agent = \"testcluster\"");
        let _ = writeln!(config, "output = \"/dev/null\"");
        let _ = writeln!(config, "write-out = \"%{{http_code}} {n}\\n\"");
        if let Some(body) = &req.body {
            let file = dir.join(format!("{n}.json"));
            fs::write(&file, body).map_err(io_err(format!("writing {}", file.display())))?;
            let _ = writeln!(config, "header = \"Content-Type: {}\"", req.content_type);
            let _ = writeln!(config, "data-binary = \"@{}\"", file.display());
        }
    }
    // The config holds the token: it goes through stdin, never to a file or the command line.
    let mut child = Command::new("curl")
        .args(["-sS", "--parallel", "--parallel-max"])
        .arg(parallel.max(1).to_string())
        .args(["--max-time", "60", "-K", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io_err("starting curl for a batch of writes".to_string()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(config.as_bytes())
            .map_err(io_err("writing curl's config".to_string()))?;
    }
    let out = child
        .wait_with_output()
        .map_err(io_err("waiting for curl".to_string()))?;
    let _ = fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    let mut written = Written::default();
    let mut seen = 0;
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let (Some(code), Some(n)) = (parts.next(), parts.next()) else {
            continue;
        };
        let (Ok(code), Ok(n)) = (code.parse::<u16>(), n.parse::<usize>()) else {
            continue;
        };
        seen += 1;
        if (200..300).contains(&code) {
            written.ok += 1;
        } else if let Some(req) = requests.get(n) {
            written
                .failed
                .push((code, format!("{} {}", req.method, req.path)));
        }
    }
    if seen < requests.len() {
        return Err(Error::Command {
            what: format!("curl batch of {} writes", requests.len()),
            status: format!("{} answers of {}: {}", seen, requests.len(), out.status),
            output: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(written)
}

/// Creates the workload's namespaces (those that exist already are left as they are).
pub fn create_namespaces(cluster: &TestCluster, workload: &Workload) -> Result<Written, Error> {
    let requests: Vec<Request> = workload
        .namespace_names()
        .into_iter()
        .map(|ns| Request {
            method: "POST",
            path: "/api/v1/namespaces".into(),
            content_type: "application/json",
            body: Some(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
                    .to_string(),
            ),
        })
        .collect();
    let mut w = run_batch(cluster, &requests, 4)?;
    // 409: it exists.
    w.failed.retain(|(code, _)| *code != 409);
    Ok(w)
}

/// How many requests one `curl` runs.
const BATCH: usize = 500;

/// Writes Pods `range` of `workload`: each created as kube-controller-manager would, then its
/// status written through the `status` subresource as the kubelet would (field managers
/// named so), at most `parallel` requests at once. Creates the namespaces first. `ok` is the
/// Pods' writes answered 2xx (two per Pod when all went well).
pub fn write_pods(
    cluster: &TestCluster,
    workload: &Workload,
    range: std::ops::Range<usize>,
    parallel: usize,
) -> Result<Written, Error> {
    // `ok` counts the Pods' writes only; a namespace that could not be made is a failure.
    let mut total = Written {
        ok: 0,
        failed: create_namespaces(cluster, workload)?.failed,
    };
    let ids: Vec<usize> = range.collect();
    for chunk in ids.chunks(BATCH) {
        let creates: Vec<Request> = chunk.iter().map(|&i| create_request(workload, i)).collect();
        merge(&mut total, run_batch(cluster, &creates, parallel)?);
        let statuses: Vec<Request> = chunk
            .iter()
            .map(|&i| status_request(workload, i, 0))
            .collect();
        merge(&mut total, run_batch(cluster, &statuses, parallel)?);
    }
    Ok(total)
}

fn merge(total: &mut Written, w: Written) {
    total.ok += w.ok;
    total.failed.extend(w.failed);
}

fn status_request(workload: &Workload, i: usize, round: u64) -> Request {
    let (ns, name) = workload.key(i);
    Request {
        method: "PATCH",
        path: format!("/api/v1/namespaces/{ns}/pods/{name}/status?fieldManager=kubelet"),
        content_type: "application/strategic-merge-patch+json",
        body: Some(workload.status_body(i, round)),
    }
}

/// A churn of the workload's first `pods` Pods: what [`churn`] does each second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Churn {
    /// Status updates per second (the kubelet's), spread over the Pods in turn.
    pub status_updates: usize,
    /// Pods deleted and created again per second (a rollout's or an eviction's).
    pub recreates: usize,
    /// Requests at once.
    pub parallel: usize,
}

/// Churns Pods `0..pods` of `workload` (written before by [`write_pods`]) for `duration`:
/// every second, `status_updates` status writes and `recreates` deletes each followed by the
/// same Pod's creation and status; a second that runs long is not made up.
pub fn churn(
    cluster: &TestCluster,
    workload: &Workload,
    pods: usize,
    rate: Churn,
    duration: Duration,
) -> Result<Written, Error> {
    let start = Instant::now();
    let mut total = Written::default();
    let (mut next_status, mut next_recreate, mut round) = (0usize, 0usize, 1u64);
    let pods = pods.max(1);
    let mut tick = 0u32;
    while start.elapsed() < duration {
        let mut requests = Vec::new();
        for _ in 0..rate.status_updates {
            requests.push(status_request(workload, next_status, round));
            next_status += 1;
            if next_status == pods {
                next_status = 0;
                round += 1;
            }
        }
        let mut recreated = Vec::new();
        for _ in 0..rate.recreates {
            let i = (next_recreate * 7919) % pods;
            next_recreate += 1;
            let (ns, name) = workload.key(i);
            requests.push(Request {
                method: "DELETE",
                path: format!("/api/v1/namespaces/{ns}/pods/{name}?gracePeriodSeconds=0"),
                content_type: "application/json",
                body: None,
            });
            recreated.push(i);
        }
        merge(&mut total, run_batch(cluster, &requests, rate.parallel)?);
        if !recreated.is_empty() {
            let creates: Vec<Request> = recreated
                .iter()
                .map(|&i| create_request(workload, i))
                .collect();
            merge(&mut total, run_batch(cluster, &creates, rate.parallel)?);
            let statuses: Vec<Request> = recreated
                .iter()
                .map(|&i| status_request(workload, i, round))
                .collect();
            merge(&mut total, run_batch(cluster, &statuses, rate.parallel)?);
        }
        tick += 1;
        let next = Duration::from_secs(u64::from(tick));
        if let Some(wait) = next.checked_sub(start.elapsed()) {
            std::thread::sleep(wait.min(duration.saturating_sub(start.elapsed())));
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_are_deterministic_realistic_and_4_to_8_kb() {
        // Two replicas each: 100 Deployments, so every container count is met.
        let w = Workload {
            replicas: 2,
            ..Workload::new(42, 200)
        };
        let again = w.clone();
        let other = Workload {
            seed: 43,
            ..w.clone()
        };
        let mut containers_seen = [0; 4];
        let mut sizes = Vec::new();
        for i in 0..200 {
            let stored = w.stored_json(i, 1000 + i as u64, true);
            assert_eq!(stored, again.stored_json(i, 1000 + i as u64, true));
            assert_ne!(stored, other.stored_json(i, 1000 + i as u64, true));
            let v: Value = serde_json::from_str(&stored).unwrap();
            let (ns, name) = w.key(i);
            assert_eq!(v["metadata"]["namespace"], ns.as_str());
            assert_eq!(v["metadata"]["name"], name.as_str());
            let generate = v["metadata"]["generateName"].as_str().unwrap();
            assert!(name.starts_with(generate) && name.len() == generate.len() + 5);
            assert_eq!(
                v["metadata"]["labels"]["pod-template-hash"]
                    .as_str()
                    .unwrap()
                    .len(),
                10
            );
            assert_eq!(v["metadata"]["ownerReferences"][0]["controller"], true);
            let managers: Vec<&str> = v["metadata"]["managedFields"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["manager"].as_str().unwrap())
                .collect();
            assert_eq!(managers, ["kube-controller-manager", "kubelet"]);
            let containers = v["spec"]["containers"].as_array().unwrap().len();
            assert!((1..=3).contains(&containers));
            containers_seen[containers] += 1;
            assert_eq!(
                v["status"]["containerStatuses"].as_array().unwrap().len(),
                containers
            );
            assert_eq!(v["status"]["conditions"].as_array().unwrap().len(), 4);
            assert!(v["spec"]["nodeName"].as_str().unwrap().starts_with("node-"));
            // The create body is the stored object's metadata and spec, without what the
            // server adds.
            let create: Value = serde_json::from_str(&w.create_body(i)).unwrap();
            assert_eq!(create["spec"], v["spec"]);
            assert!(create["metadata"].get("uid").is_none());
            let status: Value = serde_json::from_str(&w.status_body(i, 0)).unwrap();
            assert_eq!(status["status"], v["status"]);
            assert_ne!(
                w.status_body(i, 0),
                w.status_body(i, 5),
                "later rounds differ"
            );
            sizes.push(stored.len());
        }
        let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
        assert!(*min >= 4 * 1024 && *max <= 8 * 1024, "sizes {min}..{max}");
        assert!(
            containers_seen[1..].iter().all(|&n| n > 0),
            "{containers_seen:?}"
        );
        let names: std::collections::HashSet<_> = (0..200).map(|i| w.key(i)).collect();
        assert_eq!(names.len(), 200, "names are distinct");
    }

    #[test]
    fn rfc3339_matches_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(EPOCH), "2021-03-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400 + 86_399), "2000-02-29T23:59:59Z");
    }
}
