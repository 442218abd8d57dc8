//! Incremental decoding of a list answer while its body arrives.
//!
//! A `…List` body of the informer's first list can be tens of megabytes (kube-apiserver serves
//! a `resourceVersion=0` list from its watch cache in one answer). [`ListDecoder`] scans the
//! top-level object byte by byte and decodes every element of `items` as soon as its last byte
//! arrives, so only the unfinished element is ever buffered, never the body.

use std::sync::Arc;

use informer_core::object::{FromJson, JsonIdentity};
use informer_core::protocol::ListPage;

use super::{DecodeError, KnownObjects, ListMeta, object_error, straight_object};

/// Items looked up in [`KnownObjects`] before the decoder judges whether it is worth it.
const KNOWN_PROBE: u32 = 64;

/// Deepest nesting of arrays and objects accepted (the top-level object included), as
/// `serde_json`'s own recursion limit.
const MAX_DEPTH: usize = 128;

/// Where the scanner is in the JSON grammar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Before the top-level object.
    Start,
    /// A value is expected (after `:`, or after `,` in an array).
    Value,
    /// Just after `[`: a value or `]`.
    ValueOrEnd,
    /// Just after `{`: a key or `}`.
    KeyOrEnd,
    /// After `,` in an object: a key.
    Key,
    /// Inside a string (`key`: an object key).
    Str { key: bool },
    /// After a backslash in a string.
    Escape { key: bool },
    /// Inside `\uXXXX`, `left` hex digits still to come.
    Unicode { key: bool, left: u8 },
    /// After a key: `:`.
    Colon,
    /// After a value: `,` or the end of the enclosing container.
    AfterValue,
    /// After a leading `-`.
    NumMinus,
    /// After a leading `0`.
    NumZero,
    /// In the integer digits.
    NumInt,
    /// After the `.`.
    NumDot,
    /// In the fraction digits.
    NumFrac,
    /// After `e`/`E`.
    NumExp,
    /// After the exponent's sign.
    NumExpSign,
    /// In the exponent digits.
    NumExpDigits,
    /// Inside `true`, `false` or `null`: `at` bytes of `word` seen.
    Literal { word: &'static [u8], at: u8 },
    /// After the top-level object: only whitespace may follow.
    Done,
    /// Inside an item that is an object or array, outside strings. Only its end is looked
    /// for: `serde_json` checks its syntax when it decodes it.
    Item,
    /// Inside a string in an item.
    ItemStr,
    /// After a backslash in a string in an item.
    ItemEscape,
}

/// What a top-level key's value is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// `items`.
    Items,
    /// `metadata`.
    Meta,
    /// `kind`.
    Kind,
    /// Anything else: skipped.
    Other,
}

/// A value being kept until its last byte arrives.
#[derive(Clone, Copy, Debug)]
struct Capture {
    /// What it is.
    role: Target,
    /// Nesting depth at which the value sits (it ends when the scanner is back there).
    depth: usize,
    /// Where it starts in the chunk being fed, when it started in that chunk; otherwise its
    /// beginning is in the decoder's buffer.
    start: Option<usize>,
}

/// The objects a list may take instead of decoding its items, and how often it did.
struct Known<K> {
    objects: Arc<dyn KnownObjects<K>>,
    /// Whether `objects` was asked if it is empty (at the first item).
    checked: bool,
    looked: u32,
    found: u32,
}

/// What a captured value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// One element of `items`.
    Item,
    /// `items` when it is not an array (only `null` is accepted).
    ItemsOther,
    /// `metadata`.
    Meta,
    /// `kind`.
    Kind,
}

/// Decodes a list answer (`{"kind":"…List","metadata":{…},"items":[…]}`) fed in arbitrary
/// chunks, decoding each item as soon as it is complete.
///
/// Keys may come in any order; keys other than `items`, `metadata` and `kind` are skipped
/// without being kept. Memory beyond the decoded items is one unfinished item (plus the
/// `metadata` and `kind` values, and one top-level key). The result does not depend on the
/// chunking: a page, or a [`DecodeError`] — [`DecodeError::Object`] naming the first item that
/// does not decode (the list fails as a whole, once the rest of the body is known to be
/// well-formed), [`DecodeError::Malformed`] for a body that is not a JSON object, is not valid
/// JSON, has trailing bytes or ends early.
///
/// Everything outside the items is checked byte by byte as JSON, as strictly as `serde_json`
/// parses a `serde_json::Value`, even where nothing is kept: strings must be valid UTF-8 with
/// paired surrogate escapes, numbers within `f64` range. An object item that lies wholly in
/// the chunk being fed (and in its valid UTF-8) is decoded straight from the chunk, the
/// decoder finding its end as it decodes it, so its bytes are read once (a `DynamicObject` by
/// [`DynamicObject::from_json_start`](informer_core::object::DynamicObject::from_json_start), which
/// gives serde_json's result, anything else by `serde_json`). Any other item's end is found
/// by counting brackets outside strings; the item must be UTF-8 and is then checked by
/// `serde_json` as it decodes it. Both ways give the same item: a JSON object ends at the
/// bracket that closes it.
///
/// ```
/// use informer_http::decode::ListDecoder;
/// use informer_http::core::object::DynamicObject;
///
/// let body = br#"{"kind":"ConfigMapList","items":[{"metadata":{"name":"a"}}],"metadata":{"resourceVersion":"7"}}"#;
/// let mut d = ListDecoder::<DynamicObject>::new();
/// for chunk in body.chunks(5) {
///     d.feed(chunk).unwrap();
/// }
/// let page = d.finish().unwrap();
/// assert_eq!(page.items.len(), 1);
/// assert_eq!(page.resource_version, "7");
/// ```
#[derive(Debug)]
pub struct ListDecoder<K> {
    state: State,
    /// The open containers: `true` for an object, `false` for an array.
    stack: Vec<bool>,
    /// The top-level key being read, with its quotes.
    key: Vec<u8>,
    /// The role of the current top-level key's value.
    role: Role,
    /// The `items` array is the innermost container but one (its elements are items).
    in_items: bool,
    /// Nesting inside the item being read, in [`State::Item`].
    item_depth: usize,
    /// The captured value's bytes from earlier chunks.
    buf: Vec<u8>,
    capture: Option<Capture>,
    items: Vec<Arc<K>>,
    seen_items: bool,
    meta: Option<ListMeta>,
    /// `kind`: `Ok(None)` when absent or `null`, `Err(())` when not a string or given twice.
    kind: Result<Option<String>, ()>,
    seen_kind: bool,
    /// The first item that did not decode; the rest of the body is still checked.
    item_error: Option<DecodeError>,
    /// UTF-8 validation of the string being scanned (outside the items).
    utf8: Utf8Tail,
    /// The `\u` escape being read, its hex digits so far.
    unicode: u16,
    /// The last escape was a leading surrogate: a `\u` escape of a trailing one must follow.
    high_surrogate: bool,
    /// The number being scanned outside the items, kept to check its range at its end.
    num: Vec<u8>,
    /// `num` is being filled.
    num_check: bool,
    /// A fatal error: every later call returns it.
    error: Option<DecodeError>,
    /// Bytes fed so far.
    fed: usize,
    /// Length of the last item decoded straight from a chunk ([`ListDecoder::item_at_once`]):
    /// an item is not tried that way when less than this is left of the chunk, as it would
    /// most likely not end there.
    last_item_len: usize,
    /// The objects to take instead of decoding items ([`ListDecoder::with_known`]); `None`
    /// when not given, or given up on (most items were not there).
    known: Option<Known<K>>,
}

impl<K> std::fmt::Debug for Known<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Known")
            .field("looked", &self.looked)
            .field("found", &self.found)
            .finish_non_exhaustive()
    }
}

impl<K: FromJson> Default for ListDecoder<K> {
    fn default() -> Self {
        ListDecoder::new()
    }
}

fn malformed(message: impl Into<String>) -> DecodeError {
    DecodeError::Malformed {
        message: message.into(),
    }
}

/// UTF-8 validation of a string whose bytes arrive in pieces, without allocating: a multi-byte
/// character cut by a chunk boundary is kept (at most three bytes) until the rest arrives.
#[derive(Clone, Copy, Debug, Default)]
struct Utf8Tail {
    held: [u8; 4],
    len: u8,
}

impl Utf8Tail {
    /// Checks `bytes`, which continue the string's plain bytes checked so far.
    fn feed(&mut self, mut bytes: &[u8]) -> bool {
        if self.len > 0 {
            let width = match self.held[0] {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                _ => 4,
            };
            while usize::from(self.len) < width {
                let Some((&b, rest)) = bytes.split_first() else {
                    return true;
                };
                self.held[usize::from(self.len)] = b;
                self.len += 1;
                bytes = rest;
            }
            self.len = 0;
            if std::str::from_utf8(&self.held[..width]).is_err() {
                return false;
            }
        }
        match std::str::from_utf8(bytes) {
            Ok(_) => true,
            // Only cut short: the start of a character that goes on in the next piece.
            Err(e) if e.error_len().is_none() => {
                let tail = &bytes[e.valid_up_to()..];
                self.held[..tail.len()].copy_from_slice(tail);
                self.len = tail.len() as u8;
                true
            }
            Err(_) => false,
        }
    }

    /// The plain bytes end (an escape, the closing quote or a control byte follows): no
    /// character may be left unfinished.
    fn end(&mut self) -> bool {
        std::mem::take(&mut self.len) == 0
    }
}

/// How many bytes of `s` (the inside of a JSON string) come before its first `"` or `\`;
/// `s.len()` when there is none.
///
/// Most strings in objects are short (keys, names), where a search call costs more than it
/// saves: their first bytes are looked at one by one. The rest of a longer one (a data value,
/// a certificate, a script) is searched with `memchr2`, many bytes per step: a 1 KB value is
/// most of a small ConfigMap's bytes.
fn string_end(s: &[u8]) -> usize {
    const SHORT: usize = 24;
    let head = &s[..s.len().min(SHORT)];
    if let Some(n) = head.iter().position(|&b| b == b'"' || b == b'\\') {
        return n;
    }
    let rest = &s[head.len()..];
    head.len() + memchr::memchr2(b'"', b'\\', rest).unwrap_or(rest.len())
}

/// Fails unless `bytes` is one JSON value: the items were only delimited by the scanner.
fn check_syntax(bytes: &[u8]) -> Result<(), DecodeError> {
    serde_json::from_slice::<serde::de::IgnoredAny>(bytes)
        .map(drop)
        .map_err(|e| malformed(format!("list item: {e}")))
}

impl<K: FromJson> ListDecoder<K> {
    /// A decoder at the start of a body.
    pub fn new() -> Self {
        ListDecoder {
            state: State::Start,
            stack: Vec::new(),
            key: Vec::new(),
            role: Role::Other,
            in_items: false,
            item_depth: 0,
            buf: Vec::new(),
            capture: None,
            items: Vec::new(),
            seen_items: false,
            meta: None,
            kind: Ok(None),
            seen_kind: false,
            item_error: None,
            utf8: Utf8Tail::default(),
            unicode: 0,
            high_surrogate: false,
            num: Vec::new(),
            num_check: false,
            error: None,
            fed: 0,
            last_item_len: 0,
            known: None,
        }
    }

    /// Takes an item's object from `known` instead of decoding the item, whenever `known`
    /// holds the item's key at the item's resourceVersion (a relist: most objects are
    /// unchanged). Such an item is read once, for its syntax, its key and resourceVersion (see
    /// [`JsonIdentity`]), and builds nothing. Any other item is decoded as without `known`.
    ///
    /// When `known` is empty as the first item arrives (a first list), or fewer than half of
    /// the first 64 items looked up are found (a relist after most of the objects changed),
    /// the decoder stops looking. The page is the one decoding every
    /// item gives, but for sharing the known objects, and a body that is not JSON fails the
    /// same way. One difference: an item that is JSON but would not decode as `K` is taken
    /// when its key is known at its resourceVersion, as the server gives one version of an
    /// object one content, and that content decoded when it was cached.
    pub fn with_known(mut self, known: Arc<dyn KnownObjects<K>>) -> Self {
        self.known = Some(Known {
            objects: known,
            checked: false,
            looked: 0,
            found: 0,
        });
        self
    }

    /// How many items were taken from the known objects ([`ListDecoder::with_known`]) so far;
    /// 0 once the decoder stopped looking.
    pub fn items_known(&self) -> usize {
        self.known.as_ref().map_or(0, |k| k.found as usize)
    }

    /// The known object for the item that starts `text`, and the item's length, when the
    /// item ends within `text` and its key is known at its resourceVersion.
    fn known_item(&mut self, text: &str) -> Option<(Arc<K>, usize)> {
        let known = self.known.as_mut()?;
        if !known.checked {
            known.checked = true;
            if known.objects.is_empty() {
                self.known = None;
                return None;
            }
        }
        let (id, len) = JsonIdentity::of_json_start(text)?;
        let resource_version = id.resource_version?;
        known.looked += 1;
        match known.objects.known(id.key(), resource_version) {
            Some(obj) => {
                known.found += 1;
                Some((obj, len))
            }
            None => {
                if known.looked >= KNOWN_PROBE && known.found < known.looked / 2 {
                    self.known = None;
                }
                None
            }
        }
    }

    /// Items decoded so far.
    pub fn items_decoded(&self) -> usize {
        self.items.len()
    }

    /// Bytes held for the value being read (an unfinished item, `metadata` or `kind`).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Scans the next chunk of the body, decoding the items it completes.
    ///
    /// Fails as soon as the body cannot be a list answer (not JSON, not an object, trailing
    /// bytes, `items` not an array, undecodable `metadata`); then every later call fails the
    /// same way. An item that does not decode is reported by [`ListDecoder::finish`], once the
    /// rest of the body is known to be well-formed.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), DecodeError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        match self.scan(chunk) {
            Ok(()) => {
                if let Some(cap) = &mut self.capture {
                    let from = cap.start.take().unwrap_or(0);
                    self.buf.extend_from_slice(&chunk[from..]);
                }
                self.fed += chunk.len();
                Ok(())
            }
            Err(e) => {
                self.fail(e.clone());
                Err(e)
            }
        }
    }

    /// The list's `kind` (`ConfigMapList`, ...), once it has been read; `None` before, or when
    /// the body has none.
    pub fn list_kind(&self) -> Option<&str> {
        self.kind.as_ref().ok().and_then(|k| k.as_deref())
    }

    /// At the end of the body: the page, or why there is none.
    pub fn finish(self) -> Result<ListPage<K>, DecodeError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.state != State::Done {
            return Err(malformed(format!(
                "list body ends inside its JSON object after {} bytes",
                self.fed
            )));
        }
        if let Some(mut err) = self.item_error {
            let Ok(list_kind) = self.kind else {
                return Err(malformed("list kind is not a string"));
            };
            if let DecodeError::Object { kind, .. } = &mut err {
                if kind.is_none() {
                    *kind = list_kind
                        .as_deref()
                        .and_then(|k| k.strip_suffix("List"))
                        .map(str::to_string);
                }
            }
            return Err(err);
        }
        let meta = self.meta.unwrap_or_default();
        Ok(ListPage {
            items: self.items,
            resource_version: meta.resource_version.unwrap_or_default(),
            continue_token: meta.continue_token.filter(|c| !c.is_empty()),
            remaining_item_count: meta
                .remaining_item_count
                .and_then(|n| u64::try_from(n).ok()),
        })
    }

    /// Decodes the object item that starts `text` (the rest of the chunk being fed, as far as
    /// it is valid UTF-8) when it ends within `text`; returns its length. `None` (nothing
    /// changed) when the item goes on past `text` or does not decode: the scanner then reads it
    /// as before (buffering it across chunks, naming it if it does not decode), which also
    /// gives this item's result when it does decode, as a JSON object ends at the bracket
    /// that closes it. Its bytes are then read once, by the straight decoder
    /// ([`straight_object`]) or `serde_json`, instead of by the scanner too.
    fn item_at_once(&mut self, text: &str) -> Option<usize> {
        if self.item_error.is_some() || text.len() < self.last_item_len {
            return None;
        }
        if let Some((obj, len)) = self.known_item(text) {
            self.items.push(obj);
            self.last_item_len = len;
            return Some(len);
        }
        let (obj, len) = match straight_object::<K>(text) {
            Some(decoded) => decoded,
            None => {
                let mut stream = serde_json::Deserializer::from_str(text).into_iter::<K>();
                let obj = stream.next()?.ok()?;
                (obj, stream.byte_offset())
            }
        };
        self.items.push(Arc::new(obj));
        self.last_item_len = len;
        Some(len)
    }

    /// Stops decoding for good, releasing what was held.
    fn fail(&mut self, e: DecodeError) {
        self.error = Some(e);
        self.items = Vec::new();
        self.buf = Vec::new();
        self.num = Vec::new();
        self.capture = None;
    }

    /// Whether the scanner is inside a (scalar) item: its strings and numbers are checked by
    /// `serde_json` as it decodes the item, not here.
    fn in_item(&self) -> bool {
        self.capture.is_some_and(|c| c.role == Target::Item)
    }

    /// One more byte of the number being scanned.
    fn num_byte(&mut self, b: u8) {
        if self.num_check {
            self.num.push(b);
        }
    }

    /// A number outside the items ended: it must be one `serde_json` can hold (`1e400` is
    /// not), as a `serde_json::Value` would have to.
    fn number_end(&mut self) -> Result<(), DecodeError> {
        if std::mem::take(&mut self.num_check)
            && serde_json::from_slice::<serde_json::Number>(&self.num).is_err()
        {
            return Err(malformed("number out of range"));
        }
        Ok(())
    }

    /// A value starts at `chunk[i]` (its first byte `b`), at the current depth.
    fn value_start(&mut self, b: u8, i: usize) -> Result<(), DecodeError> {
        let depth = self.stack.len();
        let what = if depth == 1 {
            match self.role {
                Role::Items if b == b'[' => {
                    self.in_items = true;
                    None
                }
                Role::Items if b == b'n' => Some(Target::ItemsOther),
                Role::Items => return Err(malformed("list items are neither an array nor null")),
                Role::Meta => Some(Target::Meta),
                Role::Kind => Some(Target::Kind),
                Role::Other => None,
            }
        } else if depth == 2 && self.in_items {
            Some(Target::Item)
        } else {
            None
        };
        if let Some(role) = what {
            self.buf.clear();
            self.capture = Some(Capture {
                role,
                depth,
                start: Some(i),
            });
        }
        Ok(())
    }

    /// A value ended just before `chunk[end]`, leaving the scanner at `depth`.
    fn value_end(&mut self, chunk: &[u8], end: usize) -> Result<(), DecodeError> {
        let depth = self.stack.len();
        if depth == 1 && self.in_items {
            // The `items` array itself just closed.
            self.in_items = false;
        }
        let Some(cap) = self.capture else {
            return Ok(());
        };
        if cap.depth != depth {
            return Ok(());
        }
        self.capture = None;
        let mut held = std::mem::take(&mut self.buf);
        let bytes: &[u8] = match cap.start {
            Some(s) => &chunk[s..end],
            None => {
                held.extend_from_slice(&chunk[..end]);
                &held
            }
        };
        let result = self.captured(cap.role, bytes);
        held.clear();
        self.buf = held;
        result
    }

    /// Decodes one complete captured value.
    fn captured(&mut self, role: Target, bytes: &[u8]) -> Result<(), DecodeError> {
        match role {
            Target::Item => {
                // JSON text is UTF-8: an item that is not is a broken body, even where the item
                // type would ignore the bytes at fault (serde_json skips ignored strings
                // unchecked).
                let Ok(text) = std::str::from_utf8(bytes) else {
                    return Err(malformed("list item is not valid UTF-8"));
                };
                if self.item_error.is_some() {
                    return check_syntax(bytes);
                }
                if let Some((obj, len)) = self.known_item(text) {
                    // The scanner delimited the item, so it ends where its object does.
                    if len == text.len() {
                        self.items.push(obj);
                        return Ok(());
                    }
                }
                // Already known to be UTF-8: `from_str` does not check it again.
                match serde_json::from_str::<K>(text) {
                    Ok(obj) => self.items.push(Arc::new(obj)),
                    Err(e) => {
                        check_syntax(bytes)?;
                        self.item_error = Some(object_error(None, text, e));
                        self.items = Vec::new();
                    }
                }
            }
            Target::ItemsOther => {
                if bytes != b"null" {
                    return Err(malformed("list items are neither an array nor null"));
                }
            }
            Target::Meta => {
                let meta = serde_json::from_slice::<ListMeta>(bytes)
                    .map_err(|e| malformed(format!("list metadata: {e}")))?;
                self.meta = Some(meta);
            }
            Target::Kind => {
                self.kind = if self.seen_kind {
                    Err(())
                } else {
                    serde_json::from_slice::<Option<String>>(bytes).map_err(|_| ())
                };
                self.seen_kind = true;
            }
        }
        Ok(())
    }

    /// A top-level key is complete in `self.key`.
    fn top_key(&mut self) -> Result<(), DecodeError> {
        let key: String =
            serde_json::from_slice(&self.key).map_err(|e| malformed(format!("list key: {e}")))?;
        self.role = match key.as_str() {
            "items" => {
                if self.seen_items {
                    return Err(malformed("duplicate field `items`"));
                }
                self.seen_items = true;
                Role::Items
            }
            "metadata" => {
                if self.meta.is_some() {
                    return Err(malformed("duplicate field `metadata`"));
                }
                Role::Meta
            }
            "kind" => Role::Kind,
            _ => Role::Other,
        };
        Ok(())
    }

    /// Opens a container.
    fn push(&mut self, object: bool) -> Result<(), DecodeError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(malformed("list body nested too deep"));
        }
        self.stack.push(object);
        self.state = if object {
            State::KeyOrEnd
        } else {
            State::ValueOrEnd
        };
        Ok(())
    }

    /// A value ended just before `chunk[end]`: what comes next.
    fn after_value(&mut self, chunk: &[u8], end: usize) -> Result<(), DecodeError> {
        self.value_end(chunk, end)?;
        self.state = if self.stack.is_empty() {
            State::Done
        } else {
            State::AfterValue
        };
        Ok(())
    }

    /// In an item: how many bytes of `data` the item still takes, or `None` when it goes on
    /// past `data` (the state then says where in the item `data` ended).
    fn item_end(&mut self, data: &[u8]) -> Option<usize> {
        let mut depth = self.item_depth;
        let mut state = self.state;
        let mut j = 0;
        let end = loop {
            let Some(&c) = data.get(j) else {
                break None;
            };
            match state {
                State::ItemStr => {
                    j += string_end(&data[j..]);
                    match data.get(j) {
                        Some(b'"') => state = State::Item,
                        Some(_) => state = State::ItemEscape,
                        None => break None,
                    }
                    j += 1;
                }
                State::ItemEscape => {
                    j += 1;
                    state = State::ItemStr;
                }
                _ => {
                    j += 1;
                    match c {
                        b'"' => state = State::ItemStr,
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth = depth.saturating_sub(1);
                            if depth == 0 {
                                break Some(j);
                            }
                        }
                        _ => {}
                    }
                }
            }
        };
        self.item_depth = depth;
        self.state = state;
        end
    }

    /// Runs the grammar over one chunk.
    fn scan(&mut self, chunk: &[u8]) -> Result<(), DecodeError> {
        // The chunk's valid UTF-8 prefix, once an item starts in it (for `item_at_once`).
        let mut text: Option<&str> = None;
        let mut i = 0;
        while i < chunk.len() {
            let b = chunk[i];
            match self.state {
                State::Item | State::ItemStr | State::ItemEscape => {
                    match self.item_end(&chunk[i..]) {
                        Some(n) => {
                            i += n;
                            self.after_value(chunk, i)?;
                            continue;
                        }
                        None => break,
                    }
                }
                State::Str { key } => {
                    // The bulk of a list is strings: skip their plain bytes in one go.
                    let rest = &chunk[i..];
                    let n = rest
                        .iter()
                        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
                        .unwrap_or(rest.len());
                    let top_key = key && self.stack.len() == 1;
                    if top_key {
                        self.key.extend_from_slice(&rest[..n]);
                    }
                    let strict = !self.in_item();
                    if strict {
                        if self.high_surrogate
                            && (n > 0 || rest.get(n).is_some_and(|&c| c != b'\\'))
                        {
                            return Err(malformed("lone leading surrogate in a \\u escape"));
                        }
                        if !self.utf8.feed(&rest[..n]) || (n < rest.len() && !self.utf8.end()) {
                            return Err(malformed("string is not valid UTF-8"));
                        }
                    }
                    i += n;
                    let Some(&c) = chunk.get(i) else {
                        break;
                    };
                    match c {
                        b'"' => {
                            i += 1;
                            if key {
                                if top_key {
                                    self.key.push(b'"');
                                    self.top_key()?;
                                }
                                self.state = State::Colon;
                            } else {
                                self.after_value(chunk, i)?;
                            }
                        }
                        b'\\' => {
                            if top_key {
                                self.key.push(b'\\');
                            }
                            i += 1;
                            self.state = State::Escape { key };
                        }
                        _ => return Err(malformed("control character in a string")),
                    }
                    continue;
                }
                State::Escape { key } => {
                    if self.high_surrogate && b != b'u' {
                        return Err(malformed("lone leading surrogate in a \\u escape"));
                    }
                    self.state = match b {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                            State::Str { key }
                        }
                        b'u' => {
                            self.unicode = 0;
                            State::Unicode { key, left: 4 }
                        }
                        _ => return Err(malformed("invalid escape in a string")),
                    };
                    if key && self.stack.len() == 1 {
                        self.key.push(b);
                    }
                }
                State::Unicode { key, left } => {
                    let Some(digit) = (b as char).to_digit(16) else {
                        return Err(malformed("invalid \\u escape in a string"));
                    };
                    if key && self.stack.len() == 1 {
                        self.key.push(b);
                    }
                    self.unicode = self.unicode << 4 | digit as u16;
                    if left == 1 && !self.in_item() {
                        // As serde_json reads a string it keeps: surrogates come in pairs.
                        let trailing = (0xDC00..=0xDFFF).contains(&self.unicode);
                        if std::mem::take(&mut self.high_surrogate) != trailing {
                            return Err(malformed("unpaired surrogate in a \\u escape"));
                        }
                        self.high_surrogate = (0xD800..=0xDBFF).contains(&self.unicode);
                    }
                    self.state = if left == 1 {
                        State::Str { key }
                    } else {
                        State::Unicode {
                            key,
                            left: left - 1,
                        }
                    };
                }
                _ if matches!(b, b' ' | b'\t' | b'\n' | b'\r')
                    && !matches!(
                        self.state,
                        State::NumMinus
                            | State::NumZero
                            | State::NumInt
                            | State::NumDot
                            | State::NumFrac
                            | State::NumExp
                            | State::NumExpSign
                            | State::NumExpDigits
                            | State::Literal { .. }
                    ) => {}
                State::Start => {
                    if b != b'{' {
                        return Err(malformed("list body is not a JSON object"));
                    }
                    self.push(true)?;
                }
                State::Done => return Err(malformed("trailing characters after the list")),
                State::KeyOrEnd | State::Key => {
                    if b == b'"' {
                        if self.stack.len() == 1 {
                            self.key.clear();
                            self.key.push(b'"');
                        }
                        self.state = State::Str { key: true };
                    } else if b == b'}' && self.state == State::KeyOrEnd {
                        self.stack.pop();
                        self.after_value(chunk, i + 1)?;
                    } else {
                        return Err(malformed("expected an object key"));
                    }
                }
                State::Colon => {
                    if b != b':' {
                        return Err(malformed("expected `:` after an object key"));
                    }
                    self.state = State::Value;
                }
                State::AfterValue => match (b, self.stack.last()) {
                    (b',', Some(true)) => self.state = State::Key,
                    (b',', Some(false)) => self.state = State::Value,
                    (b'}', Some(true)) | (b']', Some(false)) => {
                        self.stack.pop();
                        self.after_value(chunk, i + 1)?;
                    }
                    _ => return Err(malformed("expected `,` or the end of an object or array")),
                },
                State::Value | State::ValueOrEnd => {
                    if b == b']' && self.state == State::ValueOrEnd {
                        self.stack.pop();
                        self.after_value(chunk, i + 1)?;
                        i += 1;
                        continue;
                    }
                    if b == b'{' && self.stack.len() == 2 && self.in_items {
                        let text = *text.get_or_insert_with(|| match std::str::from_utf8(chunk) {
                            Ok(t) => t,
                            Err(e) => {
                                std::str::from_utf8(&chunk[..e.valid_up_to()]).unwrap_or_default()
                            }
                        });
                        // `{` is one byte, so `i` is a character boundary.
                        if let Some(n) = text.get(i..).and_then(|t| self.item_at_once(t)) {
                            i += n;
                            self.after_value(chunk, i)?;
                            continue;
                        }
                    }
                    self.value_start(b, i)?;
                    if matches!(b, b'{' | b'[') && self.in_item() {
                        self.item_depth = 1;
                        self.state = State::Item;
                        i += 1;
                        continue;
                    }
                    match b {
                        b'{' => self.push(true)?,
                        b'[' => self.push(false)?,
                        b'"' => self.state = State::Str { key: false },
                        b'-' | b'0'..=b'9' => {
                            self.state = match b {
                                b'-' => State::NumMinus,
                                b'0' => State::NumZero,
                                _ => State::NumInt,
                            };
                            self.num_check = !self.in_item();
                            if self.num_check {
                                self.num.clear();
                                self.num.push(b);
                            }
                        }
                        b't' => {
                            self.state = State::Literal {
                                word: b"true",
                                at: 1,
                            }
                        }
                        b'f' => {
                            self.state = State::Literal {
                                word: b"false",
                                at: 1,
                            }
                        }
                        b'n' => {
                            self.state = State::Literal {
                                word: b"null",
                                at: 1,
                            }
                        }
                        _ => return Err(malformed("expected a JSON value")),
                    }
                }
                State::Literal { word, at } => {
                    if word.get(usize::from(at)) != Some(&b) {
                        return Err(malformed("invalid literal"));
                    }
                    if usize::from(at) + 1 == word.len() {
                        self.after_value(chunk, i + 1)?;
                    } else {
                        self.state = State::Literal { word, at: at + 1 };
                    }
                }
                State::NumMinus => {
                    match b {
                        b'0' => self.state = State::NumZero,
                        b'1'..=b'9' => self.state = State::NumInt,
                        _ => return Err(malformed("invalid number")),
                    }
                    self.num_byte(b);
                }
                State::NumDot => {
                    match b {
                        b'0'..=b'9' => self.state = State::NumFrac,
                        _ => return Err(malformed("invalid number")),
                    }
                    self.num_byte(b);
                }
                State::NumExp => {
                    match b {
                        b'+' | b'-' => self.state = State::NumExpSign,
                        b'0'..=b'9' => self.state = State::NumExpDigits,
                        _ => return Err(malformed("invalid number")),
                    }
                    self.num_byte(b);
                }
                State::NumExpSign => {
                    match b {
                        b'0'..=b'9' => self.state = State::NumExpDigits,
                        _ => return Err(malformed("invalid number")),
                    }
                    self.num_byte(b);
                }
                State::NumZero | State::NumInt | State::NumFrac | State::NumExpDigits => {
                    match (self.state, b) {
                        (State::NumInt, b'0'..=b'9') => {}
                        (State::NumFrac, b'0'..=b'9') => {}
                        (State::NumExpDigits, b'0'..=b'9') => {}
                        (State::NumZero | State::NumInt, b'.') => self.state = State::NumDot,
                        (State::NumZero | State::NumInt | State::NumFrac, b'e' | b'E') => {
                            self.state = State::NumExp
                        }
                        _ => {
                            // The number ended before this byte; read it again as what follows.
                            self.number_end()?;
                            self.after_value(chunk, i)?;
                            continue;
                        }
                    }
                    self.num_byte(b);
                }
            }
            i += 1;
        }
        Ok(())
    }
}
