//! The engine's entry for the in-order data segments of a receive run: a segment to the
//! connection of the segment before, a plain data segment that continues that connection's
//! run ([`crate::tcb::Tcb::takes_run_segment`]), is read without building the general
//! representation, found without hashing its 4-tuple and handled without the general
//! input's checks, which it would pass; so is a plain data segment ahead of RCV.NXT at or
//! beyond the end of the last range held out of order
//! ([`crate::tcb::Tcb::takes_ooo_run_segment`]). Anything else goes the general way,
//! unchanged.

use std::net::IpAddr;

use smoltcp::wire::TcpRepr;

use super::{list_active, schedule_conn, slot_mut, Conn, ConnId, Engine};
use crate::checksum::AddressSum;
use crate::ip::PacketError;
use crate::time::Instant;
use crate::ulp::{Bound, Ulp};
use crate::wire::parse_data;

/// The addresses and ports of the last segment the general input handed to a connection,
/// and that connection: a segment with the same ones goes to it (the table maps each
/// 4-tuple to one connection; a stale handle finds none).
#[derive(Clone, Copy, Debug)]
pub(super) struct RunKey {
    src: IpAddr,
    dst: IpAddr,
    /// Source and destination port as the TCP header's first four octets.
    ports: [u8; 4],
    id: ConnId,
    /// The pseudo-header's addresses, summed once for the run's checksums.
    addresses: AddressSum,
}

impl RunKey {
    /// The key of `repr`, from `src` to `dst`, handed to `id`.
    pub(super) fn new(src: IpAddr, dst: IpAddr, repr: &TcpRepr, id: ConnId) -> RunKey {
        let [a, b] = repr.src_port.to_be_bytes();
        let [c, d] = repr.dst_port.to_be_bytes();
        RunKey {
            src,
            dst,
            ports: [a, b, c, d],
            id,
            addresses: AddressSum::new(src, dst),
        }
    }
}

impl<U: Ulp<C>, C: ?Sized> Engine<U, C> {
    /// Handles `segment` (from `src` to `dst`, its checksum verified when `verify`) as the
    /// general input would when it continues its connection's run in the open burst;
    /// `None` (nothing done) when it does not. The addresses were found unicast and of one
    /// family with the key's segment.
    #[inline]
    pub(super) fn input_run(
        &mut self,
        now: Instant,
        cx: &mut C,
        src: &IpAddr,
        dst: &IpAddr,
        segment: &[u8],
        verify: bool,
    ) -> Option<Result<(), PacketError>> {
        if !self.burst || !self.cfg.rx_run_entry {
            return None;
        }
        let key = self.run_key.as_ref()?;
        let seg = parse_data(segment)?;
        if seg.ports != key.ports || *src != key.src || *dst != key.dst {
            return None;
        }
        let (id, addresses) = (key.id, key.addresses);
        let bursts = self.bursts;
        let c = slot_mut(&mut self.slots, id)?;
        let Conn {
            tcb,
            ulp,
            ack_listed,
            ..
        } = c;
        let ulp = ulp.as_mut()?;
        // In order (the run), or ahead of RCV.NXT at or beyond the last range held.
        let in_order = tcb.takes_run_segment(&seg, bursts, now);
        if !in_order && !tcb.takes_ooo_run_segment(&seg) {
            return None;
        }
        // As the general input: the checksum before the segment touches any state, the
        // payload first offered to the ULP to stage (`checksum_ok`; the header is a
        // whole number of words).
        let mut staged = false;
        if verify {
            let header = &segment[..segment.len() - seg.payload.len()];
            let sum = ulp.stage(cx, seg.seq, seg.payload);
            staged = sum.is_some();
            let ok = match sum {
                Some(sum) => addresses.split_ok(header, sum),
                None => addresses.segment_ok(segment),
            };
            if !ok {
                if staged {
                    ulp.unstage(cx);
                }
                self.stats.bad_checksums += 1;
                return Some(Err(self.malformed(PacketError::BadTcp)));
            }
        }
        self.stats.segments_in += 1;
        if in_order {
            self.stats.run_segments += 1;
            let pending = tcb.advance_pending;
            let hold = self.more_waiting;
            tcb.hold_ack = hold;
            tcb.take_run_segment(now, &self.cfg, &seg, &mut Bound { ulp, cx, now });
            if tcb.advance_pending && !pending {
                self.deferred.push(id);
            }
            if hold && !*ack_listed && tcb.holds_ack() {
                *ack_listed = true;
                self.held_acks.push(id);
            }
        } else {
            self.stats.ooo_run_segments += 1;
            tcb.take_ooo_run_segment(now, &self.cfg, &seg, &mut Bound { ulp, cx, now });
        }
        if staged {
            ulp.unstage(cx);
        }
        // What the general input does after a segment that raised no event; the octets in
        // flight did not change (SND.UNA and SND.NXT did not move). A segment whose advance
        // waits for the run's end is listed there (once per run).
        let listed = !c.tcb.advance_pending && list_active(&mut self.active, c, id);
        if !c.queued {
            c.queued = true;
            self.ready.push_back(id);
        }
        schedule_conn(&mut self.timers, c, id);
        if listed {
            self.bound_active();
        }
        self.release_waiters();
        Some(Ok(()))
    }
}
