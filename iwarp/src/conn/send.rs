//! The send side: MPA frames first, then whole FPDUs built from the engine's DDP segments,
//! sized by the MULPDU of the effective send MSS (RFC 5044 §4.1), with markers at their
//! sequence positions, handed to TCP as units it sends and retransmits unchanged.

use tcp::{Instant, SegmentSource, Unit};

use super::connection::Connection;
use super::outbound::{Sender, MIN_MULPDU};
use crate::mem::{BufferPool, HasMemoryTable, MemoryTable};

impl Connection {
    /// Whether FPDUs may go out now.
    fn may_send(&self) -> bool {
        debug_assert!(!self.negotiator_done || self.negotiator.may_send_fpdus());
        let established = self.negotiator_done || self.negotiator.may_send_fpdus();
        self.sender()
            .is_some_and(|s| s.may_send(self.now, established))
    }

    /// Takes DDP segments from the engine up to the budget, into buffers of `pool` (the
    /// context's shared one) or of the connection's own.
    pub(super) fn fill_tx<M: MemoryTable + ?Sized>(
        &mut self,
        mem: &M,
        pool: Option<&mut BufferPool>,
    ) {
        self.fill_tx_up_to(mem, pool, self.cfg.tx_budget);
    }

    /// Takes DDP segments from the engine until `budget` octets wait (at most the budget,
    /// at least enough for one unit when the budget allows it: a full MULPDU).
    fn fill_tx_up_to<M: MemoryTable + ?Sized>(
        &mut self,
        mem: &M,
        pool: Option<&mut BufferPool>,
        budget: usize,
    ) {
        if self.may_send() {
            self.fill_tx_sendable(mem, pool, budget);
        }
    }

    /// [`Connection::fill_tx_up_to`] once [`Connection::may_send`] said yes.
    fn fill_tx_sendable<M: MemoryTable + ?Sized>(
        &mut self,
        mem: &M,
        pool: Option<&mut BufferPool>,
        budget: usize,
    ) {
        let mulpdu = self.mulpdu();
        if mulpdu < MIN_MULPDU {
            return;
        }
        let now = self.now;
        let Some((engine, sender)) = self.phase.stream_mut() else {
            return;
        };
        self.stats.tx_buffers_allocated +=
            sender.fill(engine, mem, pool, now, mulpdu, budget, &mut self.ops);
    }

    fn sender_mut(&mut self) -> Option<&mut Sender> {
        self.phase.stream_mut().map(|(_, s)| s)
    }

    /// Gives every send buffer the connection holds (queued DDP segments', its own pool's,
    /// unacknowledged units' TCP handed back when it removed the connection) to `pool`:
    /// the connection is closed and about to be dropped.
    pub fn release_tx_buffers(&mut self, pool: &mut BufferPool) {
        if let Some(s) = self.sender_mut() {
            s.release(pool);
        }
    }
}

impl<C: HasMemoryTable + ?Sized> SegmentSource<C> for Connection {
    fn next_unit(&mut self, cx: &mut C, now: Instant, seq: u32, max_len: usize) -> Option<Unit> {
        // TCP asks for a unit before it asks `pending`: the effective MSS is learned from
        // `max_len` only while data waits, as when `pending` was asked first (the receive
        // side's ULPDU_Length bound, set as FPDU mode begins, depends on it).
        if self.cfg.emss.is_none() && max_len > self.emss && SegmentSource::<C>::pending(self) {
            self.emss = max_len;
        }
        let (mem, mut pool) = cx.table_and_pool();
        self.advance_time(now);
        if let Some(f) = self.frames.front() {
            if f.len() > max_len {
                return None;
            }
            let f = self.frames.pop_front()?;
            self.negotiator.frame_sent(now);
            self.stats.units_sent += 1;
            self.tx_start = Some(seq.wrapping_add(f.len() as u32));
            self.setup_tx();
            return Some(Unit::new(f));
        }
        if !self.may_send() {
            return None;
        }
        // What TCP can send now: one unit's worth (a full MULPDU, or the budget if less).
        let mulpdu = self.mulpdu();
        let budget = self.cfg.tx_budget.min(mulpdu);
        let now = self.now;
        let direct = match self.phase.stream_mut() {
            Some((engine, sender)) if mulpdu >= MIN_MULPDU => sender.direct_unit(
                engine,
                mem,
                pool.as_deref_mut(),
                now,
                mulpdu,
                budget,
                seq,
                max_len,
                &mut self.ops,
                &mut self.stats.tx_buffers_allocated,
            ),
            _ => None,
        };
        let unit = match direct {
            Some(unit) => unit,
            None => {
                self.fill_tx_sendable(mem, pool.as_deref_mut(), budget);
                if self.sender().is_none_or(Sender::is_empty) {
                    return None;
                }
                self.sender_mut()?.frame_unit(seq, max_len, pool)?
            }
        };
        self.stats.units_sent += 1;
        self.stats.fpdus_sent += unit.fpdus as u64;
        self.stats.units_in_place += u64::from(unit.in_place);
        self.stats.tx_buffers_allocated += u64::from(unit.allocated);
        Some(Unit::with_headroom(unit.bytes, unit.head, unit.sum))
    }

    /// Frames waiting, or FPDUs that may go out: DDP segments already read, or ones the
    /// engine would produce now. Nothing is read ahead of TCP after a unit, so that a
    /// connection whose window closed holds no segment copied (and cold by its next turn).
    fn pending(&self) -> bool {
        if !self.frames.is_empty() {
            return true;
        }
        if !self.may_send() {
            return false;
        }
        let Some((engine, sender)) = self.phase.stream() else {
            return false;
        };
        if !sender.is_empty() {
            return true;
        }
        let mulpdu = self.mulpdu();
        mulpdu >= MIN_MULPDU && engine.has_segment(mulpdu)
    }

    // Inlined into the engine's ACK loop, which calls it per unit acknowledged.
    #[inline(always)]
    fn recycle(&mut self, cx: &mut C, buffer: Vec<u8>) {
        let (_, pool) = cx.table_and_pool();
        match (self.sender_mut(), pool) {
            (Some(s), pool) => s.recycle(buffer, pool),
            (None, Some(pool)) => pool.give(buffer),
            (None, None) => {}
        }
    }

    fn reclaim(&mut self, buffer: Vec<u8>) {
        if let Some(s) = self.sender_mut() {
            s.reclaim(buffer);
        }
    }

    fn needs_service(&self) -> bool {
        Connection::needs_service(self)
    }
}
