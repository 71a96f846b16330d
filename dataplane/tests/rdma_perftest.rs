//! `perf -R` (perftest's rdma_cm exchange): our client against our server over the
//! in-process software pair, for every test the siw interop runs against Linux perftest.

mod rdma_common;

use std::net::SocketAddrV4;
use std::time::Duration;

use dataplane::apps::perf::PerfResult;
use dataplane::apps::perftest::{PerftestParams, PerftestSession, Test};
use dataplane::apps::run_pair;
use dataplane::port::fault::FaultConfig;
use iwarp::mpa::MpaConfig;
use rdma_common::*;

fn run(test: Test, size: usize, iters: u64) -> (PerfResult, Option<PerfResult>) {
    run_held(test, size, iters, Duration::ZERO)
}

/// [`run`] with the client holding its first FPDUs for `hold` after each MPA Reply.
fn run_held(
    test: Test,
    size: usize,
    iters: u64,
    hold: Duration,
) -> (PerfResult, Option<PerfResult>) {
    let (mut ls, mut lc) = pair(MpaConfig::default(), 32 << 20, FaultConfig::default());
    lc.handler_mut().set_first_fpdu_delay(hold);
    let addr = SocketAddrV4::new(SERVER_IP, 18515);
    let params = PerftestParams::new(test, size, iters);
    let mut s = PerftestSession::server(ls.handler_mut(), addr, params.clone()).expect("server");
    let mut c = PerftestSession::client(lc.handler_mut(), CLIENT_IP, addr, params).expect("client");
    let (rs, rc) = run_pair(
        &mut ls,
        &mut s,
        &mut lc,
        &mut c,
        Duration::from_secs(60),
        &NO_STOP,
    );
    assert!(rc.is_ok() && rs.is_ok(), "client {rc:?}, server {rs:?}");
    assert_eq!(c.peer_version(), Some("6.06"));
    assert_eq!(s.peer_version(), Some("6.06"));
    (c.result.expect("client result"), s.result)
}

fn bw(r: &PerfResult) -> (usize, u64, f64) {
    match r {
        PerfResult::Bw {
            bytes,
            iters,
            peak_mbs,
            avg_mbs,
            mpps,
        } => {
            assert!(
                *avg_mbs > 0.0 && *mpps > 0.0 && peak_mbs >= avg_mbs,
                "{r:?}"
            );
            (*bytes, *iters, *avg_mbs)
        }
        PerfResult::Lat { .. } => panic!("bandwidth expected"),
    }
}

// RFC 5040 §5.1 (RDMA Write); the server prints the report the client sent over the
// control connection (five big-endian 8-octet fields), so both rows agree.
#[test]
fn write_bw_client_report_reaches_server() {
    let (c, s) = run(Test::WriteBw, 65536, 300);
    assert_eq!(bw(&c).0, 65536);
    assert_eq!(bw(&c).1, 300);
    assert_eq!(Some(c), s);
}

// RFC 5040 §5.2 (RDMA Read), IRD/ORD offered on the data connection.
#[test]
fn read_bw() {
    let (c, s) = run(Test::ReadBw, 8192, 300);
    assert_eq!(bw(&c).1, 300);
    assert_eq!(Some(c), s);
}

// RFC 5040 §5.3 (Send) with perftest's iWARP credits: the server RDMA-Writes its receive
// count into the client's credit buffer; 1000 Sends through 100 receives (rx_depth is
// at most -n, so here 512) only finish if credits flow.
#[test]
fn send_bw_with_credit_writes() {
    let mut p = PerftestParams::new(Test::SendBw, 1024, 1000);
    assert_eq!(p.rx_depth, 512);
    p.rx_depth = 100;
    let (mut ls, mut lc) = pair(MpaConfig::default(), 32 << 20, FaultConfig::default());
    let addr = SocketAddrV4::new(SERVER_IP, 18515);
    let mut s = PerftestSession::server(ls.handler_mut(), addr, p.clone()).expect("server");
    let mut c = PerftestSession::client(lc.handler_mut(), CLIENT_IP, addr, p).expect("client");
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
    // The server measures its own receives (perftest's ib_send_bw server does too).
    assert_eq!(bw(c.result.as_ref().unwrap()).1, 1000);
    assert_eq!(bw(s.result.as_ref().unwrap()).1, 1000);
}

#[test]
fn send_bw_default_depths() {
    let (c, s) = run(Test::SendBw, 65536, 200);
    assert_eq!(bw(&c).1, 200);
    assert_eq!(bw(&s.expect("server result")).1, 200);
}

// Write ping-pong: both sides measure half round trips.
#[test]
fn write_lat() {
    let (c, s) = run(Test::WriteLat, 2, 200);
    for r in [c, s.expect("server result")] {
        assert_eq!(lat(&r), (2, 200));
    }
}

// RFC 5044 §7.1.2: the client's first FPDU on the data connection may be held after the
// MPA Reply (`first_fpdu_delay`, for Linux siw); the data phase starts after the hold, so
// neither side's samples (half the gap between its consecutive Writes) contain it. One
// that did would come near half the hold (less the few control exchanges before it).
#[test]
fn write_lat_excludes_first_fpdu_hold() {
    let hold = Duration::from_secs(1);
    let (c, s) = run_held(Test::WriteLat, 2, 50, hold);
    for r in [c, s.expect("server result")] {
        assert_eq!(lat(&r), (2, 50));
        let PerfResult::Lat { max, .. } = r else {
            unreachable!()
        };
        let limit = hold.as_secs_f64() * 1e6 / 4.0;
        assert!(max < limit, "a sample of {max} µs spans the hold");
    }
}

fn lat(r: &PerfResult) -> (usize, u64) {
    match r {
        PerfResult::Lat {
            bytes,
            iters,
            min,
            typical,
            max,
            ..
        } => {
            assert!(*min > 0.0 && min <= typical && typical <= max, "{r:?}");
            (*bytes, *iters)
        }
        PerfResult::Bw { .. } => panic!("latency expected"),
    }
}

// RFC 5040 §5.2: one RDMA Read at a time; only the client measures (the server is passive).
#[test]
fn read_lat() {
    let (c, s) = run(Test::ReadLat, 64, 150);
    assert_eq!(lat(&c), (64, 150));
    assert!(s.is_none());
}

// RFC 5040 §5.3: Send ping-pong, the client first; both sides measure.
#[test]
fn send_lat() {
    let (c, s) = run(Test::SendLat, 2, 150);
    assert_eq!(lat(&c), (2, 150));
    assert_eq!(lat(&s.expect("server result")), (2, 150));
}

// Our own perf protocol's server rejects a connection without its hello in the MPA
// private data: the client reports the rejected control connection and stops.
#[test]
fn client_against_plain_perf_server_fails_cleanly() {
    use dataplane::apps::perf::PerfServer;
    let (mut ls, mut lc) = pair(MpaConfig::default(), 32 << 20, FaultConfig::default());
    let addr = SocketAddrV4::new(SERVER_IP, 18515);
    let mut s = PerfServer::new(ls.handler_mut(), addr).expect("server");
    let params = PerftestParams::new(Test::WriteBw, 64, 10);
    let mut c = PerftestSession::client(lc.handler_mut(), CLIENT_IP, addr, params).expect("client");
    let (_, rc) = run_pair(
        &mut ls,
        &mut s,
        &mut lc,
        &mut c,
        Duration::from_secs(3),
        &NO_STOP,
    );
    assert_eq!(
        rc.map_err(|e| e.to_string()),
        Err("control connection: rejected".to_string())
    );
    assert!(c.result.is_none());
}

/// A peer that answers the client's first record (the version) with `reply`.
struct BadPeer {
    res: dataplane::apps::Resources,
    buf: dataplane::rdma::Region,
    qp: Option<iwarp::verbs::QpId>,
    reply: Vec<u8>,
}

impl dataplane::apps::App for BadPeer {
    type Error = dataplane::apps::AppError;

    fn step(
        &mut self,
        h: &mut dataplane::rdma::RdmaHandler,
        _now: dataplane::clock::Instant,
    ) -> dataplane::apps::Step {
        use dataplane::apps::Step;
        use dataplane::rdma::CmEvent;
        use iwarp::verbs::{CompletionStatus, RecvWr, SendOp, SendWr, WcOpcode};
        while let Some(ev) = h.poll_cm_event() {
            match ev {
                CmEvent::ConnectRequest { id, qp, .. } => {
                    let wr = RecvWr {
                        wr_id: 0,
                        sgl: vec![self.buf.sge(0, 64)],
                    };
                    h.rnic_mut().post_rq(qp, vec![wr]).unwrap();
                    h.accept(id, &[]).unwrap();
                    self.qp = Some(qp);
                }
                CmEvent::Disconnected { .. } => return Step::Done(Ok(())),
                _ => {}
            }
        }
        while let Some(wc) = self.res.poll_cq(h) {
            if wc.opcode == WcOpcode::Receive && wc.status == CompletionStatus::Success {
                let rnic = h.rnic_mut();
                self.buf.bytes_mut(rnic)[64..64 + self.reply.len()].copy_from_slice(&self.reply);
                let wr = SendWr::message(
                    1,
                    SendOp::Send {
                        sgl: iwarp::mem::Sgl::one(self.buf.sge(64, self.reply.len())),
                        solicited: false,
                        invalidate: None,
                    },
                );
                rnic.post_sq(wc.qp, vec![wr]).unwrap();
            }
        }
        Step::Continue
    }
}

fn against_bad_peer(reply: &[u8]) -> String {
    use dataplane::apps::{all_rights, Resources};
    let (mut ls, mut lc) = pair(MpaConfig::default(), 32 << 20, FaultConfig::default());
    let addr = SocketAddrV4::new(SERVER_IP, 18515);
    let h = ls.handler_mut();
    let mut res = Resources::new(h, 64, 16, 16, 0).unwrap();
    let buf = res.buffer(h, 128, all_rights()).unwrap();
    h.listen(addr, res.init).unwrap();
    let mut s = BadPeer {
        res,
        buf,
        qp: None,
        reply: reply.to_vec(),
    };
    let params = PerftestParams::new(Test::WriteBw, 64, 10);
    let mut c = PerftestSession::client(lc.handler_mut(), CLIENT_IP, addr, params).expect("client");
    let (_, rc) = run_pair(
        &mut ls,
        &mut s,
        &mut lc,
        &mut c,
        Duration::from_secs(10),
        &NO_STOP,
    );
    assert!(s.qp.is_some(), "the bad peer accepted");
    rc.expect_err("the client must fail").to_string()
}

// Malformed control records from the peer: a one-line error naming the record, no panic.
#[test]
fn malformed_version_records_are_errors() {
    let e = against_bad_peer(b"not-a-version!!\0");
    assert_eq!(
        e,
        "malformed version record from the peer: version record is not a version string"
    );
    let e = against_bad_peer(b"6.06");
    assert_eq!(
        e,
        "malformed version record from the peer: version: 4 octets, expected 16"
    );
    let e = against_bad_peer(b"5.20\0\0\0\0\0\0\0\0\0\0\0\0");
    assert!(e.contains("older than 5.33"), "{e}");
    assert!(!e.contains('\n'));
}
