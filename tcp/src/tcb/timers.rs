//! Timers: retransmission timeout (RFC 6298), delayed ACK, persist, keepalive, FIN-WAIT-2
//! and TIME-WAIT deadlines.

use super::{CloseReason, RtoUndo, State, Tcb, TcbEvent, TS_REFRESH};
use core::time::Duration;

use crate::config::Config;
use crate::time::Instant;

impl Tcb {
    /// Earliest pending timer.
    #[inline]
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let earliest = Instant::earliest;
        earliest(
            earliest(
                earliest(self.rtx_deadline, self.delack_deadline),
                earliest(self.persist_deadline, self.keepalive_deadline),
            ),
            earliest(
                earliest(self.timewait_deadline, self.finwait2_deadline),
                earliest(self.rack_deadline, self.tlp_deadline),
            ),
        )
    }

    /// `at` as a deadline being armed (the value to store): the engine's timer for the
    /// connection must come due by then ([`Tcb::take_armed`]).
    #[inline]
    pub(super) fn arm(&mut self, at: Instant) -> Option<Instant> {
        self.armed = self.armed.min(at.as_nanos());
        Some(at)
    }

    /// The earliest deadline armed since the last call, in nanoseconds (`u64::MAX`: none).
    /// A timer armed for no later than that is due no later than every pending deadline
    /// if it was before: deadlines only move earlier by being armed.
    #[inline]
    pub(crate) fn take_armed(&mut self) -> u64 {
        core::mem::replace(&mut self.armed, u64::MAX)
    }

    /// A segment arrived: the connection is not idle. The idle timer is re-armed lazily
    /// (when it runs out, from the time of the last segment), so the per-segment cost is a
    /// store; an answer to keepalive probes arms it afresh.
    pub(super) fn restart_keepalive(&mut self, now: Instant, cfg: &Config) {
        self.idle_since = now;
        if self.keepalive_deadline.is_none() || self.ka_probes != 0 {
            self.ka_probes = 0;
            self.keepalive_deadline = self.idle_timeout(cfg).and_then(|d| self.arm(now + d));
        }
    }

    /// How long the connection may receive nothing before the idle timer acts: the
    /// keepalive idle time, or [`TS_REFRESH`] with timestamps, whichever is shorter; none
    /// outside ESTABLISHED and CLOSE-WAIT.
    fn idle_timeout(&self, cfg: &Config) -> Option<Duration> {
        if !matches!(self.state, State::Established | State::CloseWait) {
            return None;
        }
        match (cfg.keepalive, self.opts.timestamps) {
            (Some(ka), true) => Some(ka.idle.min(TS_REFRESH)),
            (Some(ka), false) => Some(ka.idle),
            (None, true) => Some(TS_REFRESH),
            (None, false) => None,
        }
    }

    pub(super) fn enter_time_wait(&mut self, now: Instant, cfg: &Config, ev: &mut Vec<TcbEvent>) {
        self.state = State::TimeWait;
        self.restart_time_wait(now, cfg);
        self.rtx_deadline = None;
        self.persist_deadline = None;
        self.keepalive_deadline = None;
        self.finwait2_deadline = None;
        self.delack_deadline = None;
        self.rack_deadline = None;
        self.tlp_deadline = None;
        ev.push(TcbEvent::Closed(CloseReason::Normal));
    }

    /// Arm, or restart, the 2 MSL TIME-WAIT timer (RFC 9293 §3.10.7.4).
    pub(super) fn restart_time_wait(&mut self, now: Instant, cfg: &Config) {
        self.timewait_deadline = self.arm(now + 2 * cfg.msl);
    }

    /// Arm the tail loss probe timer (RFC 8985 §7.2): two SRTTs from now, plus the delayed
    /// ACK when a single unit is outstanding, unless the RTO comes first. Not in recovery,
    /// after a timeout, or while a probe is out.
    pub(super) fn arm_tlp(&mut self, now: Instant, cfg: &Config) {
        self.tlp_deadline = None;
        if !cfg.tail_loss_probe
            || !self.opts.sack
            || self.tlp.is_some()
            || self.recovery.is_some()
            || self.rto_point.is_some()
            || self.txq.is_empty()
            || !matches!(self.state, State::Established | State::CloseWait)
        {
            return;
        }
        // In nanoseconds, as `Instant` counts (saturating as its `Duration` arithmetic
        // does): this runs for every unit sent.
        let Some(srtt_us) = self.rtt.srtt_micros() else {
            return;
        };
        let mut pto = srtt_us.saturating_mul(2_000);
        if self.txq.len() == 1 {
            pto = pto.saturating_add(u64::try_from(cfg.delayed_ack.as_nanos()).unwrap_or(u64::MAX));
        }
        let at = Instant::from_nanos(now.as_nanos().saturating_add(pto));
        if self.rtx_deadline.is_none_or(|r| at < r) {
            self.tlp_deadline = self.arm(at);
        }
    }

    pub(super) fn arm_rtx(&mut self, now: Instant) {
        if self.rtx_deadline.is_none() {
            self.rtx_deadline = self.arm(now + self.rtt.rto());
        }
    }

    /// Run expired timers.
    pub(crate) fn handle_timeout(&mut self, now: Instant, cfg: &Config, ev: &mut Vec<TcbEvent>) {
        let due = |d: Option<Instant>| d.is_some_and(|t| t <= now);
        if due(self.timewait_deadline) {
            ev.push(TcbEvent::Remove);
            return;
        }
        if due(self.finwait2_deadline) && self.state == State::FinWait2 {
            ev.push(TcbEvent::Closed(CloseReason::TimedOut));
            ev.push(TcbEvent::Remove);
            return;
        }
        if due(self.rack_deadline) {
            // RFC 8985 §6.3: the reordering timer ran out; units it waited for are lost.
            self.rack_deadline = None;
            let lost = self.rack_detect(now);
            self.on_losses(now, lost);
        }
        if due(self.tlp_deadline) {
            self.tlp_deadline = None;
            if self.tlp.is_none() && self.recovery.is_none() && !self.txq.is_empty() {
                self.send_tlp = true;
            }
        }
        if due(self.rtx_deadline) {
            self.rtx_deadline = None;
            self.on_rto(now, cfg, ev);
        }
        if due(self.delack_deadline) {
            self.delack_deadline = None;
            self.ack_now = true;
            self.delayed_acks += 1;
        }
        if due(self.persist_deadline) {
            // RFC 9293 §3.8.6.1: zero-window probe, exponential backoff.
            self.send_probe = true;
            self.persist_backoff = (self.persist_backoff + 1).min(16);
            let d = self
                .rtt
                .rto()
                .saturating_mul(1 << self.persist_backoff.min(10))
                .min(cfg.rto_max);
            self.persist_deadline = self.arm(now + d);
        }
        if due(self.keepalive_deadline) {
            match self.idle_timeout(cfg) {
                None => self.keepalive_deadline = None,
                // A segment arrived since the timer was armed.
                Some(first) if self.ka_probes == 0 && now < self.idle_since + first => {
                    self.keepalive_deadline = self.arm(self.idle_since + first);
                }
                Some(_) => self.on_idle(now, cfg, ev),
            }
        }
    }

    /// The connection received nothing for its idle timeout: a keepalive probe (RFC 9293
    /// §3.8.4) once the keepalive idle time has passed, else an ACK with the current TSval
    /// ([`TS_REFRESH`]).
    fn on_idle(&mut self, now: Instant, cfg: &Config, ev: &mut Vec<TcbEvent>) {
        let idle = now.saturating_since(self.idle_since);
        match cfg.keepalive {
            Some(ka) if idle >= ka.idle => {
                if self.ka_probes >= ka.count {
                    self.abort_with(CloseReason::TimedOut, ev);
                    return;
                }
                self.ka_probes += 1;
                self.send_probe = true;
                self.keepalive_deadline = self.arm(now + ka.interval);
            }
            _ if self.opts.timestamps => {
                // The peer's TS.Recent stays within 2^31 ticks of our TSval.
                self.ack_now = true;
                let next = now + TS_REFRESH;
                let at = match cfg.keepalive {
                    Some(ka) => next.min(self.idle_since + ka.idle),
                    None => next,
                };
                self.keepalive_deadline = self.arm(at);
            }
            _ => self.keepalive_deadline = None,
        }
    }

    fn on_rto(&mut self, now: Instant, cfg: &Config, ev: &mut Vec<TcbEvent>) {
        match self.state {
            State::SynSent if self.resend_refused_syn => {
                self.resend_refused_syn = false;
                self.send_syn = true;
            }
            State::SynSent | State::SynReceived => {
                self.syn_retries += 1;
                self.timeouts += 1;
                let limit = if self.state == State::SynSent {
                    cfg.syn_retries
                } else {
                    cfg.synack_retries
                };
                if self.syn_retries > limit {
                    if !(self.state == State::SynReceived && self.passive) {
                        ev.push(TcbEvent::Closed(CloseReason::TimedOut));
                    }
                    ev.push(TcbEvent::Remove);
                    return;
                }
                self.rtt.backoff();
                self.send_syn = true;
            }
            _ => {
                if self.txq.is_empty() {
                    return;
                }
                self.rtx_count += 1;
                self.timeouts += 1;
                if self.rtx_count > cfg.max_retries {
                    self.abort_with(CloseReason::TimedOut, ev);
                    return;
                }
                // RFC 3522 §3.2: remember RetransmitTS and (RFC 4015) the state to restore,
                // at the first timeout of an episode.
                if self.opts.timestamps && self.rto_undo.is_none() {
                    self.rto_undo = Some(RtoUndo {
                        retransmit_ts: self.tsval(now),
                        cc: self.cc.snapshot(),
                    });
                }
                // RFC 6298 §5.4-5.6, RFC 5681 §3.1, RFC 6675 §5.1.
                let flight = self.flight_size();
                self.cc.on_rto(now, flight, self.eff_mss);
                self.rtt.backoff();
                self.txq.mark_all_lost();
                self.recovery = None;
                self.rec_undo = None;
                self.rack_deadline = None;
                self.tlp_deadline = None;
                self.send_tlp = false;
                self.tlp = None;
                self.rto_point = Some(self.snd_nxt);
                self.dupacks = 0;
                self.fast_rtx = true;
                self.rtx_deadline = self.arm(now + self.rtt.rto());
            }
        }
    }
}
