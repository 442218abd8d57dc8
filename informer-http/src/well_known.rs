//! Names and places every layer agrees on: where a pod's service account is mounted, and the
//! user agent this crate sends. Constants only, on the ground floor (the errors name the
//! service-account directory, configuration reads it, both HTTP clients send the user agent).

/// Where Kubernetes mounts the service account: `token`, `ca.crt`, `namespace`.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The user agent sent with every request.
pub const USER_AGENT: &str = concat!("informer-rs/", env!("CARGO_PKG_VERSION"));
