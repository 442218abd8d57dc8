//! The admin server on tokio: hyper 1 over hyper-util's tokio I/O, on a thread of its own with
//! a current-thread runtime, so that it answers while the application's runtime is wedged.

use futures_util::future::{Either, select};
use hyper_util::rt::{TokioIo, TokioTimer};
use informer_runtime::admin::{self, Admin, AdminError, AdminServer};

/// Starts the admin server of `admin` (`/livez`, `/readyz`, `/metrics`; see
/// [`informer_runtime::admin`]) on its address, on a thread of its own. Returns once it
/// listens.
pub fn serve_admin(admin: Admin) -> Result<AdminServer, AdminError> {
    let (listener, server, serving) = admin::bind(admin)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(AdminError::Start)?;
    std::thread::Builder::new()
        .name("informer-admin".into())
        .spawn(move || {
            rt.block_on(async {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(listener) => loop {
                        let accept = std::pin::pin!(listener.accept());
                        let stop = std::pin::pin!(serving.stopped());
                        match select(accept, stop).await {
                            Either::Left((Ok((stream, _)), _)) => {
                                let conn = serving
                                    .clone()
                                    .serve_connection(TokioIo::new(stream), TokioTimer::new());
                                tokio::spawn(conn);
                            }
                            Either::Left((Err(e), _)) => {
                                tracing::warn!(error = %e, "admin server: accept failed");
                                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                            }
                            Either::Right(_) => break,
                        }
                    },
                    Err(e) => tracing::error!(error = %e, "admin server: cannot listen"),
                }
            });
            // Dropping the runtime ends the connections still open.
            drop(rt);
            serving.exited();
        })
        .map_err(AdminError::Start)?;
    Ok(server)
}
