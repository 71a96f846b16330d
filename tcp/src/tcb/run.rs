//! The in-order data segments of a receive run, past the general input: a segment that
//! continues the connection's run (RCV.NXT, nothing held, no flag but ACK and PSH, the
//! acknowledgment fields of the run's last processed segment or an ACK that finds nothing
//! outstanding, a timestamp PAWS accepts) is taken by the few steps of
//! [`Tcb::handle_segment`] that apply to it. So is a data segment beyond a hole that
//! continues the last range held out of order ([`Tcb::takes_ooo_run_segment`]).

use super::{State, Tcb};
use crate::config::Config;
use crate::rx::for_each_unconsumed;
use crate::seq;
use crate::time::Instant;
use crate::ulp::Upper;
use crate::wire::DataSegment;

impl Tcb {
    /// Whether `seg`, arriving at `now` in receive burst `burst`, continues this
    /// connection's run so that [`Tcb::handle_segment`] would do nothing with it but what
    /// [`Tcb::take_run_segment`] does: ESTABLISHED, at RCV.NXT within the window with
    /// nothing held out of order and no FIN seen ahead, its timestamp, if any, not older
    /// than TS.Recent (RFC 7323 §5.3 R1: the PAWS test passes); and its ACK finds nothing
    /// new (RFC 9293 §3.10.7.4): either an ACK of SND.UNA with nothing the connection sent
    /// outstanding and no loss probe armed (whatever it transmitted since the last ACK it
    /// processed, in this burst or before, was no data: the ACK processing would only
    /// update the send window, whatever the burst, time, window or echo), or the ACK,
    /// window, echoed timestamp and time of the run's last segment whose ACK was processed
    /// in this burst (so SND.NXT did not move since). Changes nothing.
    #[inline]
    pub(crate) fn takes_run_segment(&self, seg: &DataSegment, burst: u64, now: Instant) -> bool {
        let acks_nothing_new =
            (seg.ack == self.snd_una && self.txq.is_empty() && self.tlp_deadline.is_none())
                || self.run_ack.as_ref().is_some_and(|run| {
                    run.ack == seg.ack
                        && run.window == seg.window
                        && run.tsecr == seg.timestamp.map(|t| t.tsecr)
                        && run.burst == burst
                        && run.now == now
                });
        acks_nothing_new
            && seg.seq == self.rcv_nxt
            && self.state == State::Established
            && self.rx.is_empty()
            && self.peer_fin.is_none()
            && seg.payload.len() <= self.rcv_wnd() as usize
            && !(self.opts.timestamps
                && self.ts_recent_at.is_some()
                && seg
                    .timestamp
                    .is_some_and(|ts| seq::lt(ts.tsval, self.ts_recent)))
    }

    /// Takes `seg`, which [`Tcb::takes_run_segment`] accepted and whose checksum was
    /// verified, as [`Tcb::handle_segment`] would during a burst: TS.Recent (RFC 7323
    /// §4.3), SND.WL1 (the rest of the ACK processing would find nothing new), the idle
    /// time, the payload to the ULP with RCV.NXT advanced (the ULP told at the run's end)
    /// and the ACK decision (RFC 9293 §3.8.6.3: every second segment, else the delayed
    /// ACK; [`Tcb::hold_ack`] as the engine set it).
    #[inline]
    pub(crate) fn take_run_segment(
        &mut self,
        now: Instant,
        cfg: &Config,
        seg: &DataSegment,
        ulp: &mut impl Upper,
    ) {
        self.take_run_header(now, cfg, seg);
        self.take_run_payload(now, cfg, seg.payload, ulp);
    }

    /// What a segment the run's entries accepted brings besides its payload: TS.Recent
    /// (RFC 7323 §4.3; not older than TS.Recent, checked: only the segment's place counts),
    /// SND.WL1 and the send window, and the idle time.
    #[inline(always)]
    fn take_run_header(&mut self, now: Instant, cfg: &Config, seg: &DataSegment) {
        if self.opts.timestamps {
            if let Some(ts) = seg.timestamp {
                if seq::le(seg.seq, self.last_ack_sent) {
                    self.ts_recent = ts.tsval;
                    self.ts_recent_at = Some(now);
                }
            }
        }
        self.update_send_window(seg.window, seg.seq, seg.ack);
        self.restart_keepalive(now, cfg);
    }

    /// Whether `seg`, arriving at `now`, is a data segment around a hole that
    /// [`Tcb::handle_segment`] would take as [`Tcb::take_ooo_run_segment`] does:
    /// ESTABLISHED with no FIN seen ahead, the segment starting either at RCV.NXT with data
    /// held out of order (it fills a hole) or beyond RCV.NXT, where the last (highest)
    /// range held out of order ends or beyond it (nothing was received there), and ending
    /// within the window (RFC 9293 §3.10.7.4 first check: acceptable,
    /// nothing to trim, all of it new), its
    /// timestamp, if any, not older than TS.Recent (RFC 7323 §5.3 R1), and its ACK one of
    /// SND.UNA with nothing the connection sent outstanding and no loss probe armed (the
    /// ACK processing would only update the send window; the segment carries no SACK
    /// block, [`crate::wire::parse_data`]). Changes nothing; O(log n) in the received
    /// ranges.
    #[inline(never)]
    pub(crate) fn takes_ooo_run_segment(&self, seg: &DataSegment) -> bool {
        if !(seg.ack == self.snd_una
            && self.txq.is_empty()
            && self.tlp_deadline.is_none()
            && self.state == State::Established
            && self.peer_fin.is_none())
        {
            return false;
        }
        let rel = seq::diff(seg.seq, self.rcv_nxt);
        let placed = if rel == 0 {
            // At RCV.NXT with data held: the hole's filler, taken the general way.
            !self.rx.is_empty()
        } else {
            rel > 0
                && self
                    .rx
                    .last_end()
                    .is_none_or(|end| self.rcv_off + rel as u64 >= end)
        };
        placed
            && rel as u64 + seg.payload.len() as u64 <= u64::from(self.rcv_wnd())
            && !(self.opts.timestamps
                && self.ts_recent_at.is_some()
                && seg
                    .timestamp
                    .is_some_and(|ts| seq::lt(ts.tsval, self.ts_recent)))
    }

    /// Takes `seg`, which [`Tcb::takes_ooo_run_segment`] accepted and whose checksum was
    /// verified, as [`Tcb::handle_segment`] would: the ULP told first if a run left RCV.NXT's
    /// advance pending, TS.Recent (RFC 7323 §4.3), SND.WL1, the idle time, then the payload:
    /// a hole's filler as [`Tcb::handle_segment`] takes it; else (all of it new) offered to
    /// the ULP out of order, what it leaves stored, the last
    /// received range grown over it or a new range after it, the arrival noted for the SACK blocks (RFC 2018 §4)
    /// and an ACK at once (RFC 5681 §4.2, RFC 9293 §3.10.7.4).
    #[inline(never)]
    pub(crate) fn take_ooo_run_segment(
        &mut self,
        now: Instant,
        cfg: &Config,
        seg: &DataSegment,
        ulp: &mut impl Upper,
    ) {
        self.flush_advance(ulp);
        self.run_ack = None;
        self.take_run_header(now, cfg, seg);
        if seg.seq == self.rcv_nxt {
            let end = self.rcv_off + seg.payload.len() as u64;
            if self.rx.first_start().is_some_and(|first| end <= first) {
                self.take_filler(now, cfg, seg.payload, ulp);
            } else {
                self.process_payload(now, cfg, seg.seq, seg.payload, false, ulp);
            }
            return;
        }
        let s = self.rcv_off + seq::diff(seg.seq, self.rcv_nxt) as u64;
        let payload = seg.payload;
        let consumed = ulp.on_segment(seg.seq, payload, false, self.rcv_nxt);
        for_each_unconsumed(&consumed, payload.len(), |a, b| {
            self.rx.store(s + a as u64, &payload[a..b]);
        });
        self.rx.push_last(s, s + payload.len() as u64);
        self.sack_rep.record(s);
        self.ack_now = true;
    }

    /// [`Tcb::process_payload`] of `payload` at RCV.NXT, with data held out of order that
    /// it does not reach past (it ends at or before the first range held): offered to the
    /// ULP in order, what it leaves stored, then RCV.NXT moved over it and over the first
    /// range held if that starts where it ends, the stored octets before there handed to
    /// the ULP in order (RFC 9293 §3.10.7.4, seventh check), and an ACK at once for the
    /// filled gap (RFC 5681 §4.2).
    fn take_filler(&mut self, now: Instant, cfg: &Config, payload: &[u8], ulp: &mut impl Upper) {
        let before = self.rcv_nxt;
        let start = self.rcv_off;
        let consumed = ulp.on_segment(before, payload, true, before);
        for_each_unconsumed(&consumed, payload.len(), |a, b| {
            self.rx.store(start + a as u64, &payload[a..b]);
        });
        let mut end = start + payload.len() as u64;
        if self.rx.first_start() == Some(end) {
            end = self.rx.pop_front_at(end).unwrap_or(end);
        }
        while let Some((off, bytes)) = self.rx.pop_stored_before(end) {
            ulp.on_in_order(self.seq_of(off), &bytes);
            self.rx.recycle(bytes);
        }
        self.rcv_nxt = self.seq_of(end);
        self.rcv_off = end;
        self.delivered(now, cfg, before, true, true, false, ulp);
    }
}
