//! One connection's RFC 9293 state machine (the transmission control block).
//!
//! Split by concern the way Linux splits `tcp_input.c` / `tcp_output.c` / `tcp_timer.c`:
//! this module holds the state, its construction and accessors; [`input`] processes
//! arriving segments ([`run`] the in-order data segments of a receive run), [`output`]
//! builds outgoing ones and [`timers`] runs the deadlines.

mod holding;
mod input;
mod output;
mod run;
mod timers;

use core::time::Duration;
use std::net::SocketAddr;

use smoltcp::wire::{TcpControl, TcpRepr};

use crate::cc::Controller;
use crate::config::Config;
use crate::options::{Negotiated, Offer};
use crate::rack::Rack;
use crate::rto::RttEstimator;
use crate::rx::Reassembly;
use crate::sack::SackReporter;
use crate::seq;
use crate::template::Template;
use crate::time::Instant;
use crate::tx::SendQueue;

/// Longest a connection with timestamps goes without sending one. Our TSval ticks in
/// microseconds, so it passes 2^31 ticks after 35.8 minutes; a peer that holds TS.Recent
/// for longer (RFC 7323 §5.5 lets a receiver invalidate it only after 24 days of idleness,
/// as Linux before 6.7 does) would then take every later segment for an old duplicate and
/// drop it (PAWS, RFC 7323 §5.3). A connection that received nothing for this long
/// therefore sends an ACK with the current TSval (the peer's TS.Recent follows, RFC 7323
/// §4.3); one that receives something answers with its own segments anyway.
pub(crate) const TS_REFRESH: Duration = Duration::from_secs(15 * 60);

pub(crate) use holding::Holding;

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
    /// Of those, episodes found spurious (reordering, not loss) and undone (RFC 3522 or
    /// RFC 3708 detection, RFC 4015 response).
    pub spurious_recoveries: u64,
    /// Segments dropped by PAWS (RFC 7323 §5.3: a TSval older than TS.Recent).
    pub paws_drops: u64,
    /// The receive window last advertised, bytes.
    pub rcv_wnd: usize,
}

/// One connection's loss-recovery counters, summed into the engine's statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LossCounters {
    pub(crate) retransmits: u64,
    pub(crate) timeouts: u64,
    pub(crate) spurious_timeouts: u64,
    pub(crate) recoveries: u64,
    pub(crate) spurious_recoveries: u64,
    pub(crate) syn_retransmits: u64,
    pub(crate) loss_probes: u64,
    pub(crate) pure_acks: u64,
    pub(crate) delayed_acks: u64,
}

/// What a segment's acknowledgment processing depends on besides the sender's own state,
/// which nothing changes within one receive burst (the engine transmits and runs timers
/// only between bursts): the burst, the ACK, the window field, the echoed timestamp and the
/// time (SACK blocks make a segment ineligible).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RunAck {
    pub(crate) burst: u64,
    pub(crate) ack: u32,
    pub(crate) window: u16,
    pub(crate) tsecr: Option<u32>,
    pub(crate) now: Instant,
}

/// A transmission control block.
///
/// Aligned to a cache line and laid out in declaration order (`repr(C)`): its eight
/// deadlines fill the block's first two lines whichever slot holds it (the timer wheel's
/// check of a connection it reaches cold, `next_deadline`, reads two lines, not three);
/// then what a receive run and an ACK read on a cold connection (the sequence variables,
/// the state and its flags in the third line, the run's other scalars in the fourth, the
/// send queue's header in the fifth), the sender's congestion and RTT state and the
/// headers' template after them, the handshake's fields and the counters last.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct Tcb {
    /// The RACK reordering timer (RFC 8985 §6.2 step 5).
    rack_deadline: Option<Instant>,
    /// The tail loss probe timer (RFC 8985 §7.2).
    tlp_deadline: Option<Instant>,
    rtx_deadline: Option<Instant>,
    delack_deadline: Option<Instant>,
    persist_deadline: Option<Instant>,
    keepalive_deadline: Option<Instant>,
    timewait_deadline: Option<Instant>,
    finwait2_deadline: Option<Instant>,

    snd_una: u32,
    snd_nxt: u32,
    snd_wnd: u32,
    snd_wl1: u32,
    snd_wl2: u32,
    max_snd_wnd: u32,
    rcv_nxt: u32,
    rcv_adv: u32,
    last_ack_sent: u32,
    ts_recent: u32,
    segs_unacked: u32,
    ts_offset: u32,
    opts: Negotiated,
    pub(crate) state: State,
    /// RCV.NXT advanced and the ULP was not told yet (only while `defer_advance`).
    pub(crate) advance_pending: bool,
    /// Set by the engine during a receive burst: in-order segments leave the ULP's
    /// `on_advance` to the end of the connection's run ([`Tcb::flush_advance`]).
    pub(crate) defer_advance: bool,
    ack_now: bool,
    /// Set by the engine before each transmit call: whether its bound on the octets all
    /// connections keep in flight ([`Config::max_flight`]) lets this connection send new
    /// data (always true without a bound).
    pub(crate) flight_open: bool,
    /// A new unit waited for the engine's bound alone (not for this connection's windows).
    pub(crate) flight_held: bool,
    fin_queued: bool,
    close_requested: bool,
    fin_received: bool,
    pub(crate) reported_closed: bool,

    rcv_off: u64,
    /// Which receive burst the engine is in (meaningful while `defer_advance`).
    pub(crate) burst: u64,
    eff_mss: usize,
    /// When the last segment arrived (keepalive idle time, [`TS_REFRESH`]).
    idle_since: Instant,
    /// The earliest deadline armed since the engine last scheduled the connection's
    /// timer, in nanoseconds (`u64::MAX`: none); see [`Tcb::take_armed`].
    armed: u64,
    ts_recent_at: Option<Instant>,
    peer_fin: Option<u32>,

    txq: SendQueue,

    rx: Reassembly,
    /// The acknowledgment fields of the last segment of the current run whose ACK was
    /// processed: a next one of the run with the same fields changes nothing but SND.WL1.
    run_ack: Option<RunAck>,
    recovery: Option<u32>,
    dupacks: u32,
    fast_rtx: bool,
    /// A data segment went out without the SACK blocks it should have carried (no room
    /// beside a full-sized payload): a pure ACK with them follows (RFC 2018 §4).
    sack_ack: bool,
    /// A tail loss probe is due: the next `poll_transmit` sends it.
    send_tlp: bool,
    send_probe: bool,

    cc: Controller,
    rtt: RttEstimator,
    /// RACK loss detection (RFC 8985), used when SACK is on.
    rack: Rack,
    /// The probe in flight, until acknowledged or a timeout (one at a time).
    tlp: Option<TlpProbe>,
    /// A D-SACK block (RFC 2883) for the next ACK: sequence range of a duplicate received.
    dsack: Option<(u32, u32)>,
    /// SND.NXT at the last retransmission timeout, until acknowledged: no fast recovery
    /// begins before (RFC 6582 §3.2 step 1, RFC 6675 §5.1).
    rto_point: Option<u32>,

    /// Segments sent with neither data nor SYN/FIN (ACKs and window updates).
    pure_acks: u64,
    pub(crate) local: SocketAddr,
    pub(crate) remote: SocketAddr,
    /// The headers of this connection's data segments and ACKs, prebuilt on first use.
    template: Option<Template>,
    /// The header fields the data segments of a run share (see [`output::RunHeader`]).
    run: Option<output::RunHeader>,

    sack_rep: SackReporter,
    /// Scratch for the new pieces of an arriving segment (kept: no allocation per segment).
    pieces: Vec<(u64, u64)>,
    offer: Offer,
    /// Created by a listener (a reset in SYN-RECEIVED returns silently to LISTEN).
    pub(crate) passive: bool,
    iss: u32,
    irs: u32,
    syn_sent_at: Instant,
    /// When the active open began (for `Config::refused_retry`).
    opened_at: Instant,
    /// A refused SYN is to be sent again when the retransmission timer fires
    /// (`Config::refused_retry`), without counting as a SYN timeout.
    resend_refused_syn: bool,
    send_syn: bool,
    syn_emitted: bool,
    syn_retries: u32,
    rtx_count: u32,
    persist_backoff: u32,
    ka_probes: u32,

    retransmits: u64,
    timeouts: u64,
    spurious_timeouts: u64,
    recoveries: u64,
    spurious_recoveries: u64,
    /// Of `retransmits`, SYNs and SYN-ACKs sent again.
    syn_retransmits: u64,
    /// Tail loss probes sent (RFC 8985 §7.3), new data or a retransmission.
    loss_probes: u64,
    /// Times the delayed-ACK timer ran out with an ACK owed (RFC 9293 §3.8.6.3).
    delayed_acks: u64,
    paws_drops: u64,
    /// Since a timeout: how to undo it should it prove spurious.
    rto_undo: Option<RtoUndo>,
    /// Since the last fast recovery began: how to undo it should it prove spurious.
    rec_undo: Option<RecoveryUndo>,
}

/// What a retransmission timeout changed, kept until the next ACK shows whether it was
/// spurious (RFC 3522 detection with timestamps, RFC 4015 response).
#[derive(Debug)]
struct RtoUndo {
    /// TSval of the first retransmission (RFC 3522 RetransmitTS).
    retransmit_ts: u32,
    /// The congestion controller before the timeout.
    cc: Controller,
}

/// A tail loss probe in flight (RFC 8985 §7.3 TLP.end_seq and TLP.is_retrans).
#[derive(Clone, Copy, Debug)]
struct TlpProbe {
    /// SND.NXT after the probe.
    end: u32,
    /// When it sent the last unit again: that copy's TSval.
    retransmit_ts: Option<u32>,
}

/// What a fast recovery changed, kept until its retransmissions prove needed or spurious:
/// Eifel detection (RFC 3522) at the ACK of the first retransmission, or D-SACKs for every
/// retransmission of the episode (RFC 3708 §3.2). The response restores the congestion
/// state as RFC 4015 does after a timeout.
#[derive(Debug)]
struct RecoveryUndo {
    /// The congestion controller before the recovery.
    cc: Controller,
    /// SND.UNA and SND.NXT when it began: D-SACKs inside count.
    start: u32,
    end: u32,
    /// TSval of the first retransmission, and the end of the unit it carried.
    retransmit_ts: Option<(u32, u32)>,
    /// Whether the ACK of the first retransmission was seen (Eifel decided).
    eifel_done: bool,
    /// Retransmissions of the episode not yet reported duplicate by a D-SACK.
    retrans: u32,
}

impl Tcb {
    /// Active open (RFC 9293 §3.10.1): SYN-SENT, SYN queued for transmission.
    pub(crate) fn new_active(
        now: Instant,
        cfg: &Config,
        local: SocketAddr,
        remote: SocketAddr,
        iss: u32,
        ts_offset: u32,
    ) -> Self {
        let offer = Offer {
            mss: cfg.local_mss(remote.ip()),
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
            template: None,
            run: None,
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
            pieces: Vec::new(),
            defer_advance: false,
            burst: 0,
            advance_pending: false,
            flight_open: true,
            flight_held: false,
            run_ack: None,
            sack_rep: SackReporter::default(),
            peer_fin: None,
            fin_received: false,
            rtt: RttEstimator::new(cfg.rto_initial, cfg.rto_min, cfg.rto_max),
            cc: cfg.congestion.build(eff_mss, cfg.initial_window),
            recovery: None,
            dupacks: 0,
            fast_rtx: false,
            rack: Rack::default(),
            rack_deadline: None,
            rto_point: None,
            dsack: None,
            sack_ack: false,
            tlp_deadline: None,
            send_tlp: false,
            tlp: None,
            syn_sent_at: now,
            opened_at: now,
            resend_refused_syn: false,
            syn_retries: 0,
            rtx_count: 0,
            rtx_deadline: None,
            delack_deadline: None,
            persist_deadline: None,
            persist_backoff: 0,
            keepalive_deadline: None,
            idle_since: now,
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
            spurious_recoveries: 0,
            syn_retransmits: 0,
            loss_probes: 0,
            pure_acks: 0,
            delayed_acks: 0,
            paws_drops: 0,
            rto_undo: None,
            rec_undo: None,
            armed: u64::MAX,
        }
    }

    /// Passive open from a SYN to a listener (RFC 9293 §3.10.7.2): SYN-RECEIVED.
    pub(crate) fn new_passive(
        now: Instant,
        cfg: &Config,
        local: SocketAddr,
        remote: SocketAddr,
        iss: u32,
        ts_offset: u32,
        syn: &TcpRepr,
    ) -> Self {
        let mut t = Tcb::new_active(now, cfg, local, remote, iss, ts_offset);
        t.passive = true;
        t.state = State::SynReceived;
        t.accept_syn(now, cfg, syn);
        t
    }

    /// Marks this passive connection's SYN-ACK as sent already, statelessly, with a SYN
    /// cookie ([`crate::syn_cookie`]) that the peer's ACK returned. The handshake's time is
    /// not known, so it gives no RTT sample (as after a retransmitted SYN-ACK, Karn's rule).
    pub(crate) fn syn_ack_sent_statelessly(&mut self) {
        self.send_syn = false;
        self.syn_emitted = true;
        self.syn_retries = 1;
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
            spurious_recoveries: self.spurious_recoveries,
            paws_drops: self.paws_drops,
            rcv_wnd: self.rcv_wnd() as usize,
        }
    }

    /// Empties the send queue (the connection goes away), handing the units' payload
    /// buffers to `reclaim`.
    pub(crate) fn drain_unit_buffers(&mut self, reclaim: impl FnMut(Vec<u8>)) {
        self.txq.drain_buffers(reclaim);
    }

    /// The send queue ([`crate::tx::SendQueue`]): the engine lends and settles its units'
    /// payloads.
    pub(crate) fn txq_mut(&mut self) -> &mut crate::tx::SendQueue {
        &mut self.txq
    }

    /// Unit `i`, when the send queue has one.
    pub(crate) fn unit_at(&mut self, i: usize) -> Option<&mut crate::tx::TxUnit> {
        (i < self.txq.len()).then(|| self.txq.unit_mut(i))
    }

    /// Retransmissions, timeouts, recoveries and the spurious ones, loss probes and pure
    /// ACKs so far.
    pub(crate) fn loss_counters(&self) -> LossCounters {
        LossCounters {
            retransmits: self.retransmits,
            timeouts: self.timeouts,
            spurious_timeouts: self.spurious_timeouts,
            recoveries: self.recoveries,
            spurious_recoveries: self.spurious_recoveries,
            syn_retransmits: self.syn_retransmits,
            loss_probes: self.loss_probes,
            pure_acks: self.pure_acks,
            delayed_acks: self.delayed_acks,
        }
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

    fn rcv_wnd(&self) -> u32 {
        seq::diff(self.rcv_adv, self.rcv_nxt).max(0) as u32
    }

    fn seq_of(&self, off: u64) -> u32 {
        self.rcv_nxt
            .wrapping_add(off.wrapping_sub(self.rcv_off) as u32)
    }

    /// RFC 5681 FlightSize: bytes sent and not yet cumulatively acknowledged.
    pub(crate) fn eff_mss(&self) -> usize {
        self.eff_mss
    }

    pub(crate) fn flight_size(&self) -> usize {
        seq::diff(self.snd_nxt, self.snd_una).max(0) as usize
    }

    /// Our TSval: a microsecond clock (RFC 7323 §5.4 leaves the rate open), so that Eifel
    /// detection (RFC 3522) tells an original from a retransmission sent a few
    /// microseconds later, as happens when reordering is mistaken for loss.
    fn tsval(&self, now: Instant) -> u32 {
        (now.as_micros() as u32).wrapping_add(self.ts_offset)
    }

    fn abort_with(&mut self, reason: CloseReason, ev: &mut Vec<TcbEvent>) {
        ev.push(TcbEvent::Rst {
            seq: self.snd_nxt,
            ack: Some(self.rcv_nxt),
        });
        ev.push(TcbEvent::Closed(reason));
        ev.push(TcbEvent::Remove);
    }
}

#[cfg(test)]
mod layout {
    use super::{Instant, Tcb};
    use core::mem::{align_of, offset_of, size_of};

    /// The timer wheel's check of a cold connection reads every deadline: they must fill
    /// the block's first two cache lines (see [`Tcb`]).
    #[test]
    fn deadlines_fill_the_first_two_cache_lines() {
        assert_eq!(align_of::<Tcb>(), 64);
        let ends = [
            offset_of!(Tcb, rack_deadline),
            offset_of!(Tcb, tlp_deadline),
            offset_of!(Tcb, rtx_deadline),
            offset_of!(Tcb, delack_deadline),
            offset_of!(Tcb, persist_deadline),
            offset_of!(Tcb, keepalive_deadline),
            offset_of!(Tcb, timewait_deadline),
            offset_of!(Tcb, finwait2_deadline),
        ]
        .map(|o| o + size_of::<Option<Instant>>());
        assert!(ends.iter().all(|&e| e <= 128), "deadlines end at {ends:?}");
    }

    /// A receive run's start on a cold connection (the run checks, the ACK decision, the
    /// send-window update) reads the sequence variables, the state and its flags: they
    /// must share the line after the deadlines, and the run's wider scalars the next one
    /// (see [`Tcb`]).
    #[test]
    fn the_run_fields_fill_the_third_and_fourth_lines() {
        fn size<F>(_: fn(&Tcb) -> &F) -> usize {
            size_of::<F>()
        }
        macro_rules! in_line {
            ($line:expr => $($field:ident),+) => {
                $(
                    let start = offset_of!(Tcb, $field);
                    let end = start + size(|t| &t.$field) - 1;
                    assert_eq!(
                        (start / 64, end / 64),
                        ($line, $line),
                        concat!(stringify!($field), " is off its line")
                    );
                )+
            };
        }
        in_line! { 2 =>
            snd_una, snd_nxt, snd_wnd, snd_wl1, snd_wl2, max_snd_wnd, rcv_nxt, rcv_adv,
            last_ack_sent, ts_recent, segs_unacked, opts, state, advance_pending,
            defer_advance, ack_now, flight_open, fin_queued, fin_received, reported_closed
        }
        in_line! { 3 => rcv_off, burst, eff_mss, idle_since, ts_recent_at, peer_fin }
    }
}
