//! Every name a user needs is reachable through informer-tokio alone.

include!("../../informer-runtime/tests/runtime_crate_names.rs.inc");

every_public_name!(informer_tokio);
