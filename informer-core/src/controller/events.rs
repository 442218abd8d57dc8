//! Event correlation (client-go `tools/record`'s `EventCorrelator`) as pure state: what a
//! recorder does with each event it is asked to write — create it, bump the count of the same
//! event written before, fold it into an aggregate of similar ones, or drop it as spam.
//!
//! The rules are client-go's, with its defaults ([`CorrelatorConfig::default`]):
//!
//! - **Aggregation**: events about one object from one reporter with the same type and reason
//!   but different messages are similar. Once `max_similar` (10) different messages were seen
//!   within `similar_interval` (10 minutes) of one another, they are written as one
//!   aggregate event whose message is `(combined from similar events): <latest message>`
//!   (client-go's count: the tenth distinct message is the first aggregated). The window
//!   slides: it restarts once no similar event came for `similar_interval`.
//! - **Deduplication**: an event identical to one written within the cache's memory (same
//!   object, reporter, type, reason and message, or the same aggregate) is not created again:
//!   the existing one's `count` and `lastTimestamp` are bumped by a patch.
//! - **Spam filter**: per object and reporter, a token bucket of `spam_burst` (25) tokens
//!   refilled at one per `spam_refill` (5 minutes): an event finding the bucket empty is dropped.
//!
//! The caches are bounded (`cache_size` entries each, the least recently used dropped first), so
//! memory stays bounded however many objects a controller reports on. Their keys are 64-bit
//! hashes of the events' fields, not copies of them (no allocation per event for a key): two
//! different events colliding (about one chance in 2^64 per pair) would share a count. Time is
//! passed in: `now`
//! on the caller's monotonic clock for the intervals, and the wall-clock time for the event's
//! name and timestamps.

use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;
use core::hash::{BuildHasher, Hasher};
use core::time::Duration;

use crate::hash::{HashMap, HashState};
use crate::time::Instant;

/// An event's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Something expected happened (`Normal`).
    Normal,
    /// Something may need attention (`Warning`).
    Warning,
}

impl EventType {
    /// The API's spelling: `Normal` or `Warning`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// The object an event is about (`involvedObject`, a `core/v1` `ObjectReference`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ObjectReference {
    /// `apiVersion`, e.g. `v1` or `example.com/v1`.
    pub api_version: String,
    /// `kind`, e.g. `ConfigMap`.
    pub kind: String,
    /// `namespace`; `None` for a cluster-scoped object (its events go to `default`).
    pub namespace: Option<String>,
    /// `name`.
    pub name: String,
    /// `uid`.
    pub uid: Option<String>,
    /// `resourceVersion`, when the event is about one state of the object.
    pub resource_version: Option<String>,
}

/// One event a controller asks to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSpec {
    /// What it is about.
    pub regarding: ObjectReference,
    /// Normal or Warning.
    pub event_type: EventType,
    /// Why, in UpperCamelCase (`Created`, `FailedSync`).
    pub reason: String,
    /// What was done or failed (`Reconcile`, `Delete`).
    pub action: String,
    /// For people.
    pub message: String,
}

/// The defaults of client-go's `EventCorrelator`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CorrelatorConfig {
    /// Distinct messages of similar events at which they are aggregated (10).
    pub max_similar: usize,
    /// The window those messages are counted in (10 minutes).
    pub similar_interval: Duration,
    /// Tokens of an object's spam bucket (25).
    pub spam_burst: u32,
    /// Time to refill one token (5 minutes: client-go's 1/300 qps).
    pub spam_refill: Duration,
    /// Entries kept in each cache (4096).
    pub cache_size: usize,
}

impl Default for CorrelatorConfig {
    fn default() -> Self {
        CorrelatorConfig {
            max_similar: 10,
            similar_interval: Duration::from_secs(600),
            spam_burst: 25,
            spam_refill: Duration::from_secs(300),
            cache_size: 4096,
        }
    }
}

/// What to do with an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Correlated {
    /// Create a new Event object.
    Create {
        /// Its name (`<object name>.<unix nanoseconds in hex>`, as client-go names them).
        name: String,
        /// Its message (the aggregate's, for an aggregated event).
        message: String,
    },
    /// Patch the Event created earlier under `name`: `count`, `lastTimestamp` and `message`.
    /// If it is gone (expired on the server: 404), create it again with this count.
    Bump {
        /// The existing Event's name.
        name: String,
        /// Its new `count`.
        count: u32,
        /// Its new message.
        message: String,
    },
    /// Dropped by the spam filter.
    Spam,
}

/// Correlates events as client-go's `EventCorrelator` does (see the [module](self)).
#[derive(Debug)]
pub struct EventCorrelator {
    config: CorrelatorConfig,
    /// Similar events: the distinct messages seen in the current window.
    similar: Lru<Similar>,
    /// Events written: name and count.
    written: Lru<Written>,
    /// Spam buckets per object and reporter.
    buckets: Lru<Bucket>,
    hasher: HashState,
}

#[derive(Debug)]
struct Similar {
    messages: Vec<u64>,
    last: Instant,
}

#[derive(Debug)]
struct Written {
    name: String,
    count: u32,
}

#[derive(Debug)]
struct Bucket {
    tokens: u32,
    refilled: Instant,
}

/// A map bounded to `cap` entries, the least recently used evicted first.
#[derive(Debug)]
struct Lru<V> {
    map: HashMap<u64, (u64, V)>,
    order: VecDeque<(u64, u64)>,
    tick: u64,
    cap: usize,
}

impl<V> Lru<V> {
    fn new(cap: usize) -> Self {
        Lru {
            map: HashMap::default(),
            order: VecDeque::new(),
            tick: 0,
            cap: cap.max(1),
        }
    }

    /// The entry for `key`, made most recently used; `make` builds a missing one.
    fn entry(&mut self, key: u64, make: impl FnOnce() -> V) -> &mut V {
        self.tick += 1;
        let tick = self.tick;
        if !self.map.contains_key(&key) {
            while self.map.len() >= self.cap {
                let Some((k, t)) = self.order.pop_front() else {
                    break;
                };
                if self.map.get(&k).is_some_and(|(last, _)| *last == t) {
                    self.map.remove(&k);
                }
            }
            self.map.insert(key, (tick, make()));
        }
        self.order.push_back((key, tick));
        // Stale order entries (keys used again since) are dropped when they reach the front;
        // compact when they outnumber the live ones, so the queue stays bounded too.
        if self.order.len() > 2 * self.cap + 16 {
            let map = &self.map;
            self.order
                .retain(|(k, t)| map.get(k).is_some_and(|(last, _)| last == t));
        }
        let slot = self.map.get_mut(&key).expect("inserted above");
        slot.0 = tick;
        &mut slot.1
    }

    fn len(&self) -> usize {
        self.map.len()
    }
}

impl EventCorrelator {
    /// A correlator with `config`.
    pub fn new(config: CorrelatorConfig) -> Self {
        EventCorrelator {
            config,
            similar: Lru::new(config.cache_size),
            written: Lru::new(config.cache_size),
            buckets: Lru::new(config.cache_size),
            hasher: HashState::default(),
        }
    }

    fn hash(&self, parts: &[&dyn HashPart]) -> u64 {
        let mut h = self.hasher.build_hasher();
        for p in parts {
            p.hash_part(&mut h);
        }
        h.finish()
    }

    /// Decides what to do with `event` from `reporter` (the reporting controller and instance)
    /// at `now` (monotonic) and `wall` (since the Unix epoch, for a new event's name).
    pub fn correlate(
        &mut self,
        now: Instant,
        wall: Duration,
        reporter: (&str, &str),
        event: &EventSpec,
    ) -> Correlated {
        let r = &event.regarding;
        let object: [&dyn HashPart; 8] = [
            &reporter.0,
            &reporter.1,
            &r.api_version,
            &r.kind,
            &r.namespace,
            &r.name,
            &r.uid,
            &r.resource_version,
        ];
        let similar_key = self.hash(&[
            &object as &dyn HashPart,
            &event.event_type.as_str(),
            &event.reason,
        ]);
        // Aggregation: count the distinct messages of similar events in the window.
        let message_hash = self.hash(&[&event.message, &event.action]);
        let (interval, max) = (self.config.similar_interval, self.config.max_similar);
        let seen = self.similar.entry(similar_key, || Similar {
            messages: Vec::new(),
            last: now,
        });
        if now - seen.last > interval {
            seen.messages.clear();
        }
        seen.last = now;
        if !seen.messages.contains(&message_hash) {
            seen.messages.push(message_hash);
        }
        let aggregated = seen.messages.len() >= max;
        // Bounded however many messages come: past `max`, only that there were that many counts.
        seen.messages.truncate(max);
        let (written_key, message) = if aggregated {
            (
                similar_key,
                alloc::format!("(combined from similar events): {}", event.message),
            )
        } else {
            (
                self.hash(&[&similar_key, &message_hash]),
                event.message.clone(),
            )
        };
        // Spam filter, per object and reporter.
        let bucket_key = self.hash(&[&object as &dyn HashPart]);
        let (burst, refill) = (self.config.spam_burst, self.config.spam_refill);
        let bucket = self.buckets.entry(bucket_key, || Bucket {
            tokens: burst,
            refilled: now,
        });
        if !refill.is_zero() {
            let gained = ((now - bucket.refilled).as_nanos() / refill.as_nanos()) as u64;
            if gained > 0 {
                bucket.tokens = (u64::from(bucket.tokens) + gained).min(u64::from(burst)) as u32;
                bucket.refilled = bucket.refilled + refill * gained.min(u64::from(u32::MAX)) as u32;
            }
        }
        if bucket.tokens == 0 {
            return Correlated::Spam;
        }
        bucket.tokens -= 1;
        // Deduplication.
        let mut created = false;
        let written = self.written.entry(written_key, || {
            created = true;
            Written {
                name: alloc::format!("{}.{:x}", r.name, wall.as_nanos()),
                count: 1,
            }
        });
        if created {
            Correlated::Create {
                name: written.name.clone(),
                message,
            }
        } else {
            written.count = written.count.saturating_add(1);
            Correlated::Bump {
                name: written.name.clone(),
                count: written.count,
                message,
            }
        }
    }

    /// Entries held, in total over the three caches (each at most `cache_size`).
    pub fn cached(&self) -> usize {
        self.similar.len() + self.written.len() + self.buckets.len()
    }
}

impl Default for EventCorrelator {
    fn default() -> Self {
        Self::new(CorrelatorConfig::default())
    }
}

/// Something hashed into a cache key.
trait HashPart {
    fn hash_part(&self, h: &mut dyn Hasher);
}

impl HashPart for &str {
    fn hash_part(&self, h: &mut dyn Hasher) {
        h.write(self.as_bytes());
        h.write_u8(0xff);
    }
}

impl HashPart for String {
    fn hash_part(&self, h: &mut dyn Hasher) {
        self.as_str().hash_part(h)
    }
}

impl HashPart for Option<String> {
    fn hash_part(&self, h: &mut dyn Hasher) {
        match self {
            Some(s) => {
                h.write_u8(1);
                s.hash_part(h)
            }
            None => h.write_u8(0),
        }
    }
}

impl HashPart for u64 {
    fn hash_part(&self, h: &mut dyn Hasher) {
        h.write_u64(*self)
    }
}

impl HashPart for [&dyn HashPart; 8] {
    fn hash_part(&self, h: &mut dyn Hasher) {
        for p in self {
            p.hash_part(h)
        }
    }
}

#[cfg(test)]
mod tests;
