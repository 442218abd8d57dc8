//! A small, pure HTTP/1.1 client codec for the smol backend: request encoding, response head
//! parsing (httparse) and body framing (`Content-Length`, `chunked`, until-close).
//!
//! The smol backend speaks HTTP/1.1 itself (HTTP/2 goes through the `h2` crate,
//! in the `h2conn` module). Only what kube-apiserver answers with is needed here: no upgrades,
//! no `Expect`, no compression (none is asked for).

use std::fmt;

use bytes::Bytes;

/// Largest response head accepted.
pub const MAX_HEAD: usize = 64 * 1024;
/// Most headers accepted in a response.
const MAX_HEADERS: usize = 128;

/// A protocol error from the server's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum H1Error {
    /// The response head is not valid HTTP/1.x.
    BadHead(String),
    /// The response head exceeds [`MAX_HEAD`].
    HeadTooLarge,
    /// The chunked body encoding is broken.
    BadChunk(&'static str),
    /// The connection closed before the body was complete.
    UnexpectedEof,
}

impl fmt::Display for H1Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            H1Error::BadHead(m) => write!(f, "invalid HTTP response head: {m}"),
            H1Error::HeadTooLarge => write!(f, "HTTP response head larger than {MAX_HEAD} bytes"),
            H1Error::BadChunk(m) => write!(f, "invalid chunked encoding: {m}"),
            H1Error::UnexpectedEof => write!(f, "connection closed before the body ended"),
        }
    }
}

impl std::error::Error for H1Error {}

/// Encodes a request: `METHOD path HTTP/1.1`, `Host`, the request's headers, a
/// `Content-Length` when there is a body, then the body.
pub fn encode_request(
    method: &http::Method,
    path_and_query: &str,
    authority: &str,
    headers: &http::HeaderMap,
    body: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + body.len());
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(path_and_query.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(authority.as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        if name == http::header::HOST || name == http::header::CONTENT_LENGTH {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !body.is_empty()
        || matches!(
            *method,
            http::Method::POST | http::Method::PUT | http::Method::PATCH
        )
    {
        out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// How the body of a response is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body (`HEAD`, 1xx, 204, 304).
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the server closes the connection.
    UntilClose,
}

/// A parsed response head.
#[derive(Debug)]
pub struct Head {
    /// Status code.
    pub status: http::StatusCode,
    /// Headers.
    pub headers: http::HeaderMap,
    /// Body framing.
    pub framing: Framing,
    /// Whether the connection may carry another request after this body.
    pub keep_alive: bool,
}

/// Parses a response head from the start of `buf`: `Ok(None)` when incomplete, else the head
/// and its length in bytes.
pub fn parse_head(buf: &[u8], method: &http::Method) -> Result<Option<(usize, Head)>, H1Error> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return if buf.len() > MAX_HEAD {
                Err(H1Error::HeadTooLarge)
            } else {
                Ok(None)
            };
        }
        Err(e) => return Err(H1Error::BadHead(e.to_string())),
    };
    let code = resp.code.unwrap_or(0);
    let status =
        http::StatusCode::from_u16(code).map_err(|_| H1Error::BadHead(format!("status {code}")))?;
    let mut map = http::HeaderMap::with_capacity(resp.headers.len());
    for h in resp.headers.iter() {
        let name = http::HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|e| H1Error::BadHead(format!("header name {:?}: {e}", h.name)))?;
        let value = http::HeaderValue::from_bytes(h.value)
            .map_err(|e| H1Error::BadHead(format!("header {:?}: {e}", h.name)))?;
        map.append(name, value);
    }
    let has_token = |name: http::header::HeaderName, token: &str| {
        map.get_all(name).iter().any(|v| {
            v.to_str()
                .unwrap_or("")
                .split(',')
                .any(|t| t.trim().eq_ignore_ascii_case(token))
        })
    };
    let http10 = resp.version == Some(0);
    let mut keep_alive = if http10 {
        has_token(http::header::CONNECTION, "keep-alive")
    } else {
        !has_token(http::header::CONNECTION, "close")
    };
    let framing = if *method == http::Method::HEAD
        || status.is_informational()
        || status == http::StatusCode::NO_CONTENT
        || status == http::StatusCode::NOT_MODIFIED
    {
        Framing::Empty
    } else if has_token(http::header::TRANSFER_ENCODING, "chunked") {
        Framing::Chunked
    } else if let Some(cl) = map.get(http::header::CONTENT_LENGTH) {
        let n = cl
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .ok_or_else(|| H1Error::BadHead("bad Content-Length".into()))?;
        Framing::Length(n)
    } else {
        keep_alive = false;
        Framing::UntilClose
    };
    Ok(Some((
        len,
        Head {
            status,
            headers: map,
            framing,
            keep_alive,
        },
    )))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunk {
    /// Reading hex digits of a chunk size.
    Size {
        size: u64,
        digits: u8,
    },
    /// After the size: an extension or whitespace up to the line end.
    SizeRest {
        size: u64,
    },
    /// Expecting `\n` after the size line's `\r`.
    SizeLf {
        size: u64,
    },
    /// Inside chunk data.
    Data {
        left: u64,
    },
    /// Expecting `\r\n` after chunk data.
    DataCr,
    DataLf,
    /// At the start of a trailer line (or the final empty line).
    TrailerStart,
    /// Inside a trailer line.
    TrailerLine,
    /// Expecting `\n` of the final empty line.
    TrailerEndLf,
}

/// Decodes a response body according to its [`Framing`], incrementally.
#[derive(Clone, Debug)]
pub struct BodyDecoder {
    state: BodyState,
}

#[derive(Clone, Debug)]
enum BodyState {
    Length(u64),
    Chunked(Chunk),
    UntilClose,
    Done,
}

impl BodyDecoder {
    /// A decoder for a body framed as `framing`.
    pub fn new(framing: Framing) -> BodyDecoder {
        let state = match framing {
            Framing::Empty | Framing::Length(0) => BodyState::Done,
            Framing::Length(n) => BodyState::Length(n),
            Framing::Chunked => BodyState::Chunked(Chunk::Size { size: 0, digits: 0 }),
            Framing::UntilClose => BodyState::UntilClose,
        };
        BodyDecoder { state }
    }

    /// Whether the body is complete.
    pub fn is_done(&self) -> bool {
        matches!(self.state, BodyState::Done)
    }

    /// Decodes from `input`, appending body bytes to `out`. Returns how many input bytes were
    /// consumed: all of them unless the body ended inside `input` (the rest belongs to the
    /// next response).
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, H1Error> {
        match &mut self.state {
            BodyState::Done => Ok(0),
            BodyState::UntilClose => {
                out.extend_from_slice(input);
                Ok(input.len())
            }
            BodyState::Length(left) => {
                let take = usize::try_from(*left)
                    .unwrap_or(usize::MAX)
                    .min(input.len());
                out.extend_from_slice(&input[..take]);
                *left -= take as u64;
                if *left == 0 {
                    self.state = BodyState::Done;
                }
                Ok(take)
            }
            BodyState::Chunked(_) => self.decode_chunked(input, out),
        }
    }

    fn decode_chunked(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, H1Error> {
        let BodyState::Chunked(mut st) = self.state else {
            return Ok(0);
        };
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            st = match st {
                Chunk::Size { size, digits } => match b {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        if digits >= 15 {
                            return Err(H1Error::BadChunk("chunk size too large"));
                        }
                        let d = (b as char).to_digit(16).unwrap_or(0) as u64;
                        Chunk::Size {
                            size: size * 16 + d,
                            digits: digits + 1,
                        }
                    }
                    _ if digits == 0 => return Err(H1Error::BadChunk("missing chunk size")),
                    b'\r' => Chunk::SizeLf { size },
                    b'\n' => after_size(size),
                    b';' | b' ' | b'\t' => Chunk::SizeRest { size },
                    _ => return Err(H1Error::BadChunk("bad character in chunk size")),
                },
                Chunk::SizeRest { size } => match b {
                    b'\r' => Chunk::SizeLf { size },
                    b'\n' => after_size(size),
                    _ => Chunk::SizeRest { size },
                },
                Chunk::SizeLf { size } => match b {
                    b'\n' => after_size(size),
                    _ => return Err(H1Error::BadChunk("expected LF after chunk size")),
                },
                Chunk::Data { left } => {
                    let avail = input.len() - i;
                    let take = usize::try_from(left).unwrap_or(usize::MAX).min(avail);
                    out.extend_from_slice(&input[i..i + take]);
                    i += take;
                    let left = left - take as u64;
                    st = if left == 0 {
                        Chunk::DataCr
                    } else {
                        Chunk::Data { left }
                    };
                    continue;
                }
                Chunk::DataCr => match b {
                    b'\r' => Chunk::DataLf,
                    b'\n' => Chunk::Size { size: 0, digits: 0 },
                    _ => return Err(H1Error::BadChunk("expected CRLF after chunk data")),
                },
                Chunk::DataLf => match b {
                    b'\n' => Chunk::Size { size: 0, digits: 0 },
                    _ => return Err(H1Error::BadChunk("expected LF after chunk data")),
                },
                Chunk::TrailerStart => match b {
                    b'\r' => Chunk::TrailerEndLf,
                    b'\n' => {
                        self.state = BodyState::Done;
                        return Ok(i + 1);
                    }
                    _ => Chunk::TrailerLine,
                },
                Chunk::TrailerLine => match b {
                    b'\n' => Chunk::TrailerStart,
                    _ => Chunk::TrailerLine,
                },
                Chunk::TrailerEndLf => match b {
                    b'\n' => {
                        self.state = BodyState::Done;
                        return Ok(i + 1);
                    }
                    _ => return Err(H1Error::BadChunk("expected LF ending the trailer")),
                },
            };
            i += 1;
        }
        self.state = BodyState::Chunked(st);
        Ok(i)
    }

    /// The connection closed: fine only when the body is complete or runs until close.
    pub fn eof(&mut self) -> Result<(), H1Error> {
        match self.state {
            BodyState::Done => Ok(()),
            BodyState::UntilClose => {
                self.state = BodyState::Done;
                Ok(())
            }
            _ => Err(H1Error::UnexpectedEof),
        }
    }
}

fn after_size(size: u64) -> Chunk {
    if size == 0 {
        Chunk::TrailerStart
    } else {
        Chunk::Data { left: size }
    }
}

/// Convenience for tests and callers holding a whole body.
pub fn decode_all(framing: Framing, input: &[u8]) -> Result<(Bytes, usize), H1Error> {
    let mut d = BodyDecoder::new(framing);
    let mut out = Vec::new();
    let n = d.decode(input, &mut out)?;
    if !d.is_done() {
        d.eof()?;
    }
    Ok((Bytes::from(out), n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn head(text: &str) -> Head {
        parse_head(text.as_bytes(), &http::Method::GET)
            .unwrap()
            .unwrap()
            .1
    }

    #[test]
    fn request_encoding() {
        let mut h = http::HeaderMap::new();
        h.insert("authorization", "Bearer t".parse().unwrap());
        h.insert("host", "ignored".parse().unwrap());
        let r = encode_request(
            &http::Method::GET,
            "/api/v1/pods?watch=true",
            "127.0.0.1:6443",
            &h,
            b"",
        );
        assert_eq!(
            r,
            b"GET /api/v1/pods?watch=true HTTP/1.1\r\nHost: 127.0.0.1:6443\r\nauthorization: Bearer t\r\n\r\n"
        );
        let r = encode_request(
            &http::Method::POST,
            "/x",
            "h:1",
            &http::HeaderMap::new(),
            b"{}",
        );
        assert_eq!(
            r,
            b"POST /x HTTP/1.1\r\nHost: h:1\r\nContent-Length: 2\r\n\r\n{}"
        );
    }

    #[test]
    fn heads_and_framing() {
        assert_eq!(
            parse_head(b"HTTP/1.1 200 OK\r\nContent-Le", &http::Method::GET)
                .unwrap()
                .map(|h| h.0),
            None
        );
        let h = head(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        );
        assert_eq!(
            (h.status.as_u16(), h.framing, h.keep_alive),
            (200, Framing::Chunked, true)
        );
        let h = head("HTTP/1.1 410 Gone\r\nContent-Length: 12\r\nConnection: close\r\n\r\n");
        assert_eq!(
            (h.status.as_u16(), h.framing, h.keep_alive),
            (410, Framing::Length(12), false)
        );
        let h = head("HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::UntilClose, false));
        let h =
            head("HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(h.headers["retry-after"], "3");
        assert_eq!(
            head("HTTP/1.1 204 No Content\r\n\r\n").framing,
            Framing::Empty
        );
        assert!(matches!(
            parse_head(b"garbage\r\n\r\n", &http::Method::GET),
            Err(H1Error::BadHead(_))
        ));
        assert!(matches!(
            parse_head(
                b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
                &http::Method::GET
            ),
            Err(H1Error::BadHead(_))
        ));
        let huge = format!("HTTP/1.1 200 OK\r\nX: {}", "a".repeat(MAX_HEAD));
        assert_eq!(
            parse_head(huge.as_bytes(), &http::Method::GET).unwrap_err(),
            H1Error::HeadTooLarge
        );
    }

    #[test]
    fn bodies() {
        let (b, n) = decode_all(Framing::Length(3), b"abcNEXT").unwrap();
        assert_eq!((&b[..], n), (&b"abc"[..], 3));
        let chunked = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-Trailer: y\r\n\r\nNEXT";
        let (b, n) = decode_all(Framing::Chunked, chunked).unwrap();
        assert_eq!(&b[..], b"Wikipedia in\r\n\r\nchunks.");
        assert_eq!(&chunked[n..], b"NEXT");
        assert_eq!(
            decode_all(Framing::Chunked, b"3\r\nab").unwrap_err(),
            H1Error::UnexpectedEof
        );
        assert!(matches!(
            decode_all(Framing::Chunked, b"zz\r\n"),
            Err(H1Error::BadChunk(_))
        ));
        assert!(matches!(
            decode_all(Framing::Chunked, b"1\r\nab\r\n"),
            Err(H1Error::BadChunk(_))
        ));
        assert!(matches!(
            decode_all(Framing::Chunked, b"fffffffffffffffff\r\n"),
            Err(H1Error::BadChunk(_))
        ));
        assert_eq!(
            decode_all(Framing::Length(5), b"ab").unwrap_err(),
            H1Error::UnexpectedEof
        );
        assert_eq!(
            &decode_all(Framing::UntilClose, b"all").unwrap().0[..],
            b"all"
        );
    }

    fn chunk_encode(parts: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in parts.iter().filter(|p| !p.is_empty()) {
            out.extend_from_slice(format!("{:x}\r\n", p.len()).as_bytes());
            out.extend_from_slice(p);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    }

    proptest! {
        /// Chunked decoding gives the same body whatever the read boundaries.
        #[test]
        fn chunked_any_split(
            parts in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..8),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..10),
        ) {
            let wire = chunk_encode(&parts);
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(wire.len() + 1)).collect();
            points.sort_unstable();
            points.push(wire.len());
            let mut d = BodyDecoder::new(Framing::Chunked);
            let mut out = Vec::new();
            let mut prev = 0;
            for p in points {
                let n = d.decode(&wire[prev..p], &mut out).unwrap();
                prop_assert_eq!(n, p - prev);
                prev = p;
            }
            prop_assert!(d.is_done());
            prop_assert_eq!(out, parts.concat());
        }

        /// Fuzzing the parsers with arbitrary bytes (and with mutations of a valid answer):
        /// a typed error or a result, never a panic, and never more body than was sent.
        #[test]
        fn arbitrary_bytes_never_panic(
            junk in proptest::collection::vec(any::<u8>(), 0..300),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
            split in any::<prop::sample::Index>(),
        ) {
            let mut valid = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\
                Content-Type: application/json\r\n\r\n5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\n\r\n"
                .to_vec();
            for (i, b) in &flips {
                let at = i.index(valid.len());
                valid[at] = *b;
            }
            for input in [&junk, &valid] {
                let _ = parse_head(input, &http::Method::GET);
                if let Ok(Some((len, head))) = parse_head(input, &http::Method::GET) {
                    let body = &input[len..];
                    let mut d = BodyDecoder::new(head.framing);
                    let mut out = Vec::new();
                    let cut = split.index(body.len() + 1);
                    if let Ok(n) = d.decode(&body[..cut], &mut out) {
                        prop_assert!(n <= cut);
                        if n == cut {
                            let _ = d.decode(&body[cut..], &mut out);
                        }
                    }
                    let _ = d.eof();
                    prop_assert!(out.len() <= body.len());
                }
                for framing in [Framing::Chunked, Framing::Length(7), Framing::UntilClose] {
                    let mut d = BodyDecoder::new(framing);
                    let mut out = Vec::new();
                    let _ = d.decode(input, &mut out);
                    prop_assert!(out.len() <= input.len());
                }
            }
        }
    }
}
