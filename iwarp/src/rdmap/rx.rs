//! Receive path: validation and placement of each DDP segment as it arrives (possibly out of
//! order), then in-order delivery and RDMAP processing (RFC 5040 §5, §7.2; RFC 5041 §5.3,
//! §7.1).

use tcp::Instant;

use super::completion::{Completion, CompletionOpcode, CompletionStatus, Event, WorkQueue};
use super::engine::{Engine, Handled, StreamState};
use super::state::{Culprit, EarlyTagged, Failure, Response, RxRecord, UntaggedRecord, INLINE_MAX};
use crate::ddp::delivery::{Offer, SegmentPos};
use crate::ddp::error::DdpError;
use crate::ddp::tagged;
use crate::mem::{Access, MemoryTable, STag};
use crate::wire::atomic::{AtomicRequest, AtomicRequestRepr, AtomicResponseRepr};
use crate::wire::atomic::{ATOMIC_REQUEST_LEN, ATOMIC_RESPONSE_LEN};
use crate::wire::ddp::{DdpRepr, Segment, DDP_VERSION};
use crate::wire::rdmap::{
    ImmediateDataRepr, Opcode, RdmapControl, ReadRequest, ReadRequestRepr, IMMEDIATE_DATA_LEN,
    READ_REQUEST_LEN,
};
use crate::wire::terminate::{CopiedDdpHeader, Terminate, TerminateCause, TerminateRepr};

fn seg_len(bytes: &[u8]) -> u16 {
    u16::try_from(bytes.len()).unwrap_or(u16::MAX)
}

impl Engine {
    /// Hands one verified DDP segment (the MPA ULPDU: DDP header + payload) to the engine.
    ///
    /// `pos` gives the segment's place in the sender's order. Segments may arrive in any
    /// order: each is validated and placed at once, and messages are delivered (completed,
    /// processed by RDMAP) strictly in order once every earlier segment has been handed in.
    pub fn handle_ddp_segment<M: MemoryTable + ?Sized>(
        &mut self,
        now: Instant,
        pos: SegmentPos,
        segment: &[u8],
        mem: &mut M,
    ) -> Handled {
        if !matches!(self.state, StreamState::Active | StreamState::Closing) {
            return Handled::Dropped;
        }
        self.last_rx = Some(now);
        if self.order.is_duplicate(pos) {
            return Handled::Duplicate;
        }
        let in_order = self.order.is_next(pos);
        let record = match self.classify(segment, mem, !in_order) {
            Ok(r) => r,
            Err(f) if in_order => RxRecord::Failed(f),
            Err(_) => RxRecord::Retry(segment.to_vec()),
        };
        if in_order && self.order.advance(pos) {
            // Fast path: deliver at once, then whatever was held behind it.
            if let Err(f) = self.deliver(record, mem) {
                self.fail(f);
            }
            self.deliver_ready(mem, None);
            return Handled::Accepted;
        }
        match self.order.offer(pos, record) {
            Offer::Accepted => {}
            Offer::Duplicate => return Handled::Duplicate,
            Offer::Full => return Handled::Deferred,
        }
        self.deliver_ready(mem, None);
        Handled::Accepted
    }

    /// The in-order fast path for a segment of an RDMA Write: when `segment` is the next in
    /// order, a tagged segment (DV 01b, RFC 5041 §4.1) of an RDMA
    /// Write (the stream's RDMAP version, RFC 5040 §4.1) with a payload, and its placement
    /// passes every check of RFC 5041 §7.2 and §8.1 (`mem` makes them: through its grant
    /// for the segments of one Write after the first, plus the range check of each), places
    /// it and moves the delivery order past it, which is all [`Engine::handle_ddp_segment`]
    /// does with such a segment (a Write completes nothing at its target), then delivers
    /// the segments held early that are now next, as that does (the segment that fills a
    /// hole left by reordering, RFC 5041 §7.2, takes this path too). Anything else,
    /// a refused placement included, changes nothing and gives false: the caller then hands
    /// the segment to [`Engine::handle_ddp_segment`], which reports it as it always did
    /// (the Terminate of the check that failed).
    #[inline]
    pub fn place_next_write<M: MemoryTable + ?Sized>(
        &mut self,
        now: Instant,
        pos: SegmentPos,
        segment: &[u8],
        mem: &mut M,
    ) -> bool {
        if !matches!(self.state, StreamState::Active | StreamState::Closing)
            || !self.order.is_next(pos)
            || pos.end <= pos.start
        {
            return false;
        }
        let Ok(seg) = Segment::new_checked(segment) else {
            return false;
        };
        let ctrl = seg.rsvd_ulp();
        let write = seg.tagged()
            && seg.version() == DDP_VERSION
            && RdmapControl::raw_version(ctrl) == self.cfg.rdmap_version
            && Opcode::from_u4(ctrl) == Some(Opcode::Write);
        let payload = seg.payload();
        if !write || payload.is_empty() {
            return false;
        }
        let (pd, stream) = (self.cfg.pd, self.cfg.stream);
        let need = Access::REMOTE_WRITE;
        if mem
            .place(STag(seg.stag()), pd, stream, seg.to(), payload, need)
            .is_err()
        {
            return false;
        }
        self.last_rx = Some(now);
        if !self.order.advance(pos) {
            return false;
        }
        self.deliver_ready(mem, None);
        true
    }

    /// The out-of-order counterpart of [`Engine::place_next_write`]: when `segment` lies
    /// ahead of the next in order (neither next nor a duplicate) and is a tagged segment of
    /// an RDMA Write with a payload whose placement passes every check of RFC 5041 §7.2
    /// and §8.1 (`mem` makes them), places it and holds its record, with the STag to check
    /// again once it is reached in order (VERBS-00 §7.8), exactly as
    /// [`Engine::handle_ddp_segment`] would, without the general classification. Returns
    /// what that would have answered; `None` (nothing changed) for anything else, a
    /// refused placement included: the caller then hands the segment to
    /// [`Engine::handle_ddp_segment`], which holds it for a retry in order (and reports the
    /// check that fails then).
    pub fn place_early_write<M: MemoryTable + ?Sized>(
        &mut self,
        now: Instant,
        pos: SegmentPos,
        segment: &[u8],
        mem: &mut M,
    ) -> Option<Handled> {
        if !matches!(self.state, StreamState::Active | StreamState::Closing)
            || self.order.is_next(pos)
            || pos.end <= pos.start
            || self.order.is_duplicate(pos)
        {
            return None;
        }
        let seg = Segment::new_checked(segment).ok()?;
        let ctrl = seg.rsvd_ulp();
        let write = seg.tagged()
            && seg.version() == DDP_VERSION
            && RdmapControl::raw_version(ctrl) == self.cfg.rdmap_version
            && Opcode::from_u4(ctrl) == Some(Opcode::Write);
        let payload = seg.payload();
        if !write || payload.is_empty() {
            return None;
        }
        let copy = CopiedDdpHeader::from_segment(segment).ok()?;
        let (pd, stream) = (self.cfg.pd, self.cfg.stream);
        mem.place(
            STag(seg.stag()),
            pd,
            stream,
            seg.to(),
            payload,
            Access::REMOTE_WRITE,
        )
        .ok()?;
        self.last_rx = Some(now);
        let record = RxRecord::Tagged {
            opcode: Opcode::Write,
            last: seg.last(),
            len: payload.len() as u32,
            recheck: Some(EarlyTagged {
                generation: mem.table_generation(),
                stag: seg.stag(),
                to: seg.to(),
                segment_len: seg_len(segment),
                copy,
            }),
        };
        match self.order.offer(pos, record) {
            Offer::Accepted => {}
            Offer::Duplicate => return Some(Handled::Duplicate),
            Offer::Full => return Some(Handled::Deferred),
        }
        // Not next: nothing became ready (what was ready was delivered when it became so).
        Some(Handled::Accepted)
    }

    /// How many receive buffers must be posted before [`Engine::handle_ddp_segment`] can
    /// place `segment`: for a Send or Immediate Data on queue 0 whose MSN has no buffer yet,
    /// one for it and one for each earlier MSN without one (VERBS-00 §6.3.5); 0 for every
    /// other segment. A stream on a shared receive queue takes them right before handing
    /// the segment in.
    pub fn recv_buffers_wanted(&self, segment: &[u8]) -> u32 {
        if !matches!(self.state, StreamState::Active | StreamState::Closing) {
            return 0;
        }
        let Ok(seg) = Segment::new_checked(segment) else {
            return 0;
        };
        if seg.tagged() || seg.version() != DDP_VERSION || seg.qn() != 0 {
            return 0;
        }
        let ctrl = seg.rsvd_ulp();
        let send = RdmapControl::raw_version(ctrl) == self.cfg.rdmap_version
            && Opcode::from_u4(ctrl & 0x0F).is_some_and(|op| {
                op.queue() == Some(0) && (!op.is_extension() || self.cfg.extensions)
            });
        if !send {
            return 0;
        }
        self.queues.recv_missing(seg.msn())
    }

    /// The LLP reports that every DDP segment starting before `position` has been handed in
    /// (its in-order point moved, e.g. MPA's RCV.NXT in stream offsets). Needed only when the
    /// positions have holes between consecutive segments; held segments before `position`
    /// are delivered in order.
    pub fn handle_in_order_position<M: MemoryTable + ?Sized>(
        &mut self,
        now: Instant,
        position: u64,
        mem: &mut M,
    ) {
        if !matches!(self.state, StreamState::Active | StreamState::Closing) {
            return;
        }
        self.last_rx = Some(now);
        self.deliver_ready(mem, Some(position));
    }

    /// Delivers the held records that are next in order (and, with a `watermark`, those
    /// before it). Inline: in order nothing is held, and the check is all there is to do.
    #[inline]
    fn deliver_ready<M: MemoryTable + ?Sized>(&mut self, mem: &mut M, watermark: Option<u64>) {
        if watermark.is_some() || self.order.held() > 0 {
            self.deliver_held(mem, watermark);
        }
    }

    fn deliver_held<M: MemoryTable + ?Sized>(&mut self, mem: &mut M, watermark: Option<u64>) {
        while matches!(self.state, StreamState::Active | StreamState::Closing) {
            let next = match self.order.pop_ready() {
                Some(r) => Some(r),
                None => watermark.and_then(|w| self.order.pop_before(w)),
            };
            let Some(rec) = next else {
                break;
            };
            let rec = match rec {
                RxRecord::Retry(bytes) => match self.classify(&bytes, mem, false) {
                    Ok(r) => r,
                    Err(f) => RxRecord::Failed(f),
                },
                other => other,
            };
            if let Err(f) = self.deliver(rec, mem) {
                self.fail(f);
            }
        }
    }

    /// Validates a segment (DDP checks, RDMAP version and opcode, untagged and tagged
    /// buffer checks) and places its payload.
    fn classify<M: MemoryTable + ?Sized>(
        &self,
        bytes: &[u8],
        mem: &mut M,
        early: bool,
    ) -> Result<RxRecord, Failure> {
        let segment_len = seg_len(bytes);
        let seg = Segment::new_checked(bytes).map_err(|_| Failure {
            cause: TerminateCause::RDMAP_CATASTROPHIC_STREAM,
            segment_len: Some(segment_len),
            ddp: None,
            rdma: None,
            culprit: Culprit::None,
        })?;
        // The header copy a Terminate carries, taken only where one may be needed (not for
        // every tagged segment placed); `new_checked` saw the whole header.
        let copy = || {
            CopiedDdpHeader::from_segment(bytes).map_err(|_| {
                Failure::bare(TerminateCause::RDMAP_CATASTROPHIC_STREAM, Culprit::None)
            })
        };
        let fail = |cause: TerminateCause| Failure {
            cause,
            segment_len: Some(segment_len),
            ddp: CopiedDdpHeader::from_segment(bytes).ok(),
            rdma: None,
            culprit: Culprit::None,
        };
        // RFC 5041 §4.1 (SPEC-DIGEST D9): DV first.
        if seg.version() != DDP_VERSION {
            return Err(fail(if seg.tagged() {
                DdpError::TaggedVersion.cause()
            } else {
                DdpError::UntaggedVersion.cause()
            }));
        }
        let hdr =
            DdpRepr::parse(&seg).map_err(|_| fail(TerminateCause::RDMAP_CATASTROPHIC_STREAM))?;
        // RFC 5040 §7.2: RDMAP version, then opcode.
        let ctrl_octet = hdr.rsvd_ulp();
        if RdmapControl::raw_version(ctrl_octet) != self.cfg.rdmap_version {
            return Err(fail(TerminateCause::RDMAP_INVALID_VERSION));
        }
        let opcode = match Opcode::from_u4(ctrl_octet & 0x0F) {
            Some(op) if !op.is_extension() || self.cfg.extensions => op,
            _ => return Err(fail(TerminateCause::RDMAP_UNEXPECTED_OPCODE)),
        };
        let payload = seg.payload();
        let len = payload.len() as u32;
        match hdr {
            DdpRepr::Tagged(t) => {
                if !opcode.is_tagged() {
                    return Err(fail(TerminateCause::RDMAP_UNEXPECTED_OPCODE));
                }
                if opcode == Opcode::ReadResponse && self.reads.is_empty() {
                    return Err(fail(TerminateCause::RDMAP_UNEXPECTED_OPCODE));
                }
                tagged::place(
                    mem,
                    self.cfg.pd,
                    self.cfg.stream,
                    &t,
                    payload,
                    Access::REMOTE_WRITE,
                )
                .map_err(|e| fail(e.cause()))?;
                let recheck = match early && len > 0 {
                    true => Some(EarlyTagged {
                        generation: mem.table_generation(),
                        stag: t.stag,
                        to: t.to,
                        segment_len,
                        copy: copy()?,
                    }),
                    false => None,
                };
                Ok(RxRecord::Tagged {
                    opcode,
                    last: t.last,
                    len,
                    recheck,
                })
            }
            DdpRepr::Untagged(u) => {
                // RFC 5041 §7.1 checks 1, 2, 5.
                let slot = self
                    .queues
                    .check_msn(u.qn, u.msn)
                    .map_err(|e| fail(e.cause()))?;
                if opcode.is_tagged() || opcode.queue() != Some(u.qn) {
                    return Err(fail(TerminateCause::RDMAP_UNEXPECTED_OPCODE));
                }
                let mut rec = UntaggedRecord {
                    opcode,
                    hdr: u,
                    len,
                    inline: [0; INLINE_MAX],
                    inline_len: 0,
                    segment_len,
                    copy: copy()?,
                };
                let single = u.mo == 0 && u.last;
                match opcode {
                    Opcode::Send
                    | Opcode::SendSe
                    | Opcode::SendInvalidate
                    | Opcode::SendSeInvalidate => {
                        self.queues
                            .place_recv(mem, self.cfg.pd, self.cfg.stream, slot, u.mo, payload)
                            .map_err(|e| {
                                let mut f = fail(e.cause());
                                if e == DdpError::TooLong {
                                    f.culprit =
                                        Culprit::Recv(slot.index, CompletionStatus::RecvOverflow);
                                }
                                f
                            })?;
                    }
                    _ => {
                        // Control messages are single segments of a fixed size
                        // (SPEC-DIGEST D19, §3.9 item 3; EXT-01 §6.3).
                        let want = match opcode {
                            Opcode::ReadRequest => Some(READ_REQUEST_LEN),
                            Opcode::AtomicRequest => Some(ATOMIC_REQUEST_LEN),
                            Opcode::AtomicResponse => Some(ATOMIC_RESPONSE_LEN),
                            Opcode::ImmediateData | Opcode::ImmediateDataSe => {
                                Some(IMMEDIATE_DATA_LEN)
                            }
                            _ => None,
                        };
                        let ok_len = match want {
                            Some(n) => payload.len() == n,
                            None => {
                                Terminate::new_checked(payload).is_ok()
                                    && payload.len() <= INLINE_MAX
                            }
                        };
                        if !single {
                            return Err(fail(TerminateCause::RDMAP_CATASTROPHIC_STREAM));
                        }
                        if !ok_len {
                            return Err(fail(if opcode == Opcode::AtomicRequest {
                                TerminateCause::RDMAP_OP_UNSPECIFIED
                            } else {
                                TerminateCause::RDMAP_CATASTROPHIC_STREAM
                            }));
                        }
                        rec.inline[..payload.len()].copy_from_slice(payload);
                        rec.inline_len = payload.len();
                    }
                }
                Ok(RxRecord::Untagged(Box::new(rec)))
            }
        }
    }

    /// In-order stage: Delivery to RDMAP (RFC 5041 §5.4) and RDMAP processing.
    fn deliver<M: MemoryTable + ?Sized>(
        &mut self,
        rec: RxRecord,
        mem: &mut M,
    ) -> Result<(), Failure> {
        match rec {
            RxRecord::Failed(f) => Err(f),
            RxRecord::Retry(_) => Err(Failure::bare(
                TerminateCause::RDMAP_CATASTROPHIC_STREAM,
                Culprit::None,
            )),
            RxRecord::Tagged {
                opcode,
                last,
                len,
                recheck,
            } => {
                // The placement's check still holds while the table is unchanged.
                if let Some(e) = recheck
                    .filter(|e| e.generation.is_none() || e.generation != mem.table_generation())
                {
                    self.resolve_on_stream(
                        mem,
                        STag(e.stag),
                        e.to,
                        u64::from(len),
                        Access::REMOTE_WRITE,
                    )
                    .map_err(|err| Failure {
                        cause: err.ddp_cause(),
                        segment_len: Some(e.segment_len),
                        ddp: Some(e.copy),
                        rdma: None,
                        culprit: Culprit::None,
                    })?;
                }
                if opcode == Opcode::ReadResponse {
                    let Some(read) = self.reads.front_mut() else {
                        return Err(Failure::bare(
                            TerminateCause::RDMAP_UNEXPECTED_OPCODE,
                            Culprit::None,
                        ));
                    };
                    read.received += u64::from(len);
                    if last {
                        // RFC 5040 §5.5 rule 19: the Read completes on Read Response delivery.
                        if let Some(read) = self.reads.pop_front() {
                            // RFC 5040 §5.2.2: the response carries exactly RDMARDSZ octets
                            // (a requester MAY check).
                            if read.received != u64::from(read.len) {
                                return Err(Failure::bare(
                                    TerminateCause::RDMAP_OP_UNSPECIFIED,
                                    Culprit::Send(read.seq, CompletionStatus::Fatal),
                                ));
                            }
                            if let Some(e) = self.sq_entry_mut(read.seq) {
                                e.byte_len = read.len;
                            }
                            self.finish_sq(read.seq, CompletionStatus::Success);
                        }
                    }
                }
                Ok(())
            }
            RxRecord::Untagged(u) => self.deliver_untagged(&u, mem),
        }
    }

    fn deliver_untagged<M: MemoryTable + ?Sized>(
        &mut self,
        u: &UntaggedRecord,
        mem: &mut M,
    ) -> Result<(), Failure> {
        match u.opcode {
            Opcode::Send | Opcode::SendSe | Opcode::SendInvalidate | Opcode::SendSeInvalidate => {
                self.deliver_send(u, mem)
            }
            Opcode::ImmediateData | Opcode::ImmediateDataSe => {
                let imm = ImmediateDataRepr::parse(u.inline())
                    .map_err(|_| u.error(TerminateCause::RDMAP_CATASTROPHIC_STREAM))?;
                let Some(posted) = self.queues.complete_recv() else {
                    return Err(u.error(TerminateCause::DDP_NO_BUFFER));
                };
                let mut c = Completion::new(
                    posted.buffer.wr_id,
                    WorkQueue::Recv,
                    CompletionOpcode::RecvImmediate,
                    CompletionStatus::Success,
                );
                c.immediate = Some(imm.data);
                c.solicited = u.opcode.is_solicited();
                self.complete(c);
                if c.solicited {
                    self.events.push_back(Event::SolicitedEvent);
                }
                Ok(())
            }
            Opcode::ReadRequest => self.deliver_read_request(u, mem),
            Opcode::AtomicRequest => self.deliver_atomic_request(u, mem),
            Opcode::AtomicResponse => self.deliver_atomic_response(u, mem),
            Opcode::Terminate => {
                self.queues.deliver_slot(2, false);
                // siw sends the Layer/EType nibbles swapped; name the cause it meant.
                let t = Terminate::new_checked(u.inline())
                    .and_then(|t| {
                        TerminateRepr::parse(&t).map(|r| TerminateRepr {
                            cause: t.decoded_cause().0,
                            ..r
                        })
                    })
                    .map_err(|_| u.error(TerminateCause::RDMAP_CATASTROPHIC_STREAM))?;
                self.remote_terminated(t);
                Ok(())
            }
            Opcode::Write | Opcode::ReadResponse => {
                Err(u.error(TerminateCause::RDMAP_UNEXPECTED_OPCODE))
            }
        }
    }

    fn deliver_send<M: MemoryTable + ?Sized>(
        &mut self,
        u: &UntaggedRecord,
        mem: &mut M,
    ) -> Result<(), Failure> {
        let index = u.hdr.msn.wrapping_sub(self.recv_base());
        let Some(posted) = self.queues.recv_mut(index) else {
            return Err(u.error(TerminateCause::DDP_NO_BUFFER));
        };
        posted.received += u64::from(u.len);
        if !u.hdr.last {
            return Ok(());
        }
        // RFC 5041 §5.4: message length = MO + length of the L=1 segment.
        let msg_len = u64::from(u.hdr.mo) + u64::from(u.len);
        if posted.received != msg_len {
            return Err(u.error(TerminateCause::DDP_INVALID_MO));
        }
        let mut invalidated = None;
        if u.opcode.carries_invalidate_stag() {
            let stag = STag(u.hdr.rsvd_ulp_word);
            // RFC 5040 §5.3: check association and invalidate before completing.
            let result = if stag.0 == 0 {
                Err(TerminateCause::RDMAP_PROT_CANNOT_INVALIDATE)
            } else {
                mem.invalidate(stag, self.cfg.pd, self.cfg.stream)
                    .map_err(|e| e.invalidate_cause())
            };
            match result {
                Ok(()) => invalidated = Some(stag),
                Err(cause) => {
                    return Err(u.failure(
                        cause,
                        Culprit::Recv(index, CompletionStatus::InvalidateFailed),
                    ))
                }
            }
        }
        let Some(posted) = self.queues.complete_recv() else {
            return Err(u.error(TerminateCause::DDP_NO_BUFFER));
        };
        let mut c = Completion::new(
            posted.buffer.wr_id,
            WorkQueue::Recv,
            CompletionOpcode::Recv,
            CompletionStatus::Success,
        );
        c.byte_len = u32::try_from(msg_len).unwrap_or(u32::MAX);
        c.invalidated = invalidated;
        c.solicited = u.opcode.is_solicited();
        self.complete(c);
        if c.solicited {
            self.events.push_back(Event::SolicitedEvent);
        }
        Ok(())
    }

    fn recv_base(&self) -> u32 {
        self.queues.recv_base()
    }

    fn deliver_read_request<M: MemoryTable + ?Sized>(
        &mut self,
        u: &UntaggedRecord,
        mem: &mut M,
    ) -> Result<(), Failure> {
        self.queues.deliver_slot(1, true);
        let view = ReadRequest::new_checked(u.inline())
            .map_err(|_| u.error(TerminateCause::RDMAP_CATASTROPHIC_STREAM))?;
        let req = ReadRequestRepr::parse(&view)
            .map_err(|_| u.error(TerminateCause::RDMAP_CATASTROPHIC_STREAM))?;
        // RFC 5040 §5.2.1: a zero-length read is not validated.
        let src = if req.size == 0 {
            None
        } else {
            match self.resolve_on_stream(
                mem,
                STag(req.src_stag),
                req.src_to,
                u64::from(req.size),
                Access::REMOTE_READ,
            ) {
                Ok(r) => Some(r),
                Err(e) => {
                    let mut f = u.error(e.rdmap_cause());
                    f.rdma = Some(req.to_bytes());
                    return Err(f);
                }
            }
        };
        self.queue_response(Response::Read {
            src,
            req,
            copy: u.copy,
            segment_len: u.segment_len,
        });
        Ok(())
    }

    fn deliver_atomic_request<M: MemoryTable + ?Sized>(
        &mut self,
        u: &UntaggedRecord,
        mem: &mut M,
    ) -> Result<(), Failure> {
        self.queues.deliver_slot(1, true);
        let view = AtomicRequest::new_checked(u.inline())
            .map_err(|_| u.error(TerminateCause::RDMAP_OP_UNSPECIFIED))?;
        let req = AtomicRequestRepr::parse(&view)
            .map_err(|_| u.error(TerminateCause::RDMAP_UNEXPECTED_OPCODE))?;
        // The verbs' remote atomic right (RFC 7306's extension of the access rights, on a QP
        // with inbound atomics enabled) admits the request; otherwise SPEC-DIGEST §3.9 item 5,
        // D23: remote read and remote write rights.
        let r = self
            .resolve_on_stream(mem, STag(req.stag), req.to, 8, Access::REMOTE_ATOMIC)
            .or_else(|_| {
                self.resolve_on_stream(
                    mem,
                    STag(req.stag),
                    req.to,
                    8,
                    Access::REMOTE_READ | Access::REMOTE_WRITE,
                )
            })
            .map_err(|e| u.error(e.rdmap_cause()))?;
        // EXT-01 §5.1, §8.2; SPEC-DIGEST D20: natural alignment, memory untouched otherwise.
        if req.to % 8 != 0 || r.addr % 8 != 0 {
            return Err(u.error(TerminateCause::RDMAP_CATASTROPHIC_STREAM));
        }
        let original = mem
            .atomic(&r, &mut |orig| req.apply(orig))
            .map_err(|e| u.error(e.rdmap_cause()))?;
        self.queue_response(Response::Atomic(AtomicResponseRepr {
            request_id: req.request_id,
            original,
        }));
        Ok(())
    }

    fn deliver_atomic_response<M: MemoryTable + ?Sized>(
        &mut self,
        u: &UntaggedRecord,
        mem: &mut M,
    ) -> Result<(), Failure> {
        self.queues.deliver_slot(3, false);
        let resp = AtomicResponseRepr::parse(u.inline())
            .map_err(|_| u.error(TerminateCause::RDMAP_CATASTROPHIC_STREAM))?;
        let Some(pending) = self.atomics.pop_front() else {
            return Err(u.error(TerminateCause::RDMAP_UNEXPECTED_OPCODE));
        };
        self.queues.set_capacity(3, self.atomics.len() as u32);
        if pending.request_id != resp.request_id {
            return Err(u.error(TerminateCause::RDMAP_OP_UNSPECIFIED));
        }
        if let Some(r) = &pending.result {
            mem.write(r, 0, &resp.original.to_ne_bytes()).map_err(|_| {
                Failure::bare(
                    TerminateCause::RDMAP_LOCAL_CATASTROPHIC,
                    Culprit::Send(pending.seq, CompletionStatus::LocalProtection),
                )
            })?;
        }
        if let Some(e) = self.sq_entry_mut(pending.seq) {
            e.atomic_original = Some(resp.original);
            e.byte_len = 8;
        }
        self.finish_sq(pending.seq, CompletionStatus::Success);
        Ok(())
    }
}
