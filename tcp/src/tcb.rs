//! One connection's RFC 9293 state machine (the transmission control block).

use core::time::Duration;
use std::net::SocketAddrV4;

use smoltcp::wire::{TcpControl, TcpRepr};

use crate::cc::CongestionControl;
use crate::config::Config;
use crate::options::{Negotiated, Offer};
use crate::rto::RttEstimator;
use crate::rx::{Consumed, Reassembly};
use crate::sack::SackReporter;
use crate::seq;
use crate::time::Instant;
use crate::tx::{SendQueue, Unit};
use crate::upper::Upper;
use crate::wire::{write_packet, Header, SynOptions};

/// Connection states of RFC 9293 §3.3.2 (LISTEN lives in the listener table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// Active open sent SYN.
    SynSent,
    /// SYN received, SYN-ACK sent.
    SynReceived,
    /// Data flows both ways.
    Established,
    /// We closed; our FIN is not yet acknowledged.
    FinWait1,
    /// We closed and our FIN was acknowledged; the peer may still send.
    FinWait2,
    /// The peer closed; we may still send.
    CloseWait,
    /// Both closed simultaneously; waiting for the ACK of our FIN.
    Closing,
    /// The peer closed first, then we did; waiting for the ACK of our FIN.
    LastAck,
    /// Both FINs acknowledged; lingering 2 MSL for stray segments.
    TimeWait,
}

/// Why a connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// Both sides closed gracefully.
    Normal,
    /// The peer reset the connection.
    Reset,
    /// The peer refused the active open (RST in SYN-SENT).
    Refused,
    /// Retransmissions, keepalive probes or FIN-WAIT-2 timed out.
    TimedOut,
    /// Aborted locally (RST sent).
    Aborted,
    /// The segment source handed a unit larger than the effective send MSS.
    UnitTooLarge,
}

/// What a TCB asks of the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TcbEvent {
    /// Active open (or simultaneous open) completed.
    Connected,
    /// Passive open completed.
    Accepted,
    /// The peer's FIN was received in order.
    PeerFin,
    /// The connection is over for the application.
    Closed(CloseReason),
    /// Send a RST with this sequence number (and ACK number).
    Rst { seq: u32, ack: Option<u32> },
    /// Delete the TCB.
    Remove,
}

/// RFC 7323 §5.5: TS.Recent is invalid after 24 days of idleness.
const PAWS_IDLE: Duration = Duration::from_secs(24 * 24 * 3600);

/// Statistics and state exposed for monitoring and tests.
#[derive(Clone, Copy, Debug)]
pub struct ConnInfo {
    /// RFC 9293 state.
    pub state: State,
    /// Negotiated options.
    pub options: Negotiated,
    /// Effective send MSS: the largest unit the source is ever asked for.
    pub effective_mss: usize,
    /// Congestion window, bytes.
    pub cwnd: usize,
    /// Slow-start threshold, bytes.
    pub ssthresh: usize,
    /// Smoothed RTT.
    pub srtt: Option<Duration>,
    /// Current retransmission timeout.
    pub rto: Duration,
    /// Peer's advertised window, bytes (scaled).
    pub snd_wnd: usize,
    /// Bytes in flight (RFC 6675 pipe).
    pub pipe: usize,
    /// SND.UNA.
    pub snd_una: u32,
    /// SND.NXT.
    pub snd_nxt: u32,
    /// RCV.NXT.
    pub rcv_nxt: u32,
    /// Received ranges beyond RCV.NXT (each preceded by a gap).
    pub rx_ranges: usize,
    /// Bytes copied into the reassembly store.
    pub rx_stored: usize,
    /// Segments retransmitted, SYN and SYN-ACK included.
    pub retransmits: u64,
    /// Retransmission timeouts, those of the SYN and SYN-ACK included.
    pub timeouts: u64,
    /// Of those, timeouts found spurious by the Eifel algorithm and undone (RFC 3522,
    /// RFC 4015).
    pub spurious_timeouts: u64,
    /// Fast-recovery episodes.
    pub recoveries: u64,
}

/// A transmission control block.
#[derive(Debug)]
pub(crate) struct Tcb {
    pub(crate) state: State,
    pub(crate) local: SocketAddrV4,
    pub(crate) remote: SocketAddrV4,
    /// Created by a listener (a reset in SYN-RECEIVED returns silently to LISTEN).
    pub(crate) passive: bool,
    pub(crate) reported_closed: bool,

    offer: Offer,
    opts: Negotiated,
    eff_mss: usize,

    iss: u32,
    snd_una: u32,
    snd_nxt: u32,
    snd_wnd: u32,
    snd_wl1: u32,
    snd_wl2: u32,
    max_snd_wnd: u32,
    txq: SendQueue,
    fin_queued: bool,
    close_requested: bool,

    irs: u32,
    rcv_nxt: u32,
    rcv_off: u64,
    rcv_adv: u32,
    rx: Reassembly,
    sack_rep: SackReporter,
    peer_fin: Option<u32>,
    fin_received: bool,

    rtt: RttEstimator,
    cc: Box<dyn CongestionControl>,
    recovery: Option<u32>,
    dupacks: u32,
    fast_rtx: bool,

    syn_sent_at: Instant,
    syn_retries: u32,
    rtx_count: u32,
    rtx_deadline: Option<Instant>,
    delack_deadline: Option<Instant>,
    persist_deadline: Option<Instant>,
    persist_backoff: u32,
    keepalive_deadline: Option<Instant>,
    ka_probes: u32,
    timewait_deadline: Option<Instant>,
    finwait2_deadline: Option<Instant>,

    send_syn: bool,
    syn_emitted: bool,
    ack_now: bool,
    send_probe: bool,
    segs_unacked: u32,
    last_ack_sent: u32,

    ts_recent: u32,
    ts_recent_at: Option<Instant>,
    ts_offset: u32,

    retransmits: u64,
    timeouts: u64,
    spurious_timeouts: u64,
    recoveries: u64,
    /// Since a timeout: how to undo it should it prove spurious.
    rto_undo: Option<RtoUndo>,
}

/// What a retransmission timeout changed, kept until the next ACK shows whether it was
/// spurious (RFC 3522 detection with timestamps, RFC 4015 response).
#[derive(Debug)]
struct RtoUndo {
    /// TSval of the first retransmission (RFC 3522 RetransmitTS).
    retransmit_ts: u32,
    /// The congestion controller before the timeout.
    cc: Box<dyn CongestionControl>,
}

impl Tcb {
    fn new(
        now: Instant,
        cfg: &Config,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        iss: u32,
        ts_offset: u32,
    ) -> Self {
        let offer = Offer {
            mss: cfg.local_mss(),
            wscale: Some(cfg.window_scale.min(14)),
            sack: cfg.sack,
            timestamps: cfg.timestamps,
        };
        let opts = Negotiated {
            peer_mss: crate::options::DEFAULT_PEER_MSS,
            snd_shift: 0,
            rcv_shift: 0,
            sack: false,
            timestamps: false,
        };
        let eff_mss = opts.effective_mss(offer.mss);
        Tcb {
            state: State::SynSent,
            local,
            remote,
            passive: false,
            reported_closed: false,
            offer,
            opts,
            eff_mss,
            iss,
            snd_una: iss,
            snd_nxt: iss.wrapping_add(1),
            snd_wnd: 0,
            snd_wl1: 0,
            snd_wl2: 0,
            max_snd_wnd: 0,
            txq: SendQueue::default(),
            fin_queued: false,
            close_requested: false,
            irs: 0,
            rcv_nxt: 0,
            rcv_off: 0,
            rcv_adv: 0,
            rx: Reassembly::default(),
            sack_rep: SackReporter::default(),
            peer_fin: None,
            fin_received: false,
            rtt: RttEstimator::new(cfg.rto_initial, cfg.rto_min, cfg.rto_max),
            cc: cfg.congestion.build(eff_mss, cfg.initial_window),
            recovery: None,
            dupacks: 0,
            fast_rtx: false,
            syn_sent_at: now,
            syn_retries: 0,
            rtx_count: 0,
            rtx_deadline: None,
            delack_deadline: None,
            persist_deadline: None,
            persist_backoff: 0,
            keepalive_deadline: None,
            ka_probes: 0,
            timewait_deadline: None,
            finwait2_deadline: None,
            send_syn: true,
            syn_emitted: false,
            ack_now: false,
            send_probe: false,
            segs_unacked: 0,
            last_ack_sent: 0,
            ts_recent: 0,
            ts_recent_at: None,
            ts_offset,
            retransmits: 0,
            timeouts: 0,
            spurious_timeouts: 0,
            recoveries: 0,
            rto_undo: None,
        }
    }

    /// Active open (RFC 9293 §3.10.1): SYN-SENT, SYN queued for transmission.
    pub(crate) fn new_active(
        now: Instant,
        cfg: &Config,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        iss: u32,
        ts_offset: u32,
    ) -> Self {
        Tcb::new(now, cfg, local, remote, iss, ts_offset)
    }

    /// Passive open from a SYN to a listener (RFC 9293 §3.10.7.2): SYN-RECEIVED.
    pub(crate) fn new_passive(
        now: Instant,
        cfg: &Config,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        iss: u32,
        ts_offset: u32,
        syn: &TcpRepr,
    ) -> Self {
        let mut t = Tcb::new(now, cfg, local, remote, iss, ts_offset);
        t.passive = true;
        t.state = State::SynReceived;
        t.accept_syn(now, cfg, syn);
        t
    }

    /// Take the peer's SYN: IRS, options, initial (unscaled, RFC 7323 §2.2) window.
    fn accept_syn(&mut self, now: Instant, cfg: &Config, syn: &TcpRepr) {
        let seq = syn.seq_number.0 as u32;
        self.irs = seq;
        self.rcv_nxt = seq.wrapping_add(1);
        self.rcv_adv = self.rcv_nxt;
        self.last_ack_sent = self.rcv_nxt;
        self.opts = Negotiated::from_syn(&self.offer, syn);
        self.eff_mss = self.opts.effective_mss(self.offer.mss);
        self.cc = cfg.congestion.build(self.eff_mss, cfg.initial_window);
        self.snd_wnd = u32::from(syn.window_len);
        self.max_snd_wnd = self.snd_wnd;
        self.snd_wl1 = seq;
        if let (true, Some(ts)) = (self.opts.timestamps, syn.timestamp) {
            self.ts_recent = ts.tsval;
            self.ts_recent_at = Some(now);
        }
    }

    pub(crate) fn info(&self) -> ConnInfo {
        ConnInfo {
            state: self.state,
            options: self.opts,
            effective_mss: self.eff_mss,
            cwnd: self.cc.cwnd(),
            ssthresh: self.cc.ssthresh(),
            srtt: self.rtt.srtt(),
            rto: self.rtt.rto(),
            snd_wnd: self.snd_wnd as usize,
            pipe: self.txq.pipe(),
            snd_una: self.snd_una,
            snd_nxt: self.snd_nxt,
            rcv_nxt: self.rcv_nxt,
            rx_ranges: self.rx.range_count(),
            rx_stored: self.rx.stored_bytes(),
            retransmits: self.retransmits,
            timeouts: self.timeouts,
            spurious_timeouts: self.spurious_timeouts,
            recoveries: self.recoveries,
        }
    }

    /// Segments retransmitted, retransmission timeouts and spurious ones so far.
    pub(crate) fn loss_counters(&self) -> (u64, u64, u64) {
        (self.retransmits, self.timeouts, self.spurious_timeouts)
    }

    /// Sequence number of the next new byte (for RSTs on abort).
    pub(crate) fn snd_nxt(&self) -> u32 {
        self.snd_nxt
    }

    /// RCV.NXT.
    pub(crate) fn rcv_nxt(&self) -> u32 {
        self.rcv_nxt
    }

    /// Whether the connection reached a synchronized state (RFC 9293 §3.5).
    pub(crate) fn synchronized(&self) -> bool {
        !matches!(self.state, State::SynSent | State::SynReceived)
    }

    /// A new SYN may reuse this 4-tuple while in TIME-WAIT (RFC 9293 §3.6.1, RFC 6191): its
    /// sequence number is beyond the old connection's, or its timestamp is newer.
    pub(crate) fn time_wait_reusable_by(&self, syn: &TcpRepr) -> bool {
        if self.state != State::TimeWait
            || syn.control != TcpControl::Syn
            || syn.ack_number.is_some()
        {
            return false;
        }
        let newer_ts = match (self.opts.timestamps, syn.timestamp) {
            (true, Some(ts)) => seq::gt(ts.tsval, self.ts_recent),
            _ => false,
        };
        newer_ts || seq::gt(syn.seq_number.0 as u32, self.rcv_nxt)
    }

    /// Graceful close (RFC 9293 §3.10.4): FIN follows once the source is drained.
    pub(crate) fn close(&mut self) {
        self.close_requested = true;
    }

    /// Earliest pending timer.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        // Pairwise, without building an array: this runs after every segment.
        fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        earliest(
            earliest(
                earliest(self.rtx_deadline, self.delack_deadline),
                earliest(self.persist_deadline, self.keepalive_deadline),
            ),
            earliest(self.timewait_deadline, self.finwait2_deadline),
        )
    }

    fn rcv_wnd(&self) -> u32 {
        seq::diff(self.rcv_adv, self.rcv_nxt).max(0) as u32
    }

    fn seq_of(&self, off: u64) -> u32 {
        self.rcv_nxt
            .wrapping_add(off.wrapping_sub(self.rcv_off) as u32)
    }

    fn tsval(&self, now: Instant) -> u32 {
        (now.as_millis() as u32).wrapping_add(self.ts_offset)
    }

    fn restart_keepalive(&mut self, now: Instant, cfg: &Config) {
        if let Some(ka) = cfg.keepalive {
            if matches!(self.state, State::Established | State::CloseWait) {
                self.keepalive_deadline = Some(now + ka.idle);
                self.ka_probes = 0;
            }
        }
    }

    fn enter_time_wait(&mut self, now: Instant, cfg: &Config, ev: &mut Vec<TcbEvent>) {
        self.state = State::TimeWait;
        self.timewait_deadline = Some(now + 2 * cfg.msl);
        self.rtx_deadline = None;
        self.persist_deadline = None;
        self.keepalive_deadline = None;
        self.finwait2_deadline = None;
        self.delack_deadline = None;
        ev.push(TcbEvent::Closed(CloseReason::Normal));
    }

    // ---------------------------------------------------------------- receive

    /// Process one segment addressed to this TCB (RFC 9293 §3.10.7).
    pub(crate) fn handle_segment(
        &mut self,
        now: Instant,
        cfg: &Config,
        repr: &TcpRepr,
        ulp: &mut dyn Upper,
        ev: &mut Vec<TcbEvent>,
    ) {
        if self.state == State::SynSent {
            self.handle_syn_sent(now, cfg, repr, ev);
            return;
        }
        let seg_seq = repr.seq_number.0 as u32;
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
            self.timewait_deadline = Some(now + 2 * cfg.msl);
            self.ack_now = true;
            return;
        }

        // PAWS, RFC 7323 §5.3 R1.
        if self.opts.timestamps && !is_rst {
            if let (Some(ts), Some(at)) = (repr.timestamp, self.ts_recent_at) {
                if seq::lt(ts.tsval, self.ts_recent) && now.saturating_since(at) < PAWS_IDLE {
                    log::debug!("PAWS: dropping segment with old TSval {}", ts.tsval);
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
            }
            // RFC 9293 §3.10.7.4: with a zero window, valid ACKs are still processed.
            if wnd == 0 && seg_seq == self.rcv_nxt && !is_rst && self.synchronized() {
                if let Some(a) = seg_ack {
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
        self.process_ack(now, repr, seg_seq, ack, ulp);

        let fin_acked = self.fin_queued && self.txq.is_empty();
        match self.state {
            State::FinWait1 if fin_acked => {
                self.state = State::FinWait2;
                self.finwait2_deadline = Some(now + cfg.fin_wait2_timeout);
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
            self.process_payload(now, cfg, seg_seq, repr.payload, ulp);
        }

        if repr.control == TcpControl::Fin {
            let fin_seq = seg_seq.wrapping_add(repr.payload.len() as u32);
            if self.state == State::TimeWait {
                // RFC 9293 §3.10.7.4: retransmitted FIN restarts the 2 MSL timer.
                self.timewait_deadline = Some(now + 2 * cfg.msl);
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

    /// ACK field processing (RFC 9293 §3.10.7.4 fifth check) with SACK (RFC 6675) and
    /// fast retransmit / NewReno recovery (RFC 5681 §3.2, RFC 6582).
    fn process_ack(
        &mut self,
        now: Instant,
        repr: &TcpRepr,
        seg_seq: u32,
        ack: u32,
        ulp: &mut dyn Upper,
    ) {
        let new_wnd = u32::from(repr.window_len) << self.opts.snd_shift;
        let mut sack_changed = false;
        if self.opts.sack {
            for (l, r) in repr.sack_ranges.iter().flatten() {
                if seq::lt(*l, *r) && seq::ge(*l, self.snd_una) && seq::le(*r, self.snd_nxt) {
                    sack_changed |= self.txq.sack(*l, *r);
                }
            }
        }
        let outstanding = !self.txq.is_empty();
        if seq::gt(ack, self.snd_una) {
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
                    self.spurious_timeouts += 1;
                }
            }
            let acked = self.txq.ack(ack, |b| ulp.recycle(b));
            self.snd_una = ack;
            if let Some(sent) = acked.rtt_sample_sent_at {
                self.rtt.sample(now.saturating_since(sent));
            }
            self.rtt.reset_backoff();
            self.rtx_count = 0;
            self.dupacks = 0;
            match self.recovery {
                Some(point) if seq::ge(ack, point) => self.recovery = None,
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
                Some(now + self.rtt.rto())
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
        if self.opts.sack && sack_changed {
            self.txq.detect_losses(self.eff_mss);
        }
        if self.recovery.is_none()
            && !self.txq.is_empty()
            && (self.dupacks >= 3 || (self.opts.sack && self.txq.first_lost()))
        {
            // RFC 6675 §5 / RFC 6582 §3.2: enter loss recovery, retransmit the first hole.
            self.recovery = Some(self.snd_nxt);
            self.recoveries += 1;
            let flight = seq::diff(self.snd_nxt, self.snd_una).max(0) as usize;
            self.cc.on_congestion_event(now, flight, self.eff_mss);
            self.txq.mark_first_lost();
            self.fast_rtx = true;
        }
        // RFC 9293 §3.10.7.4: send window update.
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

    /// Offer new payload to the sink, then keep what it did not consume (RFC 9293
    /// §3.10.7.4 seventh check, with the placement hook).
    fn process_payload(
        &mut self,
        now: Instant,
        cfg: &Config,
        seg_seq: u32,
        payload: &[u8],
        ulp: &mut dyn Upper,
    ) {
        let mut seq0 = seg_seq;
        let mut p = payload;
        let front = seq::diff(self.rcv_nxt, seq0);
        if front > 0 {
            let cut = front as usize;
            if cut >= p.len() {
                self.ack_now = true;
                return;
            }
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
        let whole = [(s, e)];
        let uncovered;
        let pieces: &[(u64, u64)] = if had_gaps {
            uncovered = self.rx.uncovered(s, e);
            &uncovered
        } else {
            &whole
        };
        if pieces.is_empty() {
            // Entirely duplicate: RFC 5681 §4.2 immediate ACK.
            self.ack_now = true;
            return;
        }
        let before = self.rcv_nxt;
        for &(ps, pe) in pieces {
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
        if self.rcv_nxt != before {
            ulp.on_advance(self.rcv_nxt);
        }
        if seq0 != before || had_gaps {
            // RFC 5681 §4.2 / RFC 9293 §3.8.6.3: out-of-order data or a filled gap.
            self.ack_now = true;
        } else {
            self.segs_unacked += 1;
            if self.segs_unacked >= 2 {
                self.ack_now = true;
            } else if self.delack_deadline.is_none() {
                self.delack_deadline = Some(now + cfg.delayed_ack);
            }
        }
    }

    fn deliver_in_order(&mut self, ulp: &mut dyn Upper) {
        while let Some(end) = self.rx.pop_front_at(self.rcv_off) {
            while let Some((off, bytes)) = self.rx.pop_stored_before(end) {
                ulp.on_in_order(self.seq_of(off), &bytes);
            }
            self.rcv_nxt = self.seq_of(end);
            self.rcv_off = end;
        }
    }

    fn consume_fin(&mut self, now: Instant, cfg: &Config, ev: &mut Vec<TcbEvent>) {
        if self.fin_received || self.peer_fin != Some(self.rcv_nxt) {
            return;
        }
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

    // ---------------------------------------------------------------- timers

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
        if due(self.rtx_deadline) {
            self.rtx_deadline = None;
            self.on_rto(now, cfg, ev);
        }
        if due(self.delack_deadline) {
            self.delack_deadline = None;
            self.ack_now = true;
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
            self.persist_deadline = Some(now + d);
        }
        if due(self.keepalive_deadline) {
            if let Some(ka) = cfg.keepalive {
                if self.ka_probes >= ka.count {
                    self.abort_with(CloseReason::TimedOut, ev);
                    return;
                }
                self.ka_probes += 1;
                self.send_probe = true;
                self.keepalive_deadline = Some(now + ka.interval);
            } else {
                self.keepalive_deadline = None;
            }
        }
    }

    fn abort_with(&mut self, reason: CloseReason, ev: &mut Vec<TcbEvent>) {
        ev.push(TcbEvent::Rst {
            seq: self.snd_nxt,
            ack: Some(self.rcv_nxt),
        });
        ev.push(TcbEvent::Closed(reason));
        ev.push(TcbEvent::Remove);
    }

    fn on_rto(&mut self, now: Instant, cfg: &Config, ev: &mut Vec<TcbEvent>) {
        match self.state {
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
                let flight = seq::diff(self.snd_nxt, self.snd_una).max(0) as usize;
                self.cc.on_rto(now, flight, self.eff_mss);
                self.rtt.backoff();
                self.txq.mark_all_lost();
                self.recovery = None;
                self.dupacks = 0;
                self.fast_rtx = true;
                self.rtx_deadline = Some(now + self.rtt.rto());
            }
        }
    }

    // ---------------------------------------------------------------- transmit

    /// The window we would advertise now: the sink's window capped by configuration and
    /// scaling, with receiver SWS avoidance (RFC 9293 §3.8.6.2.2): the right edge moves only
    /// by a useful amount and never backward.
    fn proposed_window(&self, cfg: &Config, sink_wnd: usize, shift: u8) -> u32 {
        let max = 65_535usize << shift;
        let want = sink_wnd.min(cfg.max_rx_window).min(max) as u32;
        let cur = self.rcv_wnd();
        let step = u32::from(self.offer.mss).min(want / 2).max(1);
        let wnd = if want >= cur.saturating_add(step) || (cur == 0 && want > 0) {
            want
        } else {
            cur
        };
        (wnd >> shift).min(65_535) << shift
    }

    fn window_to_advertise(&mut self, cfg: &Config, sink_wnd: usize, syn: bool) -> u16 {
        let shift = if syn { 0 } else { self.opts.rcv_shift };
        let wnd = self.proposed_window(cfg, sink_wnd, shift);
        let edge = self.rcv_nxt.wrapping_add(wnd);
        if seq::gt(edge, self.rcv_adv) {
            self.rcv_adv = edge;
        }
        (wnd >> shift) as u16
    }

    /// A pure window update is worth sending (RFC 9293 §3.8.6.2.2 and §3.8.6.3).
    fn window_update_due(&self, cfg: &Config, sink_wnd: usize) -> bool {
        let new = self.proposed_window(cfg, sink_wnd, self.opts.rcv_shift) as usize;
        let cur = self.rcv_wnd() as usize;
        let mss = usize::from(self.offer.mss);
        new > cur && (new - cur >= (2 * mss).min(cfg.max_rx_window / 2) || cur < mss)
    }

    fn header(
        &mut self,
        now: Instant,
        cfg: &Config,
        sink_wnd: usize,
        control: TcpControl,
        seq_no: u32,
    ) -> Header {
        let syn = control == TcpControl::Syn;
        let window = self.window_to_advertise(cfg, sink_wnd, syn);
        let ack = if self.state == State::SynSent && syn {
            None
        } else {
            Some(self.rcv_nxt)
        };
        let syn_opts = syn.then(|| {
            let offering = self.state == State::SynSent;
            SynOptions {
                mss: self.offer.mss,
                wscale: if offering || self.opts.rcv_shift > 0 || self.opts.snd_shift > 0 {
                    self.offer.wscale
                } else {
                    None
                },
                sack_permitted: if offering {
                    self.offer.sack
                } else {
                    self.opts.sack
                },
            }
        });
        let ts_on = if self.state == State::SynSent && syn {
            self.offer.timestamps
        } else {
            self.opts.timestamps
        };
        let timestamp = ts_on.then(|| (self.tsval(now), self.ts_recent));
        let mut sack = [None; 3];
        if self.opts.sack && !syn && !self.rx.is_empty() {
            for (i, (a, b)) in self.sack_rep.blocks(&self.rx, 3).into_iter().enumerate() {
                sack[i] = Some((self.seq_of(a), self.seq_of(b)));
            }
        }
        if ack.is_some() {
            self.ack_now = false;
            self.delack_deadline = None;
            self.segs_unacked = 0;
            self.last_ack_sent = self.rcv_nxt;
        }
        Header {
            control,
            seq: seq_no,
            ack,
            window,
            syn: syn_opts,
            sack,
            timestamp,
        }
    }

    /// RFC 6675 pipe. Without SACK, each duplicate ACK stands for one segment that left the
    /// network: this gives Limited Transmit (RFC 3042) on the first two and the window
    /// inflation of NewReno recovery (RFC 6582 §3.2) after the third.
    fn pipe(&self) -> usize {
        if self.opts.sack {
            self.txq.pipe()
        } else {
            self.txq
                .pipe()
                .saturating_sub(self.dupacks as usize * self.eff_mss)
        }
    }

    fn arm_rtx(&mut self, now: Instant) {
        if self.rtx_deadline.is_none() {
            self.rtx_deadline = Some(now + self.rtt.rto());
        }
    }

    fn send_unit(
        &mut self,
        now: Instant,
        cfg: &Config,
        sink_wnd: usize,
        i: usize,
        buf: &mut [u8],
    ) -> Option<usize> {
        let (useq, fin) = {
            let u = self.txq.unit(i);
            (u.seq, u.fin)
        };
        let control = if fin {
            TcpControl::Fin
        } else {
            TcpControl::Psh
        };
        let hdr = self.header(now, cfg, sink_wnd, control, useq);
        self.arm_rtx(now);
        write_packet(
            buf,
            cfg,
            self.local,
            self.remote,
            &hdr,
            &self.txq.unit(i).data,
        )
    }

    /// Produce at most one segment into `buf` (a whole IPv4 packet). Priority: SYN/SYN-ACK,
    /// retransmissions (RFC 6675 NextSeg), new units, FIN, probes, pure ACKs.
    pub(crate) fn poll_transmit(
        &mut self,
        now: Instant,
        cfg: &Config,
        ulp: &mut dyn Upper,
        buf: &mut [u8],
        ev: &mut Vec<TcbEvent>,
    ) -> Option<usize> {
        let sink_wnd = ulp.rx_window();
        match self.state {
            State::SynSent | State::SynReceived => {
                if self.send_syn {
                    self.send_syn = false;
                    if self.syn_retries == 0 {
                        self.syn_sent_at = now;
                    }
                    // Every SYN or SYN-ACK after the first carries the same ISS again.
                    if self.syn_emitted {
                        self.retransmits += 1;
                    }
                    self.syn_emitted = true;
                    self.rtx_deadline = Some(now + self.rtt.rto());
                    let hdr = self.header(now, cfg, sink_wnd, TcpControl::Syn, self.iss);
                    return write_packet(buf, cfg, self.local, self.remote, &hdr, &[]);
                }
                if self.ack_now && self.state == State::SynReceived {
                    let hdr = self.header(now, cfg, sink_wnd, TcpControl::None, self.snd_nxt);
                    return write_packet(buf, cfg, self.local, self.remote, &hdr, &[]);
                }
                return None;
            }
            State::TimeWait => {
                if self.ack_now {
                    let hdr = self.header(now, cfg, sink_wnd, TcpControl::None, self.snd_nxt);
                    return write_packet(buf, cfg, self.local, self.remote, &hdr, &[]);
                }
                return None;
            }
            _ => {}
        }

        // Retransmissions: whole units, identical bytes.
        if let Some(i) = self.txq.next_lost() {
            if self.fast_rtx || self.pipe() < self.cc.cwnd() {
                self.fast_rtx = false;
                self.txq.retransmitted(i, now);
                self.retransmits += 1;
                return self.send_unit(now, cfg, sink_wnd, i, buf);
            }
        }
        self.fast_rtx = false;

        // New units.
        if matches!(self.state, State::Established | State::CloseWait) && !self.fin_queued {
            if ulp.pending() {
                let in_flight = seq::diff(self.snd_nxt, self.snd_una).max(0) as u32;
                let wnd_avail = self.snd_wnd.saturating_sub(in_flight) as usize;
                let max_len = self.eff_mss.min(wnd_avail);
                // RFC 9293 §3.8.6.2.1 sender SWS avoidance.
                let sws_ok = max_len == self.eff_mss
                    || (max_len > 0 && self.txq.is_empty())
                    || (max_len > 0 && max_len >= self.max_snd_wnd as usize / 2);
                if sws_ok && self.pipe() < self.cc.cwnd() {
                    if let Some(unit) = ulp.next_unit(self.snd_nxt, max_len) {
                        return self.queue_unit(now, cfg, sink_wnd, unit, max_len, buf, ev);
                    }
                }
                if self.txq.is_empty() && self.persist_deadline.is_none() {
                    self.persist_deadline = Some(now + self.rtt.rto());
                }
            } else if self.close_requested {
                // RFC 9293 §3.10.4: FIN after all data.
                let fin_seq = self.snd_nxt;
                self.txq.push(fin_seq, Vec::new(), true, now);
                self.snd_nxt = fin_seq.wrapping_add(1);
                self.fin_queued = true;
                self.persist_deadline = None;
                self.keepalive_deadline = None;
                self.state = if self.state == State::Established {
                    State::FinWait1
                } else {
                    State::LastAck
                };
                let i = self.txq.len() - 1;
                return self.send_unit(now, cfg, sink_wnd, i, buf);
            } else {
                self.persist_deadline = None;
            }
        }

        if self.send_probe {
            // Zero-window probe / keepalive: an empty segment below SND.UNA elicits an ACK
            // carrying the current window without splitting any unit.
            self.send_probe = false;
            let probe_seq = self.snd_una.wrapping_sub(1);
            let hdr = self.header(now, cfg, sink_wnd, TcpControl::None, probe_seq);
            return write_packet(buf, cfg, self.local, self.remote, &hdr, &[]);
        }
        if self.ack_now || (!self.fin_received && self.window_update_due(cfg, sink_wnd)) {
            let hdr = self.header(now, cfg, sink_wnd, TcpControl::None, self.snd_nxt);
            return write_packet(buf, cfg, self.local, self.remote, &hdr, &[]);
        }
        None
    }

    #[allow(clippy::too_many_arguments)]
    fn queue_unit(
        &mut self,
        now: Instant,
        cfg: &Config,
        sink_wnd: usize,
        unit: Unit,
        max_len: usize,
        buf: &mut [u8],
        ev: &mut Vec<TcbEvent>,
    ) -> Option<usize> {
        let len = unit.payload.len();
        if len == 0 {
            return None;
        }
        if len > max_len {
            log::error!("segment source returned a {len}-byte unit, limit {max_len}; aborting");
            self.abort_with(CloseReason::UnitTooLarge, ev);
            return None;
        }
        let useq = self.snd_nxt;
        self.txq.push(useq, unit.payload, false, now);
        self.snd_nxt = useq.wrapping_add(len as u32);
        self.persist_deadline = None;
        self.persist_backoff = 0;
        let i = self.txq.len() - 1;
        self.send_unit(now, cfg, sink_wnd, i, buf)
    }
}

/// Call `f(start, end)` for each byte range of a `len`-byte payload outside `consumed`.
fn for_each_unconsumed(consumed: &Consumed, len: usize, mut f: impl FnMut(usize, usize)) {
    let mut pos = 0;
    for r in consumed.iter() {
        let (a, b) = (r.start.min(len), r.end.min(len));
        if a > pos {
            f(pos, a);
        }
        pos = pos.max(b);
    }
    if pos < len {
        f(pos, len);
    }
}

/// Placeholder ULP for connections accepted before the application attached one: keeps
/// in-order bytes (bounded by the advertised window) and sends nothing.
#[derive(Debug)]
pub(crate) struct Holding<'a> {
    pub(crate) buf: &'a mut Vec<u8>,
    pub(crate) start: &'a mut Option<u32>,
    pub(crate) cap: usize,
}

impl Upper for Holding<'_> {
    fn on_segment(&mut self, seq: u32, payload: &[u8], in_order: bool, _rcv_nxt: u32) -> Consumed {
        if in_order {
            self.on_in_order(seq, payload);
            Consumed::all(payload.len())
        } else {
            Consumed::none()
        }
    }

    fn on_in_order(&mut self, seq: u32, bytes: &[u8]) {
        if self.start.is_none() {
            *self.start = Some(seq);
        }
        self.buf.extend_from_slice(bytes);
    }

    fn rx_window(&self) -> usize {
        self.cap.saturating_sub(self.buf.len())
    }

    fn next_unit(&mut self, _seq: u32, _max_len: usize) -> Option<Unit> {
        None
    }

    fn pending(&self) -> bool {
        false
    }
}
