//! A one-shot, blocking HTTP(S) request (`Connection: close`) for credential refreshes (an OIDC
//! issuer's discovery document and token endpoint): rustls with ring, the given CA or the
//! system's roots. Run off the executor (see `credential`).

use std::io::Write as _;
use std::net::{TcpStream, ToSocketAddrs as _};
use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;

/// Largest answer read.
const MAX_ANSWER: usize = 1 << 20;
/// Connect, read and write timeout.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Sends `method url` with `headers` and `body`; answers the status and body. Errors are
/// messages that never quote the request or answer bodies.
pub(crate) fn request(
    url: &str,
    ca_pem: Option<&[u8]>,
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
    let addr = (host.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| format!("{host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}: no address"))?;
    let tcp =
        TcpStream::connect_timeout(&addr, TIMEOUT).map_err(|e| format!("{authority}: {e}"))?;
    let _ = tcp.set_read_timeout(Some(TIMEOUT));
    let _ = tcp.set_write_timeout(Some(TIMEOUT));
    let mut wire = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\
         Accept: application/json\r\nUser-Agent: {}\r\n",
        crate::client::USER_AGENT
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
    if tls {
        let mut cfg = Config::new(url);
        cfg.root_ca_pem = ca_pem.map(<[u8]>::to_vec);
        let tls = crate::tls::client_config(&cfg, &[b"http/1.1"]).map_err(|e| e.to_string())?;
        let name = rustls_pki_types::ServerName::try_from(host.clone())
            .map_err(|e| format!("{host}: {e}"))?;
        let conn =
            rustls::ClientConnection::new(Arc::new(tls), name).map_err(|e| format!("TLS: {e}"))?;
        let mut s = rustls::StreamOwned::new(conn, tcp);
        s.write_all(&wire)
            .map_err(|e| format!("{authority}: {e}"))?;
        read_answer(&mut s)
    } else {
        let mut s = tcp;
        s.write_all(&wire)
            .map_err(|e| format!("{authority}: {e}"))?;
        read_answer(&mut s)
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
