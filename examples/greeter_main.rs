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

use super::greeter::{self, Greeting};
use super::runtime::http::crd::{Crd, to_yaml};

/// The example's `main`.
pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("OPERATOR_NAMESPACE").ok())
        .unwrap_or_else(|| "default".into());
    if arg == "crd" {
        println!("{}", to_yaml(&Crd::of::<Greeting>().to_json()?));
        return Ok(());
    }
    // JSON logs: one line per event, with the fields of its spans; RUST_LOG filters.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_current_span(true)
        .with_span_list(true)
        .with_env_filter(filter)
        .try_init();
    // The admin server first: it installs the metrics recorder the informers report to.
    let addr: std::net::SocketAddr = std::env::var("ADMIN_ADDR")
        .unwrap_or_else(|_| "0.0.0.0:8080".into())
        .parse()?;
    let admin = super::runtime::serve_admin(super::runtime::Admin::new(addr))?;
    super::runtime::block_on(async move {
        let client = super::runtime::client(super::runtime::Config::infer()?)?;
        let identity =
            std::env::var("POD_NAME").unwrap_or_else(|_| format!("greeter-{}", std::process::id()));
        greeter::run(client, &arg, &identity, Some(admin), std::future::pending()).await
    })?
}
