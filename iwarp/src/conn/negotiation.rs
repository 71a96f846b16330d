//! Phase 1: the MPA exchange (RFC 5044 §7.1, RFC 6581), work posted meanwhile, and the
//! moves to FPDU mode or to the end.

use std::collections::VecDeque;

use super::connection::{
    Closed, ConnEvent, ConnState, Connection, Fpdu, LlpRequest, Phase, Stream,
};
use super::inbound::Inbound;
use super::outbound::Sender;
use super::receive::RxContext;
use super::rtr::rtr_message;
use crate::mpa::{
    Event as MpaEvent, Framer, MarkerSpacing, MpaError, Negotiated, Receiver, ReceiverConfig,
    Recovery, Role,
};
use crate::rdmap::{Engine, EngineConfig};
use crate::wire::mpa::{fpdu_len, MARKER_LEN};

impl Connection {
    /// Stream octets in order during negotiation.
    pub(super) fn negotiate_input<C: RxContext + ?Sized>(
        &mut self,
        seq: u32,
        data: &[u8],
        cx: &mut C,
    ) {
        let Phase::Negotiating(n) = &mut self.phase else {
            return;
        };
        if n.rx_start.is_some() {
            // The peer's frame is complete; the ULP has not decided yet: keep the octets.
            let cap = self.cfg.rx_window;
            let early = n.early.get_or_insert_with(|| (seq, Vec::new()));
            let room = cap.saturating_sub(early.1.len());
            early.1.extend_from_slice(&data[..data.len().min(room)]);
            return;
        }
        let used = match self.negotiator.handle_input(self.now, data) {
            Ok(used) => used,
            Err(e) => {
                self.fail_negotiation(e);
                return;
            }
        };
        let frame_end = seq.wrapping_add(used as u32);
        let mut established = None;
        let mut rejected = false;
        while let Some(ev) = self.negotiator.poll_event() {
            match ev {
                MpaEvent::ConnectRequest(r) => {
                    n.rx_start = Some(frame_end);
                    n.request = Some(r.clone());
                    self.events.push_back(ConnEvent::ConnectRequest(r));
                }
                MpaEvent::Established(neg) => {
                    n.rx_start = Some(frame_end);
                    established = Some(neg.clone());
                    self.events.push_back(ConnEvent::Established(neg));
                }
                MpaEvent::Rejected { private_data } => {
                    rejected = true;
                    self.events.push_back(ConnEvent::Rejected { private_data });
                }
            }
        }
        let rest = &data[used.min(data.len())..];
        if rejected {
            self.end_negotiation(ConnState::Rejected);
            self.llp.push_back(LlpRequest::Close);
        } else if let Some(neg) = established {
            self.enter_fpdu_mode(neg, cx);
            if !rest.is_empty() {
                self.receive_in_order(frame_end, rest, cx);
            }
        } else if n.rx_start.is_some() && !rest.is_empty() {
            n.early = Some((frame_end, rest.to_vec()));
        }
    }

    /// Ends the negotiation without FPDU mode: work posted meanwhile completes as Flushed.
    pub(super) fn end_negotiation(&mut self, state: ConnState) {
        let flushed = match &mut self.phase {
            Phase::Negotiating(n) => n.flush(&self.cfg),
            _ => VecDeque::new(),
        };
        self.phase = Phase::Closed(Closed {
            state,
            flushed,
            stream: None,
        });
    }

    /// Negotiation (or the peer-to-peer RTR) failed: the LLP is closed or reset as the
    /// error's recovery says; after the frames were exchanged the peer can parse one FPDU,
    /// so a Terminate goes first when the error asks for one.
    pub(super) fn fail_negotiation(&mut self, error: MpaError) {
        let recovery = error.recovery();
        log::debug!("conn: negotiation failed: {error}");
        let phase = std::mem::replace(
            &mut self.phase,
            Phase::Closed(Closed {
                state: ConnState::Failed,
                flushed: VecDeque::new(),
                stream: None,
            }),
        );
        let closed = match phase {
            Phase::Negotiating(mut n) if recovery == Recovery::Terminate => {
                let (crc, markers) = match &n.request {
                    Some(r) => (
                        r.crc || self.cfg.mpa.require_crc,
                        r.markers && self.cfg.mpa.accept_markers,
                    ),
                    None => (self.cfg.mpa.require_crc, false),
                };
                let mut engine = n.standby_engine(&self.cfg);
                engine.abort(error.terminate_cause());
                let mut sender = Sender::terminate_only(crc, markers);
                if let Some(start) = self.tx_start {
                    sender.start(start);
                }
                Closed {
                    state: ConnState::Failed,
                    flushed: VecDeque::new(),
                    stream: Some(Box::new(Stream { engine, sender })),
                }
            }
            Phase::Negotiating(mut n) => Closed {
                state: ConnState::Failed,
                flushed: n.flush(&self.cfg),
                stream: None,
            },
            Phase::Fpdu(f) => Closed {
                state: ConnState::Failed,
                flushed: VecDeque::new(),
                stream: Some(Box::new(Stream {
                    engine: f.engine,
                    sender: f.sender,
                })),
            },
            Phase::Closed(c) => Closed {
                state: ConnState::Failed,
                ..c
            },
        };
        self.phase = Phase::Closed(closed);
        self.llp.push_back(match recovery {
            Recovery::Reset => LlpRequest::Reset,
            Recovery::Close | Recovery::Terminate => LlpRequest::Close,
        });
        self.events
            .push_back(ConnEvent::NegotiationFailed { error, recovery });
        self.pump();
    }

    /// Sets up the receive side and the engine once the parameters are known.
    pub(super) fn enter_fpdu_mode<C: RxContext + ?Sized>(&mut self, n: Negotiated, cx: &mut C) {
        let Phase::Negotiating(neg) = &mut self.phase else {
            return;
        };
        let Some(rx_start) = neg.rx_start else {
            return;
        };
        let rcfg = ReceiverConfig::from_negotiated(&n, rx_start).limit_to_mss(self.emss);
        let spacing = n.markers_rx.then(|| MarkerSpacing::new(rx_start));
        let (ird, ord) = if n.enhanced {
            (n.ird, n.ord)
        } else {
            (self.cfg.mpa.ird, self.cfg.mpa.ord)
        };
        let mut ecfg =
            EngineConfig::new(self.cfg.pd, self.cfg.stream, u32::from(ird), u32::from(ord));
        ecfg.extensions = self.cfg.extensions;
        ecfg.rdmap_version = self.cfg.rdmap_version;
        ecfg.max_held_segments = self.cfg.max_held_segments;
        // A peer-to-peer responder's MPA layer consumes the RTR, the first FPDU.
        let awaiting_rtr = n.role == Role::Responder && n.rtr.is_some();
        let start = match (awaiting_rtr, n.rtr) {
            (true, Some(kind)) => {
                let len = fpdu_len(rtr_message(kind).len());
                match spacing {
                    Some(sp) => {
                        let first = rx_start.wrapping_add(MARKER_LEN as u32);
                        (MARKER_LEN + sp.interior_span(first, len)) as u64
                    }
                    None => len as u64,
                }
            }
            _ => 0,
        };
        let mut engine = Engine::with_start_position(ecfg, start);
        neg.move_work_to(&mut engine);
        let early = neg.early.take();
        let mut sender = Sender::default();
        // The initiator's hold is for Linux siw as responder; the responder's (outside
        // peer-to-peer mode, where the RTR orders the start) is RFC 5044 §7.1.2's rule 4, which
        // Linux siw as initiator enforces: it reads the Reply expecting nothing behind it
        // yet. The initiator's first FPDU ends the responder's hold early
        // ([`Connection::receive_in_order`]).
        let holds = match n.role {
            Role::Initiator => true,
            Role::Responder => n.rtr.is_none(),
        };
        if holds && !self.cfg.first_fpdu_delay.is_zero() {
            sender.hold_until = Some(self.now + self.cfg.first_fpdu_delay);
        }
        let inbound = Inbound::new(Receiver::new(rcfg), rx_start, spacing, awaiting_rtr);
        self.phase = Phase::Fpdu(Fpdu {
            negotiated: n,
            engine,
            inbound,
            sender,
        });
        self.setup_tx();
        if let Some((seq, bytes)) = early {
            self.receive_in_order(seq, &bytes, cx);
        }
    }

    /// Creates the framer once our frame went out and the parameters are known; a
    /// peer-to-peer initiator's RTR goes first (RFC 6581 §5).
    pub(super) fn setup_tx(&mut self) {
        let Some(start) = self.tx_start else {
            return;
        };
        match &mut self.phase {
            Phase::Fpdu(f) if !f.sender.is_started() => {
                f.sender.framer = Some(Framer::from_negotiated(&f.negotiated, start));
                if let (Role::Initiator, Some(kind)) = (f.negotiated.role, f.negotiated.rtr) {
                    f.sender.push_front_raw(rtr_message(kind));
                }
            }
            Phase::Closed(Closed {
                stream: Some(s), ..
            }) => s.sender.start(start),
            _ => {}
        }
    }
}
