//! A TCP proxy to the API server that can be cut (every connection closed, new ones refused)
//! and restored: a member cut off from the server while the process lives on. Shared by the
//! sharding end-to-end tests (`tests/shard.rs`, `tests/shard_processes.rs`).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The proxy: listens on `127.0.0.1:port`, forwards to `127.0.0.1:upstream`.
pub struct Proxy {
    pub port: u16,
    cut: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    pub fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (c, cs) = (cut.clone(), conns.clone());
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(down) = s else { continue };
                if c.load(Ordering::Acquire) {
                    let _ = down.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(up) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                {
                    let mut v = cs.lock().unwrap();
                    v.push(down.try_clone().unwrap());
                    v.push(up.try_clone().unwrap());
                }
                for (mut from, mut to) in [
                    (down.try_clone().unwrap(), up.try_clone().unwrap()),
                    (up, down),
                ] {
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 * 1024];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 || to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        Proxy { port, cut, conns }
    }

    /// Closes every connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::Release);
        for s in self.conns.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Accepts connections again.
    #[allow(dead_code)]
    pub fn restore(&self) {
        self.cut.store(false, Ordering::Release);
    }
}
