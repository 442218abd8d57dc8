//! The bodies of the fuzz targets, as plain functions: `fuzz_targets/*.rs` hand them libFuzzer's
//! input, and this crate's own tests replay the committed seeds (`corpus/<target>/`) and every
//! saved crash (`regressions/<target>/`) through them without libFuzzer
//! (`cargo test --manifest-path fuzz/Cargo.toml --lib`, run by `cargo xtask test-all`).
//!
//! Each function panics when an invariant fails; a panic is a finding. Inputs are split into
//! parameters (chunk sizes, limits) and payload by their first bytes, so the fuzzer explores
//! both.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use informer_http::core::object::FromJson;
use informer_http::core::protocol::ListPage;
use informer_http::core::{object::DynamicObject, object::Object};
use informer_http::decode::{DecodeError, LineDecoder, ListDecoder, WatchDecoder};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

/// Cut points for `len` bytes from a seed: a xorshift sequence of chunk sizes in `1..=max`.
fn chunk_sizes(len: usize, seed: u8) -> Vec<usize> {
    let mut x = u64::from(seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let max = 1 + usize::from(seed % 64);
    let mut sizes = Vec::new();
    let mut done = 0;
    while done < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let n = (1 + (x as usize) % max).min(len - done);
        sizes.push(n);
        done += n;
    }
    sizes
}

fn chunks(data: &[u8], seed: u8) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut at = 0;
    for n in chunk_sizes(data.len(), seed) {
        out.push(&data[at..at + n]);
        at += n;
    }
    out
}

/// An event or error, rendered for comparison.
fn show<T: Debug, E: Debug>(r: &Result<T, E>) -> String {
    format!("{r:?}")
}

/// Decodes a watch stream fed in `pieces` with a line limit; also checks the decoder's memory
/// bound after each piece (the limit, once every complete line is taken out).
fn watch_stream(pieces: &[&[u8]], max_line: usize) -> Vec<String> {
    let mut d = WatchDecoder::<DynamicObject>::new(max_line);
    let mut lines = LineDecoder::new(max_line);
    let mut out = Vec::new();
    for p in pieces {
        d.feed(p);
        while let Some(ev) = d.next_event() {
            out.push(show(&ev));
        }
        lines.feed(p);
        while lines.next_line().is_some() {}
        assert!(
            lines.buffered() <= max_line,
            "{} bytes held with a limit of {max_line}",
            lines.buffered()
        );
    }
    if let Some(ev) = d.finish() {
        out.push(show(&ev));
    }
    out
}

/// Watch-event line decoder: the events (and errors) do not depend on how the stream is cut;
/// memory stays within the line limit; a line over the limit is `LineTooLong`, never decoded.
///
/// Input: `[limit byte, chunk seed, stream...]`.
pub fn watch_decoder(data: &[u8]) {
    let [limit, seed, stream @ ..] = data else {
        return;
    };
    // Small limits reach the over-long paths; 0 means the default.
    let max_line = match *limit {
        0 => informer_http::decode::DEFAULT_MAX_LINE,
        n => usize::from(n) * 4,
    };
    let whole = watch_stream(&[stream], max_line);
    let cut = watch_stream(&chunks(stream, *seed), max_line);
    assert_eq!(whole, cut, "chunking changed the events");
    let bytewise: Vec<&[u8]> = stream.chunks(1).collect();
    if stream.len() <= 4096 {
        assert_eq!(whole, watch_stream(&bytewise, max_line), "byte by byte");
    }
    // Every complete line over the limit is reported as too long, not decoded.
    let over = stream
        .split(|&b| b == b'\n')
        .rev()
        .skip(1) // the unterminated tail
        .filter(|l| l.len() > max_line)
        .count();
    let too_long = whole
        .iter()
        .filter(|e| e.starts_with("Err(LineTooLong"))
        .count();
    assert!(too_long >= over, "{over} long lines, {too_long} reported");
}

/// `metadata` of a list, as the reference reads it.
#[derive(Deserialize, Default)]
#[serde(default)]
struct ListMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
    #[serde(rename = "remainingItemCount")]
    remaining_item_count: Option<i64>,
}

#[derive(Deserialize)]
struct TypedList<K> {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default = "none")]
    items: Option<Vec<K>>,
}

fn none<T>() -> Option<T> {
    None
}

/// The list's structure parsed strictly outside the items: every other value must be a
/// `serde_json::Value` (valid UTF-8, paired surrogates, numbers in range), `items` null or an
/// array of JSON texts.
struct Skeleton;

impl<'de> Deserialize<'de> for Skeleton {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Skeleton;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Skeleton, A::Error> {
                while let Some(key) = map.next_key::<String>()? {
                    if key == "items" {
                        map.next_value::<Option<Vec<Box<RawValue>>>>()?;
                    } else {
                        map.next_value::<serde_json::Value>()?;
                    }
                }
                Ok(Skeleton)
            }
        }
        d.deserialize_map(V)
    }
}

/// serde_json's reading of a list body: the page, or `None` when it is not a list of `K`.
fn oracle<K: DeserializeOwned>(body: &[u8]) -> Option<ListPage<K>> {
    serde_json::from_slice::<Skeleton>(body).ok()?;
    let list = serde_json::from_slice::<TypedList<K>>(body).ok()?;
    Some(ListPage {
        items: list
            .items
            .unwrap_or_default()
            .into_iter()
            .map(Arc::new)
            .collect(),
        resource_version: list.metadata.resource_version.unwrap_or_default(),
        continue_token: list.metadata.continue_token.filter(|c| !c.is_empty()),
        remaining_item_count: list
            .metadata
            .remaining_item_count
            .and_then(|n| u64::try_from(n).ok()),
    })
}

fn page_text<K: Debug>(p: &ListPage<K>) -> String {
    format!(
        "items={:?} rv={:?} continue={:?} remaining={:?}",
        p.items, p.resource_version, p.continue_token, p.remaining_item_count
    )
}

fn streamed<K: FromJson>(pieces: &[&[u8]]) -> Result<ListPage<K>, DecodeError> {
    let mut d = ListDecoder::<K>::new();
    for p in pieces {
        d.feed(p)?;
    }
    d.finish()
}

fn list_as<K: FromJson + Debug>(body: &[u8], seed: u8) {
    let expected = oracle::<K>(body).map(|p| page_text(&p));
    for (how, got) in [
        ("whole", streamed::<K>(&[body])),
        ("chunked", streamed::<K>(&chunks(body, seed))),
    ] {
        let got = got.as_ref().map(page_text).ok();
        assert_eq!(
            got,
            expected,
            "{how}: decoder and serde_json disagree on {:?}",
            String::from_utf8_lossy(body)
        );
    }
}

/// The objects of a list, held as a cache holds them, for `ListDecoder::with_known`.
struct Held(std::collections::BTreeMap<(Option<String>, String), Arc<DynamicObject>>);

impl informer_http::decode::KnownObjects<DynamicObject> for Held {
    fn known(
        &self,
        key: informer_http::core::object::KeyRef<'_>,
        rv: &str,
    ) -> Option<Arc<DynamicObject>> {
        let obj = self
            .0
            .get(&(key.namespace.map(str::to_string), key.name.to_string()))?;
        (obj.resource_version() == Some(rv)).then(|| obj.clone())
    }
}

/// The list decoder given the oracle's objects as known ones (every other item, by `seed`):
/// the same page. Only a key listed once at its resourceVersion is held: two items with the
/// same key and resourceVersion are one object to the decoder (as they are on a server).
fn list_known(body: &[u8], seed: u8) {
    let Some(page) = oracle::<DynamicObject>(body) else {
        return;
    };
    let mut seen = std::collections::BTreeMap::new();
    for obj in &page.items {
        let k = obj.key_ref();
        *seen
            .entry((k.namespace, k.name, obj.resource_version()))
            .or_insert(0) += 1;
    }
    let mut held = std::collections::BTreeMap::new();
    for (i, obj) in page.items.iter().enumerate() {
        let k = obj.key_ref();
        let once = seen[&(k.namespace, k.name, obj.resource_version())] == 1;
        if once && (i + usize::from(seed)) % 2 == 0 {
            let k = obj.key_ref();
            held.insert(
                (k.namespace.map(str::to_string), k.name.to_string()),
                obj.clone(),
            );
        }
    }
    let held = Arc::new(Held(held));
    let mut d = ListDecoder::<DynamicObject>::new().with_known(held.clone());
    let got = chunks(body, seed)
        .iter()
        .try_for_each(|p| d.feed(p))
        .and_then(|()| d.finish());
    let got = got.expect("a list serde_json decodes, with known objects");
    assert_eq!(
        page_text(&got),
        page_text(&page),
        "known objects changed the page of {:?}",
        String::from_utf8_lossy(body)
    );
}

/// List decoder fed in random chunkings, with serde_json as the oracle: the same items,
/// resourceVersion, continue token and remaining count, or both an error; for `DynamicObject`
/// also with some of the objects known (`ListDecoder::with_known`): the same page.
///
/// Input: `[item type and chunk seed, body...]`; even: items as `serde_json::Value` (any JSON),
/// odd: as `DynamicObject`.
pub fn list_decoder(data: &[u8]) {
    let [sel, body @ ..] = data else {
        return;
    };
    if sel % 2 == 0 {
        list_as::<serde_json::Value>(body, *sel / 2);
    } else {
        list_as::<DynamicObject>(body, *sel / 2);
        list_known(body, *sel / 2);
    }
}

/// Kubeconfig parsing: any text is a kubeconfig or a typed error; resolving each context is a
/// config or a typed error. Inputs naming paths (`/`, `\`) are only parsed, not resolved: the
/// resolution reads the files they name.
pub fn kubeconfig(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(k) =
        informer_http::config::Kubeconfig::from_yaml("/nonexistent-informer-fuzz/config", &text)
    else {
        return;
    };
    let _ = format!("{k:?}");
    if text.contains(['/', '\\']) {
        return;
    }
    let contexts: Vec<String> = k.contexts().map(str::to_string).collect();
    for c in contexts.iter().map(|c| Some(c.as_str())).chain([None]) {
        if let Ok(cfg) = k.config(c) {
            let debug = format!("{cfg:?}");
            if let Ok(Some(auth)) = cfg.authorization() {
                let secret = auth.expose();
                // A credential never shows in Debug (unless the text shows it elsewhere).
                let token = secret
                    .trim_start_matches("Bearer ")
                    .trim_start_matches("Basic ");
                if token.len() >= 12 && !debug.contains("***") {
                    assert!(!debug.contains(token), "credential in Debug: {debug}");
                }
            }
        }
    }
}

/// In-cluster configuration: host, port, token, CA and namespace from the input (split at
/// `0xff`), written to a service-account directory. A config or a typed error; the token never
/// in its Debug.
pub fn incluster(data: &[u8]) {
    let mut parts = data.split(|&b| b == 0xff);
    let mut next = || parts.next().unwrap_or_default();
    let host = String::from_utf8_lossy(next()).into_owned();
    let port = String::from_utf8_lossy(next()).into_owned();
    let (token, ca, ns) = (next(), next(), next());
    let dir = std::env::temp_dir().join(format!("informer-fuzz-incluster-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("token"), token).unwrap();
    std::fs::write(dir.join("ca.crt"), ca).unwrap();
    std::fs::write(dir.join("namespace"), ns).unwrap();
    if let Ok(cfg) = informer_http::config::incluster_from(&dir, Some(&host), Some(&port)) {
        let debug = format!("{cfg:?}");
        let token = String::from_utf8_lossy(token);
        let token = token.trim();
        let elsewhere = [&host, &port].iter().any(|s| s.contains(token))
            || String::from_utf8_lossy(ca).contains(token)
            || String::from_utf8_lossy(ns).contains(token)
            || debug.contains("informer-fuzz-incluster");
        if token.len() >= 12 && !elsewhere {
            assert!(!debug.contains(token), "token in Debug: {debug}");
        }
        let auth = cfg.authorization().unwrap().unwrap();
        assert!(auth.expose().starts_with("Bearer "));
    }
}

/// What a connection delivered: each response's status and body, then how it ended.
fn h1_connection(pieces: &[&[u8]]) -> (Vec<(u16, Vec<u8>)>, String) {
    use informer_http::h1::{BodyDecoder, Framing, parse_head};
    let mut responses = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut fed = pieces.iter();
    let mut more = |buf: &mut Vec<u8>| match fed.next() {
        Some(p) => {
            buf.extend_from_slice(p);
            true
        }
        None => false,
    };
    loop {
        // The head.
        let (len, head) = loop {
            match parse_head(&buf, &http::Method::GET) {
                Ok(Some(h)) => break h,
                Ok(None) => {
                    if !more(&mut buf) {
                        return (responses, format!("eof in head after {} bytes", buf.len()));
                    }
                }
                Err(e) => return (responses, format!("head error {e:?}")),
            }
        };
        assert!(len <= buf.len());
        buf.drain(..len);
        let mut body = BodyDecoder::new(head.framing);
        let mut out = Vec::new();
        loop {
            if !buf.is_empty() {
                match body.decode(&buf, &mut out) {
                    Ok(n) => {
                        assert!(n <= buf.len());
                        buf.drain(..n);
                    }
                    Err(e) => return (responses, format!("body error {e:?}")),
                }
            }
            if body.is_done() {
                break;
            }
            if !more(&mut buf) {
                let end = body.eof();
                responses.push((head.status.as_u16(), out));
                return (responses, format!("eof in body: {end:?}"));
            }
        }
        if let Framing::Length(n) = head.framing {
            assert_eq!(out.len() as u64, n, "Content-Length body");
        }
        responses.push((head.status.as_u16(), out));
        if !head.keep_alive {
            return (responses, "closed (no keep-alive)".into());
        }
        if head.framing == Framing::UntilClose {
            unreachable!("a body until close is never keep-alive");
        }
    }
}

/// The smol backend's HTTP/1.1 response parser over a connection carrying several responses
/// (status line, headers, chunked and Content-Length bodies, reuse): what the connection
/// delivers does not depend on how the bytes arrive.
///
/// Input: `[chunk seed, bytes...]`.
pub fn h1_response(data: &[u8]) {
    let [seed, stream @ ..] = data else {
        return;
    };
    let whole = h1_connection(&[stream]);
    let cut = h1_connection(&chunks(stream, *seed));
    // A head is only complete once its empty line is there; given all bytes at once it may
    // fail where piecewise it would wait for more, so compare only the responses delivered,
    // and the ending when both ended alike.
    assert_eq!(whole.0, cut.0, "chunking changed the responses");
}

/// The core informer driven through the deterministic simulation: a model API server with
/// faults (expired lists and watches, resets, 429s, hung watches, compaction), handlers added
/// and removed, resyncs, on a virtual clock, with the sim's checks (no handler sees an object
/// go back; every handler's notifications fold consistently; once quiet the cache equals the
/// server and every handler's view equals the cache). The input picks the seed and the
/// parameters.
pub fn informer_core(data: &[u8]) {
    use informer_core::sim::{SimConfig, run_with};
    let mut bytes = data.iter().copied();
    let mut seed = [0u8; 8];
    for b in &mut seed {
        *b = bytes.next().unwrap_or(0);
    }
    let mut cfg = SimConfig::from_seed(u64::from_le_bytes(seed));
    let mut byte = || bytes.next();
    if let Some(b) = byte() {
        cfg.mutations = u32::from(b % 160);
    }
    if let Some(b) = byte() {
        cfg.names = 1 + u32::from(b % 40);
    }
    if let Some(b) = byte() {
        cfg.fault_rate = f64::from(b % 8) / 10.0;
    }
    if let Some(b) = byte() {
        cfg.streaming_list = b & 1 != 0;
        cfg.server_streaming = b & 2 != 0;
        cfg.watch_cache = b & 4 != 0;
        cfg.transform = b & 8 != 0;
        cfg.remove_one = b & 16 != 0;
        cfg.page_size = (b & 32 != 0).then(|| 1 + u32::from(b >> 6));
    }
    if let Some(b) = byte() {
        cfg.resync_check_period = Duration::from_secs(u64::from(b % 40));
    }
    if let Some(b) = byte() {
        cfg.compaction_every = Duration::from_secs(1 + u64::from(b % 90));
    }
    let mut handlers = Vec::new();
    while let Some(b) = byte() {
        if handlers.len() == 6 {
            break;
        }
        handlers.push((b & 0x80 != 0, Duration::from_secs(u64::from(b % 64))));
    }
    if !handlers.is_empty() {
        cfg.handlers_before = handlers.iter().filter(|h| !h.0).map(|h| h.1).collect();
        cfg.handlers_late = handlers.iter().filter(|h| h.0).map(|h| h.1).collect();
    }
    if let Err(f) = run_with(cfg) {
        panic!("{f}");
    }
}

/// Label selectors: the input (up to its first NUL) is parsed as a selector, the rest gives the
/// labels to match. Parsing never panics; a selector that parses prints (`Display`, the
/// canonical form) as text that parses back to an equal selector and prints the same again;
/// and `Selector::matches` agrees, on labels built from the selector's own keys and values
/// and from the input, with a plain matcher written from the grammar's definitions.
pub fn selector(data: &[u8]) {
    use informer_core::object::selector::{Operator, Selector};
    use std::collections::BTreeMap;

    let (text, rest) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let text = String::from_utf8_lossy(text);
    let Ok(sel) = Selector::parse(&text) else {
        return;
    };
    let printed = sel.to_string();
    let again = Selector::parse(&printed)
        .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}, which fails: {e}"));
    assert_eq!(
        again, sel,
        "{text:?} → {printed:?} parses to another selector"
    );
    assert_eq!(again.to_string(), printed, "Display is not canonical");

    // Candidate labels: the selector's keys with its values, numbers around its bounds, and
    // free text from the input.
    let mut keys: Vec<String> = Vec::new();
    let mut values: Vec<String> = vec![String::new(), "x".into(), "0".into(), "-1".into()];
    for r in sel.requirements() {
        keys.push(r.key().to_string());
        for v in r.values() {
            values.push(v.to_string());
            if let Ok(n) = v.parse::<i64>() {
                values.push(n.saturating_add(1).to_string());
                values.push(n.saturating_sub(1).to_string());
            }
        }
    }
    for word in String::from_utf8_lossy(rest).split([',', '\n']) {
        values.push(word.to_string());
    }
    keys.push("other".into());
    let plain = |labels: &BTreeMap<String, String>| {
        sel.requirements().iter().all(|r| {
            let got = labels.get(r.key()).map(String::as_str);
            let vals: Vec<&str> = r.values().collect();
            let int = |v: &str| v.parse::<i64>().ok();
            match r.operator() {
                Operator::Equals | Operator::DoubleEquals | Operator::In => {
                    got.is_some_and(|g| vals.contains(&g))
                }
                Operator::NotEquals | Operator::NotIn => got.is_none_or(|g| !vals.contains(&g)),
                Operator::Exists => got.is_some(),
                Operator::DoesNotExist => got.is_none(),
                Operator::GreaterThan => {
                    matches!((got.and_then(int), int(vals[0])), (Some(g), Some(b)) if g > b)
                }
                Operator::LessThan => {
                    matches!((got.and_then(int), int(vals[0])), (Some(g), Some(b)) if g < b)
                }
                other => panic!("an operator the plain matcher does not know: {other:?}"),
            }
        })
    };
    // Label sets: each rest byte picks, per key, absent or one of the values.
    let mut picks = rest
        .iter()
        .copied()
        .chain([0, 1, 2, 3, 255])
        .collect::<Vec<u8>>();
    picks.truncate(64);
    for (i, seed) in picks.iter().enumerate() {
        let mut labels = BTreeMap::new();
        for (j, k) in keys.iter().enumerate() {
            let x = usize::from(*seed)
                .wrapping_mul(31)
                .wrapping_add(i * 7 + j * 13);
            let choice = x % (values.len() + 1);
            if choice < values.len() {
                labels.insert(k.clone(), values[choice].clone());
            }
        }
        assert_eq!(
            sel.matches(&labels),
            plain(&labels),
            "{printed:?} on {labels:?}"
        );
    }
}

/// The work queue driven by arbitrary operations (add, add_after, add_rate_limited, pop, done,
/// forget, time passing, shutdown) on eight keys, against a plain model of client-go's rules
/// checked after every step: a key is queued at most once and in FIFO order, never handed to
/// two workers at once, a key added while processed comes back after `done`, a delayed key
/// keeps its earliest ready time and becomes ready then, the per-key exponential limiter
/// gives `base × 2^failures` capped, and after shutdown adds are ignored, delayed keys are
/// dropped and `pop` answers `ShutDown` once the queue is empty. Counts (`len`,
/// `num_processing`, `num_delayed`) equal the model's.
pub fn workqueue(data: &[u8]) {
    use informer_core::controller::workqueue::{ItemExponentialRateLimiter, Pop, WorkQueue};
    use informer_core::time::Instant;
    use std::collections::{BTreeMap, BTreeSet, VecDeque};

    const BASE: Duration = Duration::from_millis(5);
    const MAX: Duration = Duration::from_secs(2);
    let mut q: WorkQueue<u8, _> =
        WorkQueue::with_rate_limiter(ItemExponentialRateLimiter::new(BASE, MAX));
    // The model.
    let mut queue: VecDeque<u8> = VecDeque::new();
    let mut dirty: BTreeSet<u8> = BTreeSet::new();
    let mut processing: BTreeSet<u8> = BTreeSet::new();
    let mut delayed: BTreeMap<u8, (Instant, u64)> = BTreeMap::new();
    let mut failures: BTreeMap<u8, u32> = BTreeMap::new();
    let mut shut = false;
    let mut seq = 0u64;
    let mut now = Instant::ZERO;

    fn model_add(
        key: u8,
        shut: bool,
        queue: &mut VecDeque<u8>,
        dirty: &mut BTreeSet<u8>,
        processing: &BTreeSet<u8>,
    ) -> bool {
        if shut || dirty.contains(&key) {
            return false;
        }
        dirty.insert(key);
        if !processing.contains(&key) {
            queue.push_back(key);
        }
        true
    }
    // Delayed keys whose time has come, in (ready time, sequence) order.
    let promote = |now: Instant,
                   delayed: &mut BTreeMap<u8, (Instant, u64)>,
                   queue: &mut VecDeque<u8>,
                   dirty: &mut BTreeSet<u8>,
                   processing: &BTreeSet<u8>,
                   shut: bool| {
        let mut due: Vec<(Instant, u64, u8)> = delayed
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(k, (at, s))| (*at, *s, *k))
            .collect();
        due.sort();
        for (_, _, k) in due {
            delayed.remove(&k);
            model_add(k, shut, queue, dirty, processing);
        }
    };

    let mut bytes = data.iter().copied();
    while let Some(op) = bytes.next() {
        let key = op & 7;
        let arg = bytes.next().unwrap_or(0);
        match op >> 3 & 15 {
            0..=3 => {
                let got = q.add(key);
                let want = model_add(key, shut, &mut queue, &mut dirty, &processing);
                assert_eq!(got, want, "add({key})");
            }
            4 | 5 => {
                let delay = Duration::from_millis(u64::from(arg) * 10);
                q.add_after(key, delay, now);
                if !shut {
                    if delay.is_zero() {
                        model_add(key, shut, &mut queue, &mut dirty, &processing);
                    } else {
                        let ready = now + delay;
                        if delayed.get(&key).is_none_or(|(at, _)| *at > ready) {
                            seq += 1;
                            delayed.insert(key, (ready, seq));
                        }
                    }
                }
            }
            6 => {
                q.add_rate_limited(key, now);
                if !shut {
                    let n = failures.entry(key).or_insert(0);
                    let delay = BASE
                        .checked_mul(1u32.checked_shl(*n).unwrap_or(u32::MAX))
                        .map_or(MAX, |d| d.min(MAX));
                    *n = n.saturating_add(1);
                    let ready = now + delay;
                    if delayed.get(&key).is_none_or(|(at, _)| *at > ready) {
                        seq += 1;
                        delayed.insert(key, (ready, seq));
                    }
                }
            }
            7 => {
                q.forget(&key);
                failures.remove(&key);
            }
            8..=10 => {
                let got = q.pop(now);
                if !shut {
                    promote(now, &mut delayed, &mut queue, &mut dirty, &processing, shut);
                }
                let want = match queue.pop_front() {
                    Some(k) => {
                        dirty.remove(&k);
                        assert!(processing.insert(k), "{k} handed out twice");
                        Pop::Key(k)
                    }
                    None if shut => Pop::ShutDown,
                    None => Pop::Empty,
                };
                assert_eq!(got, want, "pop at {now:?}");
            }
            11 | 12 => {
                // done on a key in hands (or, rarely, one that is not).
                let k = if arg & 1 == 0 {
                    processing
                        .iter()
                        .nth(usize::from(arg >> 1))
                        .copied()
                        .unwrap_or(key)
                } else {
                    key
                };
                let got = q.done(&k);
                let want = processing.remove(&k) && dirty.contains(&k);
                if want {
                    queue.push_back(k);
                }
                assert_eq!(got, want, "done({k})");
            }
            13 | 14 => {
                now = now + Duration::from_millis(u64::from(arg) * 20);
                if arg & 1 == 1 {
                    q.handle_timeout(now);
                    promote(now, &mut delayed, &mut queue, &mut dirty, &processing, shut);
                }
            }
            _ => {
                if arg & 1 == 0 {
                    q.shut_down();
                } else {
                    q.shut_down_with_drain();
                }
                shut = true;
                delayed.clear();
            }
        }
        // Invariants after every step.
        assert_eq!(q.len(), queue.len(), "queued keys");
        assert_eq!(q.num_processing(), processing.len(), "keys in hands");
        assert_eq!(q.num_delayed(), delayed.len(), "delayed keys");
        assert_eq!(q.is_shutting_down(), shut);
        assert_eq!(
            q.poll_timeout(),
            delayed.values().map(|(at, _)| *at).min(),
            "next ready time"
        );
        let distinct: BTreeSet<u8> = queue.iter().copied().collect();
        assert_eq!(distinct.len(), queue.len(), "a key queued twice: {queue:?}");
        assert!(
            queue.iter().all(|k| !processing.contains(k)),
            "a key both queued and in hands"
        );
        assert_eq!(
            q.is_drained(),
            shut && queue.is_empty() && processing.is_empty()
        );
        for k in 0..8u8 {
            assert_eq!(q.num_requeues(&k), failures.get(&k).copied().unwrap_or(0));
        }
    }
}

/// Snapshot decoding (the file a warm restart loads): the first byte picks the object type
/// and its codec (`0` DynamicObject, binary; `1` PartialObjectMetadata, binary; else a JSON
/// type) and, with its top bit clear, has the checksum recomputed so that the fuzzer gets past
/// it; the second byte the number of parts decoded at once and, with the length, the cuts of
/// the streamed decode. Whatever the bytes: a typed error or a whole snapshot, never a panic;
/// decoding in parts gives what decoding at once gives; so does decoding the same bytes as a
/// file is loaded ([`SnapshotStream`](informer_http::core::snapshot::SnapshotStream), its
/// start read until the layout is known, its body fed in random cuts, decoded by the stream or
/// handed out as runs of frames and decoded aside); a decoded snapshot has unique, valid keys,
/// and encodes to bytes that decode to equal objects and encode again to the same bytes.
pub fn snapshot_decode(data: &[u8]) {
    let (Some(&pick), Some(&parts)) = (data.first(), data.get(1)) else {
        return;
    };
    let mut bytes = data[2..].to_vec();
    if pick & 0x80 == 0 && bytes.len() >= 8 {
        let n = bytes.len() - 8;
        let sum = informer_http::core::snapshot::checksum(&bytes[..n]);
        bytes[n..].copy_from_slice(&sum.to_le_bytes());
    }
    let cuts = u64::from(parts) | (bytes.len() as u64) << 8;
    let parts = 1 + usize::from(parts % 5);
    match pick & 0x7f {
        0 => snapshot_round_trip::<DynamicObject>(&bytes, parts, cuts),
        1 => snapshot_round_trip::<informer_http::core::object::PartialObjectMetadata>(
            &bytes, parts, cuts,
        ),
        _ => snapshot_round_trip::<informer_http::core::sim::SimObject>(&bytes, parts, cuts),
    }
}

/// The outcome of [`Snapshot::decode`](informer_http::core::snapshot::Snapshot::decode) and
/// of the streamed decode of the same bytes must be the same: the same objects, or the same
/// error.
fn assert_same_outcome<K: PartialEq + Debug>(
    once: &Result<
        informer_http::core::snapshot::Snapshot<K>,
        informer_http::core::snapshot::SnapshotError,
    >,
    streamed: &Result<
        informer_http::core::snapshot::Snapshot<K>,
        informer_http::core::snapshot::SnapshotError,
    >,
    how: &str,
) {
    match (once, streamed) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a.resource_version, b.resource_version, "{how}");
            assert!(a.items.iter().eq(b.items.iter()), "{how}: other objects");
        }
        (Err(a), Err(b)) => assert_eq!(a, b, "{how}: fails otherwise"),
        (a, b) => panic!(
            "decode {:?} but {how} {:?}",
            a.as_ref().err(),
            b.as_ref().err()
        ),
    }
}

/// Piece sizes for a streamed decode: from empty pieces to whole 64 KiB ones.
struct Cuts(informer_http::core::rng::SplitMix64);

impl Cuts {
    fn next(&mut self) -> usize {
        let r = self.0.next_u64();
        let max = [4u64, 64, 4096, 65536][(r & 3) as usize];
        ((r >> 2) % max) as usize
    }
}

/// Decodes `bytes` as the runtime loads a snapshot file, in pieces cut by `seed`: the start
/// grown until [`SnapshotLayout::read`](informer_http::core::snapshot::SnapshotLayout::read)
/// knows the layout, the tail, then the body. `frames`: the stream hands out runs of whole
/// frames ([`SnapshotStream::feed_frames`](informer_http::core::snapshot::SnapshotStream::feed_frames)),
/// decoded here with its `FrameDecoder`, instead of decoding them itself.
fn decode_streamed<K>(
    bytes: &[u8],
    identity: &informer_http::core::snapshot::SnapshotIdentity,
    seed: u64,
    frames: bool,
) -> Result<informer_http::core::snapshot::Snapshot<K>, informer_http::core::snapshot::SnapshotError>
where
    K: informer_http::core::snapshot::SnapshotCodec,
{
    use informer_http::core::snapshot::{SnapshotError, SnapshotLayout, SnapshotStream};
    let mut cuts = Cuts(informer_http::core::rng::SplitMix64::new(seed));
    let mut head = 0;
    let layout = loop {
        head = (head + cuts.next()).min(bytes.len());
        match SnapshotLayout::read(&bytes[..head])? {
            Some(layout) => break layout,
            None if head == bytes.len() => return Err(SnapshotError::Truncated),
            None => {}
        }
    };
    let (start, end) = (layout.body_start, layout.body_end);
    // `read` saw the whole start: it lies within `head`.
    assert!(start <= head as u64, "the layout points past what was read");
    if end > bytes.len() as u64 {
        return Err(SnapshotError::Truncated);
    }
    let (start, end) = (start as usize, end as usize);
    let mut stream = SnapshotStream::<K>::new(layout, &bytes[..start], &bytes[end..], identity)?;
    let decoder = stream.frame_decoder();
    let mut at = start;
    while at < end {
        let to = (at + cuts.next()).min(end);
        let piece = &bytes[at..to];
        if frames {
            let mut runs = Vec::new();
            stream.feed_frames(piece, |run| runs.push(run.to_vec()))?;
            for run in runs {
                stream.decoded(decoder.decode::<K>(&run));
            }
        } else {
            stream.feed(piece)?;
        }
        at = to;
    }
    stream.finish()
}

fn snapshot_round_trip<K>(bytes: &[u8], parts: usize, cuts: u64)
where
    K: informer_http::core::snapshot::SnapshotCodec + PartialEq + Debug + Send + Sync,
{
    use informer_http::core::snapshot::{Snapshot, SnapshotIdentity, peek_identity};
    use informer_http::core::{object::Key, object::Object};
    let identity = match peek_identity(bytes) {
        Ok((identity, _)) => identity,
        Err(e) => {
            let r = Snapshot::<K>::decode(bytes, &SnapshotIdentity::default());
            assert_eq!(r.as_ref().err(), Some(&e), "peek and decode disagree");
            for frames in [false, true] {
                let streamed =
                    decode_streamed::<K>(bytes, &SnapshotIdentity::default(), cuts, frames);
                assert_same_outcome(&r, &streamed, "streamed");
            }
            return;
        }
    };
    let once = Snapshot::<K>::decode(bytes, &identity);
    for frames in [false, true] {
        let streamed = decode_streamed::<K>(bytes, &identity, cuts, frames);
        assert_same_outcome(
            &once,
            &streamed,
            if frames {
                "streamed as frames"
            } else {
                "streamed"
            },
        );
    }
    let in_parts = Snapshot::<K>::decode_parallel(bytes, &identity, parts, |jobs| {
        for j in jobs.iter_mut() {
            j.run();
        }
    });
    let s = match (once, in_parts) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a.resource_version, b.resource_version);
            assert!(
                a.items.iter().eq(b.items.iter()),
                "parts decode other objects"
            );
            a
        }
        (Err(a), Err(b)) => {
            assert_eq!(a, b, "parts fail otherwise");
            return;
        }
        (a, b) => panic!("decode {:?} but in {parts} parts {:?}", a.err(), b.err()),
    };
    let mut keys = std::collections::HashSet::new();
    for o in &s.items {
        assert!(!o.name().is_empty() && !o.name().contains('/'));
        assert!(keys.insert(Key::of(&**o)), "a key twice");
    }
    let mut again = Vec::new();
    s.encode(&identity, &mut again)
        .expect("a decoded snapshot encodes");
    let back = Snapshot::<K>::decode(&again, &identity).expect("its encoding decodes");
    assert_eq!(back.resource_version, s.resource_version);
    assert!(
        back.items.iter().eq(s.items.iter()),
        "round trip changed objects"
    );
    let mut third = Vec::new();
    back.encode(&identity, &mut third).unwrap();
    assert_eq!(third, again, "encoding is not stable");
}

#[cfg(test)]
mod replay {
    //! Every committed seed and saved crash, through its target, without libFuzzer.

    use std::path::Path;

    type Target = fn(&[u8]);

    const TARGETS: &[(&str, Target)] = &[
        ("watch_decoder", super::watch_decoder),
        ("list_decoder", super::list_decoder),
        ("kubeconfig", super::kubeconfig),
        ("incluster", super::incluster),
        ("h1_response", super::h1_response),
        ("informer_core", super::informer_core),
        ("selector", super::selector),
        ("workqueue", super::workqueue),
        ("snapshot_decode", super::snapshot_decode),
    ];

    fn replay(kind: &str) -> usize {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(kind);
        let mut n = 0;
        for (name, target) in TARGETS {
            let Ok(dir) = std::fs::read_dir(root.join(name)) else {
                continue;
            };
            for entry in dir {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "md") {
                    continue;
                }
                let data = std::fs::read(&path).unwrap();
                eprintln!("{name}: {}", path.display());
                target(&data);
                n += 1;
            }
        }
        n
    }

    /// The seeds: every target has some, and they pass.
    #[test]
    fn seed_corpora_pass() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
        for (name, _) in TARGETS {
            let n = std::fs::read_dir(root.join(name))
                .map(|d| d.count())
                .unwrap_or(0);
            assert!(n > 0, "no seeds for {name} in {}", root.display());
        }
        assert!(replay("seeds") >= TARGETS.len());
    }

    /// Every crash the fuzzer (or the outside probe) ever found stays fixed.
    #[test]
    fn saved_crashes_stay_fixed() {
        assert!(
            replay("regressions") >= 6,
            "the probe's list crashes are kept"
        );
    }
}
