//! `perf` client and server between two RDMA poll loops over the in-process software pair:
//! every operation in both modes completes the iterations it was asked for.

mod rdma_common;

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dataplane::apps::perf::{
    jain_index, PerfClient, PerfError, PerfMode, PerfOp, PerfParams, PerfResult, PerfServer,
    QpShares,
};
use dataplane::apps::{run_pair, AppError, PEER_GRACE, STOP_GRACE};
use dataplane::clock;
use dataplane::port::fault::{FaultConfig, Rate};
use iwarp::mpa::MpaConfig;
use rdma_common::*;

/// `op` in `mode` over `sizes`, `iters` each, on one QP, nothing inline.
fn params(op: PerfOp, mode: PerfMode, sizes: Vec<usize>, iters: u64) -> PerfParams {
    PerfParams {
        op,
        mode,
        sizes,
        iters,
        duration: None,
        qps: 1,
        tx_depth: 64,
        inline: 0,
    }
}

/// The client's results of a run with `params`.
fn perf(params: PerfParams) -> Vec<PerfResult> {
    perf_held(params, Duration::ZERO)
}

/// [`perf`] with the client holding its first FPDUs for `hold` after each MPA Reply.
fn perf_held(params: PerfParams, hold: Duration) -> Vec<PerfResult> {
    perf_client(params, hold).results
}

/// The client after a run with `params`, its first FPDUs held for `hold`.
fn perf_client(params: PerfParams, hold: Duration) -> PerfClient {
    perf_client_over(params, hold, FaultConfig::default())
}

/// [`perf_client`] over a link with `faults`.
fn perf_client_over(params: PerfParams, hold: Duration, faults: FaultConfig) -> PerfClient {
    let (mut ls, mut lc) = pair(MpaConfig::default(), 32 << 20, faults);
    lc.handler_mut().set_first_fpdu_delay(hold);
    let addr = SocketAddrV4::new(SERVER_IP, 18515);
    let mut s = PerfServer::new(ls.handler_mut(), addr).expect("server");
    let mut c = PerfClient::new(lc.handler_mut(), CLIENT_IP, addr, params).expect("client");
    let (rs, rc) = run_pair(
        &mut ls,
        &mut s,
        &mut lc,
        &mut c,
        Duration::from_secs(60),
        &NO_STOP,
    );
    rc.expect("client");
    rs.expect("server");
    c
}

fn bw_iters(r: &PerfResult) -> u64 {
    match r {
        PerfResult::Bw {
            bytes,
            iters,
            avg_mbs,
            mpps,
            ..
        } => {
            assert!(*mpps > 0.0 && (*avg_mbs > 0.0 || *bytes == 0));
            *iters
        }
        PerfResult::Lat { .. } => panic!("bandwidth expected"),
    }
}

fn lat_iters(r: &PerfResult) -> u64 {
    match r {
        PerfResult::Lat {
            iters,
            min,
            max,
            typical,
            ..
        } => {
            assert!(min <= typical && typical <= max && *min > 0.0);
            *iters
        }
        PerfResult::Bw { .. } => panic!("latency expected"),
    }
}

// RFC 5040 §5.1: RDMA Write bandwidth over sizes, several QPs.
#[test]
fn write_bw_sizes_and_qps() {
    let r = perf(PerfParams {
        qps: 2,
        ..params(PerfOp::Write, PerfMode::Bw, vec![64, 4096, 65536], 300)
    });
    assert_eq!(
        r.iter().map(bw_iters).collect::<Vec<_>>(),
        vec![300, 300, 300]
    );
}

// Jain's index: 1 for equal shares, 1/n when one of n has everything.
#[test]
fn jain_index_bounds() {
    assert_eq!(jain_index(&[5, 5, 5, 5]), 1.0);
    assert_eq!(jain_index(&[8, 0, 0, 0]), 0.25);
    assert!((jain_index(&[1, 2]) - 0.9).abs() < 1e-12);
    let s = QpShares::of(4096, &[4096, 8192]).unwrap();
    assert_eq!((s.qps, s.min, s.max), (2, 4096, 8192));
    assert!(QpShares::of(4096, &[]).is_none());
}

// Long-lived bulk connections to one peer through one link (issue #17): a timed run of
// eight QPs, each with Writes always posted, moves about the same octets on each.
#[test]
fn write_bw_qps_share_the_link_evenly() {
    let c = perf_client(
        PerfParams {
            qps: 8,
            duration: Some(Duration::from_secs(2)),
            ..params(PerfOp::Write, PerfMode::Bw, vec![65536], 0)
        },
        Duration::ZERO,
    );
    let [s] = c.shares[..] else {
        panic!("one size, one share summary: {:?}", c.shares);
    };
    assert_eq!(s.qps, 8);
    assert!(s.min > 0, "a QP moved nothing: {s:?}");
    assert!(s.jain >= 0.95, "uneven shares: {s:?}");
}

// The same over a link that drops 1 % of the frames each way: losses hit the QPs at
// random, and each still gets about its share.
#[test]
fn write_bw_qps_share_a_lossy_link_evenly() {
    let faults = FaultConfig {
        drop: Rate::from_percent(1.0).expect("rate"),
        ..FaultConfig::default()
    };
    let c = perf_client_over(
        PerfParams {
            qps: 8,
            duration: Some(Duration::from_secs(2)),
            ..params(PerfOp::Write, PerfMode::Bw, vec![65536], 0)
        },
        Duration::ZERO,
        faults,
    );
    let [s] = c.shares[..] else {
        panic!("one size, one share summary: {:?}", c.shares);
    };
    eprintln!("{}", s.line());
    assert!(s.min > 0, "a QP moved nothing: {s:?}");
    assert!(s.jain >= 0.95, "uneven shares: {s:?}");
}

// RFC 5040 §5.2: RDMA Read bandwidth with several Reads outstanding.
#[test]
fn read_bw() {
    let r = perf(params(PerfOp::Read, PerfMode::Bw, vec![8192], 300));
    assert_eq!(bw_iters(&r[0]), 300);
}

// RFC 5040 §5.3: Send bandwidth, receive credits returned by the server.
#[test]
fn send_bw_with_credits_and_inline() {
    let r = perf(PerfParams {
        inline: 64,
        ..params(PerfOp::Send, PerfMode::Bw, vec![0, 64, 2000], 2000)
    });
    assert_eq!(
        r.iter().map(bw_iters).collect::<Vec<_>>(),
        vec![2000, 2000, 2000]
    );
}

// RFC 7306 §4: FetchAdd bandwidth and latency.
#[test]
fn atomic_bw_and_lat() {
    let r = perf(params(PerfOp::Atomic, PerfMode::Bw, vec![8], 500));
    assert_eq!(bw_iters(&r[0]), 500);
    let r = perf(params(PerfOp::Atomic, PerfMode::Lat, vec![8], 100));
    assert_eq!(lat_iters(&r[0]), 100);
}

#[test]
fn latency_write_send_read() {
    for op in [PerfOp::Write, PerfOp::Send, PerfOp::Read] {
        let r = perf(params(op, PerfMode::Lat, vec![8, 4096], 100));
        assert_eq!(
            r.iter().map(lat_iters).collect::<Vec<_>>(),
            vec![100, 100],
            "{op:?}"
        );
    }
}

// RFC 5044 §7.1.2: the initiator sends the first FPDU once the MPA Reply arrived; ours may
// hold it a while longer (`first_fpdu_delay`, for Linux siw). Measurement starts after
// that hold: a sample containing it would come near half the hold (a ping-pong sample is
// half a round trip), every real one is a round trip of two in-process loops.
#[test]
fn latency_excludes_first_fpdu_hold() {
    let hold = Duration::from_secs(1);
    for op in [PerfOp::Write, PerfOp::Read] {
        let start = std::time::Instant::now();
        let r = perf_held(params(op, PerfMode::Lat, vec![8], 50), hold);
        assert!(start.elapsed() >= hold, "{op:?}: the hold was not kept");
        assert_eq!(lat_iters(&r[0]), 50, "{op:?}");
        let PerfResult::Lat { max, .. } = r[0] else {
            unreachable!()
        };
        let limit = hold.as_secs_f64() * 1e6 / 4.0;
        assert!(max < limit, "{op:?}: a sample of {max} µs spans the hold");
    }
}

// `perf --loopback`: a client that cannot connect (nothing listens on its port: the
// server's TCP resets the SYN) fails, and its in-process server, waiting for connections
// that will not come, is ended `PEER_GRACE` later instead of keeping the run alive
// until the time limit (it used to: 200 QPs over a lossy link sat in `perf` for good).
#[test]
fn a_failed_client_ends_its_in_process_server() {
    let (mut ls, mut lc) = pair(MpaConfig::default(), 8 << 20, FaultConfig::default());
    let mut s = PerfServer::new(ls.handler_mut(), SocketAddrV4::new(SERVER_IP, 18515)).unwrap();
    let elsewhere = SocketAddrV4::new(SERVER_IP, 18516);
    let p = params(PerfOp::Write, PerfMode::Bw, vec![4096], 10);
    let mut c = PerfClient::new(lc.handler_mut(), CLIENT_IP, elsewhere, p).unwrap();
    let start = clock::now();
    let (rs, rc) = run_pair(
        &mut ls,
        &mut s,
        &mut lc,
        &mut c,
        Duration::from_secs(60),
        &NO_STOP,
    );
    let took = clock::now().saturating_since(start);
    assert!(rc.is_err(), "the client connected to nobody: {rc:?}");
    assert_eq!(rs, Err(PerfError::App(AppError::PeerFailed)));
    assert!(
        took >= PEER_GRACE && took < PEER_GRACE + STOP_GRACE * 2,
        "ended after {took:?}"
    );
    assert_eq!(ls.handler().live() + lc.handler().live(), 0);
}

// Ctrl-C in `perf --loopback` (the stop flag set while the QP streams): both ends stop
// at once and their connections are closed; the time limit closes them too.
#[test]
fn the_stop_flag_and_the_time_limit_end_both_ends_of_a_pair() {
    let addr = SocketAddrV4::new(SERVER_IP, 18515);
    let mut p = params(PerfOp::Write, PerfMode::Bw, vec![4096], 1);
    p.duration = Some(Duration::from_secs(3600));
    for by_signal in [true, false] {
        let (mut ls, mut lc) = pair(MpaConfig::default(), 8 << 20, FaultConfig::default());
        let mut s = PerfServer::new(ls.handler_mut(), addr).unwrap();
        let mut c = PerfClient::new(lc.handler_mut(), CLIENT_IP, addr, p.clone()).unwrap();
        let stop = AtomicBool::new(false);
        let limit = Duration::from_secs(if by_signal { 60 } else { 1 });
        let start = clock::now();
        let (rs, rc) = std::thread::scope(|t| {
            if by_signal {
                t.spawn(|| {
                    std::thread::sleep(Duration::from_secs(1));
                    stop.store(true, Ordering::Relaxed);
                });
            }
            run_pair(&mut ls, &mut s, &mut lc, &mut c, limit, &stop)
        });
        let took = clock::now().saturating_since(start);
        let want = PerfError::App(if by_signal {
            AppError::Stopped
        } else {
            AppError::TimeLimit
        });
        assert_eq!(rc.unwrap_err(), want);
        assert_eq!(rs.unwrap_err(), want);
        assert!(took < Duration::from_secs(1) + STOP_GRACE, "took {took:?}");
        let received = ls.handler().counters().fpdus_received;
        assert!(received > 100, "the QP streamed first: {received} FPDUs");
        assert_eq!(
            ls.handler().live() + lc.handler().live(),
            0,
            "connections closed"
        );
    }
}

// The small Write's fast path (issue #18 `lat-vs-l2`): each loop steps its application
// between its receive and transmit halves, so a ping-pong's Write is answered in the
// iteration that received it (RFC 5040 §5: the peer's Write is placed when its segment
// is processed; the reply is posted and sent before the loop polls again), and the
// reply's segment carries the ACK (no pure ACK per Write). With the server's loop polled
// before the client's in each pair iteration, a round trip then takes one iteration in
// which frames arrive; a reply left for a later iteration (or an ACK sent on its own)
// would take two. Counted, not timed: the answer is the same on a loaded machine.
#[test]
fn a_write_ping_pong_answers_in_the_iteration_that_received_it() {
    use dataplane::apps::{App, Step};
    const N: u64 = 400;
    let (mut ls, mut lc) = pair(MpaConfig::default(), 8 << 20, FaultConfig::default());
    let addr = SocketAddrV4::new(SERVER_IP, 18515);
    let mut s = PerfServer::new(ls.handler_mut(), addr).expect("server");
    let p = params(PerfOp::Write, PerfMode::Lat, vec![8], N);
    let mut c = PerfClient::new(lc.handler_mut(), CLIENT_IP, addr, p).expect("client");
    let (mut server_done, mut client_done) = (false, false);
    let mut busy = 0u64;
    let end = clock::now() + Duration::from_secs(60);
    while !(server_done && client_done) {
        let now = clock::now();
        assert!(now < end, "the run did not finish");
        let rx = ls.poll_once_with(now, |h| {
            if !server_done {
                if let Step::Done(r) = s.step(h, now) {
                    r.expect("server");
                    server_done = true;
                }
            }
        }) + lc.poll_once_with(now, |h| {
            if !client_done {
                if let Step::Done(r) = c.step(h, now) {
                    r.expect("client");
                    client_done = true;
                }
            }
        });
        busy += u64::from(rx > 0);
    }
    assert_eq!(lat_iters(&c.results[0]), N);
    println!(
        "{busy} busy iterations, frames received {} (server) and {} (client) for {N} round trips",
        ls.counters(0).rx,
        lc.counters(0).rx
    );
    // Set-up and teardown (ARP, the handshakes, the MPA exchange, the close) add a few
    // dozen frames; one iteration more per round trip would add N.
    assert!(
        busy < N + N / 4,
        "{busy} busy iterations for {N} round trips"
    );
    for (side, l) in [("server", &ls), ("client", &lc)] {
        let rx = l.counters(0).rx;
        assert!(
            rx < N + N / 4,
            "{side}: {rx} frames received for {N} Writes"
        );
    }
}
