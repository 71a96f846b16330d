//! The engine's bound on octets in flight over all its connections (`Config::max_flight`):
//! many connections through one bottleneck together keep about what one would, each still
//! progresses and gets a fair share, one connection alone runs as without the bound, and a
//! bound smaller than a segment stalls nobody on delayed ACKs.

mod common;

use std::time::Duration;

use common::*;
use tcp::sim::LinkConfig;
use tcp::{Config, ConnId, StreamSocket};

const BUF: usize = 256 << 10;

/// What a run of `n` connections from A, each sending `len` octets, looked like.
struct Run {
    /// Most octets A's connections had in flight together at one instant.
    max_flight: usize,
    /// Octets B had received on each connection when the first one finished.
    at_first_done: Vec<usize>,
    /// When each connection finished (all its octets at B).
    done_at: Vec<Option<Duration>>,
}

/// A 1 Gbit/s link with 50 µs one way: a bottleneck the connections share.
fn bottleneck() -> LinkConfig {
    LinkConfig {
        delay: Duration::from_micros(50),
        rate_bps: Some(1_000_000_000),
        ..LinkConfig::default()
    }
}

fn run(n: usize, len: usize, max_flight: Option<usize>, limit: Duration) -> Run {
    let cfg = Config {
        max_flight,
        ..test_config()
    };
    let mut sim = Sim::streams(7, bottleneck(), cfg, test_config(), BUF);
    let start = sim.now;
    let conns: Vec<ConnId> = (0..n)
        .map(|_| {
            sim.a
                .connect(sim.now, a_addr(0), b_addr(), StreamSocket::new(BUF, BUF))
                .expect("connect")
        })
        .collect();
    let data = payload(len, 3);
    let mut written = vec![0usize; n];
    // B's connection for each of A's, by A's port.
    let mut received = vec![0usize; n];
    let mut out = Run {
        max_flight: 0,
        at_first_done: Vec::new(),
        done_at: vec![None; n],
    };
    let ports: Vec<u16> = conns
        .iter()
        .map(|&c| sim.a.tuple(c).expect("tuple").local.port())
        .collect();
    sim.run_until(start + limit, |s| {
        for (i, &c) in conns.iter().enumerate() {
            if let Some(sock) = s.a.ulp_mut(c) {
                written[i] += sock.write(&data[written[i]..]);
            }
        }
        for c in s.accepted(Side::B) {
            let Some(port) = s.b.tuple(c).map(|t| t.remote.port()) else {
                continue;
            };
            let i = ports
                .iter()
                .position(|&p| p == port)
                .expect("a client port");
            if let Some(sock) = s.b.ulp_mut(c) {
                received[i] += sock.read_all().len();
            }
            if received[i] == len && out.done_at[i].is_none() {
                out.done_at[i] = Some(s.now - start);
                if out.at_first_done.is_empty() {
                    out.at_first_done = received.clone();
                }
            }
        }
        let flight: usize = conns
            .iter()
            .filter_map(|&c| s.a.info(c))
            .map(|i| i.snd_nxt.wrapping_sub(i.snd_una) as usize)
            .sum();
        out.max_flight = out.max_flight.max(flight);
        out.done_at.iter().all(Option::is_some)
    });
    out
}

/// Jain's fairness index of `x`.
fn jain(x: &[usize]) -> f64 {
    let sum: f64 = x.iter().map(|&v| v as f64).sum();
    let squares: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    sum * sum / (x.len() as f64 * squares)
}

#[test]
fn many_connections_keep_what_the_bound_allows_and_share_it_fairly() {
    const N: usize = 40;
    const CAP: usize = 64 << 10;
    let mss = 1448;
    let free = run(N, 512 << 10, None, Duration::from_secs(10));
    let bound = run(N, 512 << 10, Some(CAP), Duration::from_secs(10));
    assert!(
        bound.done_at.iter().all(Option::is_some),
        "every connection finished: {:?}",
        bound.done_at
    );
    // Without the bound, each connection's initial window alone is in flight at once.
    assert!(free.max_flight >= N * 10 * mss, "{}", free.max_flight);
    // With it: the bound, and a turn (`TX_QUANTUM` segments) for the last connection woken.
    assert!(
        bound.max_flight <= CAP + tcp::TX_QUANTUM as usize * mss,
        "{} octets in flight",
        bound.max_flight
    );
    let fair = jain(&bound.at_first_done);
    eprintln!(
        "{N} connections: most in flight {} free, {} bound; Jain's index {fair:.3} (free {:.3})",
        free.max_flight,
        bound.max_flight,
        jain(&free.at_first_done)
    );
    assert!(
        fair >= 0.95,
        "Jain's index {fair:.3}: {:?}",
        bound.at_first_done
    );
    // The bottleneck stays busy: the bound costs little of the total time.
    let last = |r: &Run| r.done_at.iter().flatten().max().copied().unwrap();
    assert!(
        last(&bound) <= last(&free) * 11 / 10,
        "{:?} bounded, {:?} free",
        last(&bound),
        last(&free)
    );
}

#[test]
fn one_connection_runs_as_without_the_bound() {
    let free = run(1, 4 << 20, None, Duration::from_secs(10));
    let bound = run(1, 4 << 20, Some(4 << 20), Duration::from_secs(10));
    assert!(free.done_at[0].is_some());
    assert_eq!(bound.done_at, free.done_at);
    assert_eq!(bound.max_flight, free.max_flight);
}

#[test]
fn a_bound_below_one_segment_stalls_nobody() {
    // One octet: the connections send one at a time, a turn each (up to `TX_QUANTUM` segments, the
    // peer ACKs every second one at once).
    const N: usize = 8;
    let r = run(N, 256 << 10, Some(1), Duration::from_secs(5));
    assert!(
        r.done_at.iter().all(Option::is_some),
        "every connection finished: {:?}",
        r.done_at
    );
    assert!(
        r.max_flight <= tcp::TX_QUANTUM as usize * 1448 + 1,
        "{}",
        r.max_flight
    );
}
