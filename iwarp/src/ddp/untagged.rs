//! Untagged buffer model receive side (RFC 5041 §4.3, §5.1.2, §7.1): queues, MSN windows,
//! MO checks and placement into posted receive buffers.
//!
//! Queue 0 holds posted receive buffers (RDMAP Sends); queues 1 (Read/Atomic Requests),
//! 2 (Terminate) and 3 (Atomic Responses, extensions only) hold a number of fixed-size
//! slots whose contents the RDMAP layer keeps.

use std::collections::VecDeque;

use super::error::DdpError;
use crate::mem::{Access, MemoryTable, PdId, Resolved, Sge, StreamId};

/// Where the receive buffers of a stream on a shared receive queue come from: the receive
/// path takes one when a message on queue 0 needs it, not ahead (VERBS-00 §6.3.5).
pub trait RecvSupply {
    /// A buffer for the next message of `stream`'s queue 0 that has none, or `None` (the
    /// stream takes none on demand, or none is available).
    fn take_recv(&mut self, stream: StreamId) -> Option<RecvBuffer>;
}

/// A bare memory table has no shared receive queue: its streams' buffers are all posted.
impl<T: MemoryTable + ?Sized> RecvSupply for T {
    fn take_recv(&mut self, _stream: StreamId) -> Option<RecvBuffer> {
        None
    }
}

/// How far beyond the posted buffers an MSN may be before it is "out of range" instead of
/// "no buffer" (SPEC-DIGEST D15).
const NO_BUFFER_SLACK: u32 = 1 << 16;

/// A receive buffer posted to queue 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvBuffer {
    /// Consumer's work request id.
    pub wr_id: u64,
    /// Scatter list.
    pub sgl: Vec<Sge>,
}

impl RecvBuffer {
    /// Total capacity in octets.
    pub fn capacity(&self) -> u64 {
        self.sgl.iter().map(|s| u64::from(s.len)).sum()
    }
}

/// A posted receive buffer and what has been delivered into it so far.
#[derive(Debug, Clone)]
pub struct PostedRecv {
    /// The buffer.
    pub buffer: RecvBuffer,
    /// Octets accounted in order so far.
    pub received: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct SlotQueue {
    base: u32,
    capacity: u32,
    in_use: u32,
}

/// Receive-side state of the untagged queues of one stream.
#[derive(Debug, Clone)]
pub struct UntaggedQueues {
    recv: VecDeque<PostedRecv>,
    recv_base: u32,
    slots: [SlotQueue; 3],
    qn3_enabled: bool,
}

/// Which buffer an untagged segment maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Queue number.
    pub qn: u32,
    /// Distance of the message's MSN from the queue's next expected MSN.
    pub index: u32,
}

fn window(base: u32, avail: u32, msn: u32, lenient: bool) -> Result<u32, DdpError> {
    let d = msn.wrapping_sub(base);
    if d < avail {
        Ok(d)
    } else if d >= 0x8000_0000 {
        Err(DdpError::MsnRange)
    } else if lenient && d - avail < NO_BUFFER_SLACK {
        Err(DdpError::NoBuffer)
    } else {
        Err(DdpError::MsnRange)
    }
}

impl UntaggedQueues {
    /// Queues with `ird` slots on QN 1, one Terminate slot on QN 2, and QN 3 enabled when
    /// the RDMAP extensions are. All queues expect MSN 1 first.
    pub fn new(ird: u32, extensions: bool) -> Self {
        let q = |capacity| SlotQueue {
            base: 1,
            capacity,
            in_use: 0,
        };
        UntaggedQueues {
            recv: VecDeque::new(),
            recv_base: 1,
            slots: [q(ird), q(1), q(0)],
            qn3_enabled: extensions,
        }
    }

    /// Posts a receive buffer on queue 0.
    pub fn post_recv(&mut self, buffer: RecvBuffer) {
        self.recv.push_back(PostedRecv {
            buffer,
            received: 0,
        });
    }

    /// Number of posted, not yet consumed receive buffers.
    pub fn recv_posted(&self) -> usize {
        self.recv.len()
    }

    /// Removes every posted receive buffer (flush).
    pub fn drain_recv(&mut self) -> Vec<RecvBuffer> {
        self.recv.drain(..).map(|p| p.buffer).collect()
    }

    /// Sets how many slots queue `qn` (1..=3) has.
    pub fn set_capacity(&mut self, qn: u32, capacity: u32) {
        if let Some(q) = self.slot_queue_mut(qn) {
            q.capacity = capacity;
        }
    }

    fn slot_queue_mut(&mut self, qn: u32) -> Option<&mut SlotQueue> {
        match qn {
            1..=3 => self.slots.get_mut(qn as usize - 1),
            _ => None,
        }
    }

    /// Checks U1 (QN valid), U2/U5 (MSN has a buffer, MSN in range) for a segment
    /// (RFC 5041 §7.1 checks 1, 2, 5).
    pub fn check_msn(&self, qn: u32, msn: u32) -> Result<Slot, DdpError> {
        let index = match qn {
            0 => window(self.recv_base, self.recv.len() as u32, msn, true)?,
            1..=3 => {
                if qn == 3 && !self.qn3_enabled {
                    return Err(DdpError::InvalidQn);
                }
                let q = &self.slots[qn as usize - 1];
                if qn == 1 && q.capacity == 0 {
                    // SPEC-DIGEST D21: inbound reads disabled.
                    return Err(DdpError::InvalidQn);
                }
                window(q.base, q.capacity.saturating_sub(q.in_use), msn, false)?
            }
            _ => return Err(DdpError::InvalidQn),
        };
        Ok(Slot { qn, index })
    }

    /// How many receive buffers queue 0 lacks for a message with `msn`: one for it and one
    /// for each earlier MSN without a buffer (VERBS-00 §6.3.5 "sequential ordering"); 0 when
    /// it has one or when `msn` is out of range (RFC 5041 §7.1 check 5).
    pub fn recv_missing(&self, msn: u32) -> u32 {
        let avail = self.recv.len() as u32;
        match window(self.recv_base, avail, msn, true) {
            Err(DdpError::NoBuffer) => msn.wrapping_sub(self.recv_base) - avail + 1,
            _ => 0,
        }
    }

    /// Validates MO/length for queue 0 (checks U3, U4) and places `payload` into the
    /// posted buffer `slot.index` through the memory table. Every SGE piece is validated
    /// before the first octet is written.
    pub fn place_recv<M: MemoryTable + ?Sized>(
        &self,
        mem: &mut M,
        pd: PdId,
        stream: StreamId,
        slot: Slot,
        mo: u32,
        payload: &[u8],
    ) -> Result<(), DdpError> {
        let posted = self
            .recv
            .get(slot.index as usize)
            .ok_or(DdpError::NoBuffer)?;
        if payload.is_empty() {
            return Ok(());
        }
        let capacity = posted.buffer.capacity();
        let mo = u64::from(mo);
        if mo >= capacity {
            return Err(if mo == capacity {
                DdpError::TooLong
            } else {
                DdpError::InvalidMo
            });
        }
        if mo + payload.len() as u64 > capacity {
            return Err(DdpError::TooLong);
        }
        let mut pieces: Vec<(Resolved, usize, usize)> = Vec::new();
        let mut sge_start = 0u64;
        let end = mo + payload.len() as u64;
        for sge in &posted.buffer.sgl {
            let sge_end = sge_start + u64::from(sge.len);
            let lo = mo.max(sge_start);
            let hi = end.min(sge_end);
            if lo < hi {
                let r = mem
                    .resolve(
                        sge.stag,
                        pd,
                        stream,
                        sge.to.wrapping_add(lo - sge_start),
                        hi - lo,
                        Access::LOCAL_WRITE,
                    )
                    .map_err(|_| DdpError::LocalCatastrophic)?;
                pieces.push((r, (lo - mo) as usize, (hi - lo) as usize));
            }
            sge_start = sge_end;
        }
        for (r, at, n) in pieces {
            mem.write(&r, 0, &payload[at..at + n])
                .map_err(|_| DdpError::LocalCatastrophic)?;
        }
        Ok(())
    }

    /// MSN the front receive buffer is assigned to.
    pub fn recv_base(&self) -> u32 {
        self.recv_base
    }

    /// The posted receive buffer at `index` (0 = next to complete).
    pub fn recv_mut(&mut self, index: u32) -> Option<&mut PostedRecv> {
        self.recv.get_mut(index as usize)
    }

    /// Consumes the front receive buffer (its message is delivered) and advances queue 0's
    /// MSN window.
    pub fn complete_recv(&mut self) -> Option<PostedRecv> {
        let p = self.recv.pop_front()?;
        self.recv_base = self.recv_base.wrapping_add(1);
        Some(p)
    }

    /// A message on slot queue `qn` was delivered; if `hold` its slot stays in use until
    /// [`Self::release_slot`] (IRD slots are held until the response is generated).
    pub fn deliver_slot(&mut self, qn: u32, hold: bool) {
        if let Some(q) = self.slot_queue_mut(qn) {
            q.base = q.base.wrapping_add(1);
            if hold {
                q.in_use += 1;
            }
        }
    }

    /// Frees a held slot of queue `qn`.
    pub fn release_slot(&mut self, qn: u32) {
        if let Some(q) = self.slot_queue_mut(qn) {
            q.in_use = q.in_use.saturating_sub(1);
        }
    }
}
