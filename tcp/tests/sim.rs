//! Two engines over a simulated link: byte-exact transfers under impairments, with bounded
//! completion time in simulated time.

mod common;

use std::time::Duration;

use common::*;
use tcp::cc::CongestionAlgorithm;
use tcp::Config;

fn run(
    seed: u64,
    link: LinkConfig,
    cfg: Config,
    len: usize,
    limit: Duration,
) -> (Sim<tcp::StreamSocket>, Duration) {
    let buf = 1 << 20;
    let mut sim = Sim::streams(seed, link, cfg.clone(), cfg, buf);
    let data = payload(len, seed);
    let (got, took) = bulk_transfer(&mut sim, &data, buf, limit)
        .unwrap_or_else(|| panic!("transfer of {len} bytes did not finish within {limit:?}"));
    assert_eq!(got.len(), data.len());
    assert!(got == data, "received bytes differ from sent bytes");
    eprintln!(
        "seed {seed}: {len} bytes in {took:?}, link {:?}, {} corrupted rejected",
        sim.link.stats(),
        sim.corrupted_rejected
    );
    (sim, took)
}

// RFC 9293 §3.10: a clean link moves 10 MB byte-exact, near line rate.
#[test]
fn clean_link_10mb() {
    let (_, took) = run(
        1,
        LinkConfig::default(),
        test_config(),
        10 << 20,
        Duration::from_secs(2),
    );
    // 10 MiB at 10 Gbit/s is ~8.4 ms of serialization; allow slow start and headers.
    assert!(took < Duration::from_millis(40), "took {took:?}");
}

// RFC 6675 + RFC 6298: 1 % loss in both directions, 2 MB byte-exact in bounded time.
#[test]
fn one_percent_loss_2mb() {
    let link = LinkConfig {
        loss: 0.01,
        ..LinkConfig::default()
    };
    let (sim, took) = run(2, link, test_config(), 2 << 20, Duration::from_secs(5));
    assert!(sim.link.stats().lost > 0);
    assert!(took < Duration::from_millis(500), "took {took:?}");
}

// 5 % loss with NewReno: still byte-exact; recovery bounded by RTO min 5 ms (RFC 6298 §2.4
// relaxed per Config::rto_min).
#[test]
fn five_percent_loss_newreno_1mb() {
    let link = LinkConfig {
        loss: 0.05,
        ..LinkConfig::default()
    };
    let cfg = Config {
        congestion: CongestionAlgorithm::NewReno,
        ..test_config()
    };
    let (_, took) = run(3, link, cfg, 1 << 20, Duration::from_secs(20));
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

// Reordering, duplication and corruption together: byte-exact; every corrupted packet is
// rejected by the IPv4 or TCP checksum (RFC 9293 §3.1 checksum, RFC 791 header checksum).
#[test]
fn reorder_duplicate_corrupt_3mb() {
    let link = LinkConfig {
        loss: 0.01,
        reorder: 0.05,
        duplicate: 0.02,
        corrupt: 0.02,
        ..LinkConfig::default()
    };
    let (sim, took) = run(4, link, test_config(), 3 << 20, Duration::from_secs(10));
    let stats = sim.link.stats();
    assert!(stats.reordered > 0 && stats.duplicated > 0);
    assert!(stats.corrupted_delivered > 0);
    assert_eq!(sim.corrupted_rejected, stats.corrupted_delivered);
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

// Without SACK and timestamps (RFC 6582 NewReno recovery alone), lossy transfer still works.
#[test]
fn no_sack_no_timestamps_lossy() {
    let link = LinkConfig {
        loss: 0.02,
        reorder: 0.02,
        ..LinkConfig::default()
    };
    let cfg = Config {
        sack: false,
        timestamps: false,
        ..test_config()
    };
    let (_, took) = run(5, link, cfg, 1 << 20, Duration::from_secs(20));
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

// Long-delay path (10 ms one way): window scaling (RFC 7323 §2) lets the window exceed
// 64 KiB, so 4 MB take far fewer than the ~64 RTTs an unscaled window would need.
#[test]
fn window_scale_fills_long_path() {
    let link = LinkConfig {
        delay: Duration::from_millis(10),
        rate_bps: Some(1_000_000_000),
        ..LinkConfig::default()
    };
    let (_, took) = run(6, link, test_config(), 4 << 20, Duration::from_secs(10));
    // 4 MiB at 1 Gbit/s = 34 ms + slow start over 20 ms RTTs.
    assert!(took < Duration::from_millis(400), "took {took:?}");
}

// Many seeds under heavy impairment (5 % loss, 10 % reordering, duplication, corruption),
// both congestion controllers, with and without SACK and timestamps: every transfer
// byte-exact and done within 2 s of simulated time (with a 50 ms initial RTO, so a lost SYN
// costs 50 ms rather than RFC 6298's 1 s). TCP_SIM_SEEDS=N runs more seeds.
#[test]
fn many_seeds_heavy_impairment() {
    let seeds: u64 = std::env::var("TCP_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    for seed in 0..seeds {
        let link = LinkConfig {
            loss: 0.05,
            reorder: 0.1,
            duplicate: 0.03,
            corrupt: 0.01,
            delay: Duration::from_micros(20 + 37 * (seed % 7)),
            ..LinkConfig::default()
        };
        let cfg = Config {
            congestion: if seed % 2 == 0 {
                CongestionAlgorithm::Cubic
            } else {
                CongestionAlgorithm::NewReno
            },
            sack: seed % 3 != 0,
            timestamps: seed % 4 != 0,
            rto_initial: Duration::from_millis(50),
            ..test_config()
        };
        run(100 + seed, link, cfg, 200_000, Duration::from_secs(2));
    }
}

// Issue #18 "reordering is not loss": 1 % of the packets held back by 5 µs (a few packets,
// as a NIC or switch reorders) or by 100 µs (an RTT): RACK's reordering window (RFC 8985)
// and the undo of spurious recoveries (RFC 3522 with microsecond timestamps, RFC 3708
// D-SACK) keep goodput within 5 % of the clean link's (1.00 and 0.99), and every recovery
// is undone. With the duplicate-ACK rule (RFC 6675 IsLost) and millisecond timestamps the
// ratios were 0.29 and 0.24: 12 and 17 recoveries, none undone. Held back by less than
// the reordering window, a packet is retransmitted only before the first undo showed
// reordering (RFC 8985 §6.2 step 4): one retransmission in the whole transfer.
#[test]
fn one_percent_reordering_is_not_loss() {
    let (_, clean) = run(
        7,
        LinkConfig::default(),
        test_config(),
        4 << 20,
        Duration::from_secs(5),
    );
    for extra in [5u64, 100] {
        let link = LinkConfig {
            reorder: 0.01,
            reorder_extra: Duration::from_micros(extra),
            ..LinkConfig::default()
        };
        let (mut sim, took) = run(7, link, test_config(), 4 << 20, Duration::from_secs(5));
        assert!(sim.link.stats().reordered > 20);
        let st = sim.engine(Side::A).stats();
        eprintln!(
            "held {extra} µs: {took:?} (clean {clean:?}), {} retransmits, {} recoveries, {} undone",
            st.retransmits, st.recoveries, st.spurious_recoveries
        );
        let ratio = clean.as_secs_f64() / took.as_secs_f64();
        assert!(ratio >= 0.95, "goodput ratio {ratio:.3}");
        assert_eq!(st.recoveries, st.spurious_recoveries);
        assert_eq!(st.timeouts, 0);
        if extra == 5 {
            assert!(st.retransmits <= 1, "{} retransmissions", st.retransmits);
        }
    }
}
