//! Reaching the server: the rustls configuration both backends share ([`tls`]), which proxy a
//! connection goes through ([`proxy`]) and which redirects are followed ([`redirect`]).
//! Policy and configuration only, no I/O: the backends and the credential layer's small HTTP
//! client open the connections.

pub mod proxy;
pub mod redirect;
pub mod tls;
