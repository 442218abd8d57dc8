//! The Greeting operator's process (`greeter.rs` is the operator): `greeter crd` prints the
//! CRD; `greeter [NAMESPACE]` runs the operator (the namespace from `OPERATOR_NAMESPACE` when
//! not given; `default` without either).
//!
//! Ready for a container (`deploy/greeter/`: Dockerfile, Deployment, ServiceAccount, RBAC):
//!
//! - the admin server on `ADMIN_ADDR` (default `0.0.0.0:8080`): `/livez` and `/readyz` for
//!   the kubelet's probes, `/metrics` for Prometheus (controller-runtime's metric names);
//! - logs as JSON lines, one object per event with its spans (`reconcile{controller, key,
//!   attempt, result, duration_seconds}`, `informer{informer}`), filtered by `RUST_LOG`
//!   (default `info`): tracing-subscriber's JSON layer;
//! - in a pod it reads its ServiceAccount's token (`Config::infer`), takes its namespace
//!   from the argument (the Deployment passes `POD_NAMESPACE`) and its identity from
//!   `POD_NAME`.
//!
//! Scaled out: `greeter NAMESPACE --shard RING` runs it as one member of the sharded ring
//! `RING` (labels mode: the ring's elected sharder labels each Greeting and its ConfigMaps
//! for one member, and each member watches only its own) instead of behind the Lease
//! `greeter`. Its member name is its identity plus random digits, logged once (target
//! `greeter`, with `member` and the admin server's address `admin`); its Lease duration is
//! `--lease-duration SECONDS` (15; renew deadline ⅔ of it, retry period ⅕ and at most 2 s).
//! `/metrics` shows what it caches (`informer_store_objects`). A member that loses its Lease
//! stops with an error (the pod restarts and joins again under a new name).
//!
//! `--reconcile-log FILE` appends to FILE one JSON line when a reconcile starts and one when it
//! ends, `{"member":…,"key":…,"start":NANOS,"end":NANOS}` (wall-clock nanoseconds since the
//! epoch; `end` is `null` on the first): the span `reconcile` of the controller, which opens
//! after a sharded member was allowed to start the key and closes after it said it finished.
//! Each line is one `write` to a file opened for appending, so a killed process leaves whole
//! lines.

use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, filter};

use super::greeter::{self, Greeting};
use super::runtime::http::crd::{Crd, to_yaml};
use super::runtime::{HasResource, Resource, ShardConfig, ShardScope};

/// The example's `main`.
pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    main_with(std::env::args().skip(1).collect())
}

/// `main` with these arguments (the program's name left out).
pub fn main_with(args: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
    let (mut namespace, mut ring, mut lease, mut log) = (None, None, 15.0, None);
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--shard" => ring = Some(value()?),
            "--lease-duration" => lease = value()?.parse::<f64>()?,
            "--reconcile-log" => log = Some(value()?),
            flag if flag.starts_with("--") => return Err(format!("unknown flag {flag}").into()),
            _ => namespace = Some(arg),
        }
    }
    let ns = namespace
        .or_else(|| std::env::var("OPERATOR_NAMESPACE").ok())
        .unwrap_or_else(|| "default".into());
    if ns == "crd" {
        println!("{}", to_yaml(&Crd::of::<Greeting>().to_json()?));
        return Ok(());
    }
    let lease = Duration::try_from_secs_f64(lease).map_err(|e| format!("--lease-duration: {e}"))?;
    let identity =
        std::env::var("POD_NAME").unwrap_or_else(|_| format!("greeter-{}", std::process::id()));
    let member = super::runtime::member_name(&identity);
    // JSON logs: one line per event, with the fields of its spans; RUST_LOG filters.
    let env = filter::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| filter::EnvFilter::new("info"));
    let json = tracing_subscriber::fmt::layer()
        .json()
        .with_current_span(true)
        .with_span_list(true)
        .with_filter(env);
    let reconciles = match &log {
        Some(path) => Some(ReconcileLog::open(path, &member)?),
        None => None,
    };
    let _ = tracing_subscriber::registry()
        .with(json)
        .with(reconciles)
        .try_init();
    // The admin server first: it installs the metrics recorder the informers report to.
    let addr: std::net::SocketAddr = std::env::var("ADMIN_ADDR")
        .unwrap_or_else(|_| "0.0.0.0:8080".into())
        .parse()?;
    let admin = super::runtime::serve_admin(super::runtime::Admin::new(addr))?;
    let admin_addr = admin.local_addr();
    super::runtime::block_on(async move {
        let client = super::runtime::client(super::runtime::Config::infer()?)?;
        let shard = match ring {
            Some(ring) => {
                tracing::info!(target: "greeter", %ring, %member, admin = %admin_addr, "joining the ring");
                let config = ShardConfig {
                    lease_duration: lease,
                    renew_deadline: lease * 2 / 3,
                    retry_period: (lease / 5).min(Duration::from_secs(2)),
                    ..ShardConfig::new(ring, member)
                };
                let owned = vec![Resource::CONFIGMAPS];
                let scope = ShardScope::namespace(&ns);
                let resource = Greeting::resource();
                Some(super::runtime::sharding(
                    &client, &ns, config, resource, owned, scope,
                )?)
            }
            None => None,
        };
        let stop = std::future::pending();
        greeter::run(client, &ns, &identity, Some(admin), shard, stop).await
    })?
}

/// `--reconcile-log`: the spans `reconcile` of the controller, as JSON lines (see the module).
struct ReconcileLog {
    member: String,
    file: Mutex<std::fs::File>,
}

/// A reconcile's key and start, kept on its span.
struct Started(String, u64);

impl ReconcileLog {
    /// The layer, writing to `path` (created, or appended to), only for the reconcile spans.
    fn open<S>(path: &str, member: &str) -> std::io::Result<impl Layer<S>>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let log = ReconcileLog {
            member: member.to_string(),
            file: Mutex::new(file),
        };
        let only = filter::filter_fn(|m| m.is_span() && m.name() == "reconcile")
            .with_max_level_hint(tracing::Level::INFO);
        Ok(log.with_filter(only))
    }

    fn write(&self, key: &str, start: u64, end: Option<u64>) {
        let line =
            serde_json::json!({"member": self.member, "key": key, "start": start, "end": end});
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        // One write per line: appended whole, or (disk full, say) not at all.
        let _ = file.write_all(format!("{line}\n").as_bytes());
    }
}

/// Wall-clock nanoseconds since the epoch.
fn now_nanos() -> u64 {
    let t = SystemTime::now().duration_since(UNIX_EPOCH);
    u64::try_from(t.unwrap_or_default().as_nanos()).unwrap_or(u64::MAX)
}

impl<S> Layer<S> for ReconcileLog
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: Context<'_, S>,
    ) {
        /// The field `key`.
        struct Key(String);
        impl tracing::field::Visit for Key {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                if f.name() == "key" {
                    self.0 = format!("{v:?}");
                }
            }
            fn record_str(&mut self, f: &tracing::field::Field, v: &str) {
                if f.name() == "key" {
                    self.0 = v.to_string();
                }
            }
        }
        let mut key = Key(String::new());
        attrs.record(&mut key);
        let start = now_nanos();
        self.write(&key.0, start, None);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Started(key.0, start));
        }
    }

    fn on_close(&self, id: tracing::span::Id, ctx: Context<'_, S>) {
        let started = ctx
            .span(&id)
            .and_then(|span| span.extensions_mut().remove::<Started>());
        if let Some(Started(key, start)) = started {
            self.write(&key, start, Some(now_nanos()));
        }
    }
}
