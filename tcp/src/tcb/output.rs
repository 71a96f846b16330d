//! Segment output: header building, window advertisement, and the choice of the next
//! segment to send (SYN, retransmission, new unit, FIN, probe or pure ACK).

use smoltcp::wire::TcpControl;

use super::{CloseReason, State, Tcb, TcbEvent, TlpProbe};
use crate::config::Config;
use crate::seq;
use crate::template::{write_segment, write_segment_headers};
use crate::time::Instant;
use crate::tx::{Gather, Unit};
use crate::ulp::Upper;
use crate::wire::{Header, SynOptions};

/// What [`Tcb::header`] gave a data segment without SACK blocks or SYN options, kept for
/// the segments after it while nothing it reads changed: the same time (`now`: the TSval,
/// RFC 7323 §3), nothing received (RCV.NXT, TS.Recent, the window's right edge RCV.ADV,
/// which that header left where it was), the same window of the sink, no D-SACK block or
/// out-of-order data to report (RFC 2018). With the same inputs `header` gives the same
/// window and timestamps (the rest of what it reads is fixed once synchronized), so a run
/// of segments takes them once and patches only its sequence numbers and flags.
#[derive(Clone, Copy, Debug)]
pub(super) struct RunHeader {
    now: Instant,
    rcv_nxt: u32,
    rcv_adv: u32,
    ts_recent: u32,
    sink_wnd: usize,
    window: u16,
    timestamp: Option<(u32, u32)>,
}

impl RunHeader {
    /// The run header of `hdr`, which `tcb` just built at `now` for the sink's window
    /// `sink_wnd`; `None` when it carries SACK blocks or SYN options.
    fn of(tcb: &Tcb, now: Instant, sink_wnd: usize, hdr: &Header) -> Option<RunHeader> {
        let plain = hdr.syn.is_none() && hdr.sack == [None; 3] && hdr.ack == Some(tcb.rcv_nxt);
        plain.then_some(RunHeader {
            now,
            rcv_nxt: tcb.rcv_nxt,
            rcv_adv: tcb.rcv_adv,
            ts_recent: tcb.ts_recent,
            sink_wnd,
            window: hdr.window,
            timestamp: hdr.timestamp,
        })
    }
}

impl Tcb {
    /// The header [`Tcb::header`] would give a data segment at `seq_no` now, from the run
    /// header when it still holds (with the ACK bookkeeping `header` does), else `None`.
    #[inline]
    fn run_header(
        &mut self,
        now: Instant,
        cfg: &Config,
        sink_wnd: usize,
        control: TcpControl,
        seq_no: u32,
    ) -> Option<Header> {
        let r = self.run.as_ref()?;
        let holds = r.now == now
            && r.rcv_nxt == self.rcv_nxt
            && r.rcv_adv == self.rcv_adv
            && r.ts_recent == self.ts_recent
            && r.sink_wnd == sink_wnd
            && self.dsack.is_none()
            && self.rx.is_empty();
        if !holds {
            return None;
        }
        let (window, timestamp) = (r.window, r.timestamp);
        let shift = self.opts.rcv_shift;
        debug_assert_eq!(
            (window, timestamp),
            (
                (self.proposed_window(cfg, sink_wnd, shift) >> shift) as u16,
                self.opts
                    .timestamps
                    .then(|| (self.tsval(now), self.ts_recent))
            ),
            "the run's header is the one built afresh"
        );
        self.ack_sent();
        Some(Header {
            control,
            seq: seq_no,
            ack: Some(self.rcv_nxt),
            window,
            syn: None,
            sack: [None; 3],
            timestamp,
        })
    }

    /// A segment acknowledging RCV.NXT is being sent: no ACK is owed any more.
    #[inline]
    fn ack_sent(&mut self) {
        self.ack_now = false;
        self.delack_deadline = None;
        self.segs_unacked = 0;
        self.last_ack_sent = self.rcv_nxt;
    }

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

    /// The SYN-ACK this passive connection would send now, with `window` offered (a SYN
    /// cookie's, [`crate::syn_cookie`], sent without the connection).
    pub(crate) fn syn_ack_header(&mut self, now: Instant, cfg: &Config, window: usize) -> Header {
        self.header(now, cfg, window, TcpControl::Syn, self.iss)
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
        if self.opts.sack && !syn {
            // RFC 2883 §4: a D-SACK block first, in one ACK only.
            let dsack = self.dsack.take();
            let first = usize::from(dsack.is_some());
            sack[0] = dsack;
            if !self.rx.is_empty() {
                let blocks = self.sack_rep.blocks(&self.rx);
                for (slot, &(a, b)) in sack[first..].iter_mut().zip(blocks.as_slice()) {
                    *slot = Some((self.seq_of(a), self.seq_of(b)));
                }
            }
        }
        if ack.is_some() {
            self.ack_sent();
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

    /// An empty segment (SYN, SYN-ACK, probe or pure ACK) into `buf`.
    fn send_empty(
        &mut self,
        now: Instant,
        cfg: &Config,
        sink_wnd: usize,
        control: TcpControl,
        seq_no: u32,
        buf: &mut [u8],
    ) -> Option<usize> {
        let hdr = self.header(now, cfg, sink_wnd, control, seq_no);
        // The addresses by reference: read only to make the template (or for a header of
        // another shape), so that an ACK through the template leaves their line alone.
        let (local, remote) = (&self.local, &self.remote);
        write_segment(buf, cfg, &mut self.template, local, remote, &hdr, &[], None)
    }

    /// A pure ACK (sequence number SND.NXT) into `buf`.
    fn send_ack(
        &mut self,
        now: Instant,
        cfg: &Config,
        sink_wnd: usize,
        buf: &mut [u8],
    ) -> Option<usize> {
        self.pure_acks += 1;
        self.send_empty(now, cfg, sink_wnd, TcpControl::None, self.snd_nxt, buf)
    }

    /// The header of a data segment of `len` octets at `seq_no`, the retransmission timer
    /// armed; SACK blocks it has no room for are left to a pure ACK right after it.
    #[inline(always)]
    fn data_header(
        &mut self,
        now: Instant,
        cfg: &Config,
        sink_wnd: usize,
        control: TcpControl,
        seq_no: u32,
        len: usize,
    ) -> Header {
        if let Some(hdr) = self.run_header(now, cfg, sink_wnd, control, seq_no) {
            self.arm_rtx(now);
            return hdr;
        }
        let (dsack, adv) = (self.dsack, self.rcv_adv);
        let hdr = self.header(now, cfg, sink_wnd, control, seq_no);
        self.arm_rtx(now);
        // Kept when the window's edge stayed: the next header's inputs are then this one's.
        self.run = if self.rcv_adv == adv {
            RunHeader::of(self, now, sink_wnd, &hdr)
        } else {
            None
        };
        let blocks = hdr.sack.iter().filter(|b| b.is_some()).count();
        if blocks > 0 {
            let fit = crate::wire::sack_blocks_that_fit(cfg, self.local, self.remote, &hdr, len);
            if fit < blocks {
                // RFC 2018 §4: SACK options SHOULD be in every ACK that does not acknowledge
                // the highest sequence number received. A full-sized segment has no room for
                // them (its payload is a whole unit, which may be an FPDU that cannot be
                // cut): they go in a pure ACK right after it, the D-SACK block included.
                self.sack_ack = true;
                if fit == 0 {
                    self.dsack = dsack;
                }
            }
        }
        hdr
    }

    /// A new unit's first transmission (at `seq_no`; its payload and the payload's sum)
    /// into `buf`, before it is queued.
    #[allow(clippy::too_many_arguments)]
    fn send_new(
        &mut self,
        now: Instant,
        cfg: &Config,
        sink_wnd: usize,
        seq_no: u32,
        payload: &[u8],
        sum: Option<crate::checksum::PayloadSum>,
        buf: &mut [u8],
    ) -> Option<usize> {
        let hdr = self.data_header(now, cfg, sink_wnd, TcpControl::Psh, seq_no, payload.len());
        let (local, remote) = (&self.local, &self.remote);
        write_segment(
            buf,
            cfg,
            &mut self.template,
            local,
            remote,
            &hdr,
            payload,
            sum,
        )
    }

    /// Unit `i` into `buf`, or only its headers when `gather` takes its payload.
    fn send_unit(
        &mut self,
        now: Instant,
        cfg: &Config,
        sink_wnd: usize,
        i: usize,
        buf: &mut [u8],
        gather: &mut Gather,
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
        let len = self.txq.unit(i).payload().len();
        let hdr = self.data_header(now, cfg, sink_wnd, control, useq, len);
        let (local, remote) = (&self.local, &self.remote);
        let u = self.txq.unit_mut(i);
        let template = &mut self.template;
        if gather.wants(len) {
            let sum = cfg.fill_checksums.then(|| match u.sum {
                Some(sum) => sum,
                None => *u.sum.insert(crate::checksum::payload_sum(u.payload())),
            });
            let at = write_segment_headers(buf, cfg, template, local, remote, &hdr, len, sum)?;
            gather.lend = Some(i);
            return Some(at);
        }
        let payload = u.payload();
        write_segment(buf, cfg, template, local, remote, &hdr, payload, u.sum)
    }

    /// After a segment went out: whether [`Tcb::poll_transmit`] may find more to send now.
    /// False only when it certainly finds nothing: a synchronized connection with no
    /// SACK-only ACK, lost unit, loss probe, window probe, ACK, window update or close
    /// pending, and nothing more from the ULP (`ulp_pending`, its window `sink_wnd`).
    pub(crate) fn may_send_more(&self, cfg: &Config, ulp_pending: bool, sink_wnd: usize) -> bool {
        !matches!(self.state, State::Established | State::CloseWait)
            || ulp_pending
            || self.sack_ack
            || self.txq.lost_count() > 0
            || self.send_tlp
            || self.send_probe
            || self.close_requested
            || self.ack_now
            || (!self.fin_received && self.window_update_due(cfg, sink_wnd))
    }

    /// Produce at most one segment into `buf` (a whole IPv4 packet, or its headers when
    /// `gather` takes the payload). Priority: SYN/SYN-ACK, retransmissions (RFC 6675
    /// NextSeg), new units, FIN, probes, pure ACKs.
    pub(crate) fn poll_transmit(
        &mut self,
        now: Instant,
        cfg: &Config,
        ulp: &mut impl Upper,
        buf: &mut [u8],
        gather: &mut Gather,
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
                        self.syn_retransmits += 1;
                    }
                    self.syn_emitted = true;
                    self.rtx_deadline = self.arm(now + self.rtt.rto());
                    return self.send_empty(now, cfg, sink_wnd, TcpControl::Syn, self.iss, buf);
                }
                if self.ack_now && self.state == State::SynReceived {
                    return self.send_ack(now, cfg, sink_wnd, buf);
                }
                return None;
            }
            State::TimeWait => {
                if self.ack_now {
                    return self.send_ack(now, cfg, sink_wnd, buf);
                }
                return None;
            }
            _ => {}
        }

        // The SACK blocks a data segment had no room for, before anything else.
        if std::mem::take(&mut self.sack_ack) {
            return self.send_ack(now, cfg, sink_wnd, buf);
        }

        // Retransmissions: whole units, identical bytes.
        if let Some(i) = self.txq.next_lost() {
            if self.fast_rtx || self.pipe() < self.cc.cwnd() {
                self.fast_rtx = false;
                if self.recovery.is_some() {
                    let ts = self.tsval(now);
                    let end = self.txq.unit(i).end();
                    if let Some(undo) = self.rec_undo.as_mut() {
                        undo.retrans += 1;
                        undo.retransmit_ts.get_or_insert((ts, end));
                    }
                }
                self.txq.retransmitted(i, now);
                self.retransmits += 1;
                return self.send_unit(now, cfg, sink_wnd, i, buf, gather);
            }
        }
        self.fast_rtx = false;

        if self.send_tlp {
            self.send_tlp = false;
            if let Some(len) = self.send_loss_probe(now, cfg, ulp, sink_wnd, buf, gather, ev) {
                return Some(len);
            }
        }

        // New units.
        if matches!(self.state, State::Established | State::CloseWait) && !self.fin_queued {
            let in_flight = self.flight_size() as u32;
            let wnd_avail = self.snd_wnd.saturating_sub(in_flight) as usize;
            let max_len = self.eff_mss.min(wnd_avail);
            // RFC 9293 §3.8.6.2.1 sender SWS avoidance.
            let sws_ok = max_len == self.eff_mss
                || (max_len > 0 && self.txq.is_empty())
                || (max_len > 0 && max_len >= self.max_snd_wnd as usize / 2);
            let own_ok = sws_ok && self.pipe() < self.cc.cwnd();
            // The engine's bound on octets in flight over all connections
            // (`Config::max_flight`) comes on top of the connection's own windows.
            let shared_ok = self.flight_open;
            // The source is asked for a unit first and whether it holds data only when it
            // gives none (it answers `None` when nothing is ready): one question per unit
            // of a run, not two.
            if own_ok && shared_ok {
                if let Some(unit) = ulp.next_unit(self.snd_nxt, max_len) {
                    return self.queue_unit(now, cfg, sink_wnd, unit, max_len, buf, gather, ev);
                }
            }
            if ulp.pending() {
                if own_ok && !shared_ok {
                    // Its window is open: no probing, the engine wakes it.
                    self.flight_held = true;
                } else if self.txq.is_empty() && self.persist_deadline.is_none() {
                    self.persist_deadline = self.arm(now + self.rtt.rto());
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
                return self.send_unit(now, cfg, sink_wnd, i, buf, gather);
            } else {
                self.persist_deadline = None;
            }
        }

        if self.send_probe {
            // Zero-window probe / keepalive: an empty segment below SND.UNA elicits an ACK
            // carrying the current window without splitting any unit.
            self.send_probe = false;
            let probe_seq = self.snd_una.wrapping_sub(1);
            return self.send_empty(now, cfg, sink_wnd, TcpControl::None, probe_seq, buf);
        }
        if self.ack_now || (!self.fin_received && self.window_update_due(cfg, sink_wnd)) {
            return self.send_ack(now, cfg, sink_wnd, buf);
        }
        None
    }

    /// A tail loss probe (RFC 8985 §7.3): a new unit if the peer's window has room (not
    /// limited by the congestion window), else the last unit again; the RTO restarts.
    #[allow(clippy::too_many_arguments)]
    fn send_loss_probe(
        &mut self,
        now: Instant,
        cfg: &Config,
        ulp: &mut impl Upper,
        sink_wnd: usize,
        buf: &mut [u8],
        gather: &mut Gather,
        ev: &mut Vec<TcbEvent>,
    ) -> Option<usize> {
        let mut out = None;
        let mut retransmit_ts = None;
        if matches!(self.state, State::Established | State::CloseWait)
            && !self.fin_queued
            && ulp.pending()
        {
            let in_flight = self.flight_size() as u32;
            let max_len = self
                .eff_mss
                .min(self.snd_wnd.saturating_sub(in_flight) as usize);
            if max_len > 0 {
                if let Some(unit) = ulp.next_unit(self.snd_nxt, max_len) {
                    out = self.queue_unit(now, cfg, sink_wnd, unit, max_len, buf, gather, ev);
                }
            }
        }
        if out.is_none() {
            let i = self.txq.len().checked_sub(1)?;
            if self.txq.unit(i).sacked {
                return None;
            }
            self.txq.retransmitted(i, now);
            self.retransmits += 1;
            retransmit_ts = Some(self.tsval(now));
            out = self.send_unit(now, cfg, sink_wnd, i, buf, gather);
        }
        self.loss_probes += 1;
        self.tlp = Some(TlpProbe {
            end: self.snd_nxt,
            retransmit_ts,
        });
        self.tlp_deadline = None;
        self.rtx_deadline = self.arm(now + self.rtt.rto());
        out
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
        gather: &mut Gather,
        ev: &mut Vec<TcbEvent>,
    ) -> Option<usize> {
        // A room longer than the buffer is refused as too large a unit.
        let Some(payload) = unit.buffer.get(usize::from(unit.headroom())..) else {
            log::error!("segment source returned a unit with room beyond it; aborting");
            self.abort_with(CloseReason::UnitTooLarge, ev);
            return None;
        };
        let len = payload.len();
        if len == 0 {
            return None;
        }
        if len > max_len {
            log::error!("segment source returned a {len}-byte unit, limit {max_len}; aborting");
            self.abort_with(CloseReason::UnitTooLarge, ev);
            return None;
        }
        let useq = self.snd_nxt;
        self.snd_nxt = useq.wrapping_add(len as u32);
        self.persist_deadline = None;
        self.persist_backoff = 0;
        let out = if gather.wants(len) {
            // A sum the source took is kept for every transmission, as one taken here
            // would be.
            self.txq.push_summed(useq, unit, now);
            let i = self.txq.len() - 1;
            self.send_unit(now, cfg, sink_wnd, i, buf, gather)
        } else {
            // Written from the unit in hand, then queued: the send queue's entry is made
            // once, not looked up again for the segment.
            let out = self.send_new(now, cfg, sink_wnd, useq, payload, unit.sum(), buf);
            self.txq.push_summed(useq, unit, now);
            out
        };
        self.arm_tlp(now, cfg);
        out
    }
}
