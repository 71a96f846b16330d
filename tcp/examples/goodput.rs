//! In-memory goodput of two engines: a bulk transfer between two `Engine`s whose packets are
//! handed over directly (no loss), measured in wall-clock time. Shows what the engine itself
//! costs per byte, without NIC, TAP or kernel.
//!
//!     cargo run --release -p tcp --example goodput -- [MiB] [loss-percent]

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Instant as WallClock;

use tcp::{Config, Engine, Event, Instant, StreamSocket};

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(256);
    let loss: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(0.0) / 100.0;
    let total = mib << 20;
    let buf = 4 << 20;
    let cfg = Config {
        fill_checksums: true,
        verify_checksums: true,
        ..Config::default()
    };
    let mut a: Engine<StreamSocket> = Engine::new(cfg.clone());
    let mut b: Engine<StreamSocket> = Engine::new(cfg);
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
    let chunk = vec![0x5au8; 1 << 16];
    let mut written = 0usize;
    let mut received = 0usize;
    let mut accepted = None;
    let mut pkt = vec![0u8; 1500];
    let mut in_flight: Vec<(bool, Vec<u8>)> = Vec::new();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let start = WallClock::now();
    while received < total {
        // Simulated time advances 10 µs per round: a 10 µs link.
        now = now + std::time::Duration::from_micros(10);
        for (to_b, p) in in_flight.drain(..) {
            let e = if to_b { &mut b } else { &mut a };
            let _ = e.handle_packet(now, &p);
        }
        a.handle_timeout(now);
        b.handle_timeout(now);
        while let Some(ev) = b.poll_event() {
            if let Event::Accepted { conn, .. } = ev {
                b.attach(conn, StreamSocket::new(buf, buf)).expect("attach");
                accepted = Some(conn);
            }
        }
        while a.poll_event().is_some() {}
        if let Some(s) = a.ulp_mut(conn) {
            while written < total {
                let n = s.write(&chunk[..chunk.len().min(total - written)]);
                if n == 0 {
                    break;
                }
                written += n;
            }
        }
        if let Some(s) = accepted.and_then(|c| b.ulp_mut(c)) {
            let mut sink = [0u8; 1 << 16];
            loop {
                let n = s.read(&mut sink);
                if n == 0 {
                    break;
                }
                received += n;
            }
        }
        for (to_b, e) in [(true, &mut a), (false, &mut b)] {
            while let Some(t) = e.poll_transmit(now, &mut pkt) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if (x % 1_000_000) as f64 >= loss * 1_000_000.0 {
                    in_flight.push((to_b, pkt[..t.len].to_vec()));
                }
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let info = a.info(conn).expect("connection");
    println!(
        "{mib} MiB in {secs:.3} s wall = {:.2} Gbit/s goodput (loss {:.2} %, {} retransmits, {} timeouts)",
        total as f64 * 8.0 / secs / 1e9,
        loss * 100.0,
        info.retransmits,
        info.timeouts
    );
}
