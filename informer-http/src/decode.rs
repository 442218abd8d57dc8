//! Decoding answers: the watch stream (one JSON event per line, fed in arbitrary chunks) and
//! list bodies.
//!
//! Everything here is pure: bytes in, values out, no I/O. A transport feeds whatever chunks the
//! network delivers into a [`WatchDecoder`] and pulls events until none is complete.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use informer_core::object::FromJson;
use informer_core::protocol::{DecodeFailure, DecodeKind, Failure, ListPage, WatchEvent};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use crate::status::StatusObject;

mod list_stream;

pub use list_stream::ListDecoder;

pub use crate::transport::KnownObjects;

/// Default bound on one watch line (one event): 16 MiB.
///
/// kube-apiserver refuses objects over 1.5 MiB by default (etcd's request limit), so a line
/// longer than this is a broken stream, not a big object.
pub const DEFAULT_MAX_LINE: usize = 16 * 1024 * 1024;

/// The annotation on the bookmark that ends a streaming list's initial events.
pub const INITIAL_EVENTS_END_ANNOTATION: &str = "k8s.io/initial-events-end";

/// Why a line, an event or a list body could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// A line exceeded the configured limit. The decoder drops it up to its newline and goes on
    /// with the next line.
    LineTooLong {
        /// The limit in bytes.
        limit: usize,
    },
    /// The line or body is not JSON, or not shaped like a watch event / list.
    Malformed {
        /// What the JSON parser said.
        message: String,
    },
    /// A watch event whose `type` is none of `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`, `ERROR`.
    UnknownEventType {
        /// The `type` as sent.
        event_type: String,
    },
    /// One object could not be decoded into the requested type. Names the object as far as
    /// its JSON allows.
    Object {
        /// The watch event type, `None` for a list item.
        event_type: Option<String>,
        /// The object's `kind`, when known.
        kind: Option<String>,
        /// The object's `metadata.namespace`, when known.
        namespace: Option<String>,
        /// The object's `metadata.name`, when known.
        name: Option<String>,
        /// What the deserializer said.
        message: String,
    },
    /// The stream ended in the middle of a line.
    Truncated {
        /// How many bytes of the unfinished line were received.
        len: usize,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::LineTooLong { limit } => {
                write!(f, "watch event longer than the limit of {limit} bytes")
            }
            DecodeError::Malformed { message } => write!(f, "malformed JSON: {message}"),
            DecodeError::UnknownEventType { event_type } => {
                write!(f, "unknown watch event type {event_type:?}")
            }
            DecodeError::Object {
                event_type,
                kind,
                namespace,
                name,
                message,
            } => {
                write!(f, "cannot decode ")?;
                if let Some(t) = event_type {
                    write!(f, "{t} event object ")?;
                } else {
                    write!(f, "list item ")?;
                }
                write!(f, "{}", kind.as_deref().unwrap_or("(unknown kind)"))?;
                match (namespace.as_deref(), name.as_deref()) {
                    (Some(ns), Some(n)) if !ns.is_empty() => write!(f, " {ns}/{n}")?,
                    (_, Some(n)) => write!(f, " {n}")?,
                    _ => {}
                }
                write!(f, ": {message}")
            }
            DecodeError::Truncated { len } => {
                write!(f, "stream ended inside a line ({len} bytes unterminated)")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

impl DecodeError {
    /// The kind of this error in the core's vocabulary.
    pub fn kind(&self) -> DecodeKind {
        match self {
            DecodeError::LineTooLong { .. } => DecodeKind::TooLarge,
            DecodeError::Object { .. } => DecodeKind::Object,
            DecodeError::Truncated { .. } => DecodeKind::Truncated,
            DecodeError::Malformed { .. } => DecodeKind::Malformed,
            DecodeError::UnknownEventType { .. } => DecodeKind::UnknownEventType,
        }
    }

    /// This error as the [`Failure::Decode`] the reflector acts on.
    pub fn to_failure(&self) -> Failure {
        Failure::Decode(DecodeFailure {
            kind: self.kind(),
            message: self.to_string(),
        })
    }
}

/// What [`LineDecoder::next_line`] yields.
#[derive(Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// A complete line, without its `\n`.
    Complete(&'a [u8]),
    /// A line over the limit: reported once, then skipped up to its newline.
    TooLong,
}

/// Splits a byte stream into `\n`-terminated lines, whatever the chunk boundaries.
///
/// One buffer, reused: consumed lines are dropped lazily when the next chunk arrives, so only
/// the unfinished tail is ever moved. Memory is bounded by the line limit plus the largest
/// chunk fed: a line over the limit is reported as [`Line::TooLong`] as soon as it is known to
/// be too long, and its remaining bytes are discarded as they arrive.
#[derive(Debug)]
pub struct LineDecoder {
    buf: Vec<u8>,
    /// Start of the first unconsumed line in `buf`.
    start: usize,
    /// Everything in `buf[start..scanned]` is known to contain no `\n`.
    scanned: usize,
    max_line: usize,
    /// Dropping the rest of an over-long line.
    skipping: bool,
}

impl Default for LineDecoder {
    fn default() -> Self {
        LineDecoder::new(DEFAULT_MAX_LINE)
    }
}

impl LineDecoder {
    /// A decoder refusing lines longer than `max_line` bytes (not counting the `\n`).
    pub fn new(max_line: usize) -> LineDecoder {
        LineDecoder {
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            max_line,
            skipping: false,
        }
    }

    /// The line limit.
    pub fn max_line(&self) -> usize {
        self.max_line
    }

    /// Bytes held for lines not yet returned.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Appends a chunk of the stream.
    pub fn feed(&mut self, mut data: &[u8]) {
        if self.skipping {
            match memchr::memchr(b'\n', data) {
                Some(i) => {
                    self.skipping = false;
                    data = &data[i + 1..];
                }
                None => return,
            }
        }
        if data.is_empty() {
            return;
        }
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.scanned -= self.start;
            self.start = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// The next complete line, [`Line::TooLong`] for an over-long one, or `None` when more bytes
    /// are needed.
    pub fn next_line(&mut self) -> Option<Line<'_>> {
        match memchr::memchr(b'\n', &self.buf[self.scanned..]) {
            Some(i) => {
                let end = self.scanned + i;
                let begin = self.start;
                self.start = end + 1;
                self.scanned = end + 1;
                if end - begin > self.max_line {
                    Some(Line::TooLong)
                } else {
                    Some(Line::Complete(&self.buf[begin..end]))
                }
            }
            None => {
                self.scanned = self.buf.len();
                if self.buf.len() - self.start > self.max_line {
                    self.buf.truncate(self.start);
                    self.scanned = self.start;
                    self.skipping = true;
                    Some(Line::TooLong)
                } else {
                    if self.start == self.buf.len() && self.start > 0 {
                        // Everything consumed: reuse the buffer from its start.
                        self.buf.clear();
                        self.start = 0;
                        self.scanned = 0;
                    }
                    None
                }
            }
        }
    }

    /// At the end of the stream: the unterminated last line, if any (empty when it was being
    /// skipped). Call after [`LineDecoder::next_line`] returned `None`.
    pub fn finish(&mut self) -> Option<&[u8]> {
        if self.skipping || self.start >= self.buf.len() {
            self.skipping = false;
            return None;
        }
        let begin = self.start;
        self.start = self.buf.len();
        self.scanned = self.buf.len();
        Some(&self.buf[begin..])
    }
}

#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(rename = "type", borrow)]
    event_type: Cow<'a, str>,
    #[serde(borrow)]
    object: &'a RawValue,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct IdentMeta {
    name: Option<String>,
    namespace: Option<String>,
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
    annotations: Option<BTreeMap<String, String>>,
}

/// Just enough of an object to name it in an error (or read a bookmark).
#[derive(Deserialize, Default)]
#[serde(default)]
struct Ident {
    kind: Option<String>,
    metadata: IdentMeta,
}

fn object_error(event_type: Option<&str>, raw: &str, err: serde_json::Error) -> DecodeError {
    let ident: Ident = serde_json::from_str(raw).unwrap_or_default();
    DecodeError::Object {
        event_type: event_type.map(str::to_string),
        kind: ident.kind,
        namespace: ident.metadata.namespace.filter(|n| !n.is_empty()),
        name: ident.metadata.name,
        message: err.to_string(),
    }
}

/// Decodes `raw` into `T` only when it is a JSON object: serde's derived structs also accept a
/// JSON array (fields by position), so `["Failure", …]` would pass for a `Status` or a bookmark.
fn from_json_object<T: DeserializeOwned>(raw: &str) -> Result<T, String> {
    if !raw.trim_start().starts_with('{') {
        return Err("expected a JSON object".into());
    }
    serde_json::from_str(raw).map_err(|e| e.to_string())
}

/// Decodes one watch line (`{"type":…,"object":{…}}`) into an event.
///
/// `ERROR` events become [`WatchEvent::Error`] with the server's `Status` classified (410 →
/// [`Failure::Expired`], …). A `BOOKMARK` carrying `k8s.io/initial-events-end: "true"` sets
/// `initial_events_end`.
///
/// One pass over the line when it is well-formed and `type` precedes `object` (as
/// kube-apiserver writes it); otherwise a second, slower pass works out what is wrong and names
/// the object.
pub fn decode_event<K: FromJson>(line: &[u8]) -> Result<WatchEvent<K>, DecodeError> {
    if let Some(ev) = straight_event(line) {
        return Ok(ev);
    }
    match serde_json::from_slice::<FastEvent<K>>(line) {
        Ok(FastEvent(ev)) => Ok(ev),
        Err(_) => decode_event_slow(line),
    }
}

/// The object that starts `text` (at its `{`) and its length, by `K`'s own reader when it has
/// one ([`FromJson::fast_reader`]: [`DynamicObject`](informer_core::object::DynamicObject)'s reads
/// the raw members, most of an object's bytes, several bytes a step where serde_json reads
/// one, and gives the same object). `None` for a type without one, or when the reader leaves
/// the object to serde_json.
pub(crate) fn straight_object<K: FromJson>(text: &str) -> Option<(K, usize)> {
    K::fast_reader()?(text)
}

/// `text` without its leading JSON whitespace (only these four: serde_json refuses others).
fn skip_json_space(text: &str) -> &str {
    text.trim_start_matches([' ', '\n', '\t', '\r'])
}

/// What makes an event of an object.
type Wrap<K> = fn(Arc<K>) -> WatchEvent<K>;

/// An `ADDED`, `MODIFIED` or `DELETED` event of a type with its own JSON reader
/// ([`FromJson::fast_reader`]) in the form kube-apiserver writes
/// (`{"type":"…","object":{…}}`, whitespace allowed where JSON allows it), its object read by
/// that reader; `None` for anything else, which the serde_json way then decodes to the same
/// event or refuses. For a type without a reader, `None` at once: the check is on the type,
/// settled when this is compiled for it.
fn straight_event<K: FromJson>(line: &[u8]) -> Option<WatchEvent<K>> {
    let read = K::fast_reader()?;
    let text = std::str::from_utf8(line).ok()?;
    let rest = skip_json_space(text).strip_prefix('{')?;
    let rest = skip_json_space(rest).strip_prefix(r#""type""#)?;
    let rest = skip_json_space(rest).strip_prefix(':')?;
    let rest = skip_json_space(rest);
    let (wrap, rest): (Wrap<K>, &str) = if let Some(rest) = rest.strip_prefix(r#""ADDED""#) {
        (WatchEvent::Added, rest)
    } else if let Some(rest) = rest.strip_prefix(r#""MODIFIED""#) {
        (WatchEvent::Modified, rest)
    } else {
        (WatchEvent::Deleted, rest.strip_prefix(r#""DELETED""#)?)
    };
    let rest = skip_json_space(rest).strip_prefix(',')?;
    let rest = skip_json_space(rest).strip_prefix(r#""object""#)?;
    let rest = skip_json_space(rest).strip_prefix(':')?;
    let rest = skip_json_space(rest);
    let (obj, len) = read(rest)?;
    let rest = skip_json_space(rest.get(len..)?).strip_prefix('}')?;
    skip_json_space(rest)
        .is_empty()
        .then(|| wrap(Arc::new(obj)))
}

/// The event types, as sent.
#[derive(Deserialize, Clone, Copy)]
enum EventType {
    #[serde(rename = "ADDED")]
    Added,
    #[serde(rename = "MODIFIED")]
    Modified,
    #[serde(rename = "DELETED")]
    Deleted,
    #[serde(rename = "BOOKMARK")]
    Bookmark,
    #[serde(rename = "ERROR")]
    Error,
}

/// Single-pass event decoding: `type` first, then `object` straight into its final type. Any
/// irregularity is an error here and sends the line to [`decode_event_slow`].
struct FastEvent<K>(WatchEvent<K>);

impl<'de, K: DeserializeOwned> Deserialize<'de> for FastEvent<K> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<K>(PhantomData<fn() -> K>);
        impl<'de, K: DeserializeOwned> serde::de::Visitor<'de> for V<K> {
            type Value = FastEvent<K>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a watch event")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                use serde::de::Error as _;
                let mut ty: Option<EventType> = None;
                let mut ev: Option<WatchEvent<K>> = None;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    match (&*key, ty) {
                        ("type", _) => ty = Some(map.next_value()?),
                        ("object", None) => return Err(A::Error::custom("object before type")),
                        ("object", Some(t)) => {
                            ev = Some(match t {
                                EventType::Added => WatchEvent::Added(Arc::new(map.next_value()?)),
                                EventType::Modified => {
                                    WatchEvent::Modified(Arc::new(map.next_value()?))
                                }
                                EventType::Deleted => {
                                    WatchEvent::Deleted(Arc::new(map.next_value()?))
                                }
                                EventType::Bookmark => {
                                    let raw: &'de RawValue = map.next_value()?;
                                    let ident: Ident = from_json_object(raw.get())
                                        .map_err(|_| A::Error::custom("bad bookmark"))?;
                                    bookmark(ident).map_err(|_| A::Error::custom("bad bookmark"))?
                                }
                                EventType::Error => {
                                    let raw: &'de RawValue = map.next_value()?;
                                    let status: StatusObject = from_json_object(raw.get())
                                        .map_err(|_| A::Error::custom("bad status"))?;
                                    WatchEvent::Error(status.to_failure(0, None))
                                }
                            })
                        }
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                ev.map(FastEvent)
                    .ok_or_else(|| A::Error::custom("no object"))
            }
        }
        d.deserialize_map(V(PhantomData))
    }
}

fn bookmark<K>(ident: Ident) -> Result<WatchEvent<K>, DecodeError> {
    let Some(resource_version) = ident.metadata.resource_version else {
        return Err(DecodeError::Object {
            event_type: Some("BOOKMARK".into()),
            kind: ident.kind,
            namespace: None,
            name: None,
            message: "bookmark without metadata.resourceVersion".into(),
        });
    };
    let initial_events_end = ident
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(INITIAL_EVENTS_END_ANNOTATION))
        .is_some_and(|v| v == "true");
    Ok(WatchEvent::Bookmark {
        resource_version,
        initial_events_end,
    })
}

/// Two passes: the event with its object as raw JSON, then the object; names what fails.
fn decode_event_slow<K: DeserializeOwned>(line: &[u8]) -> Result<WatchEvent<K>, DecodeError> {
    let ev: RawEvent<'_> = serde_json::from_slice(line).map_err(|e| DecodeError::Malformed {
        message: e.to_string(),
    })?;
    let raw = ev.object.get();
    let wrap: fn(Arc<K>) -> WatchEvent<K> = match &*ev.event_type {
        "ADDED" => WatchEvent::Added,
        "MODIFIED" => WatchEvent::Modified,
        "DELETED" => WatchEvent::Deleted,
        "BOOKMARK" => {
            let ident: Ident = from_json_object(raw).map_err(|e| DecodeError::Object {
                event_type: Some("BOOKMARK".into()),
                kind: None,
                namespace: None,
                name: None,
                message: e.to_string(),
            })?;
            return bookmark(ident);
        }
        "ERROR" => {
            let status: StatusObject =
                from_json_object(raw).map_err(|e| DecodeError::Malformed {
                    message: format!("ERROR event without a Status: {e}"),
                })?;
            return Ok(WatchEvent::Error(status.to_failure(0, None)));
        }
        other => {
            return Err(DecodeError::UnknownEventType {
                event_type: other.to_string(),
            });
        }
    };
    match serde_json::from_str::<K>(raw) {
        Ok(obj) => Ok(wrap(Arc::new(obj))),
        Err(e) => Err(object_error(Some(&ev.event_type), raw, e)),
    }
}

/// Incremental watch stream decoder: feed chunks, pull events.
///
/// Every complete line becomes one `Result`: an event, or a [`DecodeError`] after which the
/// decoder simply continues with the next line (one bad object does not end the stream).
/// Blank lines are skipped. The result sequence does not depend on how the stream was chunked.
#[derive(Debug)]
pub struct WatchDecoder<K> {
    lines: LineDecoder,
    _k: PhantomData<fn() -> K>,
}

impl<K: FromJson> Default for WatchDecoder<K> {
    fn default() -> Self {
        WatchDecoder::new(DEFAULT_MAX_LINE)
    }
}

impl<K: FromJson> WatchDecoder<K> {
    /// A decoder with a bound of `max_line` bytes per event.
    pub fn new(max_line: usize) -> Self {
        WatchDecoder {
            lines: LineDecoder::new(max_line),
            _k: PhantomData,
        }
    }

    /// Appends a chunk of the response body.
    pub fn feed(&mut self, data: &[u8]) {
        self.lines.feed(data);
    }

    /// The next decoded event or error, or `None` when more bytes are needed.
    pub fn next_event(&mut self) -> Option<Result<WatchEvent<K>, DecodeError>> {
        loop {
            match self.lines.next_line()? {
                Line::TooLong => {
                    return Some(Err(DecodeError::LineTooLong {
                        limit: self.lines.max_line(),
                    }));
                }
                Line::Complete(line) => {
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    return Some(decode_event(line));
                }
            }
        }
    }

    /// At the end of the body: decodes an unterminated last line, if any. A complete JSON event
    /// without its newline is accepted; anything else is [`DecodeError::Truncated`].
    pub fn finish(&mut self) -> Option<Result<WatchEvent<K>, DecodeError>> {
        let rest = self.lines.finish()?;
        if rest.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        Some(match decode_event(rest) {
            Err(DecodeError::Malformed { .. }) => Err(DecodeError::Truncated { len: rest.len() }),
            other => other,
        })
    }
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct ListMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
    #[serde(rename = "remainingItemCount")]
    remaining_item_count: Option<i64>,
}

/// Decodes a list answer (`{"kind":"…List","metadata":{…},"items":[…]}`) into a page.
///
/// The whole body at once through a [`ListDecoder`]: fails with [`DecodeError::Object`] naming
/// the first item that does not decode, or [`DecodeError::Malformed`] when the body is not a list
/// object.
pub fn decode_list<K: FromJson>(body: &[u8]) -> Result<ListPage<K>, DecodeError> {
    let mut decoder = ListDecoder::new();
    decoder.feed(body)?;
    decoder.finish()
}

#[cfg(test)]
mod tests;
