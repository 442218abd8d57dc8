//! The admin server on smol: hyper 1 with smol-hyper's I/O and timer adapters, on a thread of
//! its own (`smol::block_on` over a local executor), so that it answers while smol's global
//! executor is wedged.

use std::rc::Rc;

use informer_runtime::admin::{self, Admin, AdminError, AdminServer};
use smol::future::FutureExt;
use smol_hyper::rt::{FuturesIo, SmolTimer};

/// Starts the admin server of `admin` (`/livez`, `/readyz`, `/metrics`; see
/// [`informer_runtime::admin`]) on its address, on a thread of its own. Returns once it
/// listens.
pub fn serve_admin(admin: Admin) -> Result<AdminServer, AdminError> {
    let (listener, server, serving) = admin::bind(admin)?;
    let listener = smol::Async::new(listener).map_err(AdminError::Start)?;
    std::thread::Builder::new()
        .name("informer-admin".into())
        .spawn(move || {
            let ex = Rc::new(smol::LocalExecutor::new());
            let accept_loop = {
                let ex = ex.clone();
                let serving = serving.clone();
                async move {
                    enum Next {
                        Conn(std::io::Result<smol::Async<std::net::TcpStream>>),
                        Stop,
                    }
                    loop {
                        let accept = async { Next::Conn(listener.accept().await.map(|(s, _)| s)) };
                        let stop = async {
                            serving.stopped().await;
                            Next::Stop
                        };
                        match accept.or(stop).await {
                            Next::Conn(Ok(stream)) => {
                                let conn = serving
                                    .clone()
                                    .serve_connection(FuturesIo::new(stream), SmolTimer::new());
                                ex.spawn(conn).detach();
                            }
                            Next::Conn(Err(e)) => {
                                tracing::warn!(error = %e, "admin server: accept failed");
                                smol::Timer::after(std::time::Duration::from_millis(100)).await;
                            }
                            Next::Stop => break,
                        }
                    }
                }
            };
            smol::block_on(ex.run(accept_loop));
            // Dropping the executor ends the connections still open.
            drop(ex);
            serving.exited();
        })
        .map_err(AdminError::Start)?;
    Ok(server)
}
