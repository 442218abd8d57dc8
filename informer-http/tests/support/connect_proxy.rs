//! A CONNECT proxy written for the tests: records every target asked for, and maps names that
//! do not resolve here (`kubernetes.default.svc`, `*.test`) to 127.0.0.1, so that reaching them
//! at all proves the proxy was used.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// A CONNECT proxy on 127.0.0.1: records the targets asked for.
pub struct TestProxy {
    port: u16,
    connects: Arc<Mutex<Vec<String>>>,
}

impl TestProxy {
    pub fn start() -> TestProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connects = Arc::new(Mutex::new(Vec::new()));
        let seen = connects.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let seen = seen.clone();
                std::thread::spawn(move || serve(conn, seen));
            }
        });
        TestProxy { port, connects }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn connects(&self) -> Vec<String> {
        self.connects.lock().unwrap().clone()
    }
}

fn serve(mut client: TcpStream, seen: Arc<Mutex<Vec<String>>>) {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match client.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let mut words = head.split_whitespace();
    let (Some("CONNECT"), Some(target)) = (words.next(), words.next()) else {
        let _ = client.write_all(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    seen.lock().unwrap().push(target.to_string());
    let (host, port) = target.rsplit_once(':').unwrap();
    let host = if host == "kubernetes.default.svc" || host.ends_with(".test") {
        "127.0.0.1"
    } else {
        host
    };
    let Ok(upstream) = TcpStream::connect((host, port.parse::<u16>().unwrap())) else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .unwrap();
    let (mut c2, mut u2) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
    let (mut client, mut upstream) = (client, upstream);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut c2, &mut u2);
        let _ = u2.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut upstream, &mut client);
    let _ = client.shutdown(std::net::Shutdown::Write);
}
