//! MPA receiver (RFC 5044 §4–§6): finds FPDUs in the TCP stream, strips markers, checks
//! CRCs and hands ULPDUs (DDP segments) up.
//!
//! It works on TCP segments with their sequence numbers, before TCP buffers anything:
//!
//! * in-order bytes are parsed as a stream (FPDUs may span segments; a partial FPDU is kept
//!   here), and every error is reported with its Terminate cause;
//! * a segment ahead of RCV.NXT is searched for whole FPDUs: through the markers of the
//!   direction when they were negotiated, otherwise through the aligned-segment rule (the
//!   segment starts with an FPDU) plus the CRC. With CRC off and no markers, only a segment
//!   that is exactly tiled by plausible FPDUs is used. FPDUs found this way are handed up at
//!   once and reported as consumed, so that TCP need not buffer them; out-of-order
//!   inspection never raises an error: doubtful data is left for the in-order pass.
//!
//! The in-order pass skips FPDUs already handed up, so none is delivered twice.

use std::collections::BTreeMap;

use crate::mpa::error::MpaError;
use crate::mpa::markers::{self, MarkerSpacing};
use crate::mpa::negotiate::Negotiated;
use crate::wire::crc::{crc32c, Crc32c};
use crate::wire::crcsum::{crc32c_and_sum, one_pass};
use crate::wire::ddp::TAGGED_HEADER_LEN;
use crate::wire::mpa::{fpdu_len, pad_len, Marker, CRC_LEN, MARKER_LEN, ULPDU_LENGTH_LEN};
use tcp::checksum::{payload_sum, PayloadSum};

/// Receiver parameters for one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiverConfig {
    /// CRCs are checked (else the field is ignored).
    pub crc: bool,
    /// Markers are present in this direction.
    pub markers: bool,
    /// Sequence number of the first FPDU octet (after the peer's Request or Reply).
    pub start_seq: u32,
    /// Smallest acceptable ULPDU_Length (a DDP tagged header: 14).
    pub min_ulpdu_len: u16,
    /// Largest acceptable ULPDU_Length.
    pub max_ulpdu_len: u16,
    /// What the in-order pass does with an FPDU whose CRC does not match.
    pub crc_errors: CrcErrorPolicy,
}

/// Handling of CRC mismatches found in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CrcErrorPolicy {
    /// Stop with `MpaError::CrcMismatch` (Terminate 2/0/02, RFC 5044 §8).
    #[default]
    Fail,
    /// Hand the FPDU up marked `CrcCheck::Bad` and go on (capture analysis only).
    Deliver,
}

/// CRC verdict of a delivered FPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrcCheck {
    /// CRC not negotiated: the field was not checked.
    Off,
    /// CRC checked and matched.
    Good,
    /// CRC mismatch (only with `CrcErrorPolicy::Deliver`).
    Bad {
        /// CRC computed over the FPDU.
        computed: u32,
        /// CRC found on the wire.
        received: u32,
    },
}

impl ReceiverConfig {
    /// Parameters of the receiving direction after negotiation.
    pub fn from_negotiated(n: &Negotiated, rx_start_seq: u32) -> Self {
        ReceiverConfig {
            crc: n.crc,
            markers: n.markers_rx,
            start_seq: rx_start_seq,
            min_ulpdu_len: TAGGED_HEADER_LEN as u16,
            max_ulpdu_len: u16::MAX,
            crc_errors: CrcErrorPolicy::Fail,
        }
    }

    /// Bounds ULPDU_Length by the segment size of the connection: `mss` is the largest TCP
    /// payload the peer sends us (its effective MSS, never above the MSS we advertised,
    /// RFC 9293 §3.7.1). A conforming sender never frames an FPDU larger than its EMSS
    /// (RFC 5044 §4.1: MULPDU = EMSS less the FPDU overhead; RFC 5041 §5.2: no DDP segment
    /// exceeds MULPDU), so a longer ULPDU_Length is an MPA error, reported as soon as its two
    /// octets arrive. Without this bound a corrupted length can make the receiver wait for
    /// up to 64 KiB that the peer never sends (it waits for our answer), with CRCs on as
    /// well as off: the CRC can only be checked once the FPDU is complete. The bound is
    /// `mss - 6` (length field, pad-free CRC: the largest ULPDU of a one-segment FPDU),
    /// markers only lower the real MULPDU. `mss` 0 (unknown) leaves the bound unchanged.
    pub fn limit_to_mss(mut self, mss: usize) -> Self {
        if mss > ULPDU_LENGTH_LEN + CRC_LEN {
            let max = (mss - ULPDU_LENGTH_LEN - CRC_LEN).min(usize::from(u16::MAX)) as u16;
            self.max_ulpdu_len = self.max_ulpdu_len.min(max).max(self.min_ulpdu_len);
        }
        self
    }
}

/// One ULPDU handed up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery<'a> {
    /// Sequence number of the FPDU's ULPDU_Length field.
    pub seq: u32,
    /// The DDP segment, markers removed.
    pub ulpdu: &'a [u8],
    /// False when found in a segment ahead of RCV.NXT.
    pub in_order: bool,
    /// CRC verdict.
    pub crc: CrcCheck,
}

/// The part of a segment (offsets into its payload, `start..end`) the receiver consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Consumed {
    /// First consumed octet.
    pub start: usize,
    /// One past the last consumed octet.
    pub end: usize,
}

impl Consumed {
    /// Nothing consumed.
    pub const NONE: Consumed = Consumed { start: 0, end: 0 };

    /// Whether nothing was consumed.
    pub fn is_empty(&self) -> bool {
        self.start >= self.end
    }

    /// Number of consumed octets.
    pub fn len(&self) -> usize {
        self.end.saturating_sub(self.start)
    }
}

/// A whole FPDU found ahead: boundary, first ULPDU_Length octet, end, ULPDU length.
type Found = (u64, u64, u64, usize);

/// Problems with a candidate FPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Length(u16),
    Marker {
        at: u64,
        fpduptr: u16,
        expected: u64,
    },
    Crc {
        computed: u32,
        received: u32,
        span: usize,
        ulpdu_len: usize,
    },
}

/// Result of examining octets that should start with an FPDU's ULPDU_Length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Examined {
    /// More octets needed: at least this many from the ULPDU_Length field.
    Incomplete(usize),
    /// A whole FPDU of `span` stream octets (markers and CRC included).
    Whole { span: usize, ulpdu_len: usize },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InState {
    /// At an FPDU boundary.
    Boundary,
    /// Collecting the marker in front of an FPDU.
    Lead { have: usize, buf: [u8; 4] },
    /// Inside the FPDU whose ULPDU_Length is at `first`; `lead` is the marker in front of
    /// it when `boundary != first`.
    Body {
        boundary: u64,
        first: u64,
        lead: [u8; 4],
    },
}

/// The MPA receiver of one connection.
#[derive(Debug)]
pub struct Receiver {
    cfg: ReceiverConfig,
    spacing: Option<MarkerSpacing>,
    /// Next in-order stream position, relative to `start_seq`.
    pos: u64,
    state: InState,
    partial: Vec<u8>,
    skip_until: u64,
    /// FPDUs handed up ahead of `pos`: boundary → end (relative positions).
    delivered: BTreeMap<u64, u64>,
    scratch: Vec<u8>,
    /// The FPDUs of a segment found ahead ([`Receiver::locate_chain`]), kept across
    /// segments so that finding them allocates nothing.
    found: Vec<Found>,
    stopped: bool,
    /// CRCs computed for the segment last staged ([`Receiver::stage`]).
    staged: Vec<StagedCrc>,
    /// Whether staging pays: the CPU runs the one-pass CRC and sum ([`one_pass`]).
    stages: bool,
}

/// The CRC of a whole FPDU of a staged segment, computed in the pass that took the TCP
/// payload sum: the FPDU whose ULPDU_Length is at relative position `first`, `span` octets
/// (CRC included) at address `at` of the segment's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StagedCrc {
    first: u64,
    at: usize,
    span: usize,
    crc: u32,
}

impl Receiver {
    /// A receiver for one direction.
    pub fn new(cfg: ReceiverConfig) -> Self {
        Receiver {
            cfg,
            spacing: cfg.markers.then(|| MarkerSpacing::new(cfg.start_seq)),
            pos: 0,
            state: InState::Boundary,
            partial: Vec::new(),
            skip_until: 0,
            delivered: BTreeMap::new(),
            scratch: Vec::new(),
            found: Vec::new(),
            stopped: false,
            staged: Vec::new(),
            stages: cfg.crc && !cfg.markers && one_pass(),
        }
    }

    /// Offered a TCP segment at `seq` before TCP verified its checksum: when it is the next
    /// in-order segment and starts at an FPDU boundary (CRCs on, no markers, nothing handed
    /// up ahead of it), computes the CRCs of the whole FPDUs it holds and the TCP payload sum
    /// in one pass over the payload, and returns the sum. The CRCs are kept for the in-order
    /// pass over the same octets ([`Receiver::handle_in_order`]), which checks them as it
    /// would have computed them, until [`Receiver::unstage`]. `None`: nothing staged.
    #[inline]
    pub fn stage(&mut self, seq: u32, payload: &[u8]) -> Option<PayloadSum> {
        if !self.stages {
            // Nothing was ever staged: no CRCs to forget.
            return None;
        }
        self.stage_segment(seq, payload)
    }

    /// [`Receiver::stage`] where staging pays.
    fn stage_segment(&mut self, seq: u32, payload: &[u8]) -> Option<PayloadSum> {
        self.staged.clear();
        if self.stopped
            || !self.delivered.is_empty()
            || !self.is_at_boundary()
            || self.rel(seq) != Some(self.pos)
        {
            return None;
        }
        let mut sum = payload_sum(&[]);
        let mut rest = payload;
        while let [a, b, ..] = *rest {
            let len = u16::from_be_bytes([a, b]);
            if !self.length_ok(len) {
                break;
            }
            let span = fpdu_len(usize::from(len));
            let Some((fpdu, tail)) = rest.split_at_checked(span) else {
                break;
            };
            let (covered, crc) = fpdu.split_at(span - CRC_LEN);
            let one = crc32c_and_sum(covered);
            sum = sum.then(one.sum).then(payload_sum(crc));
            self.staged.push(StagedCrc {
                first: self.pos + (payload.len() - rest.len()) as u64,
                at: fpdu.as_ptr() as usize,
                span,
                crc: one.crc,
            });
            rest = tail;
        }
        if self.staged.is_empty() {
            return None;
        }
        Some(sum.then(payload_sum(rest)))
    }

    /// Forgets the CRCs of the segment last staged.
    pub fn unstage(&mut self) {
        self.staged.clear();
    }

    /// Whether a ULPDU_Length is within the negotiated bounds (RFC 5044 §6.5, §8).
    #[inline]
    fn length_ok(&self, len: u16) -> bool {
        (self.cfg.min_ulpdu_len..=self.cfg.max_ulpdu_len).contains(&len)
    }

    /// The CRC of the FPDU of `span` octets at relative position `first` without markers
    /// whose octets are `s`: the staged one ([`Receiver::stage`]) or computed now.
    #[inline]
    fn fpdu_crc(&self, first: u64, span: usize, s: &[u8]) -> u32 {
        self.staged_crc(first, span, s)
            .unwrap_or_else(|| crc32c(&s[..span - CRC_LEN]))
    }

    /// The staged CRC of the FPDU of `span` octets at relative position `first` whose
    /// octets are `s` (the same octets, at the same address, that were staged).
    #[inline]
    fn staged_crc(&self, first: u64, span: usize, s: &[u8]) -> Option<u32> {
        self.staged
            .iter()
            .find(|c| c.first == first && c.span == span && c.at == s.as_ptr() as usize)
            .map(|c| c.crc)
    }

    /// The in-order fast path's look at `s`, in-order octets at `seq`: when they are the
    /// next ones and start at an FPDU boundary (no markers, no partial FPDU held) with a
    /// whole FPDU that no FPDU handed up ahead starts inside of (such a start or overlap
    /// goes the general way, which skips or refuses it), whose ULPDU_Length is within
    /// bounds and whose CRC matches (RFC 5044 §6.5, §8; the staged CRC where [`Receiver::stage`] took it),
    /// its ULPDU and its span, else `None`. Nothing changes: once the ULPDU is handed up,
    /// [`Receiver::pass_fpdu`] moves past it; without that call the same octets go to
    /// [`Receiver::handle_in_order`] as before, which reports what `None` declined.
    #[inline]
    pub fn whole_fpdu_at<'s>(&self, seq: u32, s: &'s [u8]) -> Option<(&'s [u8], usize)> {
        if self.stopped
            || self.spacing.is_some()
            || !self.is_at_boundary()
            || seq != self.next_seq()
        {
            return None;
        }
        // `examine`'s checks for an FPDU at a boundary without markers, inline.
        let [a, b, ..] = *s else {
            return None;
        };
        let len = u16::from_be_bytes([a, b]);
        if !self.length_ok(len) {
            return None;
        }
        let span = fpdu_len(usize::from(len));
        let fpdu = s.get(..span)?;
        if !self.delivered.is_empty()
            && self
                .delivered
                .range(self.pos..self.pos + span as u64)
                .next()
                .is_some()
        {
            return None;
        }
        let (covered, crc) = fpdu.split_at(span - CRC_LEN);
        if self.cfg.crc {
            let computed = self.fpdu_crc(self.pos, span, s);
            if computed != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
                return None;
            }
        }
        let ulpdu = &covered[ULPDU_LENGTH_LEN..ULPDU_LENGTH_LEN + usize::from(len)];
        Some((ulpdu, span))
    }

    /// Whether the in-order pass holds part of an FPDU ([`Receiver::pending_fpdu`] is
    /// `Some`).
    #[inline]
    pub fn holds_partial_fpdu(&self) -> bool {
        matches!(self.state, InState::Body { .. }) && !self.partial.is_empty()
    }

    /// Moves the in-order position past the FPDU of `span` octets that
    /// [`Receiver::whole_fpdu_at`] found at it, once its ULPDU was handed up.
    #[inline]
    pub fn pass_fpdu(&mut self, span: usize) {
        self.pos += span as u64;
    }

    /// Parameters in use.
    pub fn config(&self) -> &ReceiverConfig {
        &self.cfg
    }

    /// Sequence number of the next in-order octet this receiver expects.
    pub fn next_seq(&self) -> u32 {
        self.seq(self.pos)
    }

    /// Whether the in-order position is between FPDUs (no partial FPDU or marker held).
    pub fn is_at_boundary(&self) -> bool {
        self.state == InState::Boundary && self.pos >= self.skip_until
    }

    /// The FPDU the in-order pass holds in part, if any: the sequence number of its
    /// ULPDU_Length field, the octets held and the octets its ULPDU_Length claims (0 while
    /// the field itself is incomplete). With CRCs on nothing can be checked until the FPDU
    /// is complete (RFC 5044 §6.5), so a ULPDU_Length corrupted upwards within the bound of
    /// [`ReceiverConfig::limit_to_mss`] leaves the stream waiting for octets the peer may
    /// never send: only a timeout on this state can end such a stream.
    pub fn pending_fpdu(&self) -> Option<(u32, usize, usize)> {
        let InState::Body { first, .. } = self.state else {
            return None;
        };
        if self.partial.is_empty() {
            return None;
        }
        let claimed = match self.partial.get(..ULPDU_LENGTH_LEN) {
            Some(b) => {
                let len = usize::from(u16::from_be_bytes([b[0], b[1]]));
                match self.spacing {
                    Some(sp) => sp.interior_span(self.seq(first), fpdu_len(len)),
                    None => fpdu_len(len),
                }
            }
            None => 0,
        };
        Some((self.seq(first), self.partial.len(), claimed))
    }

    /// Number of FPDUs handed up ahead of the in-order position and not yet passed by it.
    pub fn pending_out_of_order(&self) -> usize {
        self.delivered.len()
    }

    fn seq(&self, rel: u64) -> u32 {
        self.cfg.start_seq.wrapping_add(rel as u32)
    }

    /// Relative position of `seq`, taken within ±2 GiB of the in-order position.
    fn rel(&self, seq: u32) -> Option<u64> {
        let d = seq.wrapping_sub(self.seq(self.pos)) as i32 as i64;
        u64::try_from(self.pos as i64 + d).ok()
    }

    /// Offers a TCP segment. `in_order` is true when it starts at RCV.NXT (or overlaps it
    /// after TCP trimmed it); such bytes are always consumed. For a segment ahead of
    /// RCV.NXT the consumed range holds the FPDUs handed up; TCP keeps the rest.
    pub fn handle_segment<F: FnMut(Delivery<'_>)>(
        &mut self,
        seq: u32,
        payload: &[u8],
        in_order: bool,
        mut deliver: F,
    ) -> Result<Consumed, MpaError> {
        if self.stopped {
            return Err(MpaError::Stopped);
        }
        if in_order {
            self.handle_in_order(seq, payload, &mut deliver)?;
            return Ok(Consumed {
                start: 0,
                end: payload.len(),
            });
        }
        Ok(self.place_ahead(seq, payload, &mut deliver))
    }

    /// In-order stream octets starting at `seq`. Octets before the receiver's position are
    /// ignored; a jump forward is allowed only over FPDUs this receiver consumed out of order.
    pub fn handle_in_order<F: FnMut(Delivery<'_>)>(
        &mut self,
        seq: u32,
        data: &[u8],
        mut deliver: F,
    ) -> Result<(), MpaError> {
        if self.stopped {
            return Err(MpaError::Stopped);
        }
        let start = self.rel(seq).ok_or(MpaError::StreamGap {
            seq,
            expected: self.next_seq(),
        })?;
        while self.pos < start {
            if self.state == InState::Boundary {
                if self.pos < self.skip_until {
                    self.pos = self.skip_until;
                    continue;
                }
                if let Some(end) = self.take_delivered() {
                    self.skip_until = end;
                    continue;
                }
            }
            self.stopped = true;
            return Err(MpaError::StreamGap {
                seq,
                expected: self.next_seq(),
            });
        }
        let skip = (self.pos - start) as usize;
        if skip >= data.len() {
            return Ok(());
        }
        let r = self.feed(&data[skip..], &mut deliver);
        if r.is_err() {
            self.stopped = true;
        }
        r
    }

    /// Tells the receiver that TCP's RCV.NXT reached `rcv_nxt` over octets this receiver
    /// consumed out of order, so it can forget those FPDUs without waiting for more data.
    pub fn handle_rcv_nxt(&mut self, rcv_nxt: u32) -> Result<(), MpaError> {
        self.handle_in_order(rcv_nxt, &[], |_| ())
    }

    fn fault_to_error(&self, fault: Fault, first: u64) -> MpaError {
        match fault {
            Fault::Length(len) => MpaError::BadUlpduLength {
                seq: self.seq(first),
                len,
                min: self.cfg.min_ulpdu_len,
                max: self.cfg.max_ulpdu_len,
            },
            Fault::Marker {
                at,
                fpduptr,
                expected,
            } => MpaError::MarkerMismatch {
                seq: self.seq(at),
                fpduptr,
                expected: expected as u32,
            },
            Fault::Crc {
                computed, received, ..
            } => MpaError::CrcMismatch {
                seq: self.seq(first),
                computed,
                received,
            },
        }
    }

    fn feed<F: FnMut(Delivery<'_>)>(
        &mut self,
        mut data: &[u8],
        deliver: &mut F,
    ) -> Result<(), MpaError> {
        while !data.is_empty() {
            match self.state {
                InState::Boundary => {
                    if self.pos < self.skip_until {
                        let n = ((self.skip_until - self.pos) as usize).min(data.len());
                        self.pos += n as u64;
                        data = &data[n..];
                        continue;
                    }
                    if let Some(end) = self.take_delivered() {
                        self.skip_until = end;
                        continue;
                    }
                    let lead = self
                        .spacing
                        .is_some_and(|s| s.is_marker_at(self.seq(self.pos)));
                    self.state = if lead {
                        InState::Lead {
                            have: 0,
                            buf: [0; 4],
                        }
                    } else {
                        InState::Body {
                            boundary: self.pos,
                            first: self.pos,
                            lead: [0; 4],
                        }
                    };
                }
                InState::Lead { mut have, mut buf } => {
                    let n = (MARKER_LEN - have).min(data.len());
                    buf[have..have + n].copy_from_slice(&data[..n]);
                    have += n;
                    self.pos += n as u64;
                    data = &data[n..];
                    if have < MARKER_LEN {
                        self.state = InState::Lead { have, buf };
                        continue;
                    }
                    let at = self.pos - MARKER_LEN as u64;
                    let m = Marker::parse(&buf).map_err(MpaError::from)?;
                    if m.fpduptr != 0 {
                        return Err(self.fault_to_error(
                            Fault::Marker {
                                at,
                                fpduptr: m.fpduptr,
                                expected: 0,
                            },
                            at,
                        ));
                    }
                    self.state = InState::Body {
                        boundary: at,
                        first: self.pos,
                        lead: buf,
                    };
                }
                InState::Body {
                    boundary,
                    first,
                    lead,
                } => {
                    if self.partial.is_empty() {
                        match self.examine_in_order(first, boundary, &lead, data) {
                            Err(f) => return Err(self.fault_to_error(f, first)),
                            Ok((Examined::Whole { span, ulpdu_len }, crc)) => {
                                let fpdu = &data[..span];
                                self.hand_up_in_order(
                                    boundary, first, fpdu, ulpdu_len, crc, deliver,
                                )?;
                                self.pos += span as u64;
                                data = &data[span..];
                                self.state = InState::Boundary;
                            }
                            Ok((Examined::Incomplete(_), _)) => {
                                self.partial.extend_from_slice(data);
                                self.pos += data.len() as u64;
                                data = &[];
                            }
                        }
                        continue;
                    }
                    let mut partial = std::mem::take(&mut self.partial);
                    let need = match self.examine_in_order(first, boundary, &lead, &partial) {
                        Err(f) => return Err(self.fault_to_error(f, first)),
                        Ok((Examined::Incomplete(need), _)) => need,
                        Ok((Examined::Whole { .. }, _)) => partial.len(),
                    };
                    let n = need.saturating_sub(partial.len()).min(data.len());
                    partial.extend_from_slice(&data[..n]);
                    self.pos += n as u64;
                    data = &data[n..];
                    match self.examine_in_order(first, boundary, &lead, &partial) {
                        Err(f) => return Err(self.fault_to_error(f, first)),
                        Ok((Examined::Incomplete(_), _)) => {}
                        Ok((Examined::Whole { span, ulpdu_len }, crc)) => {
                            let fpdu = &partial[..span];
                            self.hand_up_in_order(boundary, first, fpdu, ulpdu_len, crc, deliver)?;
                            partial.clear();
                            self.state = InState::Boundary;
                        }
                    }
                    self.partial = partial;
                }
            }
        }
        Ok(())
    }

    /// Hands up `fpdu`, a whole FPDU found in order whose ULPDU_Length field is at `first`
    /// (`boundary` when no marker leads it), once `check_overlap` agrees.
    fn hand_up_in_order<F: FnMut(Delivery<'_>)>(
        &mut self,
        boundary: u64,
        first: u64,
        fpdu: &[u8],
        ulpdu_len: usize,
        crc: CrcCheck,
        deliver: &mut F,
    ) -> Result<(), MpaError> {
        self.check_overlap(boundary, first + fpdu.len() as u64)?;
        let seq = self.seq(first);
        let ulpdu = ulpdu_of(self.spacing, seq, fpdu, ulpdu_len, &mut self.scratch);
        deliver(Delivery {
            seq,
            ulpdu,
            in_order: true,
            crc,
        });
        Ok(())
    }

    /// The end of the FPDU handed up out of order that starts at the receiver's position,
    /// forgotten now that the in-order stream reached it.
    #[inline]
    fn take_delivered(&mut self) -> Option<u64> {
        if self.delivered.is_empty() {
            // The usual case, in order: no call into the map.
            return None;
        }
        self.delivered.remove(&self.pos)
    }

    /// An FPDU found in order must not overlap one handed up out of order at another start.
    #[inline]
    fn check_overlap(&mut self, boundary: u64, end: u64) -> Result<(), MpaError> {
        if !self.delivered.is_empty() && self.delivered.range(boundary..end).next().is_some() {
            return Err(MpaError::Framing(
                "an FPDU placed out of order disagrees with the in-order stream",
            ));
        }
        Ok(())
    }

    /// `examine` for the in-order pass: applies the CRC error policy.
    fn examine_in_order(
        &self,
        first: u64,
        boundary: u64,
        lead: &[u8; 4],
        s: &[u8],
    ) -> Result<(Examined, CrcCheck), Fault> {
        let ok = if self.cfg.crc {
            CrcCheck::Good
        } else {
            CrcCheck::Off
        };
        match self.examine(first, boundary, lead, s) {
            Ok(e) => Ok((e, ok)),
            Err(Fault::Crc {
                computed,
                received,
                span,
                ulpdu_len,
            }) if self.cfg.crc_errors == CrcErrorPolicy::Deliver => Ok((
                Examined::Whole { span, ulpdu_len },
                CrcCheck::Bad { computed, received },
            )),
            Err(f) => Err(f),
        }
    }

    /// Examines `s`, whose first octet is the ULPDU_Length field at relative position
    /// `first`; `boundary` is `first` or the marker `lead` in front of it.
    fn examine(
        &self,
        first: u64,
        boundary: u64,
        lead: &[u8; 4],
        s: &[u8],
    ) -> Result<Examined, Fault> {
        if s.len() < ULPDU_LENGTH_LEN {
            return Ok(Examined::Incomplete(ULPDU_LENGTH_LEN));
        }
        let len = u16::from_be_bytes([s[0], s[1]]);
        if !self.length_ok(len) {
            return Err(Fault::Length(len));
        }
        let flen = fpdu_len(len as usize);
        let span = match self.spacing {
            Some(sp) => sp.interior_span(self.seq(first), flen),
            None => flen,
        };
        if s.len() < span {
            return Ok(Examined::Incomplete(span));
        }
        if let Some(sp) = self.spacing {
            let mut m = sp.next_marker(self.seq(first).wrapping_add(1));
            let mut off = m.wrapping_sub(self.seq(first)) as usize;
            while off < span {
                let mk = Marker::parse(&s[off..]).map_err(|_| Fault::Length(len))?;
                let expected = first + off as u64 - boundary;
                if mk.fpduptr as u64 != expected {
                    return Err(Fault::Marker {
                        at: first + off as u64,
                        fpduptr: mk.fpduptr,
                        expected,
                    });
                }
                m = m.wrapping_add(markers::MARKER_INTERVAL);
                off = m.wrapping_sub(self.seq(first)) as usize;
            }
        }
        if self.cfg.crc {
            let computed = if boundary != first {
                let mut c = Crc32c::new();
                c.update(lead);
                c.update(&s[..span - CRC_LEN]);
                c.value()
            } else {
                self.fpdu_crc(first, span, s)
            };
            let b = &s[span - CRC_LEN..span];
            let received = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            if computed != received {
                return Err(Fault::Crc {
                    computed,
                    received,
                    span,
                    ulpdu_len: len as usize,
                });
            }
        }
        Ok(Examined::Whole {
            span,
            ulpdu_len: len as usize,
        })
    }

    /// Finds and hands up whole FPDUs of a segment ahead of the in-order position.
    fn place_ahead<F: FnMut(Delivery<'_>)>(
        &mut self,
        seq: u32,
        payload: &[u8],
        deliver: &mut F,
    ) -> Consumed {
        let mut found = std::mem::take(&mut self.found);
        let consumed = self.place_found_ahead(seq, payload, &mut found, deliver);
        self.found = found;
        consumed
    }

    /// [`Receiver::place_ahead`] with `found` to collect the segment's FPDUs in.
    fn place_found_ahead<F: FnMut(Delivery<'_>)>(
        &mut self,
        seq: u32,
        payload: &[u8],
        found: &mut Vec<Found>,
        deliver: &mut F,
    ) -> Consumed {
        let Some(s) = self.rel(seq) else {
            return Consumed::NONE;
        };
        if s < self.pos || payload.is_empty() {
            return Consumed::NONE;
        }
        let end = s + payload.len() as u64;
        // Lowest boundary an FPDU ahead may have: past the FPDU being reassembled in order.
        let mut floor = self.pos;
        if let InState::Body {
            boundary,
            first,
            lead,
        } = self.state
        {
            match self.examine(first, boundary, &lead, &self.partial) {
                Ok(Examined::Incomplete(need)) if self.partial.len() >= ULPDU_LENGTH_LEN => {
                    floor = floor.max(first + need as u64)
                }
                _ => {}
            }
        }
        let Some((first_boundary, b)) = self.locate_chain(s, payload, floor, found) else {
            return Consumed::NONE;
        };
        if first_boundary < floor {
            return Consumed::NONE;
        }
        if found.is_empty() {
            return Consumed::NONE;
        }
        // Without CRC and markers the aligned-segment rule must hold exactly.
        if !self.cfg.crc && self.spacing.is_none() && b != end {
            return Consumed::NONE;
        }
        for &(boundary, first, fend, ulpdu_len) in found.iter() {
            if self.delivered.contains_key(&boundary) {
                continue;
            }
            let off = (first - s) as usize;
            let span = (fend - first) as usize;
            let fseq = self.seq(first);
            let ulpdu = ulpdu_of(
                self.spacing,
                fseq,
                &payload[off..off + span],
                ulpdu_len,
                &mut self.scratch,
            );
            deliver(Delivery {
                seq: fseq,
                ulpdu,
                in_order: false,
                crc: if self.cfg.crc {
                    CrcCheck::Good
                } else {
                    CrcCheck::Off
                },
            });
            self.delivered.insert(boundary, fend);
        }
        Consumed {
            start: (first_boundary - s) as usize,
            end: (b - s) as usize,
        }
    }

    /// The whole FPDUs of the segment at `s` (into `found`) and where their chain starts and
    /// ends (no boundary below `floor`).
    ///
    /// With markers the chain starts at the boundary the first marker of the segment points
    /// to, or at the segment's start when a chain from there is confirmed: FPDU-aligned
    /// senders (RFC 5044 §6.1) start every segment with an FPDU, and the FPDUs in front of
    /// the first marker (short ones carry none) are then placed too. With CRC the start is
    /// confirmed by the CRCs of its chain (and, in a segment with a marker, by the chain
    /// running into the marker-located boundary); without CRC only by a boundary known
    /// exactly: an FPDU handed up ahead ends right at the segment's start (FPDUs are back
    /// to back in the stream, RFC 5044 §4). Otherwise the octets in front of the first
    /// marker-located boundary are left to TCP.
    ///
    /// What cannot be placed and is left to TCP: octets of an FPDU whose ULPDU_Length is
    /// in another segment (a segment starting inside an FPDU, from a sender that is not
    /// FPDU-aligned or a segment cut by a middlebox or a window trim), and an FPDU that
    /// continues into the next segment. The marker in such a piece does point back to its
    /// header, but the CRC covers the whole FPDU and must match before any of it reaches
    /// DDP (RFC 5044 §6.5, §8), so the pieces would have to be held until complete either
    /// way: TCP's reassembly store does that.
    fn locate_chain(
        &self,
        s: u64,
        payload: &[u8],
        floor: u64,
        found: &mut Vec<Found>,
    ) -> Option<(u64, u64)> {
        let marked = self.locate(s, payload);
        // A segment that starts right behind a marker: an FPDU starting there owns that
        // marker (RFC 5044 §5), so its boundary lies in the previous segment, where the
        // in-order path will meet it; leave such a start to the marker-located chain.
        let after_marker = self
            .spacing
            .is_some_and(|sp| sp.is_marker_at(self.seq(s).wrapping_sub(MARKER_LEN as u32)));
        if self.spacing.is_some() && marked != Some(s) && s >= floor && !after_marker {
            let b = self.chain(s, payload, s, found);
            let confirmed = !found.is_empty()
                && if self.cfg.crc {
                    // Each FPDU of the chain passed its CRC; with a marker in the segment
                    // the chain must also agree with the boundary the marker points to.
                    marked.is_none_or(|m| b == m || found.iter().any(|f| f.0 == m))
                } else {
                    // Without a CRC nothing checks an FPDU read from a guessed start: the
                    // sender need not align FPDUs with segments, and octets inside an FPDU
                    // can read as a plausible FPDU that ends on a real boundary, after which
                    // the chain follows the real ones into the marker's boundary or a known
                    // one. Only a boundary known exactly confirms the start: an FPDU handed
                    // up ahead ends right there.
                    self.ends_delivered(s)
                };
            if confirmed {
                return Some((s, b));
            }
        }
        let m = marked?;
        let b = self.chain(s, payload, m, found);
        Some((m, b))
    }

    /// Whether an FPDU handed up ahead ends at `pos` (which is then an FPDU boundary). They
    /// do not overlap, so it can only be the last one that starts before `pos`.
    fn ends_delivered(&self, pos: u64) -> bool {
        self.delivered
            .range(..pos)
            .next_back()
            .is_some_and(|(_, &end)| end == pos)
    }

    /// Chains whole FPDUs of the segment at `s` from boundary `from` into `found` (cleared
    /// first); returns the boundary after the last one.
    fn chain(&self, s: u64, payload: &[u8], from: u64, found: &mut Vec<Found>) -> u64 {
        let end = s + payload.len() as u64;
        found.clear();
        let mut b = from;
        while b < end {
            let mut first = b;
            let mut lead = [0u8; 4];
            if let Some(sp) = self.spacing {
                if sp.is_marker_at(self.seq(b)) {
                    let off = (b - s) as usize;
                    if b + MARKER_LEN as u64 > end {
                        break;
                    }
                    match Marker::parse(&payload[off..]) {
                        Ok(m) if m.fpduptr == 0 => first = b + MARKER_LEN as u64,
                        _ => break,
                    }
                    lead.copy_from_slice(&payload[off..off + MARKER_LEN]);
                }
            }
            let off = (first - s) as usize;
            match self.examine(first, b, &lead, &payload[off..]) {
                Ok(Examined::Whole { span, ulpdu_len }) => {
                    let fend = first + span as u64;
                    if !self.cfg.crc && !self.plausible(first, &payload[off..off + span], ulpdu_len)
                    {
                        break;
                    }
                    found.push((b, first, fend, ulpdu_len));
                    b = fend;
                }
                _ => break,
            }
        }
        b
    }

    /// Boundary of the first FPDU that starts inside the segment at `s`.
    fn locate(&self, s: u64, payload: &[u8]) -> Option<u64> {
        let end = s + payload.len() as u64;
        let Some(sp) = self.spacing else {
            return Some(s);
        };
        let mut m = s + sp.next_marker(self.seq(s)).wrapping_sub(self.seq(s)) as u64;
        while m + MARKER_LEN as u64 <= end {
            let mk = Marker::parse(&payload[(m - s) as usize..]).ok()?;
            let ptr = mk.fpduptr as u64;
            // FPDU boundaries are 4-aligned relative to the start (RFC 5044 §4.1, §5).
            if ptr <= m && m - ptr >= s && (m - ptr).is_multiple_of(4) {
                return Some(m - ptr);
            }
            m += markers::MARKER_INTERVAL as u64;
        }
        None
    }

    /// Without a CRC, an FPDU found ahead must look like one: zero pad, zero CRC field and a
    /// DDP control field with version 1 (RFC 5041 §4.1).
    fn plausible(&self, first: u64, fpdu: &[u8], ulpdu_len: usize) -> bool {
        let mut body = Vec::new();
        let data: &[u8] = match self.spacing {
            Some(sp) => {
                markers::strip(sp, self.seq(first), fpdu, &mut body);
                &body
            }
            None => fpdu,
        };
        let pad = pad_len(ulpdu_len);
        let after = ULPDU_LENGTH_LEN + ulpdu_len;
        data.len() == after + pad + CRC_LEN
            && data[ULPDU_LENGTH_LEN] & 0x03 == 1
            && data[after..].iter().all(|&b| b == 0)
    }
}

/// The ULPDU of a whole FPDU (`fpdu` starts at its ULPDU_Length field at `first_seq`):
/// borrowed when no marker falls inside it, else copied into `scratch` without markers.
#[inline]
fn ulpdu_of<'a>(
    spacing: Option<MarkerSpacing>,
    first_seq: u32,
    fpdu: &'a [u8],
    ulpdu_len: usize,
    scratch: &'a mut Vec<u8>,
) -> &'a [u8] {
    let body = ULPDU_LENGTH_LEN..ULPDU_LENGTH_LEN + ulpdu_len;
    match spacing {
        Some(sp) => {
            let to_marker = sp
                .next_marker(first_seq.wrapping_add(1))
                .wrapping_sub(first_seq) as usize;
            if to_marker >= body.end {
                return &fpdu[body];
            }
            scratch.clear();
            let data_seq = first_seq.wrapping_add(ULPDU_LENGTH_LEN as u32);
            markers::strip(sp, data_seq, &fpdu[ULPDU_LENGTH_LEN..], scratch);
            scratch.truncate(ulpdu_len);
            &scratch[..]
        }
        None => &fpdu[body],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpa::framer::Framer;

    const START: u32 = 5000;
    const MSS: usize = 1460;

    /// Two FPDUs of 200 and 100 octets, CRCs on, no markers; the first one's ULPDU_Length
    /// grown by a flipped bit (`bit`) with the stream's TCP checksum still valid.
    fn corrupted_stream(bit: u16) -> Vec<u8> {
        let f = Framer::new(true, None);
        let mut out = Vec::new();
        let a = [0x41u8; 200];
        let b = [0x42u8; 100];
        let n = f.emit_fpdu(START, &[&a[..]], &mut out).unwrap();
        f.emit_fpdu(START.wrapping_add(n as u32), &[&b[..]], &mut out)
            .unwrap();
        let len = u16::from_be_bytes([out[0], out[1]]) | (1 << bit);
        out[..2].copy_from_slice(&len.to_be_bytes());
        out
    }

    fn config() -> ReceiverConfig {
        ReceiverConfig {
            crc: true,
            markers: false,
            start_seq: START,
            min_ulpdu_len: TAGGED_HEADER_LEN as u16,
            max_ulpdu_len: u16::MAX,
            crc_errors: CrcErrorPolicy::Fail,
        }
    }

    /// FPDUs (CRCs on, no markers) of the given ULPDU lengths from `seq` on, back to back.
    fn fpdus(seq: u32, lens: &[usize]) -> Vec<u8> {
        let f = Framer::new(true, None);
        let mut out = Vec::new();
        for (i, &len) in lens.iter().enumerate() {
            let ulpdu: Vec<u8> = (0..len).map(|j| (j * 7 + i * 13) as u8 | 0x80).collect();
            let at = seq.wrapping_add(out.len() as u32);
            f.emit_fpdu(at, &[&ulpdu[..]], &mut out).unwrap();
        }
        out
    }

    /// What a receiver handed up, the sums its staging returned, and how it ended.
    #[derive(Debug)]
    struct Run {
        got: Vec<(u32, Vec<u8>, CrcCheck)>,
        sums: Vec<Option<PayloadSum>>,
        end: Result<(), MpaError>,
    }

    /// What a receiver hands up for `segments` (each staged first when `stage`).
    fn run(cfg: ReceiverConfig, segments: &[(u32, &[u8])], stage: bool) -> Run {
        let mut rx = Receiver::new(cfg);
        let mut r = Run {
            got: Vec::new(),
            sums: Vec::new(),
            end: Ok(()),
        };
        for &(seq, payload) in segments {
            if stage {
                r.sums.push(rx.stage(seq, payload));
            }
            let got = &mut r.got;
            let end = rx.handle_segment(seq, payload, true, |d| {
                got.push((d.seq, d.ulpdu.to_vec(), d.crc));
            });
            rx.unstage();
            if let Err(e) = end {
                r.end = Err(e);
                break;
            }
        }
        r
    }

    // The one-pass staging of in-order, FPDU-aligned segments: the sum it returns is the
    // payload's TCP sum (whole FPDUs, several per segment, and a partial one at the end
    // alike), and the receiver hands up exactly what it hands up without staging.
    #[test]
    fn staged_segments_give_the_payload_sum_and_the_same_deliveries() {
        let stream = fpdus(START, &[1000, 14, 300, 1440, 500, 700]);
        // FPDU spans: 1008, 20 (2 + 14 + CRC), 308, 1448, 508, 708.
        let cuts = [
            0,
            1008 + 20 + 308,
            1008 + 20 + 308 + 1448,
            stream.len() - 300,
        ];
        let mut segments = Vec::new();
        for w in cuts.windows(2).chain([&[cuts[3], stream.len()][..]]) {
            segments.push((START.wrapping_add(w[0] as u32), &stream[w[0]..w[1]]));
        }
        let plain = run(config(), &segments, false);
        let staged = run(config(), &segments, true);
        assert_eq!(plain.end, Ok(()));
        assert_eq!(plain.got.len(), 6);
        assert_eq!(staged.got, plain.got);
        assert_eq!(staged.end, Ok(()));
        let one_pass = crate::wire::crcsum::one_pass();
        for (&(_, payload), sum) in segments.iter().zip(&staged.sums) {
            // The last segment starts inside an FPDU: not staged.
            let aligned = payload.as_ptr() != segments[3].1.as_ptr();
            let want = (one_pass && aligned).then(|| payload_sum(payload).folded());
            assert_eq!(sum.map(|s| s.folded()), want);
        }
    }

    // A CRC error in a staged segment is the same error, with the same values, as without
    // staging (RFC 5044 §8: Terminate 2/0/02), and the policy that delivers it marks it the
    // same way.
    #[test]
    fn staged_crc_errors_are_reported_as_before() {
        let mut stream = fpdus(START, &[400, 600]);
        stream[408 + 100] ^= 0x20;
        let segments = [(START, &stream[..])];
        let plain = run(config(), &segments, false);
        let staged = run(config(), &segments, true);
        assert!(
            matches!(plain.end, Err(MpaError::CrcMismatch { .. })),
            "{plain:?}"
        );
        assert_eq!(staged.end, plain.end);
        assert_eq!(staged.got, plain.got);
        assert_eq!(staged.got.len(), 1);
        let deliver = ReceiverConfig {
            crc_errors: CrcErrorPolicy::Deliver,
            ..config()
        };
        let plain = run(deliver, &segments, false);
        let staged = run(deliver, &segments, true);
        assert!(matches!(plain.got[1].2, CrcCheck::Bad { .. }));
        assert_eq!((staged.got, staged.end), (plain.got, plain.end));
    }

    // Staged CRCs belong to the octets staged: the same FPDU at another address (the
    // in-order pass over a copy, or over a later segment in a buffer of its own) is checked
    // anew, so a damaged copy fails; after `unstage` nothing is left; and nothing is staged
    // ahead of the in-order position, inside an FPDU, with markers or without CRCs.
    #[test]
    fn staging_applies_only_to_the_staged_octets() {
        let stream = fpdus(START, &[400]);
        let mut rx = Receiver::new(config());
        if rx.stage(START, &stream).is_none() {
            assert!(!crate::wire::crcsum::one_pass());
            return;
        }
        let mut copy = stream.clone();
        copy[50] ^= 1;
        let r = rx.handle_segment(START, &copy, true, |_| panic!("nothing delivered"));
        assert!(matches!(r, Err(MpaError::CrcMismatch { .. })), "{r:?}");

        let mut rx = Receiver::new(config());
        assert!(rx.stage(START, &stream).is_some());
        rx.unstage();
        assert!(rx.staged.is_empty());
        assert_eq!(rx.stage(START + 4, &stream[4..]), None, "inside an FPDU");
        assert_eq!(rx.stage(START + 408, &stream), None, "ahead of RCV.NXT");
        let markers = ReceiverConfig {
            markers: true,
            ..config()
        };
        assert_eq!(Receiver::new(markers).stage(START, &stream), None);
        let no_crc = ReceiverConfig {
            crc: false,
            ..config()
        };
        assert_eq!(Receiver::new(no_crc).stage(START, &stream), None);
    }

    // RFC 5044 §4.1 (MULPDU from EMSS), RFC 5041 §5.2 (no DDP segment above MULPDU),
    // RFC 9293 §3.7.1 (no segment above the advertised MSS): a ULPDU_Length the peer could
    // not have sent is an MPA error as soon as its two octets arrive, with CRCs on, even
    // though the CRC cannot be checked until the FPDU is complete (RFC 5044 §6.5). The
    // stream ends: nothing after it is delivered.
    #[test]
    fn length_beyond_the_segment_size_fails_at_once() {
        for bit in 11..16 {
            let stream = corrupted_stream(bit);
            let mut rx = Receiver::new(config().limit_to_mss(MSS));
            let mut delivered = 0;
            let r = rx.handle_segment(START, &stream[..2], true, |_| delivered += 1);
            match r {
                Err(e @ MpaError::BadUlpduLength { max, .. }) => {
                    assert_eq!(usize::from(max), MSS - 6);
                    assert_eq!(
                        e.terminate_cause(),
                        crate::wire::terminate::TerminateCause::MPA_MARKER_MISMATCH
                    );
                }
                other => panic!("bit {bit}: {other:?}"),
            }
            assert_eq!(delivered, 0);
            assert_eq!(
                rx.handle_segment(START + 2, &stream[2..], true, |_| delivered += 1),
                Err(MpaError::Stopped)
            );
            assert_eq!(delivered, 0);
        }
    }

    // The stall the bound removes: without it the receiver takes the whole stream, delivers
    // nothing and waits for octets the grown length claims (the peer, waiting for our
    // answer, never sends them).
    #[test]
    fn unbounded_length_waits_for_octets_that_never_come() {
        let stream = corrupted_stream(12);
        let mut rx = Receiver::new(config());
        let mut delivered = 0;
        let r = rx.handle_segment(START, &stream, true, |_| delivered += 1);
        assert_eq!(
            r,
            Ok(Consumed {
                start: 0,
                end: stream.len()
            })
        );
        assert_eq!(delivered, 0);
        assert!(!rx.is_at_boundary());
        // What it waits for: the first FPDU's claimed 200 | 4096 octets of ULPDU.
        let claimed = fpdu_len(200 | 1 << 12);
        assert_eq!(rx.pending_fpdu(), Some((START, stream.len(), claimed)));
        assert!(claimed > stream.len());
    }

    // A bit flip that grows a short FPDU's length within the segment size (a 46-octet Read
    // Request claiming 558) cannot be told from a real FPDU until the claimed octets are
    // there; `pending_fpdu` shows the state a connection can time out.
    #[test]
    fn growth_within_the_bound_is_pending() {
        let f = Framer::new(true, None);
        let mut out = Vec::new();
        f.emit_fpdu(START, &[&[0x11u8; 46][..]], &mut out).unwrap();
        out[0] = 0x02; // 46 -> 558
        let mut rx = Receiver::new(config().limit_to_mss(MSS));
        assert_eq!(rx.pending_fpdu(), None);
        rx.handle_segment(START, &out[..1], true, |_| ()).unwrap();
        assert_eq!(rx.pending_fpdu(), Some((START, 1, 0)));
        rx.handle_segment(START + 1, &out[1..], true, |_| ())
            .unwrap();
        assert_eq!(rx.pending_fpdu(), Some((START, out.len(), fpdu_len(558))));
    }

    // The bound never rejects what a conforming peer sends: an FPDU filling a whole segment
    // (ULPDU of MSS - 6 octets) passes, and a growth that stays within it is still caught by
    // the CRC once the claimed octets are there (RFC 5044 §7.1: 2/0/02 CRC error).
    #[test]
    fn bound_keeps_full_segments_and_the_crc_check() {
        let f = Framer::new(true, None);
        let body = vec![7u8; MSS - 6];
        let mut full = Vec::new();
        assert_eq!(f.emit_fpdu(START, &[&body[..]], &mut full).unwrap(), MSS);
        let mut rx = Receiver::new(config().limit_to_mss(MSS));
        let mut got = Vec::new();
        rx.handle_segment(START, &full, true, |d| got.push(d.ulpdu.len()))
            .unwrap();
        assert_eq!(got, vec![MSS - 6]);

        let stream = corrupted_stream(8);
        let mut rx = Receiver::new(config().limit_to_mss(MSS));
        let mut tail = vec![0u8; 600];
        tail.splice(0..0, stream.iter().copied());
        let r = rx.handle_segment(START, &tail, true, |_| ());
        assert!(matches!(r, Err(MpaError::CrcMismatch { .. })), "{r:?}");
    }

    #[test]
    fn unknown_mss_keeps_the_configured_bound() {
        assert_eq!(config().limit_to_mss(0).max_ulpdu_len, u16::MAX);
        assert_eq!(config().limit_to_mss(4).max_ulpdu_len, u16::MAX);
        assert_eq!(config().limit_to_mss(100_000).max_ulpdu_len, u16::MAX);
        let c = ReceiverConfig {
            max_ulpdu_len: 600,
            ..config()
        };
        assert_eq!(c.limit_to_mss(MSS).max_ulpdu_len, 600);
        assert_eq!(
            config().limit_to_mss(16).max_ulpdu_len,
            TAGGED_HEADER_LEN as u16
        );
    }

    // RFC 5044 §5: a marker right in front of an FPDU's ULPDU_Length belongs to that FPDU.
    // A segment ahead of RCV.NXT that starts right behind such a marker (the marker came in
    // the previous segment) must not be placed as if its FPDU began there: the in-order path
    // delivers it once the marker arrived (found by the mpa_receiver fuzz target: the
    // out-of-order placement was recorded at the wrong boundary and the in-order path then
    // reported a stream gap).
    #[test]
    fn segment_starting_behind_a_marker_is_left_to_the_in_order_path() {
        let f = Framer::new(false, Some(MarkerSpacing::new(START)));
        let mut ulpdu = vec![0xc1u8, 0x41];
        ulpdu.resize(450, 7);
        let mut stream = Vec::new();
        let n = f.emit_fpdu(START, &[&ulpdu[..]], &mut stream).unwrap();
        assert_eq!((n, stream.len()), (460, 460), "marker + 456-octet FPDU");
        let mut rx = Receiver::new(ReceiverConfig {
            crc: false,
            markers: true,
            ..config()
        });
        let mut got = Vec::new();
        let c = rx
            .handle_segment(START + 4, &stream[4..], false, |d| {
                got.push(d.ulpdu.to_vec())
            })
            .unwrap();
        assert_eq!((c.start, c.end), (0, 0), "nothing consumed ahead");
        assert!(got.is_empty());
        rx.handle_segment(START, &stream[..4], true, |d| got.push(d.ulpdu.to_vec()))
            .unwrap();
        rx.handle_in_order(START + 4, &stream[4..], |d| got.push(d.ulpdu.to_vec()))
            .unwrap();
        assert_eq!(got, vec![ulpdu]);
        assert!(rx.is_at_boundary());
    }

    // RFC 5044 §4, §5: with markers and without CRC, a short FPDU in a segment ahead of
    // RCV.NXT that holds no marker is placed only when its start is a boundary known exactly
    // (an FPDU handed up ahead ends there); a chain that merely ends on a known boundary
    // does not confirm it (see `octets_inside_an_fpdu_that_read_as_one_are_not_placed`).
    // Stream: marker, FPDU0 (200 octets, kept back), FPDU1 (400, spans the marker at 512),
    // FPDU2 (50, no marker), FPDU3 (400, spans 1024).
    #[test]
    fn short_fpdu_ahead_is_confirmed_only_by_an_exact_boundary_without_crc() {
        let f = Framer::new(false, Some(MarkerSpacing::new(START)));
        let mut stream = Vec::new();
        let mut ulpdus = Vec::new();
        for (len, fill) in [(200usize, 1u8), (400, 2), (50, 3), (400, 4)] {
            let mut u = vec![0xc1u8, 0x41];
            u.resize(len, fill);
            let at = START.wrapping_add(stream.len() as u32);
            f.emit_fpdu(at, &[&u[..]], &mut stream).unwrap();
            ulpdus.push(u);
        }
        let cuts = [0usize, 212, 624, 680, 1092];
        assert_eq!(stream.len(), cuts[4]);
        let seg = |i: usize| (START + cuts[i] as u32, &stream[cuts[i]..cuts[i + 1]]);
        let placed = |rx: &mut Receiver, i: usize, got: &mut Vec<Vec<u8>>| {
            let (at, bytes) = seg(i);
            let c = rx
                .handle_segment(at, bytes, false, |d| got.push(d.ulpdu.to_vec()))
                .unwrap();
            c.len() == bytes.len()
        };
        let mut rx = Receiver::new(ReceiverConfig {
            crc: false,
            markers: true,
            ..config()
        });
        let mut got = Vec::new();
        assert!(
            !placed(&mut rx, 2, &mut got),
            "no marker, no known neighbour"
        );
        assert!(placed(&mut rx, 3, &mut got), "marker-located");
        assert!(
            !placed(&mut rx, 2, &mut got),
            "its chain ends on FPDU3's boundary: not enough without CRC"
        );
        assert!(placed(&mut rx, 1, &mut got), "marker-located");
        assert!(placed(&mut rx, 2, &mut got), "starts where FPDU1 ended");
        assert_eq!(
            got,
            vec![ulpdus[3].clone(), ulpdus[1].clone(), ulpdus[2].clone()]
        );

        // The other neighbour: FPDU1 handed up ahead ends where FPDU2's segment starts.
        let mut rx = Receiver::new(ReceiverConfig {
            crc: false,
            markers: true,
            ..config()
        });
        let mut got = Vec::new();
        assert!(placed(&mut rx, 1, &mut got));
        assert!(placed(&mut rx, 2, &mut got), "starts where FPDU1 ended");
        let (at, bytes) = seg(0);
        rx.handle_segment(at, bytes, true, |d| got.push(d.ulpdu.to_vec()))
            .unwrap();
        rx.handle_rcv_nxt(START + cuts[3] as u32).unwrap();
        assert_eq!(
            got,
            vec![ulpdus[1].clone(), ulpdus[2].clone(), ulpdus[0].clone()]
        );
        assert!(rx.is_at_boundary());
        assert_eq!(rx.pending_out_of_order(), 0);
    }

    // RFC 5044 §5, §8 (found by the `mpa_receiver` fuzz target): without CRC, octets inside an
    // FPDU can read as a whole FPDU (ULPDU_Length, DDP version 1, zero pad and CRC field)
    // that ends on the real next boundary, so a chain from the start of a segment cut inside
    // FPDU0 runs into the boundary FPDU1's marker points to. Nothing of that guess may be
    // handed up: the marker-located FPDU1 is placed ahead, the rest of FPDU0 stays with TCP
    // and every ULPDU comes out once, byte-exact. Stream: marker, FPDU0 (200 octets, 212 in
    // all), FPDU1 (400, spans the marker at 512); the segment ahead starts at octet 108.
    #[test]
    fn octets_inside_an_fpdu_that_read_as_one_are_not_placed() {
        let f = Framer::new(false, Some(MarkerSpacing::new(START)));
        let mut u0 = vec![0xc1u8, 0x41];
        u0.resize(200, 7);
        // Octet 108 of the stream is octet 102 of FPDU0's ULPDU: a ULPDU_Length of 98 there
        // gives a 104-octet FPDU ending at 212, on FPDU0's zero CRC field.
        u0[102..105].copy_from_slice(&[0, 98, 0x41]);
        let mut u1 = vec![0xc1u8, 0x41];
        u1.resize(400, 9);
        let mut stream = Vec::new();
        f.emit_fpdu(START, &[&u0[..]], &mut stream).unwrap();
        let second = START + stream.len() as u32;
        f.emit_fpdu(second, &[&u1[..]], &mut stream).unwrap();
        assert_eq!(stream.len(), 624);
        let cut = 108;
        for crc_errors in [CrcErrorPolicy::Fail, CrcErrorPolicy::Deliver] {
            let mut rx = Receiver::new(ReceiverConfig {
                crc: false,
                markers: true,
                crc_errors,
                ..config()
            });
            let mut got = Vec::new();
            let c = rx
                .handle_segment(START + cut as u32, &stream[cut..], false, |d| {
                    got.push((d.seq, d.ulpdu.to_vec()))
                })
                .unwrap();
            assert_eq!(
                (c.start, c.end),
                (212 - cut, 624 - cut),
                "only FPDU1 placed"
            );
            assert_eq!(got, vec![(START + 212, u1.clone())]);
            rx.handle_segment(START, &stream[..cut], true, |d| {
                got.push((d.seq, d.ulpdu.to_vec()))
            })
            .unwrap();
            rx.handle_in_order(START + cut as u32, &stream[cut..212], |d| {
                got.push((d.seq, d.ulpdu.to_vec()))
            })
            .unwrap();
            rx.handle_rcv_nxt(START + 624).unwrap();
            assert_eq!(got[1], (START + 4, u0.clone()), "FPDU0 whole, in order");
            assert_eq!(got.len(), 2);
            assert!(rx.is_at_boundary());
            assert_eq!(rx.pending_out_of_order(), 0);
        }
    }
}
