//! MPA connection setup (RFC 5044 §7.1; RFC 6581 enhanced establishment), both roles.
//!
//! The initiator sends an MPA Request right after the TCP handshake; the responder hands the
//! request to its ULP, which accepts or rejects it, and answers with an MPA Reply. Revision 2
//! with the RFC 6581 IRD/ORD words is the default; a revision 1 peer gets revision 1. CRC is
//! used in both directions when either side asks for it; markers are per direction. In
//! peer-to-peer mode the initiator's first FPDU is a zero-length RTR message that the
//! responder must receive before it may send.
//!
//! Sans-IO: stream bytes in (`handle_input`, which reports how many octets belonged to the
//! frame), bytes out (`poll_transmit`), events out (`poll_event`), time passed in.

use std::collections::VecDeque;
use std::time::Duration;

use tcp::Instant;

use crate::mpa::error::MpaError;
use crate::wire::ddp::{TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use crate::wire::mpa::{
    Frame, FrameKind, FrameRepr, IrdOrd, ReservedBits, RtrTypes, WireError, FRAME_HEADER_LEN,
    IRD_ORD_LEN, IRD_ORD_MASK, MAX_PRIVATE_DATA_LEN,
};
use crate::wire::rdmap::{Opcode, READ_REQUEST_LEN};

/// Which side of the connection we are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Active side: sends the MPA Request.
    Initiator,
    /// Passive side: answers with the MPA Reply.
    Responder,
}

/// The zero-length message that opens a peer-to-peer connection (RFC 6581 §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RtrKind {
    /// Zero-length Send.
    Send,
    /// Zero-length RDMA Write.
    Write,
    /// Zero-length RDMA Read.
    Read,
}

impl RtrKind {
    fn as_types(self) -> RtrTypes {
        let mut t = RtrTypes::NONE;
        match self {
            RtrKind::Send => t.send = true,
            RtrKind::Write => t.write = true,
            RtrKind::Read => t.read = true,
        }
        t
    }

    /// The single kind in `t`, if exactly one is set.
    fn from_single(t: RtrTypes) -> Option<RtrKind> {
        match (t.send, t.write, t.read) {
            (true, false, false) => Some(RtrKind::Send),
            (false, true, false) => Some(RtrKind::Write),
            (false, false, true) => Some(RtrKind::Read),
            _ => None,
        }
    }

    /// The preferred kind in `t`: Write (no receive buffer, no response), then Read, then Send.
    fn preferred(t: RtrTypes) -> Option<RtrKind> {
        if t.write {
            Some(RtrKind::Write)
        } else if t.read {
            Some(RtrKind::Read)
        } else if t.send {
            Some(RtrKind::Send)
        } else {
            None
        }
    }
}

/// Local MPA policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpaConfig {
    /// Highest revision we speak (1 or 2).
    pub revision: u8,
    /// Set C: require CRCs (used in both directions).
    pub require_crc: bool,
    /// Set M: ask the peer to send us markers.
    pub want_markers: bool,
    /// Agree to send markers when the peer asks (Linux siw refuses and rejects).
    pub accept_markers: bool,
    /// Our IRD (inbound RDMA Read requests we can hold), 14 bits.
    pub ird: u16,
    /// Our ORD (outbound RDMA Read requests we want), 14 bits.
    pub ord: u16,
    /// Peer-to-peer mode (revision 2): the RTR types we offer (initiator) or accept
    /// (responder). `None` disables peer-to-peer mode.
    pub p2p: Option<RtrTypes>,
    /// ULP private data of our Request (initiator only; the responder passes its own to
    /// `accept`/`reject`).
    pub private_data: Vec<u8>,
    /// How long a responder waits for the Request (from the connection's creation) and, in
    /// peer-to-peer mode, for the RTR after its Reply.
    pub timeout: Duration,
    /// How long an initiator waits for the Reply after its Request reached the stream. Longer
    /// than `timeout` (as in Linux siw, 10 s against 5 s): the wait spans the Request's and
    /// the Reply's transfers, each possibly retransmitted at an RTO of 3 s when the handshake
    /// lost a SYN (RFC 6298 §5.7), and the responder's decision.
    pub reply_timeout: Duration,
    /// Treatment of reserved bits in received frames.
    pub reserved_bits: ReservedBits,
}

impl Default for MpaConfig {
    /// Revision 2, CRC on request only, no markers (refused, as Linux siw), IRD/ORD 16, no
    /// peer-to-peer, 5 s for the Request and 10 s for the Reply (as Linux siw).
    fn default() -> Self {
        MpaConfig {
            revision: 2,
            require_crc: false,
            want_markers: false,
            accept_markers: false,
            ird: 16,
            ord: 16,
            p2p: None,
            private_data: Vec::new(),
            timeout: Duration::from_secs(5),
            reply_timeout: Duration::from_secs(10),
            reserved_bits: ReservedBits::Reject,
        }
    }
}

/// The outcome of a successful negotiation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// Our role.
    pub role: Role,
    /// Negotiated revision.
    pub revision: u8,
    /// CRC in both directions.
    pub crc: bool,
    /// We must send markers.
    pub markers_tx: bool,
    /// The peer sends us markers.
    pub markers_rx: bool,
    /// Whether RFC 6581 IRD/ORD were exchanged (otherwise `ird`/`ord` are the local
    /// configuration and the ULP must exchange them itself, VERBS-00 §6.6.1).
    pub enhanced: bool,
    /// Our IRD.
    pub ird: u16,
    /// Our ORD, never above the peer's IRD.
    pub ord: u16,
    /// Peer-to-peer RTR: the initiator sends this zero-length message first and the
    /// responder waits for it.
    pub rtr: Option<RtrKind>,
    /// The peer's ULP private data (after the IRD/ORD words).
    pub private_data: Vec<u8>,
}

/// What the responder's ULP sees of an incoming Request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectRequest {
    /// Revision of the Request.
    pub revision: u8,
    /// The initiator asked for CRC.
    pub crc: bool,
    /// The initiator asked for markers.
    pub markers: bool,
    /// RFC 6581 IRD/ORD words, when present.
    pub ird_ord: Option<IrdOrd>,
    /// The initiator's ULP private data.
    pub private_data: Vec<u8>,
}

/// Negotiation events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Responder: a Request arrived; call `accept` or `reject`.
    ConnectRequest(ConnectRequest),
    /// FPDU mode may start (for a peer-to-peer responder: the RTR arrived).
    Established(Negotiated),
    /// Initiator: the responder rejected us with this private data.
    Rejected {
        /// The responder's ULP private data.
        private_data: Vec<u8>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    AwaitReply,
    AwaitRequest,
    RequestReceived(ConnectRequest),
    AwaitRtr,
    Established,
    Rejected,
    Failed,
}

/// MPA negotiation state machine for one connection.
#[derive(Debug)]
pub struct Negotiator {
    role: Role,
    cfg: MpaConfig,
    state: State,
    rx: Vec<u8>,
    tx: VecDeque<Vec<u8>>,
    events: VecDeque<Event>,
    deadline: Option<Instant>,
    sent_revision: u8,
    negotiated: Option<Negotiated>,
}

impl Negotiator {
    /// Starts the initiator side; the Request is ready in `poll_transmit`.
    pub fn initiator(cfg: MpaConfig, now: Instant) -> Result<Self, MpaError> {
        Self::check_config(&cfg)?;
        let enhanced = cfg.revision == 2;
        let ird_ord = enhanced.then(|| IrdOrd {
            ird: cfg.ird,
            ord: cfg.ord,
            p2p: cfg.p2p.is_some(),
            rtr: cfg.p2p.unwrap_or_default(),
        });
        let request = FrameRepr {
            kind: FrameKind::Request,
            markers: cfg.want_markers,
            crc: cfg.require_crc,
            reject: false,
            revision: cfg.revision,
            ird_ord,
            private_data: &cfg.private_data,
        }
        .to_vec()?;
        let mut n = Negotiator::new(Role::Initiator, cfg, State::AwaitReply, now);
        n.sent_revision = n.cfg.revision;
        n.tx.push_back(request);
        Ok(n)
    }

    /// Starts the responder side, waiting for the Request.
    pub fn responder(cfg: MpaConfig, now: Instant) -> Result<Self, MpaError> {
        Self::check_config(&cfg)?;
        Ok(Negotiator::new(
            Role::Responder,
            cfg,
            State::AwaitRequest,
            now,
        ))
    }

    fn new(role: Role, cfg: MpaConfig, state: State, now: Instant) -> Self {
        let deadline = Some(
            now + match role {
                Role::Initiator => cfg.reply_timeout,
                Role::Responder => cfg.timeout,
            },
        );
        Negotiator {
            role,
            cfg,
            state,
            rx: Vec::with_capacity(FRAME_HEADER_LEN),
            tx: VecDeque::new(),
            events: VecDeque::new(),
            deadline,
            sent_revision: 0,
            negotiated: None,
        }
    }

    fn check_config(cfg: &MpaConfig) -> Result<(), MpaError> {
        if cfg.revision == 0 || cfg.revision > 2 {
            return Err(WireError::UnsupportedRevision(cfg.revision).into());
        }
        let room = MAX_PRIVATE_DATA_LEN - if cfg.revision == 2 { IRD_ORD_LEN } else { 0 };
        if cfg.private_data.len() > room {
            return Err(WireError::PrivateDataTooLong(cfg.private_data.len() as u16).into());
        }
        if cfg.p2p.is_some() && cfg.revision < 2 {
            return Err(MpaError::NoMatchingRtr("peer-to-peer needs revision 2"));
        }
        Ok(())
    }

    /// Our role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The negotiated parameters, once known (a responder knows them after `accept`).
    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.negotiated.as_ref()
    }

    /// Whether we may send FPDUs now (false for a peer-to-peer responder awaiting the RTR).
    pub fn may_send_fpdus(&self) -> bool {
        self.state == State::Established
    }

    /// Whether the exchange is still running.
    pub fn is_negotiating(&self) -> bool {
        matches!(
            self.state,
            State::AwaitReply | State::AwaitRequest | State::RequestReceived(_) | State::AwaitRtr
        )
    }

    /// Next bytes to write to the TCP stream.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.tx.pop_front()
    }

    /// Next negotiation event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When `handle_timeout` must be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::AwaitReply | State::AwaitRequest | State::AwaitRtr => self.deadline,
            _ => None,
        }
    }

    /// Our frame reached the stream at `now` (the transport took it): an initiator awaiting
    /// the Reply waits `timeout` from here, not from its creation, so the time TCP took to
    /// connect (SYN retransmissions under load, say) is not counted against the peer.
    pub fn frame_sent(&mut self, now: Instant) {
        if self.state == State::AwaitReply {
            self.deadline = Some(now + self.cfg.reply_timeout);
        }
    }

    /// Fails the negotiation when the peer's frame (or RTR) is overdue.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), MpaError> {
        match self.poll_timeout() {
            Some(d) if now >= d => {
                log::debug!("mpa: {:?} timed out in {:?}", self.role, self.state);
                self.state = State::Failed;
                Err(MpaError::Timeout)
            }
            _ => Ok(()),
        }
    }

    /// Feeds stream bytes; returns how many belonged to the MPA frame. The rest (for an
    /// initiator: FPDUs that followed the Reply in the same segment) is the FPDU stream.
    pub fn handle_input(&mut self, now: Instant, data: &[u8]) -> Result<usize, MpaError> {
        let expected = match self.state {
            State::AwaitReply => FrameKind::Reply,
            State::AwaitRequest => FrameKind::Request,
            State::Failed => return Err(MpaError::NotNegotiating("failed")),
            State::Rejected => return Err(MpaError::NotNegotiating("rejected")),
            _ => return Ok(0),
        };
        if data.is_empty() {
            return Ok(0);
        }
        if self.handle_timeout(now).is_err() {
            return Err(MpaError::Timeout);
        }
        // Header first, so that a bad frame is refused before its private data arrives.
        let mut used = 0;
        if self.rx.len() < FRAME_HEADER_LEN {
            let n = (FRAME_HEADER_LEN - self.rx.len()).min(data.len());
            self.rx.extend_from_slice(&data[..n]);
            used += n;
            if self.rx.len() < FRAME_HEADER_LEN {
                return Ok(used);
            }
            let header = Frame::new_unchecked(&self.rx[..]);
            let kind = FrameRepr::validate_header(&header, self.cfg.reserved_bits)
                .map_err(|e| self.fail(e.into()))?;
            if kind != expected {
                return Err(self.fail(WireError::UnexpectedKind { expected }.into()));
            }
        }
        let total = Frame::new_unchecked(&self.rx[..]).total_len();
        let n = (total - self.rx.len()).min(data.len() - used);
        self.rx.extend_from_slice(&data[used..used + n]);
        used += n;
        if self.rx.len() < total {
            return Ok(used);
        }
        let frame_bytes = std::mem::take(&mut self.rx);
        let frame = Frame::new_unchecked(&frame_bytes[..]);
        let repr =
            FrameRepr::parse(&frame, self.cfg.reserved_bits).map_err(|e| self.fail(e.into()))?;
        let result = match expected {
            FrameKind::Reply => self.on_reply(&repr),
            FrameKind::Request => self.on_request(&repr),
        };
        result.map_err(|e| self.fail(e))?;
        Ok(used)
    }

    fn fail(&mut self, e: MpaError) -> MpaError {
        log::debug!("mpa: {:?} negotiation failed: {e}", self.role);
        self.state = State::Failed;
        e
    }

    fn on_request(&mut self, req: &FrameRepr<'_>) -> Result<(), MpaError> {
        let request = ConnectRequest {
            revision: req.revision,
            crc: req.crc,
            markers: req.markers,
            ird_ord: req.ird_ord,
            private_data: req.private_data.to_vec(),
        };
        self.deadline = None;
        if req.markers && !self.cfg.accept_markers {
            // Linux siw behaviour: a Reply with R set that echoes the request bits.
            let reply = FrameRepr {
                kind: FrameKind::Reply,
                markers: req.markers,
                crc: req.crc,
                reject: true,
                revision: req.revision.min(self.cfg.revision),
                ird_ord: None,
                private_data: &[],
            }
            .to_vec()?;
            self.tx.push_back(reply);
            self.state = State::Rejected;
            return Err(MpaError::MarkersRefused);
        }
        self.events
            .push_back(Event::ConnectRequest(request.clone()));
        self.state = State::RequestReceived(request);
        Ok(())
    }

    /// Responder, before `accept`: the IRD and ORD to offer in the Reply (RFC 6581) instead
    /// of the configuration's, as an application that accepts with its own depths asks
    /// (rdma_accept's responder_resources / initiator_depth). False once the Reply is out
    /// or for an initiator.
    pub fn set_reply_ird_ord(&mut self, ird: u16, ord: u16) -> bool {
        let open = matches!(self.state, State::AwaitRequest | State::RequestReceived(_));
        if self.role != Role::Responder || !open {
            return false;
        }
        self.cfg.ird = ird;
        self.cfg.ord = ord;
        true
    }

    /// Responder: accepts the pending Request, sending a Reply with `private_data`.
    /// Returns `NoMatchingRtr` (Terminate 2/0/07 after the Reply) when the initiator wants
    /// peer-to-peer mode and no RTR type is acceptable.
    pub fn accept(&mut self, now: Instant, private_data: &[u8]) -> Result<(), MpaError> {
        let req = match &self.state {
            State::RequestReceived(r) => r.clone(),
            _ => return Err(MpaError::NotNegotiating("not awaiting a decision")),
        };
        let revision = req.revision.min(self.cfg.revision);
        let enhanced = revision == 2 && req.ird_ord.is_some();
        let room = MAX_PRIVATE_DATA_LEN - if enhanced { IRD_ORD_LEN } else { 0 };
        if private_data.len() > room {
            return Err(WireError::PrivateDataTooLong(private_data.len() as u16).into());
        }
        let crc = req.crc || self.cfg.require_crc;
        let (ird, ord) = match req.ird_ord {
            // Never promise more outbound Reads than the initiator can take (RFC 6581 §5).
            Some(io) if enhanced => (self.cfg.ird, self.cfg.ord.min(io.ird)),
            _ => (self.cfg.ird, self.cfg.ord),
        };
        let mut rtr = None;
        let mut reply_rtr = RtrTypes::NONE;
        let mut no_match = false;
        if let (Some(io), Some(ours)) = (req.ird_ord.filter(|_| enhanced), self.cfg.p2p) {
            if io.p2p {
                match RtrKind::preferred(io.rtr.intersect(ours)) {
                    Some(k) => {
                        rtr = Some(k);
                        reply_rtr = k.as_types();
                    }
                    None => {
                        no_match = true;
                        reply_rtr = ours;
                    }
                }
            }
        }
        let p2p_reply = rtr.is_some() || no_match;
        let reply = FrameRepr {
            kind: FrameKind::Reply,
            markers: self.cfg.want_markers,
            crc,
            reject: false,
            revision,
            ird_ord: enhanced.then_some(IrdOrd {
                ird: ird & IRD_ORD_MASK,
                ord: ord & IRD_ORD_MASK,
                p2p: p2p_reply,
                rtr: reply_rtr,
            }),
            private_data,
        }
        .to_vec()?;
        self.tx.push_back(reply);
        if no_match {
            self.state = State::Failed;
            return Err(MpaError::NoMatchingRtr(
                "initiator offers no acceptable RTR type",
            ));
        }
        let negotiated = Negotiated {
            role: Role::Responder,
            revision,
            crc,
            markers_tx: req.markers,
            markers_rx: self.cfg.want_markers,
            enhanced,
            ird: ird & IRD_ORD_MASK,
            ord: ord & IRD_ORD_MASK,
            rtr,
            private_data: req.private_data.clone(),
        };
        self.negotiated = Some(negotiated.clone());
        if rtr.is_some() {
            self.state = State::AwaitRtr;
            self.deadline = Some(now + self.cfg.timeout);
        } else {
            self.state = State::Established;
            self.events.push_back(Event::Established(negotiated));
        }
        Ok(())
    }

    /// Responder: rejects the pending Request with `private_data` (RFC 5044 §7.1: R set);
    /// close the connection after sending it.
    pub fn reject(&mut self, private_data: &[u8]) -> Result<(), MpaError> {
        let req = match &self.state {
            State::RequestReceived(r) => r.clone(),
            _ => return Err(MpaError::NotNegotiating("not awaiting a decision")),
        };
        let revision = req.revision.min(self.cfg.revision);
        let enhanced = revision == 2 && req.ird_ord.is_some();
        let reply = FrameRepr {
            kind: FrameKind::Reply,
            markers: self.cfg.want_markers,
            crc: req.crc || self.cfg.require_crc,
            reject: true,
            revision,
            ird_ord: enhanced.then_some(IrdOrd {
                ird: self.cfg.ird,
                ord: self.cfg.ord,
                p2p: false,
                rtr: RtrTypes::NONE,
            }),
            private_data,
        }
        .to_vec()?;
        self.tx.push_back(reply);
        self.state = State::Rejected;
        Ok(())
    }

    fn on_reply(&mut self, rep: &FrameRepr<'_>) -> Result<(), MpaError> {
        self.deadline = None;
        if rep.revision > self.sent_revision {
            return Err(MpaError::RevisionMismatch {
                requested: self.sent_revision,
                reply: rep.revision,
            });
        }
        if rep.reject {
            self.state = State::Rejected;
            self.events.push_back(Event::Rejected {
                private_data: rep.private_data.to_vec(),
            });
            return Ok(());
        }
        if rep.markers && !self.cfg.accept_markers {
            return Err(MpaError::MarkersRefused);
        }
        let enhanced = rep.revision == 2 && self.sent_revision == 2 && rep.ird_ord.is_some();
        let (ird, ord, rtr) = match rep.ird_ord.filter(|_| enhanced) {
            Some(io) => {
                if io.ord > self.cfg.ird {
                    // RFC 6581 §7: our IRD cannot take the responder's Reads.
                    return Err(MpaError::InsufficientIrd {
                        local_ird: self.cfg.ird,
                        peer_ord: io.ord,
                    });
                }
                let rtr = match (io.p2p, self.cfg.p2p) {
                    (false, _) => None,
                    (true, None) => {
                        return Err(MpaError::NoMatchingRtr("peer-to-peer not requested"))
                    }
                    (true, Some(offered)) => {
                        let k = RtrKind::from_single(io.rtr)
                            .ok_or(MpaError::NoMatchingRtr("reply must choose one RTR type"))?;
                        if offered.intersect(k.as_types()).is_empty() {
                            return Err(MpaError::NoMatchingRtr("reply chose an RTR not offered"));
                        }
                        Some(k)
                    }
                };
                (self.cfg.ird, self.cfg.ord.min(io.ird), rtr)
            }
            None => (self.cfg.ird, self.cfg.ord, None),
        };
        let negotiated = Negotiated {
            role: Role::Initiator,
            revision: rep.revision,
            crc: rep.crc || self.cfg.require_crc,
            markers_tx: rep.markers,
            markers_rx: self.cfg.want_markers,
            enhanced,
            ird,
            ord,
            rtr,
            private_data: rep.private_data.to_vec(),
        };
        self.negotiated = Some(negotiated.clone());
        self.state = State::Established;
        self.events.push_back(Event::Established(negotiated));
        Ok(())
    }

    /// Responder in peer-to-peer mode: checks the first ULPDU (DDP segment) received against
    /// the agreed RTR; on success FPDU sending is allowed and `Established` is emitted.
    pub fn handle_rtr(&mut self, now: Instant, ulpdu: &[u8]) -> Result<(), MpaError> {
        if self.state != State::AwaitRtr {
            return Err(MpaError::NotNegotiating("not awaiting an RTR"));
        }
        self.handle_timeout(now)?;
        let negotiated = self
            .negotiated
            .clone()
            .ok_or(MpaError::NotNegotiating("no parameters"))?;
        let kind = negotiated.rtr.ok_or(MpaError::NotNegotiating("no RTR"))?;
        if !rtr_matches(kind, ulpdu) {
            self.state = State::Failed;
            return Err(MpaError::NoMatchingRtr(
                "first message is not the agreed RTR",
            ));
        }
        self.deadline = None;
        self.state = State::Established;
        self.events.push_back(Event::Established(negotiated));
        Ok(())
    }
}

/// Whether `ulpdu` is the zero-length RTR message of `kind` (RFC 6581 §5, RFC 5040 §4):
/// a last segment with DDP version 1 and RDMAP version 1, no payload.
pub fn rtr_matches(kind: RtrKind, ulpdu: &[u8]) -> bool {
    if ulpdu.len() < TAGGED_HEADER_LEN {
        return false;
    }
    let (ddp, rdmap) = (ulpdu[0], ulpdu[1]);
    let tagged = ddp & 0x80 != 0;
    let last = ddp & 0x40 != 0;
    if !last || ddp & 0x03 != 1 || rdmap >> 6 != 1 {
        return false;
    }
    let opcode = Opcode::from_u4(rdmap & 0x0f);
    match kind {
        RtrKind::Write => {
            tagged && opcode == Some(Opcode::Write) && ulpdu.len() == TAGGED_HEADER_LEN
        }
        RtrKind::Send => {
            !tagged && opcode == Some(Opcode::Send) && ulpdu.len() == UNTAGGED_HEADER_LEN
        }
        RtrKind::Read => {
            let size_at = UNTAGGED_HEADER_LEN + 12;
            !tagged
                && opcode == Some(Opcode::ReadRequest)
                && ulpdu.len() == UNTAGGED_HEADER_LEN + READ_REQUEST_LEN
                && ulpdu[size_at..size_at + 4] == [0, 0, 0, 0]
        }
    }
}
