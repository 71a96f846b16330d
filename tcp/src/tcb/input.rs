//! Segment input (RFC 9293 §3.10.7): acceptability, ACK and SACK processing, payload
//! delivery through the sink with reassembly, and the peer's FIN.

use core::time::Duration;

use smoltcp::wire::{TcpControl, TcpRepr};

use super::{CloseReason, RecoveryUndo, RunAck, State, Tcb, TcbEvent, ACK_RUN};
use crate::config::Config;
use crate::rx::for_each_unconsumed;
use crate::seq;
use crate::time::Instant;
use crate::ulp::Upper;

/// RFC 7323 §5.5: TS.Recent is invalid once the peer's clock may have moved on by 2^31
/// ticks: 24 days at 1 ms a tick, but 35.8 minutes at 1 µs, the rate of this engine's own
/// clock (and of Linux's with usec timestamps). The peer's rate is unknown, so the shorter
/// bound (with a margin) holds: a stale TS.Recent is then merely not enforced, where a
/// longer bound would make PAWS reject every segment of a peer that was idle that long.
const PAWS_IDLE: Duration = Duration::from_secs(30 * 60);

/// How soon a refused SYN goes out again under `Config::refused_retry`.
const REFUSED_SYN_RESEND: Duration = Duration::from_millis(20);

impl Tcb {
    /// Process one segment addressed to this TCB (RFC 9293 §3.10.7).
    pub(crate) fn handle_segment(
        &mut self,
        now: Instant,
        cfg: &Config,
        repr: &TcpRepr,
        ulp: &mut impl Upper,
        ev: &mut Vec<TcbEvent>,
    ) {
        if self.state == State::SynSent {
            self.handle_syn_sent(now, cfg, repr, ev);
            return;
        }
        let seg_seq = repr.seq_number.0 as u32;
        // During a receive burst, a run of in-order data segments tells the ULP once that
        // RCV.NXT advanced; any other segment tells it first.
        let in_run = self.defer_advance && self.continues_run(repr, seg_seq);
        if !in_run {
            self.flush_advance(ulp);
            self.run_ack = None;
        }
        let seg_ack = repr.ack_number.map(|a| a.0 as u32);
        let is_rst = repr.control == TcpControl::Rst;

        // Simultaneous open: our SYN-ACK crossed the peer's (RFC 9293 §3.5 figure 8).
        if self.state == State::SynReceived
            && repr.control == TcpControl::Syn
            && seg_seq == self.irs
        {
            match seg_ack {
                Some(a) if a == self.snd_nxt => {
                    self.snd_wnd = u32::from(repr.window_len);
                    self.establish(now, seg_seq, a, ev);
                    self.ack_now = true;
                }
                _ => self.send_syn = true,
            }
            return;
        }

        // RFC 9293 §3.10.7.4 (TIME-WAIT): a retransmission of the peer's FIN is
        // acknowledged and restarts the 2 MSL timer.
        if self.state == State::TimeWait
            && repr.control == TcpControl::Fin
            && seg_seq.wrapping_add(repr.payload.len() as u32 + 1) == self.rcv_nxt
        {
            self.restart_time_wait(now, cfg);
            self.ack_now = true;
            return;
        }

        // PAWS, RFC 7323 §5.3 R1.
        if self.opts.timestamps && !is_rst {
            if let (Some(ts), Some(at)) = (repr.timestamp, self.ts_recent_at) {
                if seq::lt(ts.tsval, self.ts_recent) && now.saturating_since(at) < PAWS_IDLE {
                    log::debug!("PAWS: dropping segment with old TSval {}", ts.tsval);
                    self.paws_drops += 1;
                    self.ack_now = true;
                    return;
                }
            }
        }

        // Sequence number check, RFC 9293 §3.10.7.4 first check.
        let seg_len = repr.payload.len() as u32
            + u32::from(matches!(repr.control, TcpControl::Syn | TcpControl::Fin));
        let wnd = self.rcv_wnd();
        let start_ok =
            seq::ge(seg_seq, self.rcv_nxt) && seq::lt(seg_seq, self.rcv_nxt.wrapping_add(wnd));
        let acceptable = match (seg_len, wnd) {
            (0, 0) => seg_seq == self.rcv_nxt,
            (0, _) => start_ok,
            (_, 0) => false,
            (_, _) => {
                let last = seg_seq.wrapping_add(seg_len - 1);
                start_ok
                    || (seq::ge(last, self.rcv_nxt)
                        && seq::lt(last, self.rcv_nxt.wrapping_add(wnd)))
            }
        };
        if !acceptable {
            if !is_rst {
                self.ack_now = true;
                // RFC 2883 §4: report a duplicate wholly below RCV.NXT.
                let end = seg_seq.wrapping_add(repr.payload.len() as u32);
                if !repr.payload.is_empty() && seq::le(end, self.rcv_nxt) {
                    self.report_duplicate(seg_seq, end);
                }
            }
            // RFC 9293 §3.10.7.4: with a zero window, valid ACKs are still processed.
            if wnd == 0 && seg_seq == self.rcv_nxt && !is_rst && self.synchronized() {
                if let Some(a) = seg_ack {
                    self.run_ack = None;
                    self.process_ack(now, repr, seg_seq, a, ulp);
                }
            }
            return;
        }

        // RFC 7323 §4.3: remember TS.Recent.
        if self.opts.timestamps {
            if let Some(ts) = repr.timestamp {
                if seq::le(seg_seq, self.last_ack_sent)
                    && (self.ts_recent_at.is_none() || seq::ge(ts.tsval, self.ts_recent))
                {
                    self.ts_recent = ts.tsval;
                    self.ts_recent_at = Some(now);
                }
            }
        }

        // RST, RFC 9293 §3.10.7.4 second check with RFC 5961 §3.2.
        if is_rst {
            if seg_seq == self.rcv_nxt {
                self.on_reset(ev);
            } else {
                self.ack_now = true;
            }
            return;
        }

        // SYN in a synchronized state: challenge ACK (RFC 5961 §4.2).
        if repr.control == TcpControl::Syn {
            self.ack_now = true;
            return;
        }

        let Some(ack) = seg_ack else {
            return;
        };

        if self.state == State::SynReceived {
            if seq::gt(ack, self.snd_una) && seq::le(ack, self.snd_nxt) {
                self.snd_wnd = u32::from(repr.window_len) << self.opts.snd_shift;
                self.establish(now, seg_seq, ack, ev);
            } else {
                ev.push(TcbEvent::Rst {
                    seq: ack,
                    ack: None,
                });
                return;
            }
        }

        if seq::gt(ack, self.snd_nxt) {
            // RFC 9293 §3.10.7.4: ACK for data not yet sent.
            self.ack_now = true;
            return;
        }
        // In a run, a segment whose acknowledgment fields repeat the previous one's finds
        // nothing new to process (the ACK advanced nothing more, no SACK block, the same
        // window and echo at the same time): only the window's update point moves on.
        let run_ack = (in_run && repr.sack_ranges.iter().all(Option::is_none)).then(|| RunAck {
            burst: self.burst,
            ack,
            window: repr.window_len,
            tsecr: repr.timestamp.map(|t| t.tsecr),
            now,
        });
        if run_ack.is_some() && run_ack == self.run_ack {
            self.update_send_window(repr.window_len, seg_seq, ack);
        } else {
            self.process_ack(now, repr, seg_seq, ack, ulp);
            self.arm_tlp(now, cfg);
            self.run_ack = run_ack;
        }

        let fin_acked = self.fin_queued && self.txq.is_empty();
        match self.state {
            State::FinWait1 if fin_acked => {
                self.state = State::FinWait2;
                self.finwait2_deadline = self.arm(now + cfg.fin_wait2_timeout);
            }
            State::Closing if fin_acked => {
                self.enter_time_wait(now, cfg, ev);
            }
            State::LastAck if fin_acked => {
                self.state = State::TimeWait;
                ev.push(TcbEvent::Closed(CloseReason::Normal));
                ev.push(TcbEvent::Remove);
                return;
            }
            _ => {}
        }

        self.restart_keepalive(now, cfg);

        if !repr.payload.is_empty()
            && matches!(
                self.state,
                State::Established | State::FinWait1 | State::FinWait2
            )
        {
            self.process_payload(now, cfg, seg_seq, repr.payload, in_run, ulp);
        }

        if repr.control == TcpControl::Fin {
            let fin_seq = seg_seq.wrapping_add(repr.payload.len() as u32);
            if self.state == State::TimeWait {
                // RFC 9293 §3.10.7.4: retransmitted FIN restarts the 2 MSL timer.
                self.restart_time_wait(now, cfg);
                self.ack_now = true;
            } else if !self.fin_received
                && seq::ge(fin_seq, self.rcv_nxt)
                && seq::le(fin_seq, self.rcv_nxt.wrapping_add(self.rcv_wnd()))
            {
                self.peer_fin = Some(fin_seq);
                self.ack_now = true;
            }
        }
        self.consume_fin(now, cfg, ev);
    }

    fn establish(&mut self, now: Instant, seg_seq: u32, ack: u32, ev: &mut Vec<TcbEvent>) {
        self.snd_una = ack;
        self.snd_wl1 = seg_seq;
        self.snd_wl2 = ack;
        self.max_snd_wnd = self.max_snd_wnd.max(self.snd_wnd);
        if self.syn_retries == 0 {
            self.rtt.sample(now.saturating_since(self.syn_sent_at));
        }
        self.rtx_deadline = None;
        self.send_syn = false;
        self.state = State::Established;
        ev.push(if self.passive {
            TcbEvent::Accepted
        } else {
            TcbEvent::Connected
        });
    }

    fn on_reset(&mut self, ev: &mut Vec<TcbEvent>) {
        match self.state {
            State::SynReceived if self.passive => {}
            State::SynReceived => ev.push(TcbEvent::Closed(CloseReason::Refused)),
            State::Closing | State::LastAck | State::TimeWait => {
                ev.push(TcbEvent::Closed(CloseReason::Normal))
            }
            _ => ev.push(TcbEvent::Closed(CloseReason::Reset)),
        }
        ev.push(TcbEvent::Remove);
    }

    /// RFC 9293 §3.10.7.3.
    fn handle_syn_sent(
        &mut self,
        now: Instant,
        cfg: &Config,
        repr: &TcpRepr,
        ev: &mut Vec<TcbEvent>,
    ) {
        let seg_ack = repr.ack_number.map(|a| a.0 as u32);
        if let Some(a) = seg_ack {
            if seq::le(a, self.iss) || seq::gt(a, self.snd_nxt) {
                if repr.control != TcpControl::Rst {
                    ev.push(TcbEvent::Rst { seq: a, ack: None });
                }
                return;
            }
        }
        match repr.control {
            // Config::refused_retry: a listener may still come up; the SYN goes out again.
            TcpControl::Rst
                if seg_ack.is_some()
                    && now.saturating_since(self.opened_at) < cfg.refused_retry =>
            {
                self.resend_refused_syn = true;
                self.rtx_deadline = self.arm(now + REFUSED_SYN_RESEND);
            }
            TcpControl::Rst if seg_ack.is_some() => {
                ev.push(TcbEvent::Closed(CloseReason::Refused));
                ev.push(TcbEvent::Remove);
            }
            TcpControl::Syn => {
                self.accept_syn(now, cfg, repr);
                match seg_ack {
                    Some(a) => {
                        self.establish(now, repr.seq_number.0 as u32, a, ev);
                        self.restart_keepalive(now, cfg);
                        self.ack_now = true;
                    }
                    None => {
                        // Simultaneous open (RFC 9293 §3.5 figure 8).
                        self.state = State::SynReceived;
                        self.send_syn = true;
                    }
                }
            }
            _ => {}
        }
    }

    /// ACK field processing (RFC 9293 §3.10.7.4 fifth check) with SACK (RFC 6675), D-SACK
    /// (RFC 2883), RACK loss detection (RFC 8985) or, without SACK, fast retransmit
    /// (RFC 5681 §3.2), NewReno recovery (RFC 6582), and the undo of recoveries and
    /// timeouts found spurious (RFC 3522, RFC 3708, RFC 4015).
    #[inline]
    fn process_ack(
        &mut self,
        now: Instant,
        repr: &TcpRepr,
        seg_seq: u32,
        ack: u32,
        ulp: &mut impl Upper,
    ) {
        // Nothing outstanding, nothing acknowledged and no SACK block (a D-SACK included):
        // no unit to deliver, count or deem lost, so only the send window may move. The
        // receiving end of a one-way transfer takes this path for every data segment.
        if ack == self.snd_una && self.txq.is_empty() && repr.sack_ranges[0].is_none() {
            self.update_send_window(repr.window_len, seg_seq, ack);
        } else {
            self.process_new_ack(now, repr, seg_seq, ack, ulp);
        }
    }

    /// [`Tcb::process_ack`] of an ACK with something to process.
    fn process_new_ack(
        &mut self,
        now: Instant,
        repr: &TcpRepr,
        seg_seq: u32,
        ack: u32,
        ulp: &mut impl Upper,
    ) {
        let new_wnd = u32::from(repr.window_len) << self.opts.snd_shift;
        let mut sack_changed = false;
        let echoed = repr
            .timestamp
            .filter(|_| self.opts.timestamps)
            .map(|ts| ts.tsecr.wrapping_sub(self.ts_offset));
        self.rack.set_echoed(echoed);
        // Most ACKs carry no SACK block: nothing to look at then.
        if self.opts.sack && repr.sack_ranges.iter().any(Option::is_some) {
            // RFC 2883 §4: a first block below the cumulative ACK, or inside the second
            // block, reports a duplicate.
            let blocks = repr.sack_ranges;
            let dsack = blocks[0].filter(|&(l, r)| {
                seq::lt(l, r)
                    && (seq::le(r, ack)
                        || blocks[1].is_some_and(|(l2, r2)| seq::le(l2, l) && seq::le(r, r2)))
            });
            if let Some((l, r)) = dsack {
                self.on_dsack(l, r);
            }
            for (l, r) in blocks.iter().skip(usize::from(dsack.is_some())).flatten() {
                if seq::lt(*l, *r) && seq::ge(*l, self.snd_una) && seq::le(*r, self.snd_nxt) {
                    sack_changed |= self.txq.sack(*l, *r, now, &mut self.rack);
                }
            }
        }
        let outstanding = !self.txq.is_empty();
        let advanced = seq::gt(ack, self.snd_una);
        if advanced {
            if let Some(undo) = self.rto_undo.take() {
                // RFC 3522 §3.2: the first ACK for new data after a timeout echoes a
                // TSval older than the retransmission's: the original arrived, the
                // timeout was spurious (a peer that stalled, not a loss). RFC 4015 §3:
                // restore the congestion state, and what the timeout marked lost is in
                // flight (not sent again).
                if repr
                    .timestamp
                    .is_some_and(|ts| seq::lt(ts.tsecr, undo.retransmit_ts))
                {
                    self.cc = undo.cc;
                    self.txq.undo_lost();
                    self.rto_point = None;
                    self.spurious_timeouts += 1;
                }
            }
            self.tlp_acked(now, repr, ack);
            let acked = self.txq.ack(ack, now, &mut self.rack, |b| ulp.recycle(b));
            self.snd_una = ack;
            if let Some(sent) = acked.rtt_sample_sent_at {
                self.rtt.sample_micros(now.micros_since(sent));
            }
            self.rtt.reset_backoff();
            self.rtx_count = 0;
            self.dupacks = 0;
            self.eifel_recovery(repr, ack);
            if self.rto_point.is_some_and(|p| seq::ge(ack, p)) {
                self.rto_point = None;
            }
            match self.recovery {
                Some(point) if seq::ge(ack, point) => {
                    self.recovery = None;
                    self.rack.on_recovery_exit();
                }
                Some(_) => {
                    // RFC 6582 §3.2 step 5: partial ACK retransmits the next hole.
                    if !self.opts.sack {
                        self.txq.mark_first_lost();
                    }
                }
                None => self
                    .cc
                    .on_ack(now, acked.bytes, self.rtt.srtt(), self.eff_mss),
            }
            // RFC 6298 §5.2/§5.3.
            self.rtx_deadline = if self.txq.is_empty() {
                None
            } else {
                self.arm(now.saturating_add_micros(self.rtt.rto_micros()))
            };
        } else if ack == self.snd_una
            && outstanding
            && repr.payload.is_empty()
            && repr.control == TcpControl::None
            && (new_wnd == self.snd_wnd || sack_changed)
        {
            // RFC 5681 §2 duplicate ACK (RFC 6675 counts SACK-bearing ACKs likewise).
            self.dupacks += 1;
        }
        if advanced || sack_changed {
            self.delivered_before_retransmission();
        }
        let lost = if self.opts.sack {
            // RFC 8985 §6.2: on each ACK that delivers data.
            (advanced || sack_changed) && self.rack_detect(now)
        } else {
            self.dupacks >= 3
        };
        self.on_losses(now, lost);
        self.update_send_window(repr.window_len, seg_seq, ack);
    }

    /// RFC 9293 §3.10.7.4: send window update, from a segment's window field.
    pub(super) fn update_send_window(&mut self, window: u16, seg_seq: u32, ack: u32) {
        let new_wnd = u32::from(window) << self.opts.snd_shift;
        if seq::lt(self.snd_wl1, seg_seq) || (self.snd_wl1 == seg_seq && seq::le(self.snd_wl2, ack))
        {
            self.snd_wnd = new_wnd;
            self.snd_wl1 = seg_seq;
            self.snd_wl2 = ack;
            self.max_snd_wnd = self.max_snd_wnd.max(new_wnd);
            if new_wnd > 0 {
                self.persist_deadline = None;
                self.persist_backoff = 0;
            }
        }
    }

    /// RACK loss detection now (RFC 8985 §6.2 step 5), arming the reordering timer for
    /// the units not yet due. Returns whether a unit was newly marked lost.
    /// The check for a unit that may be lost is inline, so that the usual ACK (nothing
    /// SACKed or retransmitted) makes no call.
    #[inline]
    pub(super) fn rack_detect(&mut self, now: Instant) -> bool {
        if !self.txq.rack_may_lose() {
            self.rack_deadline = None;
            return false;
        }
        self.rack_mark_lost(now)
    }

    /// [`Tcb::rack_detect`] when some unit may be lost.
    fn rack_mark_lost(&mut self, now: Instant) -> bool {
        let wnd = self.rack.reo_wnd(
            self.recovery.is_some(),
            self.txq.sacked_count(),
            self.rtt.srtt(),
        );
        let (marked, next) = self.txq.rack_detect_loss(now, &self.rack, wnd);
        self.rack_deadline = next.and_then(|t| self.arm(t));
        marked
    }

    /// Enter fast recovery if `lost` (a loss was detected) and none is under way (RFC 6675
    /// §5, RFC 6582 §3.2): reduce the window and retransmit the first lost unit at once.
    pub(super) fn on_losses(&mut self, now: Instant, lost: bool) {
        if !lost || self.recovery.is_some() || self.rto_point.is_some() || self.txq.is_empty() {
            return;
        }
        self.recovery = Some(self.snd_nxt);
        self.recoveries += 1;
        self.tlp_deadline = None;
        self.rec_undo = Some(RecoveryUndo {
            cc: self.cc.snapshot(),
            start: self.snd_una,
            end: self.snd_nxt,
            retransmit_ts: None,
            eifel_done: false,
            retrans: 0,
        });
        let flight = self.flight_size();
        self.cc.on_congestion_event(now, flight, self.eff_mss);
        if !self.opts.sack {
            self.txq.mark_first_lost();
        }
        self.fast_rtx = true;
    }

    /// RFC 3522 §3.2 for fast recovery: the ACK that first covers the first retransmission
    /// echoes a TSval older than it when the original arrived (reordering, not loss).
    fn eifel_recovery(&mut self, repr: &TcpRepr, ack: u32) {
        let Some(undo) = self.rec_undo.as_mut() else {
            return;
        };
        let Some((retransmit_ts, end)) = undo.retransmit_ts else {
            return;
        };
        if undo.eifel_done || !seq::ge(ack, end) {
            return;
        }
        undo.eifel_done = true;
        if repr
            .timestamp
            .is_some_and(|ts| seq::lt(ts.tsecr, retransmit_ts))
        {
            self.undo_recovery();
        }
    }

    /// RFC 8985 §7.4: the ACK covers the probe. When the probe sent the last unit again and
    /// the ACK is for that copy (it echoes the copy's TSval, or there are no timestamps to
    /// tell), the probe repaired a loss at the tail: the congestion window responds as to
    /// any loss.
    fn tlp_acked(&mut self, now: Instant, repr: &TcpRepr, ack: u32) {
        let Some(probe) = self.tlp.filter(|p| seq::ge(ack, p.end)) else {
            return;
        };
        self.tlp = None;
        let Some(ts) = probe.retransmit_ts else {
            return;
        };
        let original = repr.timestamp.is_some_and(|t| seq::lt(t.tsecr, ts));
        if !original && self.recovery.is_none() {
            let flight = self.flight_size();
            self.cc.on_congestion_event(now, flight, self.eff_mss);
        }
    }

    /// RFC 3522 §3.2 when nothing was retransmitted yet: every unit the recovery marked
    /// lost was delivered (ACKed or SACKed) by its original after all, so the recovery was
    /// spurious. Common when the ACKs that showed the hole and the one that filled it
    /// arrive in one receive burst.
    fn delivered_before_retransmission(&mut self) {
        let unsent = self
            .rec_undo
            .as_ref()
            .is_some_and(|u| u.retransmit_ts.is_none());
        if unsent && self.txq.lost_count() == 0 {
            self.undo_recovery();
        }
    }

    /// A D-SACK reported `[l, r)` received twice (RFC 2883): the reordering window grows
    /// (RFC 8985 §6.2 step 4), and once every retransmission of the last recovery has been
    /// reported so, that recovery was spurious (RFC 3708 §3.2).
    fn on_dsack(&mut self, l: u32, r: u32) {
        self.rack.on_spurious(self.snd_una, self.snd_nxt);
        let Some(undo) = self.rec_undo.as_mut() else {
            return;
        };
        if undo.retrans > 0 && seq::ge(l, undo.start) && seq::le(r, undo.end) {
            undo.retrans -= 1;
            if undo.retrans == 0 {
                self.undo_recovery();
            }
        }
    }

    /// The last fast recovery was spurious: restore the congestion state it reduced and
    /// put back in flight what it marked lost and did not send again (RFC 4015 §3 applied
    /// to fast recovery, as RFC 3708 §5 suggests).
    fn undo_recovery(&mut self) {
        let Some(undo) = self.rec_undo.take() else {
            return;
        };
        if undo.cc.cwnd() > self.cc.cwnd() {
            self.cc = undo.cc;
        }
        if self.recovery.take().is_some() {
            self.rack.on_recovery_exit();
        }
        self.txq.undo_lost();
        self.spurious_recoveries += 1;
        self.rack.on_spurious(self.snd_una, self.snd_nxt);
    }

    /// A duplicate `[start, end)` arrived: the next ACK reports it first (RFC 2883 §4).
    fn report_duplicate(&mut self, start: u32, end: u32) {
        if self.opts.sack {
            self.dsack = Some((start, end));
        }
    }

    /// Offer new payload to the sink, then keep what it did not consume (RFC 9293
    /// §3.10.7.4 seventh check, with the placement hook).
    pub(super) fn process_payload(
        &mut self,
        now: Instant,
        cfg: &Config,
        seg_seq: u32,
        payload: &[u8],
        in_run: bool,
        ulp: &mut impl Upper,
    ) {
        let before = self.rcv_nxt;
        if seg_seq == before && self.rx.is_empty() && payload.len() <= self.rcv_wnd() as usize {
            self.take_in_order(now, cfg, payload, in_run, ulp);
            return;
        }
        let mut seq0 = seg_seq;
        let mut p = payload;
        let front = seq::diff(self.rcv_nxt, seq0);
        if front > 0 {
            let cut = front as usize;
            if cut >= p.len() {
                self.report_duplicate(seq0, seq0.wrapping_add(p.len() as u32));
                self.ack_now = true;
                return;
            }
            self.report_duplicate(seq0, self.rcv_nxt);
            p = &p[cut..];
            seq0 = self.rcv_nxt;
        }
        let rel = seq::diff(seq0, self.rcv_nxt) as u64;
        let wnd = u64::from(self.rcv_wnd());
        if rel >= wnd {
            self.ack_now = true;
            return;
        }
        if p.len() as u64 > wnd - rel {
            p = &p[..(wnd - rel) as usize];
        }
        let s = self.rcv_off + rel;
        let e = s + p.len() as u64;
        let had_gaps = !self.rx.is_empty();
        // The new pieces of the segment, in a buffer kept across segments.
        let mut pieces = std::mem::take(&mut self.pieces);
        pieces.clear();
        if had_gaps {
            self.rx.uncovered(s, e, &mut pieces);
        } else {
            pieces.push((s, e));
        }
        if pieces.is_empty() {
            // Entirely duplicate: RFC 5681 §4.2 immediate ACK, with a D-SACK.
            self.report_duplicate(self.seq_of(s), self.seq_of(e));
            self.ack_now = true;
            self.pieces = pieces;
            return;
        }
        for &(ps, pe) in &pieces {
            let slice = &p[(ps - s) as usize..(pe - s) as usize];
            let pseq = self.seq_of(ps);
            let in_order = ps == self.rcv_off;
            let consumed = ulp.on_segment(pseq, slice, in_order, self.rcv_nxt);
            if in_order && self.rx.is_empty() {
                // Fast path: nothing buffered; unconsumed bytes go straight to the sink.
                for_each_unconsumed(&consumed, slice.len(), |a, b| {
                    ulp.on_in_order(pseq.wrapping_add(a as u32), &slice[a..b]);
                });
                self.rcv_off = pe;
                self.rcv_nxt = self.rcv_nxt.wrapping_add(slice.len() as u32);
            } else {
                for_each_unconsumed(&consumed, slice.len(), |a, b| {
                    self.rx.store(ps + a as u64, &slice[a..b]);
                });
                self.rx.insert(ps, pe);
                if !in_order {
                    self.sack_rep.record(ps);
                }
                self.deliver_in_order(ulp);
            }
        }
        self.pieces = pieces;
        self.delivered(now, cfg, before, seq0 == before, had_gaps, in_run, ulp);
    }

    /// [`Tcb::process_payload`] of the next bytes in order, nothing held out of order, all
    /// within the window: the whole payload is the one new piece, no reassembly to consult.
    #[inline]
    pub(super) fn take_in_order(
        &mut self,
        now: Instant,
        cfg: &Config,
        payload: &[u8],
        in_run: bool,
        ulp: &mut impl Upper,
    ) {
        let before = self.rcv_nxt;
        let consumed = ulp.on_segment(before, payload, true, before);
        for_each_unconsumed(&consumed, payload.len(), |a, b| {
            ulp.on_in_order(before.wrapping_add(a as u32), &payload[a..b]);
        });
        self.rcv_off += payload.len() as u64;
        self.rcv_nxt = before.wrapping_add(payload.len() as u32);
        self.delivered(now, cfg, before, true, false, in_run, ulp);
    }

    /// The payload of a run segment ([`Tcb::take_run_segment`]): as [`Tcb::take_in_order`]
    /// in a run, the payload handed over through [`Upper::on_run_segment`].
    #[inline]
    pub(super) fn take_run_payload(
        &mut self,
        now: Instant,
        cfg: &Config,
        payload: &[u8],
        ulp: &mut impl Upper,
    ) {
        let before = self.rcv_nxt;
        ulp.on_run_segment(before, payload);
        self.rcv_off += payload.len() as u64;
        self.rcv_nxt = before.wrapping_add(payload.len() as u32);
        self.delivered(now, cfg, before, true, false, true, ulp);
    }

    /// After a payload's new pieces went to the sink (RCV.NXT was `before`; the payload
    /// started there when `at_rcv_nxt`; out-of-order data was held when `had_gaps`): the ULP
    /// learns that RCV.NXT advanced (or, in a run, later), and the ACK is decided: at once
    /// for out-of-order data or a filled gap, else every second segment or when the delayed
    /// ACK runs out; while more segments wait behind the burst ([`Tcb::hold_ack`]) every
    /// [`ACK_RUN`] segments, when the backlog is gone or the delayed ACK runs out.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn delivered(
        &mut self,
        now: Instant,
        cfg: &Config,
        before: u32,
        at_rcv_nxt: bool,
        had_gaps: bool,
        in_run: bool,
        ulp: &mut impl Upper,
    ) {
        if self.rcv_nxt != before {
            if in_run && at_rcv_nxt && self.rx.is_empty() {
                self.advance_pending = true;
            } else {
                self.advance_pending = false;
                ulp.on_advance(self.rcv_nxt);
            }
        }
        if !at_rcv_nxt || had_gaps {
            // RFC 5681 §4.2 / RFC 9293 §3.8.6.3: out-of-order data or a filled gap.
            self.ack_now = true;
        } else {
            // RFC 9293 §3.8.6.3 / RFC 5681 §4.2: every second full segment, at the end of
            // the burst; while more segments wait behind it (`hold_ack`), up to ACK_RUN of
            // them, until the backlog is gone (`release_held_ack`) or the delayed-ACK timer
            // fires.
            self.segs_unacked += 1;
            if self.segs_unacked >= 2 && !(self.hold_ack && self.segs_unacked < ACK_RUN) {
                self.ack_now = true;
            } else if self.delack_deadline.is_none() {
                self.delack_deadline = self.arm(now + cfg.delayed_ack);
            }
        }
    }

    /// Whether an ACK owed under the every-second-segment rule waits (`hold_ack`): without
    /// the hold two unacknowledged segments make it due at once (`ack_now`), and sending
    /// any ACK clears both.
    #[inline]
    pub(crate) fn holds_ack(&self) -> bool {
        self.segs_unacked >= 2 && !self.ack_now
    }

    /// The backlog behind the receive bursts is gone: an ACK held under `hold_ack` is due
    /// now. Whether one was held (the caller then makes the connection ready).
    pub(crate) fn release_held_ack(&mut self) -> bool {
        if !self.holds_ack() {
            return false;
        }
        self.ack_now = true;
        true
    }

    /// Whether `repr` (at `seg_seq`) continues a run of in-order data segments: plain data
    /// at RCV.NXT of an established connection with nothing held out of order.
    fn continues_run(&self, repr: &TcpRepr, seg_seq: u32) -> bool {
        self.state == State::Established
            && matches!(repr.control, TcpControl::None | TcpControl::Psh)
            && !repr.payload.is_empty()
            && seg_seq == self.rcv_nxt
            && self.rx.is_empty()
    }

    /// Tells the ULP that RCV.NXT advanced, if a run left that pending.
    pub(crate) fn flush_advance(&mut self, ulp: &mut impl Upper) {
        if std::mem::take(&mut self.advance_pending) {
            ulp.on_advance(self.rcv_nxt);
        }
    }

    fn deliver_in_order(&mut self, ulp: &mut impl Upper) {
        while let Some(end) = self.rx.pop_front_at(self.rcv_off) {
            while let Some((off, bytes)) = self.rx.pop_stored_before(end) {
                ulp.on_in_order(self.seq_of(off), &bytes);
                self.rx.recycle(bytes);
            }
            self.rcv_nxt = self.seq_of(end);
            self.rcv_off = end;
        }
    }

    /// Takes the peer's FIN once RCV.NXT reached it (inline: every segment asks).
    #[inline]
    fn consume_fin(&mut self, now: Instant, cfg: &Config, ev: &mut Vec<TcbEvent>) {
        if !self.fin_received && self.peer_fin == Some(self.rcv_nxt) {
            self.take_fin(now, cfg, ev);
        }
    }

    /// [`Tcb::consume_fin`] when the FIN is next: RCV.NXT passes it and the state moves
    /// (RFC 9293 §3.10.7.4, eighth check).
    fn take_fin(&mut self, now: Instant, cfg: &Config, ev: &mut Vec<TcbEvent>) {
        self.fin_received = true;
        self.rcv_nxt = self.rcv_nxt.wrapping_add(1);
        self.ack_now = true;
        ev.push(TcbEvent::PeerFin);
        match self.state {
            State::Established => {
                self.state = State::CloseWait;
            }
            State::FinWait1 => {
                if self.fin_queued && self.txq.is_empty() {
                    self.enter_time_wait(now, cfg, ev);
                } else {
                    self.state = State::Closing;
                }
            }
            State::FinWait2 => self.enter_time_wait(now, cfg, ev),
            _ => {}
        }
    }
}
