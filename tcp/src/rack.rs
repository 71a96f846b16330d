//! RACK (RFC 8985 §6): time-based loss detection. A unit is deemed lost once a unit sent
//! after it was delivered (cumulatively ACKed or SACKed) and it stayed undelivered for an
//! RTT plus a reordering window. The window starts at a quarter of the minimum RTT, grows
//! with each round trip that brings D-SACKs (spurious retransmissions) and shrinks back
//! after 16 recoveries without one; while no reordering has been seen it is zero in
//! recovery or once DupThresh units are SACKed, which keeps the speed of the classic
//! three-duplicate-ACK rule it replaces.

use core::time::Duration;

use crate::seq;
use crate::time::Instant;

/// RFC 8985 §6.2 DupThresh: SACKed units past which, without reordering seen, the
/// reordering window is zero.
const DUP_THRESH: usize = 3;
/// Recoveries the reordering window keeps its D-SACK growth for (RFC 8985 §6.2 step 4).
const REO_WND_PERSIST: u32 = 16;
/// Cap on the window's multiplier (the window itself is capped at SRTT).
const REO_WND_MULT_MAX: u32 = 64;

/// The RACK state of one connection.
#[derive(Debug)]
pub(crate) struct Rack {
    /// Send time of the most recently sent unit delivered (RACK.xmit_ts), `None` before
    /// the first delivery.
    xmit_ts: Option<Instant>,
    /// End of that unit (RACK.end_seq).
    end_seq: u32,
    /// RTT of that delivery (RACK.rtt).
    rtt: Duration,
    /// Highest end sequence delivered (RACK.fack).
    fack: Option<u32>,
    /// Smallest RTT measured on a unit never retransmitted (RACK.min_RTT).
    min_rtt: Option<Duration>,
    /// A unit never retransmitted was delivered below `fack` (RACK.reordering_seen).
    reordering_seen: bool,
    reo_wnd_mult: u32,
    reo_wnd_persist: u32,
    /// SND.NXT when the window last grew: at most once a round trip (RACK.dsack_round).
    dsack_round: Option<u32>,
    /// The TSecr of the ACK being processed, as our microsecond clock (truncated to 32
    /// bits), when timestamps are on.
    echoed: Option<u32>,
}

impl Default for Rack {
    fn default() -> Self {
        Rack {
            xmit_ts: None,
            end_seq: 0,
            rtt: Duration::ZERO,
            fack: None,
            min_rtt: None,
            reordering_seen: false,
            reo_wnd_mult: 1,
            reo_wnd_persist: 0,
            dsack_round: None,
            echoed: None,
        }
    }
}

/// Whether a unit sent at `t1` ending at `end1` was sent after one sent at `t2` ending at
/// `end2` (RFC 8985 §6.2 RACK_sent_after: the sequence breaks ties).
fn sent_after(t1: Instant, end1: u32, t2: Instant, end2: u32) -> bool {
    t1 > t2 || (t1 == t2 && seq::gt(end1, end2))
}

impl Rack {
    /// The ACK about to be processed echoes our clock at `echoed` microseconds (its TSecr
    /// less our timestamp offset), or carries no timestamp.
    pub(crate) fn set_echoed(&mut self, echoed: Option<u32>) {
        self.echoed = echoed;
    }

    /// A unit ending at `end`, last sent at `sent_at`, was newly delivered at `now`
    /// (RFC 8985 §6.2 steps 2 and 3).
    pub(crate) fn on_delivered(
        &mut self,
        now: Instant,
        sent_at: Instant,
        end: u32,
        retransmitted: bool,
    ) {
        match self.fack {
            Some(f) if seq::lt(end, f) => self.reordering_seen |= !retransmitted,
            _ => self.fack = Some(end),
        }
        let rtt = now.saturating_since(sent_at);
        if retransmitted {
            // The ACK echoes a time before this copy was sent, or came sooner than any RTT:
            // it is for the original, not for this copy.
            let older = self
                .echoed
                .is_some_and(|e| seq::lt(e, sent_at.as_micros() as u32));
            if older || self.min_rtt.is_some_and(|m| rtt < m) {
                return;
            }
        } else {
            self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
        }
        if self
            .xmit_ts
            .is_none_or(|t| sent_after(sent_at, end, t, self.end_seq))
        {
            self.rtt = rtt;
            self.xmit_ts = Some(sent_at);
            self.end_seq = end;
        }
    }

    /// Whether a unit sent at `sent_at` ending at `end` was sent before the most recently
    /// sent delivered one, and if so when it counts as lost given `reo_wnd`.
    pub(crate) fn lost_at(&self, sent_at: Instant, end: u32, reo_wnd: Duration) -> Option<Instant> {
        let t = self.xmit_ts?;
        sent_after(t, self.end_seq, sent_at, end).then(|| sent_at + self.rtt + reo_wnd)
    }

    /// Retransmissions proved spurious (a D-SACK, or Eifel detection): the window grows,
    /// at most once a round trip (RFC 8985 §6.2 step 4). A retransmitted unit delivered
    /// late does not count as reordering in step 3; its proof of being spurious does here.
    pub(crate) fn on_spurious(&mut self, snd_una: u32, snd_nxt: u32) {
        self.reordering_seen = true;
        if self.dsack_round.is_some_and(|r| seq::ge(snd_una, r)) {
            self.dsack_round = None;
        }
        if self.dsack_round.is_none() {
            self.dsack_round = Some(snd_nxt);
            self.reo_wnd_mult = (self.reo_wnd_mult + 1).min(REO_WND_MULT_MAX);
            self.reo_wnd_persist = REO_WND_PERSIST;
        }
    }

    /// A recovery ended: after 16 without D-SACKs the window is back to its base.
    pub(crate) fn on_recovery_exit(&mut self) {
        self.reo_wnd_persist = self.reo_wnd_persist.saturating_sub(1);
        if self.reo_wnd_persist == 0 {
            self.reo_wnd_mult = 1;
        }
    }

    /// The reordering window (RFC 8985 §6.2 step 4, RACK_update_reo_wnd).
    pub(crate) fn reo_wnd(
        &self,
        in_recovery: bool,
        sacked_units: usize,
        srtt: Option<Duration>,
    ) -> Duration {
        if !self.reordering_seen && (in_recovery || sacked_units >= DUP_THRESH) {
            return Duration::ZERO;
        }
        let Some(base) = self.min_rtt.or(srtt) else {
            return Duration::ZERO;
        };
        let wnd = base * self.reo_wnd_mult / 4;
        srtt.map_or(wnd, |s| wnd.min(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Instant {
        Instant::from_micros(n)
    }

    // RFC 8985 §6.2 step 3: a unit never retransmitted delivered below RACK.fack is
    // reordering; a retransmitted one is not.
    #[test]
    fn reordering_seen_only_for_originals() {
        let mut r = Rack::default();
        r.on_delivered(us(100), us(0), 2000, false);
        r.on_delivered(us(101), us(0), 1000, true);
        assert!(!r.reordering_seen);
        r.on_delivered(us(102), us(0), 1500, false);
        assert!(r.reordering_seen);
    }

    // RFC 8985 §6.2 step 2: a retransmitted unit whose ACK echoes a time before the
    // retransmission (the original arrived) gives no RACK.rtt nor RACK.xmit_ts.
    #[test]
    fn ack_of_the_original_is_no_sample_of_the_retransmission() {
        let mut r = Rack::default();
        r.on_delivered(us(100), us(0), 1000, false);
        r.set_echoed(Some(50));
        r.on_delivered(us(400), us(300), 2000, true);
        assert_eq!(
            (r.xmit_ts, r.rtt),
            (Some(us(0)), Duration::from_micros(100))
        );
        r.set_echoed(Some(300));
        r.on_delivered(us(400), us(300), 3000, true);
        assert_eq!(
            (r.xmit_ts, r.rtt),
            (Some(us(300)), Duration::from_micros(100))
        );
    }

    // RFC 8985 §6.2 step 4: zero window with DupThresh SACKed units and no reordering
    // seen; min_RTT / 4 otherwise, growing with spurious retransmissions, capped at SRTT,
    // and back to the base after 16 recoveries.
    #[test]
    fn reordering_window() {
        let mut r = Rack::default();
        r.on_delivered(us(40), us(0), 1000, false);
        let srtt = Some(Duration::from_micros(100));
        assert_eq!(r.reo_wnd(false, 3, srtt), Duration::ZERO);
        assert_eq!(r.reo_wnd(true, 0, srtt), Duration::ZERO);
        assert_eq!(r.reo_wnd(false, 2, srtt), Duration::from_micros(10));
        r.on_delivered(us(41), us(1), 500, false);
        assert_eq!(r.reo_wnd(true, 5, srtt), Duration::from_micros(10));
        r.on_spurious(0, 5000);
        r.on_spurious(0, 6000);
        assert_eq!(
            r.reo_wnd(true, 5, srtt),
            Duration::from_micros(20),
            "once a round"
        );
        r.on_spurious(5000, 7000);
        assert_eq!(r.reo_wnd(true, 5, srtt), Duration::from_micros(30));
        for _ in 0..20 {
            r.on_spurious(20_000, 30_000);
        }
        assert_eq!(r.reo_wnd(true, 5, srtt), Duration::from_micros(40));
        for k in 3..10 {
            r.on_spurious(k * 10_000, (k + 1) * 10_000);
        }
        assert_eq!(
            r.reo_wnd(true, 5, srtt),
            Duration::from_micros(100),
            "capped at SRTT"
        );
        for _ in 0..16 {
            r.on_recovery_exit();
        }
        assert_eq!(r.reo_wnd(true, 5, srtt), Duration::from_micros(10));
    }

    // RFC 8985 §6.2 step 5: lost once RACK.rtt + reo_wnd passed since it was sent, and
    // only if sent before the most recently sent delivered unit.
    #[test]
    fn lost_only_if_sent_before_the_delivered_unit() {
        let mut r = Rack::default();
        r.on_delivered(us(50), us(10), 3000, false);
        let w = Duration::from_micros(5);
        assert_eq!(r.lost_at(us(9), 2000, w), Some(us(9 + 40 + 5)));
        assert_eq!(
            r.lost_at(us(10), 2000, w),
            Some(us(55)),
            "same time, lower seq"
        );
        assert_eq!(r.lost_at(us(10), 4000, w), None);
        assert_eq!(r.lost_at(us(11), 1000, w), None);
    }
}
