//! rping between two RDMA poll loops over the in-process software pair.

mod rdma_common;

use std::net::SocketAddrV4;
use std::time::Duration;

use dataplane::clock::{self};

use dataplane::apps::rping::{Rping, RpingOptions};
use dataplane::apps::run_pair;
use dataplane::port::fault::{FaultConfig, Rate};
use iwarp::mpa::MpaConfig;
use rdma_common::*;

fn rping(mpa: MpaConfig, faults: FaultConfig, size: usize, count: u32) -> (u32, u32) {
    let (mut ls, mut lc) = pair(mpa, 1 << 20, faults);
    let opts = RpingOptions {
        size,
        count,
        verbose: false,
        validate: true,
    };
    let addr = SocketAddrV4::new(SERVER_IP, 7174);
    let mut s = Rping::server(ls.handler_mut(), addr, opts.clone()).expect("server");
    let mut c = Rping::client(lc.handler_mut(), CLIENT_IP, addr, opts).expect("client");
    let (rs, rc) = run_pair(
        &mut ls,
        &mut s,
        &mut lc,
        &mut c,
        Duration::from_secs(20),
        &NO_STOP,
    );
    rc.expect("client");
    rs.expect("server");
    (s.pings, c.pings)
}

// RFC 5040 §5.1/§5.2/§5.3: Send, RDMA Read and RDMA Write in rping's exchange; data
// validated by the client after each ping.
#[test]
fn rping_validates_every_ping() {
    assert_eq!(
        rping(MpaConfig::default(), FaultConfig::default(), 64, 20),
        (20, 20)
    );
}

#[test]
fn rping_large_pings_with_loss_and_reordering() {
    let faults = FaultConfig {
        drop: Rate::from_percent(1.0).unwrap(),
        reorder: Rate::from_percent(1.0).unwrap(),
        ..FaultConfig::default()
    };
    assert_eq!(rping(MpaConfig::default(), faults, 60000, 20), (20, 20));
}

// RFC 5044 §6.5: the same exchange with CRC32c on every FPDU.
#[test]
fn rping_crc() {
    let mpa = MpaConfig {
        require_crc: true,
        ..MpaConfig::default()
    };
    assert_eq!(rping(mpa, FaultConfig::default(), 4000, 50), (50, 50));
}

// The client holds its first FPDUs after the MPA Reply (the Linux siw workaround): the time
// rping reports starts when that hold ends, so it is the pings' time, not the hold's.
#[test]
fn rping_time_excludes_first_fpdu_hold() {
    let hold = Duration::from_millis(800);
    let (mut ls, mut lc) = pair(MpaConfig::default(), 1 << 20, FaultConfig::default());
    lc.handler_mut().set_first_fpdu_delay(hold);
    let opts = RpingOptions {
        size: 64,
        count: 10,
        verbose: false,
        validate: true,
    };
    let addr = SocketAddrV4::new(SERVER_IP, 7174);
    let mut s = Rping::server(ls.handler_mut(), addr, opts.clone()).expect("server");
    let mut c = Rping::client(lc.handler_mut(), CLIENT_IP, addr, opts).expect("client");
    let t0 = clock::now();
    let (rs, rc) = run_pair(
        &mut ls,
        &mut s,
        &mut lc,
        &mut c,
        Duration::from_secs(20),
        &NO_STOP,
    );
    rc.expect("client");
    rs.expect("server");
    assert_eq!(c.pings, 10);
    let started = c.started.expect("started");
    let finished = c.finished.expect("finished");
    assert!(
        started >= t0 + hold,
        "the clock started before the hold ended"
    );
    // Ten in-process pings take milliseconds; with the hold counted it would be 800 ms.
    assert!(
        finished.saturating_since(started) < hold / 4,
        "{:?}",
        finished.saturating_since(started)
    );
}
