//! `dataplane pktgen`: send numbered UDP/IPv4 frames on one port and/or count frames
//! received on another (or the same) port.
//!
//! Each generated frame carries a valid IPv4 header and UDP checksum; the UDP payload
//! starts with the signature `DPGN` and a 64-bit sequence number, so the receiving side
//! counts losses and reordering.
//!
//! With `--ping-pong` it measures latency instead: one frame at a time, each sent only once
//! the previous one came back on the receive port (through the link, or reflected by a peer
//! such as `dataplane fwd --mode macswap`), printing perftest's latency table (half of each
//! round trip, like `perf --lat`).

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dataplane::clock::{self, Instant};

use dataplane::apps::perf::{latency_result, PerfMode, PerfResult};
use dataplane::config::parse_mac;
use dataplane::frame::Ends;
use dataplane::port::{AnyPort, Port};
use dataplane::say;
use dataplane::stats::{si, RateReporter, Table};

use dataplane::runtime::LaneJob;

use super::common::{deadline, parse_secs, stop_flag, CmdError, OpenArgs, PortArgs};

/// Signature at the start of every generated UDP payload.
pub const SIGNATURE: [u8; 4] = *b"DPGN";
/// Offset of the UDP header in a generated frame.
const UDP_OFFSET: usize = 14 + 20;
/// Offset of the sequence number in a generated frame.
const SEQ_OFFSET: usize = UDP_OFFSET + 8 + 4;
/// Smallest frame: Ethernet minimum (the headers, signature and sequence take 54 bytes).
pub const MIN_SIZE: usize = 60;

/// Arguments of `pktgen`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file (TOML); without it, ports are DPDK device names.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Port to transmit on.
    #[arg(long, value_name = "NAME")]
    pub tx_port: Option<String>,
    /// Port to count received frames on.
    #[arg(long, value_name = "NAME")]
    pub rx_port: Option<String>,
    /// Frame size in bytes (Ethernet header included, FCS excluded).
    #[arg(long, short = 's', default_value_t = 64)]
    pub size: usize,
    /// Frames per second to send (default: as fast as possible).
    #[arg(long, short = 'r', value_name = "PPS")]
    pub rate: Option<f64>,
    /// Stop after this many seconds.
    #[arg(long, short = 'd', value_name = "SECS", value_parser = parse_secs)]
    pub duration: Option<Duration>,
    /// Stop sending after this many frames.
    #[arg(long, short = 'n')]
    pub count: Option<u64>,
    /// Frames per burst.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=512))]
    pub burst: u16,
    /// Destination MAC (default: the receive port's when it is in this process, else
    /// broadcast).
    #[arg(long, value_name = "MAC", value_parser = parse_mac)]
    pub dst_mac: Option<[u8; 6]>,
    /// Source IPv4 address.
    #[arg(long, default_value = "198.18.0.1")]
    pub src_ip: Ipv4Addr,
    /// Destination IPv4 address.
    #[arg(long, default_value = "198.18.0.2")]
    pub dst_ip: Ipv4Addr,
    /// UDP source and destination port.
    #[arg(long, default_value_t = 9)]
    pub udp_port: u16,
    /// Longest wait for the links to come up before sending.
    #[arg(long, value_name = "SECS", value_parser = parse_secs, default_value = "5")]
    pub link_wait: Duration,
    /// Seconds between statistics lines (0: none).
    #[arg(long, value_name = "SECS", value_parser = parse_secs, default_value = "1")]
    pub stats_interval: Duration,
    /// Latency instead of rate: one frame in flight at a time, the next sent when it came
    /// back on the receive port (default: the transmit port); prints half round trips.
    #[arg(long, conflicts_with_all = ["rate", "burst"])]
    pub ping_pong: bool,
    /// With `--ping-pong`: how long to wait for a frame before counting it lost.
    #[arg(long, value_name = "SECS", value_parser = parse_secs, default_value = "0.1")]
    pub reply_timeout: Duration,
    /// How the ports are opened.
    #[command(flatten)]
    pub open: OpenArgs,
}

/// Builds the frame template (sequence number 0) of `size` bytes.
pub fn build_template(size: usize, ends: Ends, udp_port: u16) -> Vec<u8> {
    let mut payload = vec![0u8; size - UDP_OFFSET - 8];
    payload[..4].copy_from_slice(&SIGNATURE);
    ends.udp_frame(udp_port, udp_port, &payload)
}

/// Writes sequence number `seq` into a frame made from the template (whose sequence is 0)
/// and updates the UDP checksum incrementally (RFC 1624, eqn. 3).
pub fn stamp(frame: &mut [u8], seq: u64) {
    let new = seq.to_be_bytes();
    let ck_at = UDP_OFFSET + 6;
    let old_ck = u16::from_be_bytes([frame[ck_at], frame[ck_at + 1]]);
    let mut sum: u32 = u32::from(!old_ck);
    for i in (0..8).step_by(2) {
        let m = u16::from_be_bytes([frame[SEQ_OFFSET + i], frame[SEQ_OFFSET + i + 1]]);
        let m2 = u16::from_be_bytes([new[i], new[i + 1]]);
        sum += u32::from(!m) + u32::from(m2);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let mut ck = !(sum as u16);
    if ck == 0 {
        // RFC 768: a computed zero is sent as all ones.
        ck = 0xffff;
    }
    frame[SEQ_OFFSET..SEQ_OFFSET + 8].copy_from_slice(&new);
    frame[ck_at..ck_at + 2].copy_from_slice(&ck.to_be_bytes());
}

/// The sequence number of a generated frame, if `frame` is one.
pub fn sequence_of(frame: &[u8]) -> Option<u64> {
    let sig = frame.get(UDP_OFFSET + 8..UDP_OFFSET + 12)?;
    if sig != SIGNATURE || frame.get(12..14)? != [0x08, 0x00] {
        return None;
    }
    let seq = frame.get(SEQ_OFFSET..SEQ_OFFSET + 8)?;
    Some(u64::from_be_bytes(seq.try_into().ok()?))
}

/// Receive-side counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxCounters {
    /// Frames received.
    pub frames: u64,
    /// Bytes received.
    pub bytes: u64,
    /// Frames carrying the pktgen signature.
    pub generated: u64,
    /// Sequence numbers skipped (lost or not yet arrived).
    pub gaps: u64,
    /// Frames whose sequence number was below the next expected one.
    pub late: u64,
    next: u64,
}

impl RxCounters {
    /// Counts one received frame.
    pub fn count(&mut self, frame: &[u8]) {
        self.frames += 1;
        self.bytes += frame.len() as u64;
        if let Some(seq) = sequence_of(frame) {
            self.generated += 1;
            if seq >= self.next {
                self.gaps += seq - self.next;
                self.next = seq + 1;
            } else {
                self.late += 1;
            }
        }
    }
}

/// Runs `dataplane pktgen`.
pub fn run(mut args: Args) -> Result<(), CmdError> {
    if args.tx_port.is_none() && args.rx_port.is_none() {
        return Err(CmdError::Usage(
            "pktgen needs --tx-port and/or --rx-port".into(),
        ));
    }
    if args.ping_pong {
        if args.tx_port.is_none() {
            return Err(CmdError::Usage("--ping-pong needs --tx-port".into()));
        }
        if args.count.is_none() && args.duration.is_none() {
            return Err(CmdError::Usage(
                "--ping-pong needs --count or --duration".into(),
            ));
        }
        args.rx_port = args.rx_port.or_else(|| args.tx_port.clone());
    }
    if let Some(r) = args.rate {
        if !(r.is_finite() && r > 0.0) {
            return Err(CmdError::Usage(format!("--rate {r}: must be above 0")));
        }
    }
    let mut names: Vec<String> = args.tx_port.iter().cloned().collect();
    if let Some(rx) = &args.rx_port {
        if !names.contains(rx) {
            names.push(rx.clone());
        }
    }
    let port_args = PortArgs {
        config: args.config.clone(),
        ports: names,
        open: args.open.clone(),
    };
    let mut cfg = port_args.config()?;
    // A generator sends its frames as written: the device neither checksums nor segments.
    for p in &mut cfg.ports {
        p.offloads = dataplane::config::OffloadMode::Off;
    }
    let index = |name: &Option<String>| {
        name.as_ref()
            .and_then(|n| cfg.ports.iter().position(|p| p.name() == n))
    };
    let (tx_i, rx_i) = (index(&args.tx_port), index(&args.rx_port));
    if let Some(i) = tx_i {
        let max = cfg.ports[i].mtu + 14;
        if !(MIN_SIZE..=max).contains(&args.size) {
            return Err(CmdError::Usage(format!(
                "--size {}: must be {MIN_SIZE}..={max} for port {} (MTU {})",
                args.size,
                cfg.ports[i].name(),
                cfg.ports[i].mtu
            )));
        }
    }
    let stop = stop_flag()?;
    let mut opened = port_args.open_lanes(&cfg)?;
    // A port of `queues = N` generates and counts on N lanes: lane k sends its share of the
    // frames (and of the rate) on queue k, numbered from 0, and counts what queue k
    // receives (memif and soft links deliver on queue k what the peer sent on its queue k).
    let mut lanes = vec![std::mem::take(&mut opened.ports)];
    lanes.append(&mut opened.lanes);
    let n_lanes = lanes.len();
    if args.ping_pong && n_lanes > 1 {
        return Err(CmdError::Usage(format!(
            "--ping-pong takes one queue ({n_lanes} configured)"
        )));
    }
    let ports = &lanes[0];
    let template = tx_i.map(|i| {
        let dst = args
            .dst_mac
            .or_else(|| rx_i.filter(|&r| r != i).map(|r| ports[r].info().mac))
            .unwrap_or([0xff; 6]);
        let ends = Ends {
            src_mac: ports[i].info().mac,
            dst_mac: dst,
            src_ip: args.src_ip.into(),
            dst_ip: args.dst_ip.into(),
            vlan: None,
        };
        build_template(args.size, ends, args.udp_port)
    });
    for (i, p) in lanes.iter().flat_map(|ports| ports.iter().enumerate()) {
        let role = match (Some(i) == tx_i, Some(i) == rx_i) {
            (true, true) => "tx+rx",
            (true, false) => "tx",
            (false, true) => "rx",
            (false, false) => "idle",
        };
        say!(
            "port {} ({}, {role}): {}",
            p.info().name,
            p.kind(),
            p.info()
        );
    }

    let used: Vec<usize> = tx_i.iter().chain(rx_i.iter()).copied().collect();
    let wait_start = clock::now();
    while !lanes
        .iter()
        .all(|ports| used.iter().all(|&i| ports[i].link_up()))
    {
        if stop.load(Ordering::Relaxed) || clock::elapsed(wait_start) >= args.link_wait {
            log::warn!(
                "link still down after {:.1}s; sending anyway",
                args.link_wait.as_secs_f64()
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }

    let end = deadline(args.duration);
    if let (true, Some(i), Some(r), Some(t)) = (args.ping_pong, tx_i, rx_i, &template) {
        let out = ping_pong(&mut lanes[0], (i, r), t, &args, &stop, end);
        say!(
            "ping-pong: {} round trips, {} lost (no reply within {:.3}s)",
            out.samples.len(),
            out.lost,
            args.reply_timeout.as_secs_f64()
        );
        say!("{}", PerfResult::header(PerfMode::Lat));
        say!("{}", latency_result(args.size, out.samples).row());
        return Ok(());
    }
    let jobs: Vec<LaneJob<'_, LaneTotals>> = lanes
        .into_iter()
        .enumerate()
        .map(|(k, mut ports)| {
            let run = Generate {
                tx: tx_i,
                rx: rx_i,
                template: template.clone(),
                count: args.count.map(|c| lane_share(c, n_lanes, k)),
                rate: args.rate.map(|r| r / n_lanes as f64),
                burst: usize::from(args.burst),
                stop: &stop,
                end,
                interval: if k == 0 {
                    args.stats_interval
                } else {
                    Duration::ZERO
                },
            };
            Box::new(move || run.run(&mut ports)) as LaneJob<'_, LaneTotals>
        })
        .collect();
    let (per_lane, places) = opened.run_lanes(jobs)?;
    let secs = per_lane
        .iter()
        .map(|l| l.secs)
        .fold(0.0, f64::max)
        .max(1e-9);
    say!("stopped after {secs:.2}s");
    if n_lanes > 1 {
        for (k, (l, place)) in per_lane.iter().zip(&places).enumerate() {
            say!(
                "lane-{k} ({place}): sent {} received {} generated {} gaps {} late {}",
                l.sent,
                l.rx.frames,
                l.rx.generated,
                l.rx.gaps,
                l.rx.late
            );
        }
    }
    let total = LaneTotals::sum(&per_lane);
    let (sent, rx) = (total.sent, total.rx);
    let name = |i: usize| match n_lanes {
        1 => per_lane[0].names[i].clone(),
        _ => cfg.ports[i].name().to_string(),
    };
    let mut t = Table::new(["port", "role", "frames", "bytes", "pps", "bit/s"]);
    if let Some(i) = tx_i {
        t.row([
            name(i),
            "tx".into(),
            sent.to_string(),
            (sent * args.size as u64).to_string(),
            si(sent as f64 / secs),
            si((sent * args.size as u64 * 8) as f64 / secs),
        ]);
        if total.tx_dropped > 0 || total.alloc_failures > 0 {
            say!(
                "tx port {}: {} refused by the ring, {} buffer allocation failures",
                name(i),
                total.tx_dropped,
                total.alloc_failures
            );
        }
    }
    if let Some(i) = rx_i {
        t.row([
            name(i),
            "rx".into(),
            rx.frames.to_string(),
            rx.bytes.to_string(),
            si(rx.frames as f64 / secs),
            si((rx.bytes * 8) as f64 / secs),
        ]);
    }
    say!(
        "
{}",
        t.to_string().trim_end()
    );
    if rx_i.is_some() {
        say!(
            "received {} generated frames: {} sequence gaps, {} late",
            rx.generated,
            rx.gaps,
            rx.late
        );
        if tx_i.is_some() {
            say!(
                "lost {} of {} sent",
                sent.saturating_sub(rx.generated),
                sent
            );
        }
    }
    Ok(())
}

/// Lane `k`'s share of `total` frames over `lanes` lanes (the shares add up to `total`).
fn lane_share(total: u64, lanes: usize, k: usize) -> u64 {
    let n = lanes.max(1) as u64;
    total / n + u64::from((k as u64) < total % n)
}

/// What one lane generates and counts, and where.
struct Generate<'a> {
    tx: Option<usize>,
    rx: Option<usize>,
    template: Option<Vec<u8>>,
    count: Option<u64>,
    rate: Option<f64>,
    burst: usize,
    stop: &'a AtomicBool,
    end: Option<Instant>,
    /// Seconds between statistics lines (zero: none).
    interval: Duration,
}

/// What one lane sent and received.
#[derive(Debug, Default)]
struct LaneTotals {
    /// The lane's port names.
    names: Vec<String>,
    sent: u64,
    rx: RxCounters,
    alloc_failures: u64,
    /// Frames the transmit port's ring refused.
    tx_dropped: u64,
    secs: f64,
}

impl LaneTotals {
    /// The lanes' counters added up.
    fn sum(lanes: &[LaneTotals]) -> LaneTotals {
        let mut t = LaneTotals::default();
        for l in lanes {
            t.sent += l.sent;
            t.rx.frames += l.rx.frames;
            t.rx.bytes += l.rx.bytes;
            t.rx.generated += l.rx.generated;
            t.rx.gaps += l.rx.gaps;
            t.rx.late += l.rx.late;
            t.alloc_failures += l.alloc_failures;
            t.tx_dropped += l.tx_dropped;
        }
        t
    }
}

impl Generate<'_> {
    /// Sends numbered frames on `ports[tx]` and counts those received on `ports[rx]` until
    /// the count is sent (and the receive side drained), the end or a stop request.
    fn run<P: Port>(&self, ports: &mut [P]) -> LaneTotals {
        let (tx_i, rx_i, burst) = (self.tx, self.rx, self.burst);
        let start = clock::now();
        let mut reporter = RateReporter::new(self.interval, start, ports.len());
        let mut sent: u64 = 0;
        let mut pending = Vec::with_capacity(burst);
        let mut rx_bufs = Vec::with_capacity(burst);
        let mut rx = RxCounters::default();
        let mut alloc_failures = 0u64;
        let mut tx_done_at: Option<Instant> = None;
        let mut last_tick = start;
        loop {
            let now = clock::now();
            if self.stop.load(Ordering::Relaxed) || self.end.is_some_and(|d| now >= d) {
                break;
            }
            if let (Some(i), Some(t)) = (tx_i, &self.template) {
                let want_total = self.count.unwrap_or(u64::MAX);
                if pending.is_empty() && sent < want_total {
                    let mut n = (burst as u64).min(want_total - sent);
                    if let Some(rate) = self.rate {
                        let due = (now.saturating_since(start).as_secs_f64() * rate) as u64;
                        n = n.min(due.saturating_sub(sent));
                    }
                    for k in 0..n {
                        let Some(mut b) = ports[i].alloc_tx(t.len()) else {
                            alloc_failures += 1;
                            break;
                        };
                        b.as_mut().copy_from_slice(t);
                        stamp(b.as_mut(), sent + k);
                        pending.push(b);
                    }
                }
                if !pending.is_empty() {
                    let before = pending.len();
                    ports[i].tx_burst(&mut pending);
                    sent += (before - pending.len()) as u64;
                }
                if tx_done_at.is_none() && sent >= want_total {
                    tx_done_at = Some(now);
                }
            }
            if let Some(i) = rx_i {
                if ports[i].rx_burst(&mut rx_bufs, burst) > 0 {
                    for b in rx_bufs.drain(..) {
                        rx.count(b.as_ref());
                    }
                }
            }
            if let Some(t) = tx_done_at {
                // All sent: give the receive side a moment to drain, then stop.
                if rx_i.is_none() || now.saturating_since(t) >= Duration::from_millis(200) {
                    break;
                }
            }
            if now.saturating_since(last_tick) >= Duration::from_millis(10) && reporter.due(now) {
                last_tick = now;
                if let Some(line) = reporter.poll_ports(now, ports) {
                    say!("{line}");
                }
            }
        }
        LaneTotals {
            names: ports.iter().map(|p| p.info().name.clone()).collect(),
            sent,
            rx,
            alloc_failures,
            tx_dropped: tx_i.map_or(0, |i| ports[i].stats().tx_dropped),
            secs: clock::elapsed(start).as_secs_f64(),
        }
    }
}

/// What a ping-pong run measured.
struct PingPong {
    /// Half round trips in µs, one per frame that came back.
    samples: Vec<f64>,
    /// Frames that did not come back within the reply timeout.
    lost: u64,
}

/// Sends numbered copies of `template` on port `tx` one at a time, each once the previous
/// one came back on port `rx` (or its reply timeout passed), until `args.count` frames,
/// `end` or a stop request.
fn ping_pong(
    ports: &mut [AnyPort],
    (tx, rx): (usize, usize),
    template: &[u8],
    args: &Args,
    stop: &AtomicBool,
    end: Option<Instant>,
) -> PingPong {
    let want = args.count.unwrap_or(u64::MAX);
    let mut out = PingPong {
        samples: Vec::with_capacity(want.min(1 << 20) as usize),
        lost: 0,
    };
    let mut pending = Vec::with_capacity(1);
    let mut rx_bufs = Vec::with_capacity(32);
    let mut seq = 0u64;
    'frames: while seq < want && !stop.load(Ordering::Relaxed) {
        let Some(mut b) = ports[tx].alloc_tx(template.len()) else {
            std::thread::sleep(Duration::from_micros(10));
            continue;
        };
        b.as_mut().copy_from_slice(template);
        stamp(b.as_mut(), seq);
        pending.push(b);
        let sent_at = clock::now();
        while !pending.is_empty() {
            ports[tx].tx_burst(&mut pending);
        }
        loop {
            let now = clock::now();
            if ports[rx].rx_burst(&mut rx_bufs, 32) > 0 {
                let back = rx_bufs
                    .drain(..)
                    .any(|f| sequence_of(f.as_ref()) == Some(seq));
                if back {
                    out.samples
                        .push(now.saturating_since(sent_at).as_secs_f64() * 1e6 / 2.0);
                    break;
                }
            }
            if now.saturating_since(sent_at) >= args.reply_timeout {
                out.lost += 1;
                break;
            }
            if end.is_some_and(|d| now >= d) || stop.load(Ordering::Relaxed) {
                break 'frames;
            }
        }
        seq += 1;
        if end.is_some_and(|d| clock::now() >= d) {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::wire::{EthernetFrame, IpAddress, Ipv4Packet, UdpPacket};

    /// A template's addresses: 198.18.0.1 to 198.18.0.2.
    const ENDS: Ends = Ends {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        src_ip: std::net::IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)),
        dst_ip: std::net::IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)),
        vlan: None,
    };

    #[test]
    fn stamped_frames_have_valid_checksums() {
        let (src, dst) = (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2));
        let t = build_template(128, ENDS, 9);
        for seq in [0u64, 1, 0xffff, 0x1234_5678_9abc_def0, u64::MAX] {
            let mut f = t.clone();
            stamp(&mut f, seq);
            let eth = EthernetFrame::new_checked(&f[..]).unwrap();
            let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
            assert!(ip.verify_checksum());
            let udp = UdpPacket::new_checked(ip.payload()).unwrap();
            assert_ne!(udp.checksum(), 0);
            assert!(
                udp.verify_checksum(&IpAddress::Ipv4(src), &IpAddress::Ipv4(dst)),
                "seq {seq:#x}"
            );
            assert_eq!(sequence_of(&f), Some(seq));
        }
    }

    #[test]
    fn receive_counters_track_gaps_and_late_frames() {
        let t = build_template(60, ENDS, 9);
        let mut rx = RxCounters::default();
        for seq in [0u64, 1, 3, 2, 4] {
            let mut f = t.clone();
            stamp(&mut f, seq);
            rx.count(&f);
        }
        rx.count(&[0u8; 60]);
        assert_eq!((rx.frames, rx.generated, rx.gaps, rx.late), (6, 5, 1, 1));
    }
}
