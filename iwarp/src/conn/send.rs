//! The send side: MPA frames first, then whole FPDUs built from the engine's DDP segments,
//! sized by the MULPDU of the effective send MSS (RFC 5044 §4.1), with markers at their
//! sequence positions, handed to TCP as units it sends and retransmits unchanged.

use tcp::{Instant, SegmentSource, Unit};

use super::connection::Connection;
use super::outbound::{Sender, MIN_MULPDU};
use crate::mem::{HasMemoryTable, MemoryTable};

impl Connection {
    /// Whether FPDUs may go out now.
    fn may_send(&self) -> bool {
        let established = self.negotiator.may_send_fpdus();
        self.sender()
            .is_some_and(|s| s.may_send(self.now, established))
    }

    /// Takes DDP segments from the engine up to the budget.
    pub(super) fn fill_tx<M: MemoryTable + ?Sized>(&mut self, mem: &M) {
        if !self.may_send() {
            return;
        }
        let mulpdu = self.mulpdu();
        if mulpdu < MIN_MULPDU {
            return;
        }
        let (now, budget) = (self.now, self.cfg.tx_budget);
        let Some((engine, sender)) = self.phase.stream_mut() else {
            return;
        };
        self.stats.tx_buffers_allocated +=
            sender.fill(engine, mem, now, mulpdu, budget, &mut self.ops);
    }

    fn sender_mut(&mut self) -> Option<&mut Sender> {
        self.phase.stream_mut().map(|(_, s)| s)
    }
}

impl<C: HasMemoryTable + ?Sized> SegmentSource<C> for Connection {
    fn next_unit(&mut self, cx: &mut C, now: Instant, seq: u32, max_len: usize) -> Option<Unit> {
        let mem = cx.table();
        self.advance_time(now);
        if self.cfg.emss.is_none() && max_len > self.emss {
            self.emss = max_len;
        }
        if let Some(f) = self.frames.front() {
            if f.len() > max_len {
                return None;
            }
            let f = self.frames.pop_front()?;
            self.negotiator.frame_sent(now);
            self.stats.units_sent += 1;
            self.tx_start = Some(seq.wrapping_add(f.len() as u32));
            self.setup_tx();
            self.fill_tx(mem);
            return Some(Unit::new(f));
        }
        if !self.may_send() {
            return None;
        }
        self.fill_tx(mem);
        if self.sender().is_none_or(Sender::is_empty) {
            return None;
        }
        let unit = self.sender_mut()?.frame_unit(seq, max_len)?;
        self.stats.units_sent += 1;
        self.stats.fpdus_sent += unit.fpdus as u64;
        self.stats.units_in_place += u64::from(unit.in_place);
        self.stats.tx_buffers_allocated += u64::from(unit.allocated);
        self.fill_tx(mem);
        Some(Unit::new(unit.bytes))
    }

    fn pending(&self) -> bool {
        !self.frames.is_empty() || (self.may_send() && !self.sender().is_none_or(Sender::is_empty))
    }

    fn recycle(&mut self, buffer: Vec<u8>) {
        if let Some(s) = self.sender_mut() {
            s.recycle(buffer);
        }
    }
}
