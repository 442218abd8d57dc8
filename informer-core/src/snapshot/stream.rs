//! Decoding a snapshot that arrives in pieces ([`SnapshotStream`]): read from a file a buffer at
//! a time, so that the whole file never has to be in memory at once.
//!
//! Reading a large snapshot into one buffer costs a fresh process a page fault per 4 KiB of
//! it, on top of the objects it decodes, and those faults cost several times the reads
//! themselves. A stream reads the snapshot's start (its header, to find
//! where the parts lie: [`SnapshotLayout`]), its end (the shared strings and the checksum),
//! and then its body in pieces of any size, decoding each object as soon as its frame is
//! whole.
//!
//! The outcome is [`Snapshot::decode`]'s for the same bytes, errors included: the checksum is
//! only known once every byte has been fed, so an error found earlier (an object that does not
//! decode, another resource or codec) is kept and reported by [`SnapshotStream::finish`] only
//! if the checksum matches; otherwise the snapshot is corrupt. A snapshot of another identity
//! is not decoded at all (its bytes are only summed).

use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;

use super::{
    Decoded, FORMAT_VERSION, Frames, Header, MAGIC, Reader, Snapshot, SnapshotCodec, SnapshotError,
    SnapshotIdentity, corrupt,
};

/// Where the parts of a snapshot lie, in bytes from its start: read from its first bytes by
/// [`SnapshotLayout::read`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotLayout {
    /// Where the header ends and the body (the objects' frames) begins: the head is
    /// `0..body_start`.
    pub body_start: u64,
    /// Where the body ends and the tail (the shared strings and the checksum) begins: the
    /// tail is `body_end..` to the end of the snapshot.
    pub body_end: u64,
}

impl SnapshotLayout {
    /// Reads the layout from the first bytes of a snapshot. `Ok(None)`: `head` is too short
    /// to tell; it takes at most 24 bytes plus the header's length (a few hundred bytes in
    /// practice). Fails as [`Snapshot::decode`] does on a wrong magic, an unknown format
    /// version or a malformed header.
    pub fn read(head: &[u8]) -> Result<Option<SnapshotLayout>, SnapshotError> {
        let magic = &head[..head.len().min(MAGIC.len())];
        if magic != &MAGIC[..magic.len()] {
            return Err(corrupt("not a snapshot (wrong magic)"));
        }
        let mut r = Reader(head);
        // In `decode`'s order: the version is judged as soon as it is there, before the
        // header's length (a 12-byte file of another version is of an unknown format, not
        // truncated).
        let (Ok(_), Ok(version)) = (r.take(MAGIC.len()), r.u32()) else {
            return Ok(None);
        };
        if version != FORMAT_VERSION {
            return Err(SnapshotError::UnknownFormat(version));
        }
        let Ok(header_len) = r.u32() else {
            return Ok(None);
        };
        let Ok(header) = r.take(header_len as usize) else {
            return Ok(None);
        };
        Header::read(&mut Reader(header))?;
        let Ok(body_len) = r.u64() else {
            return Ok(None);
        };
        let body_start = (head.len() - r.0.len()) as u64;
        let body_end = body_start
            .checked_add(body_len)
            .ok_or(SnapshotError::Truncated)?;
        Ok(Some(SnapshotLayout {
            body_start,
            body_end,
        }))
    }
}

/// An incremental [`checksum`](super::checksum): the same value for the same bytes, fed in
/// pieces of any size. The total length must be known up front (it seeds the first lane).
#[derive(Clone, Debug)]
pub(super) struct Checksum {
    lanes: [u64; 4],
    pending: [u8; 32],
    pending_len: usize,
}

const P: u64 = 0x9E37_79B9_7F4A_7C15;

#[inline(always)]
fn step(h: u64, w: u64) -> u64 {
    let h = (h ^ w).wrapping_mul(P);
    h ^ (h >> 29)
}

#[inline(always)]
fn word(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w[..b.len()].copy_from_slice(b);
    u64::from_le_bytes(w)
}

impl Checksum {
    pub(super) fn new(total_len: u64) -> Self {
        Checksum {
            lanes: [
                0xCBF2_9CE4_8422_2325 ^ total_len,
                0x8422_2325_CBF2_9CE4,
                0x27D4_EB2F_1656_67C5,
                0x1656_67B1_9E37_79F9,
            ],
            pending: [0; 32],
            pending_len: 0,
        }
    }

    #[inline(always)]
    fn block(&mut self, b: &[u8]) {
        self.lanes[0] = step(self.lanes[0], word(&b[0..8]));
        self.lanes[1] = step(self.lanes[1], word(&b[8..16]));
        self.lanes[2] = step(self.lanes[2], word(&b[16..24]));
        self.lanes[3] = step(self.lanes[3], word(&b[24..32]));
    }

    pub(super) fn update(&mut self, mut bytes: &[u8]) {
        if self.pending_len > 0 {
            let n = (32 - self.pending_len).min(bytes.len());
            self.pending[self.pending_len..self.pending_len + n].copy_from_slice(&bytes[..n]);
            self.pending_len += n;
            bytes = &bytes[n..];
            if self.pending_len < 32 {
                return;
            }
            let block = self.pending;
            self.block(&block);
            self.pending_len = 0;
        }
        // Two blocks a step, each lane in a local: written as four array lanes a block at a
        // time, LLVM made SSE2 vectors of the lanes, whose 64-bit multiplies it emulates with
        // three 32-bit ones; scalar multiplies sum a piece in about half the time (figures in
        // docs/BENCHMARKS.md). The value is the same: each lane takes its words in order.
        let [mut l0, mut l1, mut l2, mut l3] = self.lanes;
        let mut pairs = bytes.chunks_exact(64);
        for b in &mut pairs {
            l0 = step(l0, word(&b[0..8]));
            l1 = step(l1, word(&b[8..16]));
            l2 = step(l2, word(&b[16..24]));
            l3 = step(l3, word(&b[24..32]));
            l0 = step(l0, word(&b[32..40]));
            l1 = step(l1, word(&b[40..48]));
            l2 = step(l2, word(&b[48..56]));
            l3 = step(l3, word(&b[56..64]));
        }
        self.lanes = [l0, l1, l2, l3];
        let mut blocks = pairs.remainder().chunks_exact(32);
        for b in &mut blocks {
            self.block(b);
        }
        let rest = blocks.remainder();
        self.pending[..rest.len()].copy_from_slice(rest);
        self.pending_len = rest.len();
    }

    pub(super) fn finish(&self) -> u64 {
        let mut h = self.lanes[0];
        let mut words = self.pending[..self.pending_len].chunks_exact(8);
        for w in &mut words {
            h = step(h, word(w));
        }
        h = step(h, word(words.remainder()));
        for lane in &self.lanes[1..] {
            h = step(h, *lane);
        }
        h ^ (h >> 32)
    }
}

/// A snapshot being decoded from pieces of its bytes (read from a file a buffer at a time, so
/// that the whole file is never in memory at once): its start gives the layout
/// ([`SnapshotLayout`]), then its head and its tail (the shared strings and the checksum) start
/// the stream, then the body is fed in order, in pieces of any size, each object decoded as
/// soon as its frame is whole.
///
/// The outcome is [`Snapshot::decode`]'s for the same bytes, errors included: the checksum is
/// only known once every byte has been fed, so an error found earlier (an object that does not
/// decode, another resource or codec) is kept and reported by [`finish`](Self::finish) only if
/// the checksum matches; otherwise the snapshot is corrupt. A snapshot of another identity is
/// not decoded at all (its bytes are only summed).
///
/// ```text
/// layout = SnapshotLayout::read(first bytes)        // Ok(None): read more of the start
/// stream = SnapshotStream::new(layout, head, tail, identity)
/// stream.feed(piece) ...                            // the body, in order, in any pieces
/// snapshot = stream.finish()
/// ```
pub struct SnapshotStream<K> {
    resource_version: String,
    count: usize,
    shared: Vec<String>,
    /// The tail without its checksum: summed last.
    tail: Vec<u8>,
    expected_sum: u64,
    sum: Checksum,
    /// Body bytes not fed yet.
    body_left: u64,
    /// The start of a frame the last piece ended in.
    pub(super) carry: Vec<u8>,
    decoded: Decoded<K>,
    /// The first error found before the checksum could be checked (then nothing more is
    /// decoded).
    failed: Option<SnapshotError>,
    /// With [`feed_frames`](Self::feed_frames): a frame running past the body, found when
    /// the runs before it may not be decoded yet (their errors come first).
    framing: Option<SnapshotError>,
}

impl<K> fmt::Debug for SnapshotStream<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnapshotStream")
            .field("resource_version", &self.resource_version)
            .field("count", &self.count)
            .field("decoded", &self.decoded.len())
            .field("body_left", &self.body_left)
            .finish_non_exhaustive()
    }
}

impl<K: SnapshotCodec> SnapshotStream<K> {
    /// Starts decoding the snapshot laid out as `layout`: `head` is its bytes
    /// `0..layout.body_start`, `tail` its bytes from `layout.body_end` to its end. Fails at
    /// once only when these cannot be parsed (truncated, malformed); every other refusal waits
    /// for [`finish`](Self::finish), where the checksum decides between it and
    /// [`SnapshotError::Corrupt`].
    pub fn new(
        layout: SnapshotLayout,
        head: &[u8],
        tail: &[u8],
        expected: &SnapshotIdentity,
    ) -> Result<Self, SnapshotError> {
        if head.len() as u64 != layout.body_start {
            return Err(SnapshotError::Truncated);
        }
        // The structure is checked before the checksum, as `decode` does, in its order (the
        // header, then the tail); what the header says (identity, count) and the shared
        // strings only after it.
        let mut r = Reader(head);
        r.take(MAGIC.len() + 4)?;
        let header_len = r.u32()? as usize;
        let header = Header::read(&mut Reader(r.take(header_len)?))?;
        let (Some(at), true) = (tail.len().checked_sub(8), tail.len() >= 16) else {
            return Err(SnapshotError::Truncated);
        };
        let (summed_tail, sum) = tail.split_at(at);
        let mut s = [0u8; 8];
        s.copy_from_slice(sum);
        let expected_sum = u64::from_le_bytes(s);
        let mut r = Reader(summed_tail);
        let shared_len = usize::try_from(r.u64()?).map_err(|_| SnapshotError::Truncated)?;
        let shared = r.take(shared_len)?;
        if !r.0.is_empty() {
            return Err(corrupt("bytes after the end of the snapshot"));
        }
        let body_len = layout.body_end - layout.body_start;
        let total = layout.body_end + summed_tail.len() as u64;
        let mut sum = Checksum::new(total);
        sum.update(head);
        let (resource_version, count, shared, failed) =
            match check_parts::<K>(&header, body_len, shared, expected) {
                Ok((count, shared)) => (header.resource_version.into(), count, shared, None),
                Err(e) => (String::new(), 0, Vec::new(), Some(e)),
            };
        Ok(SnapshotStream {
            resource_version,
            count,
            shared,
            tail: summed_tail.into(),
            expected_sum,
            sum,
            body_left: body_len,
            carry: Vec::new(),
            decoded: Decoded::with_capacity(count),
            failed,
            framing: None,
        })
    }

    /// The snapshot's resourceVersion as its header gives it, while the stream has found
    /// nothing against the snapshot yet (`None` once it has: another resource, selectors or
    /// codec, a malformed table of shared strings, an object that does not decode). Not
    /// checked until [`finish`](Self::finish) (the checksum): good for starting a watch while
    /// the body is read ([`Resume::At`](crate::informer::Resume::At)),
    /// never for applying anything.
    pub fn resource_version(&self) -> Option<&str> {
        match (&self.failed, &self.framing) {
            (None, None) => Some(&self.resource_version),
            _ => None,
        }
    }

    /// Feeds the next bytes of the body (in order; pieces of any size; bytes beyond the body
    /// are an error). Decodes every object whose frame is whole.
    pub fn feed(&mut self, piece: &[u8]) -> Result<(), SnapshotError> {
        self.take_body(piece)?;
        if self.failed.is_none() {
            let shared: Vec<&str> = self.shared.iter().map(String::as_str).collect();
            let decoded = &mut self.decoded;
            let r = split_frames(&mut self.carry, self.body_left, piece, |run| {
                decode_run(run, &shared, &mut |o| decoded.push(o))
            });
            self.fail(r);
        }
        Ok(())
    }

    /// [`feed`](Self::feed), handing every run of whole frames to `run`, in order, instead of
    /// decoding it: for decoding on several threads at once. The caller decodes each run
    /// ([`FrameDecoder`]) and gives back the objects of every run, in the same order, with
    /// [`decoded`](Self::decoded).
    pub fn feed_frames(
        &mut self,
        piece: &[u8],
        mut run: impl FnMut(&[u8]),
    ) -> Result<(), SnapshotError> {
        self.take_body(piece)?;
        if self.failed.is_none() && self.framing.is_none() {
            let r = split_frames(&mut self.carry, self.body_left, piece, |frames| {
                run(frames);
                Ok(())
            });
            if let Err(e) = r {
                self.framing = Some(e);
                self.carry = Vec::new();
            }
        }
        Ok(())
    }

    /// What decodes the runs [`feed_frames`](Self::feed_frames) hands out (it can be sent to
    /// other threads).
    pub fn frame_decoder(&self) -> FrameDecoder {
        FrameDecoder {
            shared: self.shared.clone(),
        }
    }

    /// The outcome of decoding the next run [`feed_frames`](Self::feed_frames) handed out
    /// (runs in the order they were handed out). The first error is the snapshot's (if its
    /// checksum matches).
    pub fn decoded(&mut self, objects: Result<Vec<Arc<K>>, SnapshotError>) {
        if self.failed.is_some() {
            return;
        }
        match objects {
            Ok(objects) => objects.into_iter().for_each(|o| self.decoded.push(o)),
            Err(e) => self.failed = Some(e),
        }
    }

    fn take_body(&mut self, piece: &[u8]) -> Result<(), SnapshotError> {
        if piece.len() as u64 > self.body_left {
            return Err(corrupt("more bytes than the body holds"));
        }
        self.body_left -= piece.len() as u64;
        self.sum.update(piece);
        Ok(())
    }

    fn fail(&mut self, r: Result<(), SnapshotError>) {
        if let Err(e) = r {
            self.failed = Some(e);
            self.carry = Vec::new();
        }
    }

    /// Ends the stream: the snapshot, if every byte of the body was fed, the checksum matches
    /// and everything checks out as in [`Snapshot::decode`].
    pub fn finish(mut self) -> Result<Snapshot<K>, SnapshotError> {
        if self.body_left > 0 {
            return Err(SnapshotError::Truncated);
        }
        self.sum.update(&self.tail);
        if self.sum.finish() != self.expected_sum {
            return Err(corrupt("checksum mismatch"));
        }
        if let Some(e) = self.failed.or(self.framing) {
            return Err(e);
        }
        if !self.carry.is_empty() {
            // A frame running past the body: `decode` finds it truncated.
            return Err(SnapshotError::Truncated);
        }
        let frames = Frames {
            resource_version: &self.resource_version,
            count: self.count,
            body: &[],
            shared: Vec::new(),
        };
        frames.finish(self.decoded)
    }
}

/// The length of the frame `bytes` starts with, when its length prefix is there.
fn frame_len(bytes: &[u8]) -> Option<usize> {
    let mut w = [0u8; 4];
    w.copy_from_slice(bytes.get(..4)?);
    Some(u32::from_le_bytes(w) as usize)
}

/// Hands the runs of whole frames that `piece` completes or holds to `run`, in order:
/// first the frame the previous piece ended in (completed in `carry`), then the whole frames
/// of `piece`; keeps the start of its last frame in `carry`. `body_left`: the body's bytes
/// after `piece`. A frame that would end beyond the body is truncated.
fn split_frames(
    carry: &mut Vec<u8>,
    body_left: u64,
    piece: &[u8],
    mut run: impl FnMut(&[u8]) -> Result<(), SnapshotError>,
) -> Result<(), SnapshotError> {
    let mut rest = piece;
    // Complete the frame the previous piece ended in (its length first, then its bytes).
    while !carry.is_empty() {
        let need = frame_len(carry).map_or(4, |n| n.saturating_add(4));
        let take = need.saturating_sub(carry.len()).min(rest.len());
        carry.extend_from_slice(&rest[..take]);
        rest = &rest[take..];
        match frame_len(carry) {
            Some(n) if carry.len() - 4 == n => {
                run(carry)?;
                carry.clear();
            }
            _ if rest.is_empty() => return check_carry(carry, body_left),
            _ => {}
        }
    }
    let mut at = 0;
    while let Some(n) = frame_len(&rest[at..]) {
        match (at + 4).checked_add(n) {
            Some(end) if end <= rest.len() => at = end,
            _ => break,
        }
    }
    if at > 0 {
        run(&rest[..at])?;
    }
    carry.extend_from_slice(&rest[at..]);
    check_carry(carry, body_left)
}

/// A frame that ends beyond the body is truncated: no need to hold on to its bytes.
fn check_carry(carry: &[u8], body_left: u64) -> Result<(), SnapshotError> {
    match frame_len(carry) {
        Some(n) if (n as u64).saturating_add(4) > carry.len() as u64 + body_left => {
            Err(SnapshotError::Truncated)
        }
        _ => Ok(()),
    }
}

/// Decodes `run`, whole frames, handing each object to `push`.
fn decode_run<K: SnapshotCodec>(
    run: &[u8],
    shared: &[&str],
    push: &mut impl FnMut(Arc<K>),
) -> Result<(), SnapshotError> {
    let mut r = Reader(run);
    while !r.0.is_empty() {
        let n = r.u32()? as usize;
        push(Frames::decode_frame(r.take(n)?, shared)?);
    }
    Ok(())
}

/// Decodes the runs of whole frames [`SnapshotStream::feed_frames`] hands out, on any thread.
#[derive(Clone, Debug)]
pub struct FrameDecoder {
    shared: Vec<String>,
}

impl FrameDecoder {
    /// The objects of `run` (as handed out by [`SnapshotStream::feed_frames`]).
    pub fn decode<K: SnapshotCodec>(&self, run: &[u8]) -> Result<Vec<Arc<K>>, SnapshotError> {
        let shared: Vec<&str> = self.shared.iter().map(String::as_str).collect();
        let mut items = Vec::new();
        decode_run(run, &shared, &mut |o| items.push(o))?;
        Ok(items)
    }
}

/// The checks `Frames::parse` makes after the checksum (the header's content, the shared
/// strings): the object count and the shared strings.
fn check_parts<K: SnapshotCodec>(
    header: &Header<'_>,
    body_len: u64,
    shared: &[u8],
    expected: &SnapshotIdentity,
) -> Result<(usize, Vec<String>), SnapshotError> {
    if header.resource_version.is_empty() {
        return Err(corrupt("empty resourceVersion"));
    }
    header.check::<K>(expected)?;
    let count = usize::try_from(header.count)
        .map_err(|_| SnapshotError::Corrupt("object count too large".into()))?;
    if count as u64 > body_len / 4 {
        return Err(corrupt("object count does not match the body"));
    }
    let shared = super::shared_strings(shared)?
        .into_iter()
        .map(String::from)
        .collect();
    Ok((count, shared))
}
