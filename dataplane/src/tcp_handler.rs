//! The poll-loop handler of a TCP engine over any ULP.
//!
//! Classified TCP segments go to [`tcp::Engine::handle_tcp`] with the context the engine
//! lends its connections (the RNIC for iWARP, nothing for plain byte streams). Once per
//! iteration and port, right after the receive burst, the handler runs the engine's timers,
//! then the [`TcpService`] on top (its events, application data, the ULPs' own timers);
//! then, after whatever the loop runs in between, the service's flush, the drain of the
//! engine's output into transmit buffers after the Ethernet header, with the next hop
//! resolved through the port's ARP cache, and last lets the service see what the
//! transmission raised.
//!
//! Transmission is budgeted: at most [`TcpHandler::set_tx_per_poll`] packets per iteration
//! and port, counting the frames the port refused earlier, so a full ring leaves the data in
//! TCP's queues instead of dropping it.

use std::marker::PhantomData;
use std::time::Duration;

use tcp::{Engine, Ulp};

use crate::classify::{Classified, FrameClass};
use crate::clock::Instant;
use crate::lcore::{Handled, Handler, PortContext, SendOutcome, ARP_ATTEMPTS};
use crate::neighbour::REQUEST_INTERVAL;
use crate::port::Port;
use crate::telemetry::{Dict, Section, Snapshot};

/// Default of [`TcpHandler::set_tx_per_poll`].
pub const TX_PER_POLL: usize = 128;

/// Smallest TCP payload the handler lets a port send from the engine's buffer rather than
/// copy into the frame (where the port can): below it, the copy costs less than the extra
/// mbuf and the reference that keep the buffer.
pub const TX_IN_PLACE_MIN: usize = 1024;

/// How long the handler holds back packets whose next hop's MAC is unknown while one such
/// packet waits for it: the port holds one, and a newer one would replace it (a thousand
/// SYNs sent before the first ARP reply, on a memif link that came up 50 ms earlier, lost
/// all but one, and those waited a whole initial RTO). Packets to known neighbours go on
/// meanwhile (and RSTs, best effort). As long as the port tries to resolve it
/// ([`ARP_ATTEMPTS`] × [`REQUEST_INTERVAL`]): under load a memif link came up after the
/// first ARP request, and the held SYN's wait outlived a one-interval limit.
pub const RESOLVE_WAIT: Duration = REQUEST_INTERVAL.saturating_mul(ARP_ATTEMPTS);

/// What runs on top of a TCP engine in the poll loop: it owns the application side of the
/// connections (a connection manager, a byte-stream application).
pub trait TcpService<U, C> {
    /// The iteration's work before the engine's output is drained: engine events,
    /// application data, the ULPs' own timers.
    fn work(&mut self, tcp: &mut Engine<U, C>, cx: &mut C, now: Instant);

    /// After [`TcpService::work`], just before the drain, once an application may have
    /// posted work in between ([`crate::lcore::PollLoop::poll_once_with`]): hand on what it
    /// posted, so that it leaves in this iteration (the default does nothing).
    fn flush(&mut self, _tcp: &mut Engine<U, C>, _cx: &mut C, _now: Instant) {}

    /// Whether [`TcpService::flush`] may have anything to hand on; when it says no and the
    /// engine has nothing queued and no event, the handler's transmit work is skipped
    /// (the default: always).
    fn has_flush_work(&self, _tcp: &Engine<U, C>, _cx: &C) -> bool {
        true
    }

    /// After the drain: events the transmission raised (the default does nothing).
    fn after_transmit(&mut self, _tcp: &mut Engine<U, C>, _cx: &mut C, _now: Instant) {}

    /// Adds what the service shows in telemetry to `snap` (the default adds nothing).
    fn observe(&self, _tcp: &Engine<U, C>, _cx: &C, _snap: &mut Snapshot) {}
}

/// A TCP engine with ULPs `U`, the context `C` it lends them, and the service `S` on top,
/// as a poll-loop [`Handler`].
pub struct TcpHandler<U, C, S> {
    engine: Engine<U, C>,
    cx: C,
    service: S,
    tx_per_poll: usize,
    /// Since when a packet of ours waits for its next hop's MAC ([`RESOLVE_WAIT`]).
    resolving_since: Option<Instant>,
    /// Tokens of payloads the engine lent that the port let go of (or never took), for
    /// [`Engine::payloads_returned`].
    returned: Vec<u64>,
    ulp: PhantomData<fn() -> U>,
}

impl<U: Ulp<C>, C, S: TcpService<U, C>> TcpHandler<U, C, S> {
    /// A handler over `engine`, lending `cx` to its connections.
    pub fn new(engine: Engine<U, C>, cx: C, service: S) -> Self {
        TcpHandler {
            engine,
            cx,
            service,
            tx_per_poll: TX_PER_POLL,
            resolving_since: None,
            returned: Vec::new(),
            ulp: PhantomData,
        }
    }

    /// Most packets queued per iteration and port, those the port refused earlier included,
    /// so that one burst does not overflow the port's transmit ring or the peer's receive
    /// ring (the rest goes out in the next iterations).
    pub fn set_tx_per_poll(&mut self, n: usize) {
        self.tx_per_poll = n.max(1);
    }

    /// The TCP engine (monitoring).
    pub fn tcp(&self) -> &Engine<U, C> {
        &self.engine
    }

    /// The context the connections borrow.
    pub fn context(&self) -> &C {
        &self.cx
    }

    /// The context, mutably (between iterations: the loop does not hold it).
    pub fn context_mut(&mut self) -> &mut C {
        &mut self.cx
    }

    /// The service on top.
    pub fn service(&self) -> &S {
        &self.service
    }

    /// The engine, the context and the service at once, for the service's own calls.
    pub fn parts(&mut self) -> (&mut Engine<U, C>, &mut C, &mut S) {
        (&mut self.engine, &mut self.cx, &mut self.service)
    }

    /// One round of the engine's timers and the service's work, without a port (for work
    /// handed to the handler between iterations); first ends the receive burst that
    /// [`Handler::handle`] opened.
    pub fn work(&mut self, now: Instant) {
        if self.engine.in_burst() {
            self.engine.end_burst(now, &mut self.cx);
        }
        if self.engine.poll_timeout().is_some_and(|d| d <= now) {
            self.engine.handle_timeout(now);
        }
        self.service.work(&mut self.engine, &mut self.cx, now);
    }
}

impl<P: Port, U: Ulp<C>, C, S: TcpService<U, C>> Handler<P> for TcpHandler<U, C, S> {
    fn handle(
        &mut self,
        ctx: &mut PortContext<'_, P>,
        now: Instant,
        frame: P::Buf,
        meta: &Classified,
    ) -> Handled {
        if meta.class != FrameClass::Tcp {
            return Handled::Ignored;
        }
        let segment = meta.l4(frame.as_ref());
        // The frames of one receive burst form one engine burst, ended by `poll`.
        if !self.engine.in_burst() {
            self.engine.begin_burst();
        }
        let unverified = meta.tcp_unverified;
        let handled = match self.engine.handle_tcp_checking(
            now,
            &mut self.cx,
            &meta.src_ip,
            &meta.dst_ip,
            segment,
            unverified,
        ) {
            Ok(()) => Handled::Consumed,
            Err(e) => {
                // Refused segments are rare: which of them had a bad checksum is found out
                // here, to count them as the classifier does.
                if unverified && !tcp::checksum::tcp_checksum_ok(meta.src_ip, meta.dst_ip, segment)
                {
                    ctx.count_bad_tcp_checksum();
                }
                log::debug!("tcp: {e}");
                Handled::Ignored
            }
        };
        // The engine copied what it keeps: the frame is freed with its burst's.
        ctx.retire(frame);
        handled
    }

    /// The engine verifies the checksums the classifier leaves: with the payload's sum
    /// taken by the connection's ULP where it reads the payload anyway
    /// ([`tcp::SegmentSink::stage`]: the MPA CRCs, a byte stream's copy).
    fn verifies_tcp_checksums(&self) -> bool {
        true
    }

    fn settle(&mut self, _ctx: &mut PortContext<'_, P>, now: Instant) {
        self.work(now);
    }

    /// Something queued (a connection ready, an RST), an event to take, or work for the
    /// service's flush.
    #[inline]
    fn has_transmit_work(&self) -> bool {
        let e = &self.engine;
        e.ready_len() > 0
            || e.rsts_pending()
            || e.has_events()
            || self.service.has_flush_work(e, &self.cx)
    }

    fn poll(&mut self, ctx: &mut PortContext<'_, P>, now: Instant) {
        let gather = ctx.sends_payloads_in_place();
        if gather {
            ctx.take_returned_payloads(&mut self.returned);
            if !self.returned.is_empty() {
                self.engine
                    .payloads_returned(&mut self.cx, self.returned.drain(..));
            }
        }
        self.service.flush(&mut self.engine, &mut self.cx, now);
        if !ctx.holds_unresolved() {
            self.resolving_since = None;
        }
        let resolving = self
            .resolving_since
            .is_some_and(|t| now.saturating_since(t) < RESOLVE_WAIT);
        let (engine, cx, unlent) = (&mut self.engine, &mut self.cx, &mut self.returned);
        // Frames the port refused earlier count against the budget: while its ring stays
        // full the data waits in TCP's queues, and nothing is dropped. While a packet waits
        // for a neighbour's MAC, the rest waits in TCP's queues too.
        // Nothing queued (no connection ready, no RST): no transmit buffer is taken and
        // the engine is not asked.
        let queued = engine.ready_len() > 0 || engine.rsts_pending();
        let budget = if queued { self.tx_per_poll } else { 0 };
        for _ in 0..budget {
            if ctx.tx_pending() >= self.tx_per_poll {
                break;
            }
            // Connections whose peer's MAC is unknown go behind the others; when none is
            // left whose packet would go out at once, the loop stops.
            if resolving && !defer_unresolved(engine, ctx) {
                break;
            }
            let sent = if gather {
                ctx.send_ip_with_payload(unlent, |buf| {
                    engine
                        .poll_transmit_gather(now, cx, buf, TX_IN_PLACE_MIN)
                        .map(|x| (x.packet.dst, x.packet.len, x.payload))
                })
            } else {
                ctx.send_ip(|buf| engine.poll_transmit(now, cx, buf).map(|x| (x.dst, x.len)))
            };
            match sent {
                None => break,
                Some(SendOutcome::Unresolved) => {
                    self.resolving_since.get_or_insert(now);
                    break;
                }
                // Nothing left queued: the engine is not asked once more.
                Some(_) if engine.ready_len() == 0 && !engine.rsts_pending() => break,
                Some(_) => {}
            }
        }
        self.service
            .after_transmit(&mut self.engine, &mut self.cx, now);
    }

    /// The TCP connections (`tcp`), like `ss -ti`, then the service's sections.
    fn observe(&self, snap: &mut Snapshot) {
        observe_tcp(&self.engine, snap.section("tcp"));
        self.service.observe(&self.engine, &self.cx, snap);
    }
}

/// Moves the engine's ready connections whose next packet would wait for a neighbour's MAC
/// behind the others, each at most once; whether the next packet can go out at once (a
/// queued RST always can: best effort, it never holds the others up).
fn defer_unresolved<P: Port, U: Ulp<C>, C>(
    engine: &mut Engine<U, C>,
    ctx: &PortContext<'_, P>,
) -> bool {
    if engine.rsts_pending() {
        return true;
    }
    for _ in 0..=engine.ready_len() {
        match engine.next_remote() {
            None => return false,
            Some(dst) if ctx.resolves(dst) => return true,
            Some(_) => engine.defer_next(),
        }
    }
    false
}

/// The engine's totals and one entry per connection: state, addresses, congestion and RTT
/// state, loss counters, reassembly.
fn observe_tcp<U: Ulp<C>, C>(engine: &Engine<U, C>, out: &mut Section) {
    let st = engine.stats();
    out.dict(
        "engine",
        Dict::new()
            .with("connections", engine.connection_count())
            .with("segments_in", st.segments_in)
            .with("segments_out", st.segments_out)
            .with("malformed", st.malformed)
            .with("syn_backlog_drops", st.syn_backlog_drops)
            .with("syn_cookies_sent", st.syn_cookies_sent)
            .with("syn_cookies_accepted", st.syn_cookies_accepted)
            .with("table_full_drops", st.table_full_drops)
            .with("resets_sent", st.resets_sent)
            .with("resets_dropped", st.resets_dropped)
            .with("retransmits", st.retransmits)
            .with("timeouts", st.timeouts)
            .with("spurious_timeouts", st.spurious_timeouts)
            .with("recoveries", st.recoveries)
            .with("spurious_recoveries", st.spurious_recoveries),
    );
    for id in engine.connections() {
        let (Some(i), Some(t)) = (engine.info(id), engine.tuple(id)) else {
            continue;
        };
        let us = |d: Option<std::time::Duration>| d.map_or(0, |d| d.as_micros() as u64);
        out.dict(
            &format!("c{}", id.index()),
            Dict::new()
                .with("state", format!("{:?}", i.state))
                .with("local", t.local.to_string())
                .with("remote", t.remote.to_string())
                .with("mss", i.effective_mss)
                .with("cwnd", i.cwnd)
                .with("ssthresh", i.ssthresh)
                .with("srtt_us", us(i.srtt))
                .with("rto_us", us(Some(i.rto)))
                .with("snd_wnd", i.snd_wnd)
                .with("in_flight", i.pipe)
                .with("snd_una", i.snd_una)
                .with("snd_nxt", i.snd_nxt)
                .with("rcv_nxt", i.rcv_nxt)
                .with("rx_ranges", i.rx_ranges)
                .with("rx_stored", i.rx_stored)
                .with("retransmits", i.retransmits)
                .with("timeouts", i.timeouts)
                .with("spurious_timeouts", i.spurious_timeouts)
                .with("recoveries", i.recoveries)
                .with("spurious_recoveries", i.spurious_recoveries)
                .with("sack", i.options.sack)
                .with("timestamps", i.options.timestamps)
                .with("wscale_snd", u32::from(i.options.snd_shift))
                .with("wscale_rcv", u32::from(i.options.rcv_shift)),
        );
    }
}
