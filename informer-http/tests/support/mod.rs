//! A scripted HTTP/1.1 server for the backend tests: plain or TLS (rustls with ring, given
//! explicitly), keep-alive, answering each request with what a script says for its path, and
//! recording what it was asked.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

/// One request the server received.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The method.
    pub method: String,
    /// The path and query.
    pub path: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
}

/// A running server.
pub struct Server {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// What it was asked, in order.
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    /// The requests received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// A complete response: `status` line, `headers`, and `body` with its `Content-Length`.
pub fn response(status: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    out.into_bytes()
}

/// The TLS configuration of a server with `tests/data/server.crt` (for 127.0.0.1 and
/// localhost, signed by `tests/data/ca.crt`).
pub fn server_tls() -> Arc<rustls::ServerConfig> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_slice_iter(include_bytes!("../data/server.crt"))
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(include_bytes!("../data/server.key")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    Arc::new(config)
}

/// Serves on a fresh port of 127.0.0.1 until the test process ends: every request is answered
/// with `script(port, path)`.
pub fn serve(
    tls: Option<Arc<rustls::ServerConfig>>,
    script: impl Fn(u16, &str) -> Vec<u8> + Send + Sync + 'static,
) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let script = Arc::new(script);
    let rec = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(tcp) = conn else { continue };
            let (tls, script, rec) = (tls.clone(), script.clone(), rec.clone());
            std::thread::spawn(move || match tls {
                Some(cfg) => {
                    let conn = rustls::ServerConnection::new(cfg).unwrap();
                    let stream = rustls::StreamOwned::new(conn, tcp);
                    handle(stream, port, &*script, &rec);
                }
                None => handle(tcp, port, &*script, &rec),
            });
        }
    });
    Server { port, seen }
}

fn handle<S: Read + Write>(
    mut s: S,
    port: u16,
    script: &(dyn Fn(u16, &str) -> Vec<u8> + Send + Sync),
    rec: &Mutex<Vec<Seen>>,
) {
    loop {
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match s.read(&mut b) {
                Ok(1) => head.push(b[0]),
                _ => return,
            }
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let mut lines = head.split("\r\n");
        let mut first = lines.next().unwrap_or("").split(' ');
        let method = first.next().unwrap_or("").to_string();
        let path = first.next().unwrap_or("").to_string();
        let mut authorization = None;
        let mut body_len = 0usize;
        for line in lines {
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("authorization") {
                    authorization = Some(v.trim().to_string());
                }
                if k.eq_ignore_ascii_case("content-length") {
                    body_len = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0u8; body_len];
        if s.read_exact(&mut body).is_err() {
            return;
        }
        rec.lock().unwrap().push(Seen {
            method,
            path: path.clone(),
            authorization,
        });
        if s.write_all(&script(port, &path)).is_err() || s.flush().is_err() {
            return;
        }
    }
}

/// Runs `f` on a current-thread tokio runtime.
pub fn tokio_run<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}
