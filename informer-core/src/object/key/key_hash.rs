//! The hash of a key, computed from its parts without joining them.
//!
//! A [`Key`](super::Key) is `namespace/name` joined; a [`KeyRef`](super::KeyRef) is the two
//! parts. Both hash as one `u64`, a function of the joined text alone: the text is split at its
//! first `/` (a namespace never holds one), each side is hashed where it lies (one or two word
//! reads for a part of up to 16 bytes, as foldhash and wyhash read short input), and the two
//! are folded together. The tables the core hashes keys for itself (the store, its index
//! buckets, the readers' copies) take that `u64` as it is ([`KeyHashState`]); any other map of
//! keys mixes it with its own hasher as it mixes any other `u64`.
//!
//! Both operands of every multiply carry the seed, so that no input can zero one (and with it
//! the product, whatever the rest of the input) without knowing the seed.
//!
//! This replaced joining the parts in a stack buffer and hashing the buffer through the map's
//! hasher: ~125 instructions per key, one hash per watch event (the store and every index
//! bucket take the same hash).
//!
//! The seed is drawn once per process (as foldhash's own global seed), fixed under `test` and
//! the `sim` feature so that a simulation replays the same iteration order.

// Arbitrary odd-ish constants (hexadecimal digits of π), to keep a zero input from meeting a
// zero operand.
const K0: u64 = 0x243f_6a88_85a3_08d3;
const K1: u64 = 0x1319_8a2e_0370_7344;
const K2: u64 = 0xa409_3822_299f_31d0;
const K3: u64 = 0x082e_fa98_ec4e_6c89;

/// `'/'` in every byte.
const SLASHES: u64 = 0x2f2f_2f2f_2f2f_2f2f;
const LOW_BITS: u64 = 0x0101_0101_0101_0101;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

#[cfg(any(test, feature = "sim"))]
#[inline(always)]
fn seed() -> u64 {
    0x5851_f42d_4c95_7f2d
}

#[cfg(not(any(test, feature = "sim")))]
static SEED: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

#[cfg(not(any(test, feature = "sim")))]
#[inline(always)]
fn seed() -> u64 {
    match SEED.load(core::sync::atomic::Ordering::Relaxed) {
        0 => first_seed(),
        s => s,
    }
}

/// Draws the process's seed; the first thread to store one wins, so every thread hashes alike.
#[cfg(not(any(test, feature = "sim")))]
#[cold]
fn first_seed() -> u64 {
    use core::hash::BuildHasher;
    use core::sync::atomic::Ordering::Relaxed;
    let drawn = crate::hash::HashState::default().hash_one(K3) | 1;
    match SEED.compare_exchange(0, drawn, Relaxed, Relaxed) {
        Ok(_) => drawn,
        Err(stored) => stored,
    }
}

/// The second seed word: the one the other operand of each multiply carries.
#[inline(always)]
fn other(seed: u64) -> u64 {
    seed.rotate_left(32) ^ K1
}

/// The 128-bit product of `a` and `b`, its halves xored.
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

#[inline(always)]
fn word(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

#[inline(always)]
fn half(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u64::from(u32::from_le_bytes(w))
}

/// Two words that together hold every byte of `b` (at most 16 bytes), overlapping as needed:
/// with the length, they tell any two such inputs apart.
#[inline(always)]
fn short_words(b: &[u8]) -> (u64, u64) {
    let n = b.len();
    if n >= 8 {
        (word(b, 0), word(b, n - 8))
    } else if n >= 4 {
        (half(b, 0), half(b, n - 4))
    } else if n > 0 {
        (
            u64::from(b[0]) << 16 | u64::from(b[n / 2]) << 8 | u64::from(b[n - 1]),
            0,
        )
    } else {
        (0, 0)
    }
}

/// Whether `a` and `b` are the same bytes: for up to 16 bytes (the parts of most keys) by
/// comparing the words [`short_words`] reads, in place of a call to `memcmp`.
#[inline(always)]
pub(super) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && if a.len() <= 16 {
            short_words(a) == short_words(b)
        } else {
            a == b
        }
}

/// Whether a word has a `'/'` byte (exact: the classic zero-byte test on `w ^ SLASHES`).
#[inline(always)]
fn has_slash_byte(w: u64) -> bool {
    let x = w ^ SLASHES;
    x.wrapping_sub(LOW_BITS) & !x & HIGH_BITS != 0
}

/// Whether `b` holds a `'/'`.
#[inline(always)]
fn has_slash(b: &[u8]) -> bool {
    let n = b.len();
    if n > 16 {
        return b.contains(&b'/');
    }
    if n >= 4 {
        // The words of up to 4 bytes have zero bytes above them, never a `'/'`.
        let (lo, hi) = short_words(b);
        return has_slash_byte(lo) || has_slash_byte(hi);
    }
    b.contains(&b'/')
}

/// The hash of one part.
#[inline(always)]
fn part(seed: u64, b: &[u8]) -> u64 {
    let n = b.len();
    if n > 16 {
        return long_part(seed, b);
    }
    let (lo, hi) = short_words(b);
    fold(lo ^ seed ^ K0, hi ^ other(seed) ^ n as u64)
}

/// [`part`] of more than 16 bytes: 16 at a time, the last 16 (overlapping) with the length.
#[inline(never)]
fn long_part(seed: u64, b: &[u8]) -> u64 {
    let n = b.len();
    let second = other(seed);
    let mut acc = seed ^ K2;
    let mut at = 0;
    while at + 16 < n {
        acc = fold(word(b, at) ^ acc ^ K0, word(b, at + 8) ^ second);
        at += 16;
    }
    fold(
        word(b, n - 16) ^ acc ^ K2,
        word(b, n - 8) ^ second ^ K3 ^ n as u64,
    )
}

/// The hash of the text split at its first `/` into `before` and `after` (`None`: no `/`).
#[inline(always)]
fn of_split(before: &[u8], after: Option<&[u8]>) -> u64 {
    let s = seed();
    let first = part(s, before);
    match after {
        None => fold(first ^ K2, other(s)),
        Some(after) => fold(first ^ K3, part(s ^ K2, after) ^ K0),
    }
}

/// The hash of the joined key text `joined`.
#[inline]
pub(super) fn of_joined(joined: &[u8]) -> u64 {
    // A short key without a `/` is told by a word test; any other is searched once.
    if joined.len() <= 16 && !has_slash(joined) {
        return of_split(joined, None);
    }
    match joined.iter().position(|&c| c == b'/') {
        Some(i) => of_split(&joined[..i], Some(&joined[i + 1..])),
        None => of_split(joined, None),
    }
}

/// The hash of the key `namespace/name` (`name` when `namespace` is `None`), equal to
/// [`of_joined`] of the joined text.
#[inline]
pub(super) fn of_parts(namespace: Option<&str>, name: &str) -> u64 {
    match namespace {
        None => of_joined(name.as_bytes()),
        Some(ns) if !has_slash(ns.as_bytes()) => of_split(ns.as_bytes(), Some(name.as_bytes())),
        // Not a namespace the API server would accept: join it (an allocation), so that the
        // hash still follows the text's first `/`.
        Some(ns) => {
            let mut joined = alloc::vec::Vec::with_capacity(ns.len() + 1 + name.len());
            joined.extend_from_slice(ns.as_bytes());
            joined.push(b'/');
            joined.extend_from_slice(name.as_bytes());
            of_joined(&joined)
        }
    }
}

/// The hasher of the maps keyed by [`Key`](super::Key) whose hashes the store computes
/// itself (the store, the index buckets): a key hashes as one `u64` ([`of_parts`], seeded
/// per process), which this hasher passes on as it is instead of mixing it again.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct KeyHashState;

impl core::hash::BuildHasher for KeyHashState {
    type Hasher = KeyHasher;

    #[inline(always)]
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(0)
    }
}

/// See [`KeyHashState`].
#[derive(Debug)]
pub(crate) struct KeyHasher(u64);

impl core::hash::Hasher for KeyHasher {
    /// Keys write one `u64`; anything else written is folded in a word at a time.
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(w));
        }
        self.write_u64(bytes.len() as u64);
    }

    #[inline(always)]
    fn write_u64(&mut self, x: u64) {
        // The first write (a key's only one) is kept as it is.
        self.0 = match self.0 {
            0 => x,
            h => fold(h ^ K0, x ^ other(seed())),
        };
    }

    #[inline(always)]
    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::string::String;

    #[test]
    fn same_bytes_is_equality() {
        let text = b"abcdefghijklmnopqrstuvwxyz0123456789";
        for n in 0..text.len() {
            let a = &text[..n];
            assert!(same_bytes(a, a));
            assert!(!same_bytes(a, &text[..n.saturating_sub(1)]) || n == 0);
            for at in 0..n {
                let mut b = a.to_vec();
                b[at] ^= 0x20;
                assert!(!same_bytes(a, &b), "{n} {at}");
            }
        }
    }

    #[test]
    fn slash_detection_is_exact_for_every_length_and_position() {
        for n in 0..40 {
            let plain: String = (0..n).map(|i| (b'a' + (i % 26) as u8) as char).collect();
            assert!(!has_slash(plain.as_bytes()), "{plain}");
            // Bytes next to '/' in value (0x2e, 0x30) and 0xaf must not pass for it.
            let near: String = (0..n).map(|i| ['.', '0', 'é'][i % 3]).collect();
            assert!(!has_slash(near.as_bytes()), "{near}");
            for at in 0..n {
                let mut b = plain.clone().into_bytes();
                b[at] = b'/';
                assert!(has_slash(&b), "{n} {at}");
            }
        }
    }

    #[test]
    fn parts_hash_as_the_joined_text_for_every_split() {
        let text = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ";
        for ns_len in 0..22 {
            for name_len in 0..22 {
                let (ns, name) = (&text[..ns_len], &text[ns_len..ns_len + name_len]);
                let joined = format!("{ns}/{name}");
                assert_eq!(of_parts(Some(ns), name), of_joined(joined.as_bytes()));
                assert_eq!(of_parts(None, &joined), of_joined(joined.as_bytes()));
            }
        }
        // A namespace holding '/' (never valid) still hashes by the text's first '/'.
        assert_eq!(of_parts(Some("a/b"), "c"), of_joined(b"a/b/c"));
        assert_eq!(of_parts(Some("a/b"), "c"), of_parts(Some("a"), "b/c"));
    }

    #[test]
    fn different_keys_hash_differently() {
        let mut seen = hashbrown::HashSet::new();
        let mut keys = alloc::vec::Vec::new();
        for ns in [
            "",
            "a",
            "ab",
            "abc",
            "default",
            "kube-system",
            "ns-0123456789abcdef",
        ] {
            for name in [
                "",
                "a",
                "b",
                "ab",
                "ba",
                "abc",
                "abcd",
                "abcdefg",
                "abcdefgh",
                "abcdefghi",
                "cm-000001",
                "cm-000002",
                "cm-0000010",
                "a/b",
                "x/",
                "/x",
                "a-name-of-more-than-sixteen-bytes",
                "a-name-of-more-than-sixteen-bytez",
            ] {
                keys.push(format!("{ns}/{name}"));
                if ns.is_empty() {
                    keys.push(String::from(name));
                }
            }
        }
        keys.sort();
        keys.dedup();
        for k in &keys {
            assert!(seen.insert(of_joined(k.as_bytes())), "collision on {k:?}");
        }
    }
}
