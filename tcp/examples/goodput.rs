//! In-memory goodput of two engines: a bulk transfer between two `Engine`s whose packets
//! cross a [`tcp::sim::Link`] of 10 µs (optionally with random loss), measured in wall-clock
//! time. Shows what the engine itself costs per byte, without NIC, TAP or kernel.
//!
//! The receiving ULP runs in one of two modes, to compare the receive hook:
//! - `on`: every segment, in order or not, is placed at its stream offset in a destination
//!   buffer inside [`SegmentSink::on_segment`] and consumed there (the MPA placement path);
//! - `off`: `on_segment` consumes nothing, so the engine keeps out-of-order bytes in its
//!   reassembly store and hands every byte over through [`SegmentSink::on_in_order`].
//!
//! Both modes check every received byte against the sent pattern and exit non-zero on a
//! mismatch or a short transfer. With `both` the second run finds the allocator warm; run
//! each mode in its own process (as `testbed/tcp-goodput` does) for a fair comparison.
//!
//!     cargo run --release -p tcp --example goodput -- [MiB] [loss-percent] [on|off|both]

use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::ExitCode;
use std::time::{Duration, Instant as WallClock};

use tcp::checksum::{self, PayloadSum};
use tcp::sim::{Link, LinkConfig, Side};
use tcp::{
    Config, Consumed, Engine, Event, Instant, SegmentSink, SegmentSource, StreamSocket, Unit,
};

/// The sent byte at stream offset `off`: a period that does not divide any power of two, so
/// a misplaced segment does not compare equal by accident.
const PERIOD: usize = 251;

fn pattern_byte(off: u64) -> u8 {
    (off % PERIOD as u64) as u8
}

/// Receive-side ULP writing the stream into a ring-shaped destination buffer.
struct Placer {
    hook: bool,
    dest: Vec<u8>,
    /// Sequence number of stream offset 0: RCV.NXT at the first offered segment, or the
    /// start of the bytes held for us before `attach`.
    base: Option<u32>,
    /// Pattern over two periods plus a segment, so any offset's expected bytes are a slice.
    expect: Vec<u8>,
    received: u64,
    mismatches: u64,
    /// Stream offset of the end of everything placed so far.
    placed_end: u64,
    /// A payload already copied to its place while its checksum was summed
    /// ([`SegmentSink::stage`]): its sequence number and length.
    staged: Option<(u32, usize)>,
}

impl Placer {
    fn new(hook: bool, capacity: usize) -> Self {
        Placer {
            hook,
            dest: vec![0; capacity],
            base: None,
            expect: (0..(PERIOD + (1 << 16)) as u64).map(pattern_byte).collect(),
            received: 0,
            mismatches: 0,
            placed_end: 0,
            staged: None,
        }
    }

    /// The stream offset of sequence number `seq`.
    fn offset(&self, base: u32, seq: u32) -> u64 {
        let low = u64::from(seq.wrapping_sub(base));
        let mut off = (self.received & !0xffff_ffff) | low;
        if off + (1 << 31) < self.received {
            off += 1 << 32;
        }
        off
    }

    /// Copy `bytes` (starting at sequence `seq`) to their offset in the destination ring and
    /// check them against the pattern.
    fn place(&mut self, seq: u32, bytes: &[u8]) {
        // Bytes that arrived before `attach` come first, through `on_in_order`.
        let base = *self.base.get_or_insert(seq);
        let off = self.offset(base, seq);
        let start = (off % PERIOD as u64) as usize;
        for (i, piece) in bytes.chunks(1 << 16).enumerate() {
            let s = (start + i * (1 << 16)) % PERIOD;
            if piece != &self.expect[s..s + piece.len()] {
                self.mismatches += 1;
            }
        }
        self.placed_end = self.placed_end.max(off + bytes.len() as u64);
        if self
            .staged
            .take()
            .is_some_and(|(s, len)| s == seq && bytes.len() <= len)
        {
            // Already where it belongs.
            return;
        }
        let cap = self.dest.len();
        let at = (off % cap as u64) as usize;
        let first = bytes.len().min(cap - at);
        self.dest[at..at + first].copy_from_slice(&bytes[..first]);
        self.dest[..bytes.len() - first].copy_from_slice(&bytes[first..]);
    }
}

impl SegmentSink for Placer {
    fn on_segment(
        &mut self,
        _cx: &mut (),
        _now: Instant,
        seq: u32,
        payload: &[u8],
        _in_order: bool,
        rcv_nxt: u32,
    ) -> Consumed {
        self.base.get_or_insert(rcv_nxt);
        if self.hook {
            self.place(seq, payload);
            Consumed::all(payload.len())
        } else {
            Consumed::none()
        }
    }

    fn on_in_order(&mut self, _cx: &mut (), _now: Instant, seq: u32, bytes: &[u8]) {
        self.place(seq, bytes);
    }

    fn on_advance(&mut self, _cx: &mut (), _now: Instant, rcv_nxt: u32) {
        if let Some(base) = self.base {
            let low = u64::from(rcv_nxt.wrapping_sub(base));
            // Offsets beyond 4 GiB: carry the high part of the running total.
            let mut total = (self.received & !0xffff_ffff) | low;
            if total < self.received {
                total += 1 << 32;
            }
            self.received = total;
        }
    }

    fn rx_window(&self) -> usize {
        // The application drains the ring as fast as it is filled.
        self.dest.len()
    }

    // Placement and checksum in one pass: a payload that starts where nothing was placed
    // yet beyond it (so a bad one overwrites nothing received) is copied to its place while
    // summed, and the engine verifies with that sum.
    fn stage(&mut self, _cx: &mut (), seq: u32, payload: &[u8]) -> Option<PayloadSum> {
        self.staged = None;
        let base = self.base?;
        let off = self.offset(base, seq);
        let cap = self.dest.len();
        let at = (off % cap as u64) as usize;
        if off < self.placed_end || payload.len() > cap - at {
            return None;
        }
        let sum = checksum::copy_payload(&mut self.dest[at..at + payload.len()], payload);
        self.staged = Some((seq, payload.len()));
        Some(sum)
    }
}

impl SegmentSource for Placer {
    fn next_unit(
        &mut self,
        _cx: &mut (),
        _now: Instant,
        _seq: u32,
        _max_len: usize,
    ) -> Option<Unit> {
        None
    }

    fn pending(&self) -> bool {
        false
    }
}

/// Result of one transfer.
struct Run {
    secs: f64,
    retransmits: u64,
    timeouts: u64,
    mismatches: u64,
    received: u64,
}

fn run(total: usize, loss: f64, hook: bool) -> Run {
    let buf = 4 << 20;
    let cfg = Config {
        fill_checksums: true,
        verify_checksums: true,
        ..Config::default()
    };
    let mut a: Engine<StreamSocket> = Engine::new(cfg.clone());
    let mut b: Engine<Placer> = Engine::new(cfg);
    let a_ip = Ipv4Addr::new(10, 0, 0, 1);
    let b_ip = Ipv4Addr::new(10, 0, 0, 2);
    b.listen(SocketAddrV4::new(b_ip, 80), 16).expect("listen");
    let mut now = Instant::ZERO;
    let conn = a
        .connect(
            now,
            SocketAddrV4::new(a_ip, 0),
            SocketAddrV4::new(b_ip, 80),
            StreamSocket::new(buf, buf),
        )
        .expect("connect");
    let pattern: Vec<u8> = (0..(PERIOD + (1 << 16)) as u64).map(pattern_byte).collect();
    let mut written = 0usize;
    let mut accepted = None;
    let mut pkt = vec![0u8; 1500];
    // Simulated time advances one link delay per round, so what is sent in one round
    // arrives in the next.
    let round = Duration::from_micros(10);
    let link_cfg = LinkConfig {
        delay: round,
        rate_bps: None,
        loss,
        ..LinkConfig::default()
    };
    let mut link = Link::new(link_cfg, 0x2545_f491_4f6c_dd1d);
    let start = WallClock::now();
    let received = |b: &Engine<Placer>, c: Option<_>| {
        c.and_then(|c| b.ulp(c)).map_or(0, |p: &Placer| p.received)
    };
    while received(&b, accepted) < total as u64 {
        now = now + round;
        while let Some(d) = link.poll_delivery(now) {
            let _ = match d.to {
                Side::A => a.handle_packet(now, &mut (), &d.bytes),
                Side::B => b.handle_packet(now, &mut (), &d.bytes),
            };
        }
        a.handle_timeout(now);
        b.handle_timeout(now);
        while let Some(ev) = b.poll_event() {
            if let Event::Accepted { conn, .. } = ev {
                b.attach(now, &mut (), conn, Placer::new(hook, buf))
                    .expect("attach");
                accepted = Some(conn);
            }
        }
        while a.poll_event().is_some() {}
        if let Some(s) = a.ulp_mut(conn) {
            while written < total {
                // Written straight into the socket's send buffer.
                let n = s.write_with(|room| {
                    let at = written % PERIOD;
                    let n = room.len().min(total - written);
                    room[..n].copy_from_slice(&pattern[at..at + n]);
                    n
                });
                if n == 0 {
                    break;
                }
                written += n;
            }
        }
        while let Some(t) = a.poll_transmit(now, &mut (), &mut pkt) {
            link.send(now, Side::A, pkt[..t.len].to_vec());
        }
        while let Some(t) = b.poll_transmit(now, &mut (), &mut pkt) {
            link.send(now, Side::B, pkt[..t.len].to_vec());
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let info = a.info(conn).expect("connection");
    let placer = accepted.and_then(|c| b.ulp(c)).expect("accepted");
    Run {
        secs,
        retransmits: info.retransmits,
        timeouts: info.timeouts,
        mismatches: placer.mismatches,
        received: placer.received,
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(256);
    let loss: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(0.0) / 100.0;
    let modes: &[bool] = match args.next().as_deref() {
        None | Some("both") => &[true, false],
        Some("on") => &[true],
        Some("off") => &[false],
        Some(other) => {
            eprintln!("goodput: hook mode must be on, off or both, not '{other}'");
            return ExitCode::from(2);
        }
    };
    let total = mib << 20;
    let mut ok = true;
    for &hook in modes {
        let r = run(total, loss, hook);
        let exact = r.mismatches == 0 && r.received == total as u64;
        ok &= exact;
        println!(
            "hook {}: {mib} MiB in {:.6} s wall = {:.2} Gbit/s goodput (loss {:.2} %, {} retransmits, {} timeouts, {})",
            if hook { "on " } else { "off" },
            r.secs,
            total as f64 * 8.0 / r.secs / 1e9,
            loss * 100.0,
            r.retransmits,
            r.timeouts,
            if exact { "byte-exact".to_string() } else { format!("{} mismatching segments", r.mismatches) }
        );
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
