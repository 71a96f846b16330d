//! A verified RDMA Write + Read + Send mix over many QPs between two poll loops joined by
//! the software pair with fault injection. Every byte is checked: a Write's target, the
//! Read's sink and each Send's receive buffer must equal the pattern exactly once the
//! operation completed, and while a stream is being torn down by an error every byte is
//! either untouched (zero) or the pattern (nothing corrupted is ever placed).
#![allow(dead_code)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::rc::Rc;
use std::time::Duration;

use dataplane::clock::{self};

use dataplane::apps::{all_rights, Resources};
use dataplane::config::Ipv4Cidr;
use dataplane::lcore::{PollLoop, PortAddr};
use dataplane::port::fault::{FaultConfig, FaultCounters, FaultPort};
use dataplane::port::soft_pair::{soft_pair, SoftPort};
use dataplane::port::{Port, PortInfo, PortStats};
use dataplane::rdma::{CmEvent, RdmaConfig, RdmaHandler, RdmaStack, Region, StackConfig};
use iwarp::mpa::MpaConfig;
use iwarp::verbs::{CompletionStatus, QpId, SendOp, SendWr, WcOpcode, WorkCompletion};
use smoltcp::wire::{EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Packet, TcpPacket};
use tcp::ConnId;

use super::find_terminate;

const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
const PORT: u16 = 7100;
/// Largest Write/Read of one round.
pub const CHUNK: usize = 32 * 1024;
/// Largest Send of one round (the server's receive buffers).
pub const MSG: usize = 4096;
const RECV_SLOTS: usize = 8;

/// Terminates seen on the wire: (TCP source port, TCP destination port, layer/etype/code).
pub type TermLog = Rc<RefCell<Vec<(u16, u16, Cause)>>>;

/// A Terminate's (layer, error type, error code).
pub type Cause = (u8, u8, u8);

/// A port that records the Terminates the data plane transmits (each FPDU-aligned TCP
/// segment is scanned for RDMAP opcode 7).
pub struct Tap<P: Port> {
    inner: P,
    log: TermLog,
}

impl<P: Port> Port for Tap<P> {
    type Buf = P::Buf;
    fn info(&self) -> &PortInfo {
        self.inner.info()
    }
    fn rx_burst(&mut self, out: &mut Vec<P::Buf>, max: usize) -> usize {
        self.inner.rx_burst(out, max)
    }
    fn alloc_tx(&mut self, len: usize) -> Option<P::Buf> {
        self.inner.alloc_tx(len)
    }
    fn tx_burst(&mut self, bufs: &mut Vec<P::Buf>) -> usize {
        for b in bufs.iter() {
            if let Some(t) = terminate_in(b.as_ref()) {
                self.log.borrow_mut().push(t);
            }
        }
        self.inner.tx_burst(bufs)
    }
    fn stats(&self) -> PortStats {
        self.inner.stats()
    }
}

fn terminate_in(frame: &[u8]) -> Option<(u16, u16, Cause)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    if ip.next_header() != IpProtocol::Tcp {
        return None;
    }
    let t = TcpPacket::new_checked(ip.payload()).ok()?;
    let (l, e, c, _) = find_terminate(t.payload())?;
    Some((t.src_port(), t.dst_port(), (l, e, c)))
}

pub type MixLoop = PollLoop<Tap<FaultPort<SoftPort>>, RdmaHandler>;

/// Settings of a mix run.
#[derive(Clone, Debug)]
pub struct MixParams {
    pub qps: usize,
    /// Stop after this many octets moved (Write + Read + Send payloads), if set.
    pub total_bytes: Option<u64>,
    /// Stop after this long, if set.
    pub duration: Option<Duration>,
    pub faults: FaultConfig,
    pub crc: bool,
    /// A stream may end in an error (checksum-preserving corruption runs).
    pub errors_allowed: bool,
    /// Progress line every so often.
    pub progress: Option<Duration>,
    /// Give up after this long without progress.
    pub stall_limit: Duration,
}

#[derive(Debug, Default, Clone)]
struct Round {
    n: u64,
    write_len: usize,
    send_len: usize,
    client_left: u8,
    recv_done: bool,
}

#[derive(Debug)]
struct MixQp {
    cid: ConnId,
    cqp: QpId,
    sqp: Option<QpId>,
    /// The server's connection.
    sid: Option<ConnId>,
    local_port: u16,
    established: bool,
    /// Server target, client source (CHUNK + MSG) and client sink.
    target: Region,
    recv: Region,
    src: Region,
    sink: Region,
    round: Option<Round>,
    rounds_done: u64,
    failed: Option<String>,
    /// Ended without a Terminate in a known state (see `stalled_on_partial_fpdu`).
    quiet_end: bool,
}

/// What a run did.
#[derive(Debug, Default, Clone)]
pub struct MixReport {
    pub bytes: u64,
    pub rounds: u64,
    pub qps_completed: usize,
    /// (QP index, reason) of the streams that ended in an error.
    pub qps_failed: Vec<(usize, String)>,
    /// Terminates each failed stream saw on the wire (not those in `quiet_ends`).
    pub failed_terminates: Vec<(usize, Vec<Cause>)>,
    /// (QP index, reason) of the failed streams that ended without a Terminate: MPA
    /// negotiation broken by corruption (no CRC protects it, RFC 5044 §7.1), or a stream
    /// waiting on a partial FPDU whose length a corruption grew (RFC 5044 §6.5).
    pub quiet_ends: Vec<(usize, String)>,
    pub faults: FaultCounters,
    pub crc_errors: u64,
    pub elapsed: Duration,
}

impl MixReport {
    pub fn line(&self) -> String {
        format!(
            "bytes {} ({:.1} MiB) rounds {} qps ok {} failed {} | faults: dropped {} reordered {} duplicated {} corrupted {} (tcp payload {}) | crc errors {} | {:.1} s",
            self.bytes,
            self.bytes as f64 / (1 << 20) as f64,
            self.rounds,
            self.qps_completed,
            self.qps_failed.len(),
            self.faults.dropped,
            self.faults.reordered,
            self.faults.duplicated,
            self.faults.corrupted,
            self.faults.corrupted_tcp,
            self.crc_errors,
            self.elapsed.as_secs_f64()
        )
    }
}

/// The soak's seeded pattern (no zero octet: zero marks "not placed").
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    dataplane::apps::soak::pattern(seed, 0, len)
}

fn seed(qp: usize, round: u64, kind: u64) -> u64 {
    ((qp as u64) << 40) | (round << 2) | kind
}

fn new_loop(
    port: SoftPort,
    faults: FaultConfig,
    ip: Ipv4Addr,
    n: u64,
    crc: bool,
    log: TermLog,
) -> MixLoop {
    let rdma = RdmaConfig {
        mpa: MpaConfig {
            require_crc: crc,
            ..MpaConfig::default()
        },
        tcp: tcp::Config {
            isn_secret: [n as u8; 16],
            rto_min: Duration::from_millis(5),
            ..tcp::Config::default()
        },
        rx_window: 1 << 20,
    };
    let cfg = StackConfig {
        rdma,
        stag_seed: n,
        burst: 64,
        ..StackConfig::new(MpaConfig::default(), tcp::Config::default())
    };
    let mut f = faults;
    f.seed = f.seed.wrapping_add(n);
    let port = Tap {
        inner: FaultPort::new(port, f),
        log,
    };
    let addr = PortAddr::on_subnet(Ipv4Cidr {
        addr: ip,
        prefix: 24,
    });
    RdmaStack::new(port, addr, cfg).expect("stack").poll
}

/// Runs the verified mix; panics on any byte that differs from what was sent.
pub fn run_mix(p: &MixParams) -> MixReport {
    let start = clock::now();
    let info = |n: &str, last| PortInfo {
        name: n.into(),
        mac: [2, 0, 0, 0, 7, last],
        mtu: 1500,
    };
    let (a, b) = soft_pair(info("s", 1), info("c", 2), 8192);
    let log: TermLog = Rc::default();
    let mut ls = new_loop(a, p.faults.clone(), SERVER_IP, 1, p.crc, log.clone());
    let mut lc = new_loop(b, p.faults.clone(), CLIENT_IP, 2, p.crc, log.clone());
    let mut srv = Resources::new(ls.handler_mut(), 4096, 64, 64, 16).expect("srv");
    let mut cli = Resources::new(lc.handler_mut(), 4096, 64, 64, 16).expect("cli");
    srv.init.rq_depth = RECV_SLOTS as u32 * 2;
    ls.handler_mut()
        .listen(SocketAddrV4::new(SERVER_IP, PORT), srv.init)
        .expect("listen");
    let mut qps = Vec::new();
    for i in 0..p.qps {
        let target = srv
            .buffer(ls.handler_mut(), CHUNK, all_rights())
            .expect("target");
        let recv = srv
            .buffer(ls.handler_mut(), MSG * RECV_SLOTS, all_rights())
            .expect("recv");
        let src = cli
            .buffer(lc.handler_mut(), CHUNK + MSG, all_rights())
            .expect("src");
        let sink = cli
            .buffer(lc.handler_mut(), CHUNK, all_rights())
            .expect("sink");
        let (cid, cqp) = lc
            .handler_mut()
            .connect(
                CLIENT_IP,
                SocketAddrV4::new(SERVER_IP, PORT),
                cli.init,
                &(i as u32).to_be_bytes(),
            )
            .expect("connect");
        let local_port = lc.handler().tcp().tuple(cid).map_or(0, |t| t.local.port());
        qps.push(MixQp {
            cid,
            cqp,
            sqp: None,
            sid: None,
            local_port,
            established: false,
            target,
            recv,
            src,
            sink,
            round: None,
            rounds_done: 0,
            failed: None,
            quiet_end: false,
        });
    }
    let mut srv_qp: HashMap<QpId, usize> = HashMap::new();
    let cli_qp: HashMap<QpId, usize> = qps.iter().enumerate().map(|(i, q)| (q.cqp, i)).collect();
    let mut report = MixReport::default();
    let mut last_progress = clock::now();
    let mut last_print = clock::now();
    loop {
        let now = clock::now();
        ls.poll_once(now);
        lc.poll_once(now);
        // Server CM: accept, post receives.
        while let Some(e) = ls.handler_mut().poll_cm_event() {
            match e {
                CmEvent::ConnectRequest { id, qp, remote, .. } => {
                    // The QP is found by the client's port, not by the Request's private
                    // data: MPA Requests carry no CRC, so corruption can change it.
                    let Some(i) = qps.iter().position(|q| q.local_port == remote.port()) else {
                        let _ = ls.handler_mut().reject(id, b"unknown port");
                        continue;
                    };
                    let q = &mut qps[i];
                    q.sqp = Some(qp);
                    q.sid = Some(id);
                    srv_qp.insert(qp, i);
                    let wrs = (0..RECV_SLOTS)
                        .map(|s| q.recv.recv_wr(s as u64, s * MSG, MSG))
                        .collect();
                    let h = ls.handler_mut();
                    h.rnic_mut().post_rq(qp, wrs).expect("post rq");
                    h.accept(id, &[]).expect("accept");
                }
                CmEvent::Disconnected { qp, graceful, .. } => {
                    if let Some(&i) = srv_qp.get(&qp) {
                        if !graceful && qps[i].failed.is_none() {
                            qps[i].failed = Some("server side: disconnected".into());
                        }
                    }
                }
                _ => {}
            }
        }
        while let Some(e) = lc.handler_mut().poll_cm_event() {
            match e {
                CmEvent::Established { qp, .. } => {
                    if let Some(&i) = cli_qp.get(&qp) {
                        qps[i].established = true;
                        qps[i].local_port = lc
                            .handler()
                            .tcp()
                            .tuple(qps[i].cid)
                            .map_or(qps[i].local_port, |t| t.local.port());
                    }
                }
                CmEvent::ConnectError { qp, reason, .. } => {
                    if let Some(&i) = cli_qp.get(&qp) {
                        assert!(p.errors_allowed, "QP {i} could not connect: {reason}");
                        qps[i].failed = Some(format!("could not connect: {reason}"));
                        qps[i].quiet_end = true;
                    }
                }
                CmEvent::Rejected { qp, .. } => {
                    if let Some(&i) = cli_qp.get(&qp) {
                        qps[i].failed = Some("client side: rejected".into());
                        qps[i].quiet_end = true;
                    }
                }
                CmEvent::Disconnected { qp, graceful, .. } => {
                    if let Some(&i) = cli_qp.get(&qp) {
                        if !graceful && qps[i].failed.is_none() {
                            qps[i].failed = Some("client side: disconnected".into());
                        }
                    }
                }
                _ => {}
            }
        }
        // Server receive completions.
        while let Some(wc) = srv.poll_cq(ls.handler_mut()) {
            let failure = |wc: &WorkCompletion| format!("server wc {:?}", wc.status);
            let Some(i) = succeeded(&wc, &srv_qp, &mut qps, failure) else {
                continue;
            };
            let q = &mut qps[i];
            assert_eq!(wc.opcode, WcOpcode::Receive);
            let r = q.round.as_mut().expect("a Send arrived outside a round");
            let slot = wc.wr_id as usize;
            assert_eq!(slot as u64, r.n % RECV_SLOTS as u64, "receive order");
            assert_eq!(wc.byte_len as usize, r.send_len, "QP {i} Send length");
            let want = pattern(seed(i, r.n, 2), r.send_len);
            {
                let h = ls.handler();
                let rnic = h.rnic();
                let got = &q.recv.bytes(rnic)[slot * MSG..slot * MSG + r.send_len];
                assert!(
                    got == &want[..],
                    "QP {i} round {}: Send payload differs",
                    r.n
                );
            }
            r.recv_done = true;
            let h = ls.handler_mut();
            {
                let rnic = h.rnic_mut();
                q.recv.bytes_mut(rnic)[slot * MSG..(slot + 1) * MSG].fill(0);
            }
            h.rnic_mut()
                .post_rq(wc.qp, vec![q.recv.recv_wr(slot as u64, slot * MSG, MSG)])
                .expect("repost");
        }
        // Client completions.
        while let Some(wc) = cli.poll_cq(lc.handler_mut()) {
            let failure =
                |wc: &WorkCompletion| format!("client wc {:?} {:?}", wc.opcode, wc.status);
            let Some(i) = succeeded(&wc, &cli_qp, &mut qps, failure) else {
                continue;
            };
            if let Some(r) = qps[i].round.as_mut() {
                r.client_left = r.client_left.saturating_sub(1);
            }
        }
        // Finished rounds: verify and start the next.
        let budget_left = p.total_bytes.is_none_or(|t| report.bytes < t)
            && p.duration.is_none_or(|d| clock::elapsed(start) < d);
        for (i, q) in qps.iter_mut().enumerate() {
            if !q.established || q.failed.is_some() || q.sqp.is_none() {
                continue;
            }
            if let Some(r) = &q.round {
                if r.client_left > 0 || !r.recv_done {
                    continue;
                }
                let want = pattern(seed(i, r.n, 0), r.write_len);
                let target = &q.target.bytes(ls.handler().rnic())[..r.write_len];
                assert!(
                    target == &want[..],
                    "QP {i} round {}: Write target differs",
                    r.n
                );
                let sink = &q.sink.bytes(lc.handler().rnic())[..r.write_len];
                assert!(sink == &want[..], "QP {i} round {}: Read sink differs", r.n);
                report.bytes += 2 * r.write_len as u64 + r.send_len as u64;
                report.rounds += 1;
                q.rounds_done += 1;
                q.round = None;
                last_progress = clock::now();
            }
            if !budget_left {
                continue;
            }
            let n = q.rounds_done;
            let write_len = 1 + (n as usize * 7919 + i * 131) % CHUNK;
            let send_len = (n as usize * 613 + i * 17) % (MSG + 1);
            let w = pattern(seed(i, n, 0), write_len);
            let s = pattern(seed(i, n, 2), send_len);
            {
                let rnic = ls.handler_mut().rnic_mut();
                q.target.bytes_mut(rnic).fill(0);
            }
            {
                let rnic = lc.handler_mut().rnic_mut();
                let src = q.src.bytes_mut(rnic);
                src[..write_len].copy_from_slice(&w);
                src[CHUNK..CHUNK + send_len].copy_from_slice(&s);
                q.sink.bytes_mut(rnic).fill(0);
            }
            let wr = |k: u64, op| SendWr::message((n << 2) | k, op);
            let wrs = vec![
                wr(
                    0,
                    SendOp::Write {
                        sgl: iwarp::mem::Sgl::one(q.src.sge(0, write_len)),
                        remote: q.target.remote(0),
                    },
                ),
                wr(
                    1,
                    SendOp::Read {
                        sink: q.sink.remote(0),
                        remote: q.target.remote(0),
                        len: write_len as u32,
                    },
                ),
                wr(
                    2,
                    SendOp::Send {
                        sgl: if send_len == 0 {
                            iwarp::mem::Sgl::new()
                        } else {
                            iwarp::mem::Sgl::one(q.src.sge(CHUNK, send_len))
                        },
                        solicited: false,
                        invalidate: None,
                    },
                ),
            ];
            lc.handler_mut()
                .rnic_mut()
                .post_sq(q.cqp, wrs)
                .expect("post sq");
            q.round = Some(Round {
                n,
                write_len,
                send_len,
                client_left: 3,
                recv_done: false,
            });
        }
        let all_idle = qps
            .iter()
            .all(|q| q.failed.is_some() || (q.established && q.round.is_none()));
        if all_idle && !budget_left {
            break;
        }
        if all_idle && qps.iter().all(|q| q.failed.is_some()) {
            break;
        }
        if let Some(every) = p.progress {
            if clock::elapsed(last_print) >= every {
                last_print = clock::now();
                report.elapsed = clock::elapsed(start);
                report.faults = fault_totals(&ls, &lc);
                report.qps_completed = qps.iter().filter(|q| q.failed.is_none()).count();
                println!("progress: {}", report.line());
            }
        }
        if clock::elapsed(last_progress) > p.stall_limit && p.errors_allowed {
            let mut explained = true;
            for q in qps
                .iter_mut()
                .filter(|q| q.round.is_some() && q.failed.is_none())
            {
                if stalled_on_partial_fpdu(&ls, &lc, q) {
                    q.failed = Some("stalled: an FPDU's grown length is never completed".into());
                    q.quiet_end = true;
                } else {
                    explained = false;
                }
            }
            if explained {
                last_progress = clock::now();
                continue;
            }
        }
        if clock::elapsed(last_progress) > p.stall_limit {
            let state: Vec<_> = qps
                .iter()
                .map(|q| {
                    (
                        q.established,
                        q.rounds_done,
                        q.round.clone(),
                        q.failed.clone(),
                    )
                })
                .collect();
            // Both ends of every open stream: TCP sequence state and MPA/DDP counters.
            for (i, q) in qps.iter().enumerate().filter(|(_, q)| q.round.is_some()) {
                let c = lc.handler().tcp().info(q.cid);
                let s = q.sid.and_then(|id| ls.handler().tcp().info(id));
                let cs = lc.handler().conn(q.cid).map(|c| c.stats());
                let ss = q
                    .sid
                    .and_then(|id| ls.handler().conn(id))
                    .map(|c| c.stats());
                eprintln!("QP {i} client tcp {c:?}\n  mpa {cs:?}\nserver tcp {s:?}\n  mpa {ss:?}");
            }
            panic!("no progress for {:?}: {state:?}", p.stall_limit);
        }
    }
    // Streams that ended in an error: nothing but the pattern was ever placed.
    report.qps_completed = 0;
    for (i, q) in qps.iter().enumerate() {
        let Some(why) = &q.failed else {
            report.qps_completed += 1;
            continue;
        };
        assert!(p.errors_allowed, "QP {i} failed: {why}");
        if let Some(r) = &q.round {
            let w = pattern(seed(i, r.n, 0), r.write_len);
            let s = pattern(seed(i, r.n, 2), r.send_len);
            let rnic = ls.handler().rnic();
            let t = q.target.bytes(rnic);
            for (k, &b) in t.iter().enumerate() {
                assert!(
                    b == 0 || (k < r.write_len && b == w[k]),
                    "QP {i}: corrupted byte placed in the Write target at {k}"
                );
            }
            let slot = (r.n % RECV_SLOTS as u64) as usize;
            let got = &q.recv.bytes(rnic)[slot * MSG..(slot + 1) * MSG];
            for (k, &b) in got.iter().enumerate() {
                assert!(
                    b == 0 || (k < r.send_len && b == s[k]),
                    "QP {i}: corrupted byte placed in a receive buffer at {k}"
                );
            }
            let crnic = lc.handler().rnic();
            for (k, &b) in q.sink.bytes(crnic).iter().enumerate() {
                assert!(
                    b == 0 || (k < r.write_len && b == w[k]),
                    "QP {i}: corrupted byte placed in the Read sink at {k}"
                );
            }
        }
        let terms: Vec<_> = log
            .borrow()
            .iter()
            .filter(|(s, d, _)| *s == q.local_port || *d == q.local_port)
            .map(|(_, _, c)| *c)
            .collect();
        report.qps_failed.push((i, why.clone()));
        if q.quiet_end {
            report.quiet_ends.push((i, why.clone()));
        } else {
            report.failed_terminates.push((i, terms));
        }
    }
    report.faults = fault_totals(&ls, &lc);
    report.crc_errors = ls.handler().counters().crc_errors + lc.handler().counters().crc_errors;
    report.elapsed = clock::elapsed(start);
    report
}

/// Whether `q`'s stream is stuck in the state a corrupted-upwards ULPDU_Length leaves: in
/// one direction TCP delivered and acknowledged every octet, yet the receiver handed up
/// fewer FPDUs than the sender framed (it holds a partial FPDU, waiting for octets the
/// length claims and the peer, waiting for an answer, never sends).
/// The index of the mix QP `wc` completed on (by `index`), when it succeeded; else `None`,
/// after recording a failure other than a flush as the QP's first (`failure` words it).
fn succeeded(
    wc: &WorkCompletion,
    index: &HashMap<QpId, usize>,
    qps: &mut [MixQp],
    failure: impl FnOnce(&WorkCompletion) -> String,
) -> Option<usize> {
    let &i = index.get(&wc.qp)?;
    if wc.status == CompletionStatus::Success {
        return Some(i);
    }
    let q = &mut qps[i];
    if wc.status != CompletionStatus::Flushed && q.failed.is_none() {
        q.failed = Some(failure(wc));
    }
    None
}

fn stalled_on_partial_fpdu(ls: &MixLoop, lc: &MixLoop, q: &MixQp) -> bool {
    let Some(sid) = q.sid else {
        return false;
    };
    let (Some(ct), Some(st)) = (lc.handler().tcp().info(q.cid), ls.handler().tcp().info(sid))
    else {
        return false;
    };
    let (Some(cc), Some(sc)) = (lc.handler().conn(q.cid), ls.handler().conn(sid)) else {
        return false;
    };
    let (cs, ss) = (cc.stats(), sc.stats());
    let waiting = |snd: &tcp::ConnInfo, rcv: &tcp::ConnInfo, sent: u64, got: u64| {
        snd.snd_una == snd.snd_nxt && rcv.rcv_nxt == snd.snd_nxt && got < sent
    };
    waiting(&ct, &st, cs.fpdus_sent, ss.fpdus_received)
        || waiting(&st, &ct, ss.fpdus_sent, cs.fpdus_received)
}

fn fault_totals(ls: &MixLoop, lc: &MixLoop) -> FaultCounters {
    let (a_rx, a_tx) = ls.ports()[0].inner.counters();
    let (b_rx, b_tx) = lc.ports()[0].inner.counters();
    a_rx + a_tx + b_rx + b_tx
}
