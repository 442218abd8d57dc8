//! A one-shot, blocking HTTP(S) request (`Connection: close`) for credential refreshes (an OIDC
//! issuer's discovery document and token endpoint): rustls with ring, the given CA or the
//! system's roots, through an HTTP `CONNECT` proxy when one is given. Run off the executor, on
//! a helper thread of its own.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs as _};
use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;

/// Largest answer read.
const MAX_ANSWER: usize = 1 << 20;
/// Connect, read and write timeout.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A byte stream: TCP, or TLS over one.
trait Io: Read + Write {}
impl<T: Read + Write> Io for T {}

/// Sends `method url` with `headers` and `body` (through `proxy`, which is asked to `CONNECT`
/// to `url`'s host, when given); answers the status and body. Errors are messages that never
/// quote the request or answer bodies (nor the proxy's password).
pub(super) fn request(
    url: &str,
    ca_pem: Option<&[u8]>,
    proxy: Option<&crate::net::proxy::Proxy>,
    method: &str,
    headers: &[(&str, String)],
    body: Option<&[u8]>,
) -> Result<(u16, Vec<u8>), String> {
    let uri: http::Uri = url.parse().map_err(|_| format!("{url:?} is not a URL"))?;
    let tls = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(format!("{url:?}: the scheme must be https or http")),
    };
    let host = uri
        .host()
        .ok_or_else(|| format!("{url:?}: no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let authority = uri
        .authority()
        .map(|a| a.as_str())
        .unwrap_or(&host)
        .to_string();
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let target = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let stream: Box<dyn Io> = match proxy {
        None => Box::new(tcp(&host, port, &authority)?),
        Some(p) => tunnel(p, &target)?,
    };
    let mut wire = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\
         Accept: application/json\r\nUser-Agent: {}\r\n",
        crate::well_known::USER_AGENT
    );
    for (k, v) in headers {
        wire.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        wire.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    wire.push_str("\r\n");
    let mut wire = wire.into_bytes();
    wire.extend_from_slice(body.unwrap_or_default());
    let mut s = if tls {
        tls_over(stream, &host, ca_pem)?
    } else {
        stream
    };
    s.write_all(&wire)
        .map_err(|e| format!("{authority}: {e}"))?;
    read_answer(&mut s)
}

/// A TCP connection to `host:port` with the timeouts set.
fn tcp(host: &str, port: u16, shown: &str) -> Result<TcpStream, String> {
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}: no address"))?;
    let tcp = TcpStream::connect_timeout(&addr, TIMEOUT).map_err(|e| format!("{shown}: {e}"))?;
    let _ = tcp.set_read_timeout(Some(TIMEOUT));
    let _ = tcp.set_write_timeout(Some(TIMEOUT));
    Ok(tcp)
}

/// TLS to `host` over `io`, verified against `ca_pem` (else the system's roots).
fn tls_over(io: Box<dyn Io>, host: &str, ca_pem: Option<&[u8]>) -> Result<Box<dyn Io>, String> {
    let mut cfg = Config::new(format!("https://{host}"));
    cfg.root_ca_pem = ca_pem.map(<[u8]>::to_vec);
    let tls =
        crate::net::tls::client_config(&cfg, &[b"http/1.1"], None).map_err(|e| e.to_string())?;
    let name = rustls_pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| format!("{host}: {e}"))?;
    let conn =
        rustls::ClientConnection::new(Arc::new(tls), name).map_err(|e| format!("TLS: {e}"))?;
    Ok(Box::new(rustls::StreamOwned::new(conn, io)))
}

/// A tunnel to `target` (`host:port`) through `proxy`: `CONNECT`, answered 2xx.
fn tunnel(proxy: &crate::net::proxy::Proxy, target: &str) -> Result<Box<dyn Io>, String> {
    let shown = &proxy.shown;
    let fail = |e: std::io::Error| format!("proxy {shown}: {e}");
    let tcp: Box<dyn Io> = Box::new(tcp(&proxy.host, proxy.port, &format!("proxy {shown}"))?);
    let mut io = if proxy.tls {
        // The proxy's certificate: the system's roots.
        tls_over(tcp, &proxy.host, None).map_err(|m| format!("proxy {shown}: {m}"))?
    } else {
        tcp
    };
    let mut req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(auth) = &proxy.authorization {
        req.push_str("Proxy-Authorization: ");
        req.push_str(auth.expose());
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    io.write_all(req.as_bytes()).map_err(fail)?;
    io.flush().map_err(fail)?;
    // The answer's head, byte by byte: what follows belongs to the tunnel.
    let mut head = Vec::with_capacity(256);
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 64 * 1024 {
            return Err(format!("proxy {shown}: CONNECT answer head too large"));
        }
        if io.read(&mut b).map_err(fail)? == 0 {
            return Err(format!(
                "proxy {shown} closed the connection during CONNECT"
            ));
        }
        head.push(b[0]);
    }
    let status = std::str::from_utf8(&head)
        .ok()
        .and_then(|h| h.split_whitespace().nth(1))
        .and_then(|s| s.parse::<u16>().ok());
    match status {
        Some(s) if (200..300).contains(&s) => Ok(io),
        Some(s) => Err(format!("proxy {shown} refused CONNECT {target}: {s}")),
        None => Err(format!("proxy {shown}: not an HTTP answer to CONNECT")),
    }
}

/// Reads until the answer is complete (by its framing, or the connection closing).
fn read_answer(r: &mut impl std::io::Read) -> Result<(u16, Vec<u8>), String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return parse(&out, true)?.ok_or_else(|| "truncated answer".into()),
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                if out.len() > MAX_ANSWER {
                    return Err("answer too large".into());
                }
                if let Some(answer) = parse(&out, false)? {
                    return Ok(answer);
                }
            }
            // A server closing without TLS close_notify after the answer.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return parse(&out, true)?.ok_or_else(|| "truncated answer".into());
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Status and body of an HTTP/1.1 answer (Content-Length, chunked, or until close when `eof`);
/// `None` while incomplete.
fn parse(raw: &[u8], eof: bool) -> Result<Option<(u16, Vec<u8>)>, String> {
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "invalid HTTP answer head")?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or("invalid HTTP status line")?;
    let mut chunked = false;
    let mut length = None;
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
            if k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked") {
                chunked = true;
            } else if k == "content-length" {
                length = v.parse::<usize>().ok();
            }
        }
    }
    let mut body = &raw[end + 4..];
    if chunked {
        let mut out = Vec::new();
        loop {
            let Some(eol) = body.windows(2).position(|w| w == b"\r\n") else {
                return Ok(None);
            };
            let size = std::str::from_utf8(&body[..eol])
                .ok()
                .and_then(|s| usize::from_str_radix(s.split(';').next()?.trim(), 16).ok())
                .ok_or("broken chunked answer")?;
            body = &body[eol + 2..];
            if size == 0 {
                return Ok(Some((status, out)));
            }
            if body.len() < size + 2 {
                return Ok(None);
            }
            out.extend_from_slice(&body[..size]);
            body = &body[size + 2..];
        }
    }
    if let Some(n) = length {
        if body.len() < n {
            return Ok(None);
        }
        body = &body[..n];
    } else if !eof {
        return Ok(None);
    }
    Ok(Some((status, body.to_vec())))
}

#[cfg(test)]
mod tests {
    #[test]
    fn answers_parse() {
        let p = |s: &str, eof| super::parse(s.as_bytes(), eof);
        assert_eq!(
            p("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiXX", false).unwrap(),
            Some((200, b"hi".to_vec()))
        );
        let chunked = "HTTP/1.1 400 Bad\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n1;x\r\nc\r\n0\r\n\r\n";
        assert_eq!(p(chunked, false).unwrap(), Some((400, b"abc".to_vec())));
        // Incomplete: more is awaited.
        assert_eq!(p(&chunked[..chunked.len() - 7], false).unwrap(), None);
        assert_eq!(p("HTTP/1.0 200 OK\r\n\r\nall", false).unwrap(), None);
        assert_eq!(
            p("HTTP/1.0 200 OK\r\n\r\nall", true).unwrap(),
            Some((200, b"all".to_vec()))
        );
        assert_eq!(
            p("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhi", true).unwrap(),
            None
        );
        assert!(p("garbage\r\n\r\n", true).is_err());
        assert!(
            p(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                false
            )
            .is_err()
        );
    }
}
