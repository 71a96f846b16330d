//! Transmit path: choosing the next message (send queue work or responses to the peer's
//! requests), segmenting it for the current MULPDU and generating Terminate.

use tcp::Instant;

use super::completion::CompletionStatus;
use super::engine::{Engine, StreamState};
use super::state::{
    Culprit, Failure, OutstandingAtomic, OutstandingRead, PieceGrant, Response, TxDone, TxMessage,
    TxPayload, INLINE_MAX,
};
use super::wr::{CheckedSource, SendOp};
use crate::ddp::segmenter::{MessageTarget, OutgoingMessage, Segmenter};
use crate::mem::{Access, AccessError, MemoryTable, ReadGrant, Resolved, Sge};
use crate::wire::atomic::{AtomicRequestRepr, ATOMIC_REQUEST_LEN};
use crate::wire::crcsum::CrcSum;
use crate::wire::ddp::{DdpRepr, UntaggedRepr, UNTAGGED_HEADER_LEN};
use crate::wire::mpa::{CRC_LEN, ULPDU_LENGTH_LEN};
use crate::wire::rdmap::{ImmediateDataRepr, Opcode, RdmapControl, ReadRequestRepr};
use crate::wire::terminate::TerminateCause;

const HEADER_MAX: usize = UNTAGGED_HEADER_LEN + INLINE_MAX;

/// Octets in front of the ULPDU_Length field of a segment's buffer: the FPDU framed there in
/// place and sent as a unit of its own, TCP may write a frame's headers into them
/// ([`tcp::Unit::with_headroom`]), so that a device sends headers and FPDU as one buffer.
/// Enough for Ethernet with an 802.1Q tag, IPv6 and a TCP header with 40 octets of
/// options.
pub const FRAME_ROOM: usize = 128;

/// The segment's octets start here in its buffer: the frame's room and the ULPDU_Length
/// field first.
const LEAD: usize = FRAME_ROOM + ULPDU_LENGTH_LEN;

/// Where the CRC32c of the FPDU that will carry a segment starts, given the segment's length
/// (the MPA ULPDU_Length): the CRC of what the framer puts in front of the segment. With
/// one, [`Engine::poll_segment_digested`] takes the FPDU's CRC and TCP sum over the segment
/// in the pass that reads its payload out of registered memory.
pub type CrcSeed = fn(usize) -> u32;

/// What [`Engine::poll_segment_digested`] sums: segments of at least `min_len` octets (a
/// shorter one is framed with others by copying, which sums it then), the FPDU's CRC
/// starting at `seed`.
#[derive(Clone, Copy, Debug)]
pub struct Digesting {
    /// The CRC before the segment, by the segment's length.
    pub seed: CrcSeed,
    /// The shortest segment summed.
    pub min_len: usize,
}

/// Room a gathered segment's buffer keeps after the payload, so that the MPA framer can
/// append pad and CRC without growing it.
const TRAILER_ROOM: usize = 3 + CRC_LEN;

/// One DDP segment ready for the MPA framer: header octets (DDP header and, for control
/// messages, the RDMAP header) followed by the payload.
///
/// The segment is built in one buffer laid out as the FPDU will be (room for a frame's
/// headers and the ULPDU_Length field, the header, the payload read once out of registered memory), so
/// that an FPDU without markers is finished in place ([`DdpSegmentOut::into_ulpdu_buffer`])
/// instead of being copied into the unit TCP sends, and the segment itself is a buffer and
/// a length, cheap to hand on.
#[derive(Clone)]
pub struct DdpSegmentOut {
    header_len: usize,
    /// The frame's room, the ULPDU_Length room, the header and the payload.
    buf: Vec<u8>,
}

impl DdpSegmentOut {
    /// Header octets.
    #[inline]
    pub fn header(&self) -> &[u8] {
        &self.buf[LEAD..LEAD + self.header_len]
    }

    /// Payload octets.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buf[LEAD + self.header_len..]
    }

    /// Gather list for the framer.
    pub fn parts(&self) -> [&[u8]; 2] {
        [self.header(), self.payload()]
    }

    /// Total length (the MPA ULPDU_Length).
    #[inline]
    pub fn len(&self) -> usize {
        self.buf.len() - LEAD
    }

    /// Whether the segment is empty (never: a segment always has a header).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Gives the payload buffer back for [`Engine::poll_segment_reusing`].
    pub fn into_buffer(self) -> Vec<u8> {
        self.buf
    }

    /// The segment as the MPA framer finishes it in place, at `FRAME_ROOM` octets into the
    /// buffer (room for a frame's headers): `ULPDU_LENGTH_LEN` octets of room (zero)
    /// followed by the ULPDU (header, payload), with room for the pad and the CRC.
    #[inline]
    pub fn into_ulpdu_buffer(mut self) -> Vec<u8> {
        self.buf[FRAME_ROOM..LEAD].fill(0);
        self.buf
    }

    /// The segment as one contiguous buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        self.buf[LEAD..].to_vec()
    }
}

/// A DDP segment being built in the caller's buffer (what it holds is overwritten), laid
/// out as [`DdpSegmentOut`] keeps it. The caller turns it into a segment with the header
/// length [`SegmentRoom::header_len`] gives, so that the segment is returned as a buffer
/// and a length written whole, not merged with the failure's layout (a value read back
/// from narrower stores waits for every store before them, the payload's copy too).
struct SegmentRoom<'a> {
    header_len: usize,
    buf: &'a mut Vec<u8>,
}

impl<'a> SegmentRoom<'a> {
    /// A segment to be built in `buf`.
    #[inline]
    fn new(buf: &'a mut Vec<u8>) -> Self {
        SegmentRoom { header_len: 0, buf }
    }

    /// Sets the buffer's length to `len`, with room for the trailer after it. A reused
    /// buffer is only cut or grown to size (what it held is overwritten by the caller), so
    /// reuse costs no clearing pass.
    #[inline]
    fn set_len(&mut self, len: usize) {
        self.buf
            .reserve((len + TRAILER_ROOM).saturating_sub(self.buf.len()));
        if self.buf.len() >= len {
            self.buf.truncate(len);
        } else {
            self.buf.resize(len, 0);
        }
    }

    /// Room for a header of up to `HEADER_MAX` octets followed by `payload` octets (the
    /// buffer grown once for both); [`SegmentRoom::end_header`] says how many header
    /// octets were written. A longer buffer is not cut, so that the payload after the
    /// header reuses what it held.
    #[inline]
    fn header_room(&mut self, payload: usize) -> &mut [u8] {
        const ROOM: usize = LEAD + HEADER_MAX;
        if self.buf.len() < ROOM {
            self.buf
                .reserve((ROOM + payload + TRAILER_ROOM).saturating_sub(self.buf.len()));
            self.buf.resize(ROOM, 0);
        }
        &mut self.buf[LEAD..ROOM]
    }

    /// The header is the first `len` octets of [`SegmentRoom::header_room`]; no payload
    /// (yet).
    #[inline]
    fn end_header(&mut self, len: usize) {
        self.header_len = len;
        self.buf.truncate(LEAD + len);
    }

    /// The buffer laid out for a payload of `len` octets after the header, returning the
    /// payload's place.
    #[inline]
    fn payload_room(&mut self, len: usize) -> &mut [u8] {
        let lead = LEAD + self.header_len;
        self.set_len(lead + len);
        &mut self.buf[lead..]
    }

    /// The header's length: with the buffer it makes the [`DdpSegmentOut`].
    #[inline]
    fn header_len(&self) -> usize {
        self.header_len
    }
}

impl PartialEq for DdpSegmentOut {
    /// The same header and payload (the ULPDU_Length room is not part of the segment).
    fn eq(&self, other: &Self) -> bool {
        self.header() == other.header() && self.payload() == other.payload()
    }
}

impl Eq for DdpSegmentOut {}

impl core::fmt::Debug for DdpSegmentOut {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DdpSegmentOut")
            .field("header", &self.header())
            .field("payload_len", &self.payload().len())
            .finish()
    }
}

/// A message's gather list: each piece's check (none for a zero-length one) and length.
type GatherPieces = Vec<(Option<Resolved>, u32)>;

fn inline<const N: usize>(src: &[u8; N]) -> TxPayload {
    let mut bytes = [0u8; INLINE_MAX];
    bytes[..N].copy_from_slice(src);
    TxPayload::Inline { bytes, len: N }
}

/// Reads `out.len()` octets at `offset` of the message's gather list, through the grant of
/// the piece read last (`grant`).
fn gather<M: MemoryTable + ?Sized>(
    pieces: &[(Option<Resolved>, u32)],
    grant: &mut PieceGrant,
    mem: &M,
    offset: u32,
    out: &mut [u8],
    mut digest: Option<&mut CrcSum>,
) -> Result<(), AccessError> {
    let mut at = 0u64;
    let want_lo = u64::from(offset);
    let want_hi = want_lo + out.len() as u64;
    for (i, (r, len)) in pieces.iter().enumerate() {
        let lo = at.max(want_lo);
        let hi = (at + u64::from(*len)).min(want_hi);
        if lo < hi {
            let r = r.as_ref().ok_or(AccessError::InvalidStag)?;
            let out = &mut out[(lo - want_lo) as usize..(hi - want_lo) as usize];
            if lo == at
                && hi == at + u64::from(*len)
                && !(grant.piece == i && grant.grant.is_held())
            {
                // The whole piece in one read (a small message's usual case): no later
                // read of it follows, so no grant is worth building (one that came with
                // the verbs layer's check is used).
                mem.read(r, 0, out)?;
                if let Some(d) = digest.as_deref_mut() {
                    d.extend(out);
                }
            } else if let Some(d) = digest.as_deref_mut() {
                mem.read_granted_digest(r, grant.for_piece(i), lo - at, out, d)?;
            } else {
                mem.read_granted(r, grant.for_piece(i), lo - at, out)?;
            }
        }
        at += u64::from(*len);
    }
    Ok(())
}

impl Engine {
    /// The next DDP segment to transmit, at most `mulpdu` octets (RFC 5041 §5.2), or `None`
    /// when there is nothing to send. After a Terminate nothing more is produced.
    pub fn poll_segment<M: MemoryTable + ?Sized>(
        &mut self,
        now: Instant,
        mulpdu: usize,
        mem: &M,
    ) -> Option<DdpSegmentOut> {
        self.poll_segment_reusing(now, mulpdu, mem, Vec::new())
    }

    /// Like [`Engine::poll_segment`], gathering the payload into `buffer` (a buffer given
    /// back by [`DdpSegmentOut::into_buffer`]) instead of a new allocation.
    pub fn poll_segment_reusing<M: MemoryTable + ?Sized>(
        &mut self,
        now: Instant,
        mulpdu: usize,
        mem: &M,
        mut buffer: Vec<u8>,
    ) -> Option<DdpSegmentOut> {
        self.poll_segment_into(now, mulpdu, mem, &mut buffer)
    }

    /// Whether [`Engine::poll_segment_into`] may give a segment now: false exactly when it
    /// would answer `None` at once, touching nothing (no Terminate to send; not active, or
    /// no message under way and none waiting).
    pub fn has_tx_work(&self) -> bool {
        if !self.tx_open() {
            return self.terminate.is_some() && !self.terminate_sent;
        }
        !self.tx_idle
    }

    /// Whether the stream is Active or Closing: then no Terminate is queued (one makes the
    /// stream Terminated for good, [`Engine::fail`]), and [`Engine::tx_idle`] tells whether
    /// anything waits to start. Checked first, with the summary in the same line.
    fn tx_open(&self) -> bool {
        debug_assert_eq!(self.tx_idle, self.nothing_to_start(), "tx_idle out of date");
        let open = matches!(self.state, StreamState::Active | StreamState::Closing);
        debug_assert!(
            !open || self.terminate.is_none(),
            "a Terminate on an open stream"
        );
        open
    }

    /// Like [`Engine::poll_segment_reusing`], taking `buffer` only for a segment it returns:
    /// when there is nothing to send the buffer stays with the caller.
    pub fn poll_segment_into<M: MemoryTable + ?Sized>(
        &mut self,
        now: Instant,
        mulpdu: usize,
        mem: &M,
        buffer: &mut Vec<u8>,
    ) -> Option<DdpSegmentOut> {
        self.poll_segment_with(now, mulpdu, mem, buffer, None, &mut None)
    }

    /// [`Engine::poll_segment_into`], also giving the CRC32c (continuing from the seed's) and
    /// TCP sum of the segment (header and payload, not the ULPDU_Length room), taken as it
    /// is built: the payload's in the pass that copies it out of registered memory where the
    /// memory allows. `None` for a segment not summed (a Terminate, one shorter than
    /// `digesting.min_len`).
    pub fn poll_segment_digested<M: MemoryTable + ?Sized>(
        &mut self,
        now: Instant,
        mulpdu: usize,
        mem: &M,
        buffer: &mut Vec<u8>,
        digesting: Digesting,
    ) -> Option<(DdpSegmentOut, Option<CrcSum>)> {
        let mut digest = None;
        let s = self.poll_segment_with(now, mulpdu, mem, buffer, Some(digesting), &mut digest)?;
        Some((s, digest))
    }

    #[inline]
    fn poll_segment_with<M: MemoryTable + ?Sized>(
        &mut self,
        now: Instant,
        mulpdu: usize,
        mem: &M,
        buffer: &mut Vec<u8>,
        digesting: Option<Digesting>,
        digest: &mut Option<CrcSum>,
    ) -> Option<DdpSegmentOut> {
        // Nothing to start (the receiving side's usual case, asked after every segment):
        // answered from the summary (up to date, as `tx_open` asserts) before the loop, so
        // that what the loop keeps at hand is set up only when a segment may be built.
        if self.tx_open() && self.current.is_none() && self.tx_idle {
            return None;
        }
        let out = self.poll_segment_inner(now, mulpdu, mem, buffer, digesting, digest);
        self.tx_idle = self.nothing_to_start();
        out
    }

    fn poll_segment_inner<M: MemoryTable + ?Sized>(
        &mut self,
        now: Instant,
        mulpdu: usize,
        mem: &M,
        buffer: &mut Vec<u8>,
        digesting: Option<Digesting>,
        digest: &mut Option<CrcSum>,
    ) -> Option<DdpSegmentOut> {
        loop {
            if !self.tx_open() {
                // Only a queued Terminate may still go out (the state is checked first: an
                // open stream has none, and its line is not read then).
                let t = self.terminate?;
                if self.terminate_sent {
                    return None;
                }
                let hdr = DdpRepr::Untagged(UntaggedRepr {
                    last: true,
                    rsvd_ulp: self.ctrl(Opcode::Terminate),
                    rsvd_ulp_word: 0,
                    qn: 2,
                    msn: self.msn.take(2),
                    mo: 0,
                });
                let mut buf = Vec::new();
                let mut out = SegmentRoom::new(&mut buf);
                let room = out.header_room(0);
                let n = hdr.emit(room).ok()?;
                let m = t.emit(&mut room[n..]).ok()?;
                out.end_header(n + m);
                self.terminate_sent = true;
                self.last_tx = Some(now);
                return Some(DdpSegmentOut {
                    header_len: n + m,
                    buf,
                });
            }
            if self.current.is_none() {
                self.current = self.start_next(mem);
                if self.current.is_none() {
                    if self.terminate.is_some() {
                        continue;
                    }
                    return None;
                }
            }
            match self.next_from_current(mulpdu, mem, buffer, digesting, digest) {
                Ok(Some(header_len)) => {
                    self.last_tx = Some(now);
                    return Some(DdpSegmentOut {
                        header_len,
                        buf: core::mem::take(buffer),
                    });
                }
                Ok(None) => return None,
                Err(f) => self.fail(f),
            }
        }
    }

    /// Whether [`Engine::poll_segment_into`] would produce a DDP segment of at most `mulpdu`
    /// octets now, without building it: a Terminate not sent yet, a message under way that
    /// fits, a response waiting, or a send-queue WR its fences and ORD let start.
    pub fn has_segment(&self, mulpdu: usize) -> bool {
        if !self.tx_open() {
            return self.terminate.is_some() && !self.terminate_sent;
        }
        if self.tx_idle {
            return false;
        }
        if let Some(cur) = &self.current {
            return match &cur.payload {
                TxPayload::Inline { len, .. } => mulpdu >= cur.seg.header_len() + len,
                _ => true,
            };
        }
        if !self.responses.is_empty() {
            return true;
        }
        let idx = self.sq_started as usize;
        let Some(entry) = self.sq.get(idx) else {
            return false;
        };
        if entry.wr.local_fence && idx != 0 {
            return false;
        }
        if entry.wr.read_fence && (!self.reads.is_empty() || !self.atomics.is_empty()) {
            return false;
        }
        let is_request = matches!(entry.wr.op, SendOp::Read { .. } | SendOp::Atomic { .. });
        !is_request || self.cfg.ord == 0 || self.outstanding_requests() < self.cfg.ord as usize
    }

    /// Builds the current message's next segment in `buffer`, answering its header's
    /// length (the segment is `buffer` then), or `None` when nothing fits; `digesting` one
    /// long enough, its CRC32c and TCP sum go to `digest_out`.
    fn next_from_current<M: MemoryTable + ?Sized>(
        &mut self,
        mulpdu: usize,
        mem: &M,
        buffer: &mut Vec<u8>,
        digesting: Option<Digesting>,
        digest_out: &mut Option<CrcSum>,
    ) -> Result<Option<usize>, Failure> {
        let Some(cur) = self.current.as_mut() else {
            return Ok(None);
        };
        let grant = &mut cur.grant;
        if let TxPayload::Inline { len, .. } = &cur.payload {
            // Control messages are never split (SPEC-DIGEST D19).
            if mulpdu < cur.seg.header_len() + len {
                return Ok(None);
            }
        }
        let Some(plan) = cur.seg.next_segment(mulpdu) else {
            return Ok(None);
        };
        let mut out = SegmentRoom::new(buffer);
        let n = plan
            .header
            .emit(out.header_room(plan.len as usize))
            .map_err(|_| Failure::bare(TerminateCause::RDMAP_LOCAL_CATASTROPHIC, Culprit::None))?;
        // The payload's room is laid out after the header, the buffer cut or grown then.
        out.header_len = n;
        // The segment's length: an inline payload is written with the header.
        let seg_len = n + match &cur.payload {
            TxPayload::Inline { len, .. } => *len,
            _ => plan.len as usize,
        };
        let mut digest = digesting.filter(|d| seg_len >= d.min_len).map(|d| {
            let mut sum = CrcSum::after((d.seed)(seg_len));
            sum.extend(&out.header_room(0)[..n]);
            sum
        });
        match &cur.payload {
            TxPayload::Inline { bytes, len } => {
                out.header_room(0)[n..n + len].copy_from_slice(&bytes[..*len]);
                out.end_header(n + len);
                if let Some(d) = digest.as_mut() {
                    d.extend(&bytes[..*len]);
                }
            }
            TxPayload::Gather(pieces) => {
                let payload = out.payload_room(plan.len as usize);
                if let Err(_e) = gather(pieces, grant, mem, plan.offset, payload, digest.as_mut()) {
                    let culprit = match cur.done {
                        TxDone::Complete(seq) => {
                            Culprit::Send(seq, CompletionStatus::LocalProtection)
                        }
                        _ => Culprit::None,
                    };
                    return Err(Failure::bare(
                        TerminateCause::RDMAP_LOCAL_CATASTROPHIC,
                        culprit,
                    ));
                }
            }
            TxPayload::Source(src) => {
                if plan.len == 0 {
                    out.end_header(n);
                } else {
                    let payload = out.payload_room(plan.len as usize);
                    let (piece, at) = (grant.for_piece(0), u64::from(plan.offset));
                    let res = match (src, digest.as_mut()) {
                        (Some(r), Some(d)) => mem.read_granted_digest(r, piece, at, payload, d),
                        (Some(r), None) => mem.read_granted(r, piece, at, payload),
                        (None, _) => Err(AccessError::InvalidStag),
                    };
                    if let Err(e) = res {
                        if let TxDone::ReadResponse {
                            req,
                            copy,
                            segment_len,
                        } = &cur.done
                        {
                            // RFC 5040 §4.8: the copied Read Request is advanced by the octets
                            // already sent.
                            let sent = plan.offset;
                            let updated = ReadRequestRepr {
                                sink_to: req.sink_to.wrapping_add(u64::from(sent)),
                                src_to: req.src_to.wrapping_add(u64::from(sent)),
                                size: req.size - sent,
                                ..*req
                            };
                            return Err(Failure {
                                cause: e.rdmap_cause(),
                                segment_len: Some(*segment_len),
                                ddp: Some(*copy),
                                rdma: Some(updated.to_bytes()),
                                culprit: Culprit::None,
                            });
                        }
                        return Err(Failure::bare(e.rdmap_cause(), Culprit::None));
                    }
                }
            }
        }
        if cur.seg.is_done() {
            if let Some(c) = self.current.take() {
                if let TxPayload::Gather(mut pieces) = c.payload {
                    pieces.clear();
                    self.spare_pieces = pieces;
                }
                match c.done {
                    TxDone::Complete(seq) => self.finish_sq(seq, CompletionStatus::Success),
                    TxDone::AwaitResponse => {}
                    TxDone::ReadResponse { .. } | TxDone::ReleaseIrd => self.queues.release_slot(1),
                }
            }
        }
        *digest_out = digest;
        Ok(Some(out.header_len()))
    }

    fn start_next<M: MemoryTable + ?Sized>(&mut self, mem: &M) -> Option<TxMessage> {
        let response_first = self.prefer_response;
        self.prefer_response = !self.prefer_response;
        if response_first {
            self.start_response().or_else(|| self.start_sq(mem))
        } else {
            self.start_sq(mem).or_else(|| self.start_response())
        }
    }

    fn ctrl(&self, opcode: Opcode) -> u8 {
        RdmapControl {
            version: self.cfg.rdmap_version,
            opcode,
        }
        .to_octet()
    }

    /// An untagged message of `len` octets on queue `qn`, with that queue's next MSN.
    fn untagged_message(
        &mut self,
        qn: u32,
        opcode: Opcode,
        rsvd_ulp_word: u32,
        len: u32,
    ) -> Segmenter {
        Segmenter::new(OutgoingMessage {
            target: MessageTarget::Untagged {
                qn,
                msn: self.msn.take(qn),
                rsvd_ulp_word,
            },
            rsvd_ulp: self.ctrl(opcode),
            len,
        })
    }

    /// A tagged message of `len` octets placed at `to` of the peer's `stag`.
    fn tagged_message(&self, opcode: Opcode, stag: u32, to: u64, len: u32) -> Segmenter {
        Segmenter::new(OutgoingMessage {
            target: MessageTarget::Tagged { stag, to },
            rsvd_ulp: self.ctrl(opcode),
            len,
        })
    }

    fn start_response(&mut self) -> Option<TxMessage> {
        let resp = self.responses.pop_front()?;
        Some(match resp {
            Response::Read {
                src,
                req,
                copy,
                segment_len,
            } => TxMessage {
                seg: self.tagged_message(
                    Opcode::ReadResponse,
                    req.sink_stag,
                    req.sink_to,
                    req.size,
                ),
                payload: TxPayload::Source(src),
                done: TxDone::ReadResponse {
                    req,
                    copy,
                    segment_len,
                },
                grant: PieceGrant::default(),
            },
            Response::Atomic(r) => {
                let mut b = [0u8; 12];
                // The array has exactly the header length.
                let _ = r.emit(&mut b);
                TxMessage {
                    seg: self.untagged_message(3, Opcode::AtomicResponse, 0, 12),
                    payload: inline(&b),
                    done: TxDone::ReleaseIrd,
                    grant: PieceGrant::default(),
                }
            }
        })
    }

    /// The resolved pieces of `sgl`, in the spare list of the last finished message.
    fn resolve_local<M: MemoryTable + ?Sized>(
        &mut self,
        mem: &M,
        sgl: &[Sge],
        need: Access,
    ) -> Result<Vec<(Option<Resolved>, u32)>, AccessError> {
        let mut pieces = core::mem::take(&mut self.spare_pieces);
        pieces.clear();
        for s in sgl {
            if s.len == 0 {
                // Zero-length SGEs are not validated (VERBS-00 §8.1.3.2).
                pieces.push((None, 0));
            } else {
                let r = self.resolve_on_stream(mem, s.stag, s.to, u64::from(s.len), need)?;
                pieces.push((Some(r), s.len));
            }
        }
        Ok(pieces)
    }

    /// The pieces of a Send's or Write's source SGL: the verbs layer's check of its one
    /// SGE ([`CheckedSource`]) while the table is unchanged since, else
    /// [`Self::resolve_local`]'s.
    /// With the check comes the grant for the piece's reads: its first read skips the
    /// STag look-up too.
    #[inline]
    fn source_pieces<M: MemoryTable + ?Sized>(
        &mut self,
        mem: &M,
        sgl: &[Sge],
        checked: Option<CheckedSource>,
    ) -> Result<(GatherPieces, PieceGrant), AccessError> {
        if let (Some(c), [s]) = (checked, sgl) {
            if s.len != 0 && mem.table_generation() == Some(c.generation) {
                let mut pieces = core::mem::take(&mut self.spare_pieces);
                pieces.clear();
                pieces.push((Some(c.piece), s.len));
                let grant = PieceGrant {
                    piece: 0,
                    grant: c
                        .start
                        .map(|start| ReadGrant::new(c.generation, Some(start)))
                        .unwrap_or_default(),
                };
                return Ok((pieces, grant));
            }
        }
        let pieces = self.resolve_local(mem, sgl, Access::LOCAL_READ)?;
        Ok((pieces, PieceGrant::default()))
    }

    /// Starts the next send-queue work request, honouring fences and ORD. A local error while
    /// building the message sends a Terminate instead (RFC 5040 §7.1 case 1).
    fn start_sq<M: MemoryTable + ?Sized>(&mut self, mem: &M) -> Option<TxMessage> {
        while (self.sq_started as usize) < self.sq.len() {
            let idx = self.sq_started as usize;
            let entry = &self.sq[idx];
            let seq = entry.seq;
            if entry.wr.local_fence && idx != 0 {
                return None;
            }
            if entry.wr.read_fence && (!self.reads.is_empty() || !self.atomics.is_empty()) {
                return None;
            }
            // The engine keeps the entry for its kind only: the SGL moves into the message.
            let op = self.sq[idx].wr.op.hand_over();
            let checked = self.sq[idx].checked.take();
            let is_request = matches!(op, SendOp::Read { .. } | SendOp::Atomic { .. });
            if is_request {
                if self.cfg.ord == 0 {
                    let before = self.sq.len();
                    self.finish_sq(seq, CompletionStatus::ZeroReadResources);
                    if self.sq.len() == before {
                        self.sq_started += 1;
                    }
                    continue;
                }
                if self.outstanding_requests() >= self.cfg.ord as usize {
                    return None;
                }
            }
            let local_error = Failure::bare(
                TerminateCause::RDMAP_LOCAL_CATASTROPHIC,
                Culprit::Send(seq, CompletionStatus::LocalProtection),
            );
            let msg = match op {
                SendOp::Send {
                    sgl,
                    solicited,
                    invalidate,
                } => {
                    let Ok((pieces, grant)) = self.source_pieces(mem, &sgl, checked) else {
                        self.fail(local_error);
                        return None;
                    };
                    let len: u32 = pieces.iter().map(|p| p.1).sum();
                    let opcode = match (solicited, invalidate.is_some()) {
                        (false, false) => Opcode::Send,
                        (false, true) => Opcode::SendInvalidate,
                        (true, false) => Opcode::SendSe,
                        (true, true) => Opcode::SendSeInvalidate,
                    };
                    self.sq[idx].byte_len = len;
                    TxMessage {
                        seg: self.untagged_message(
                            0,
                            opcode,
                            invalidate.map(|s| s.0).unwrap_or(0),
                            len,
                        ),
                        payload: TxPayload::Gather(pieces),
                        done: TxDone::Complete(seq),
                        grant,
                    }
                }
                SendOp::Write { sgl, remote } => {
                    let Ok((pieces, grant)) = self.source_pieces(mem, &sgl, checked) else {
                        self.fail(local_error);
                        return None;
                    };
                    let len: u32 = pieces.iter().map(|p| p.1).sum();
                    self.sq[idx].byte_len = len;
                    TxMessage {
                        seg: self.tagged_message(Opcode::Write, remote.stag.0, remote.to, len),
                        payload: TxPayload::Gather(pieces),
                        done: TxDone::Complete(seq),
                        grant,
                    }
                }
                SendOp::Read { sink, remote, len } => {
                    let req = ReadRequestRepr {
                        sink_stag: sink.stag.0,
                        sink_to: sink.to,
                        size: len,
                        src_stag: remote.stag.0,
                        src_to: remote.to,
                    };
                    self.reads.push_back(OutstandingRead {
                        seq,
                        len,
                        received: 0,
                    });
                    TxMessage {
                        seg: self.untagged_message(1, Opcode::ReadRequest, 0, 28),
                        payload: inline(&req.to_bytes()),
                        done: TxDone::AwaitResponse,
                        grant: PieceGrant::default(),
                    }
                }
                SendOp::Immediate { data, solicited } => {
                    let opcode = if solicited {
                        Opcode::ImmediateDataSe
                    } else {
                        Opcode::ImmediateData
                    };
                    let mut b = [0u8; 8];
                    // The array has exactly the header length.
                    let _ = ImmediateDataRepr { data }.emit(&mut b);
                    TxMessage {
                        seg: self.untagged_message(0, opcode, 0, 8),
                        payload: inline(&b),
                        done: TxDone::Complete(seq),
                        grant: PieceGrant::default(),
                    }
                }
                SendOp::Atomic {
                    op,
                    remote,
                    add_swap,
                    add_swap_mask,
                    compare,
                    compare_mask,
                    result,
                } => {
                    let Ok(mut pieces) =
                        self.resolve_local(mem, &[Sge { len: 8, ..result }], Access::LOCAL_WRITE)
                    else {
                        self.fail(local_error);
                        return None;
                    };
                    let request_id = self.next_request_id;
                    self.next_request_id = self.next_request_id.wrapping_add(1);
                    let req = AtomicRequestRepr {
                        op,
                        request_id,
                        stag: remote.stag.0,
                        to: remote.to,
                        add_swap_data: add_swap,
                        add_swap_mask,
                        compare_data: compare,
                        compare_mask,
                    };
                    let mut b = [0u8; ATOMIC_REQUEST_LEN];
                    // The array has exactly the header length.
                    let _ = req.emit(&mut b);
                    self.atomics.push_back(OutstandingAtomic {
                        seq,
                        request_id,
                        result: pieces.pop().and_then(|p| p.0),
                    });
                    self.queues.set_capacity(3, self.atomics.len() as u32);
                    TxMessage {
                        seg: self.untagged_message(
                            1,
                            Opcode::AtomicRequest,
                            0,
                            ATOMIC_REQUEST_LEN as u32,
                        ),
                        payload: inline(&b),
                        done: TxDone::AwaitResponse,
                        grant: PieceGrant::default(),
                    }
                }
            };
            self.sq_started += 1;
            return Some(msg);
        }
        None
    }
}
