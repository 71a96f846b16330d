//! perftest-style benchmarks over the data plane's iWARP: RDMA Write, RDMA Read, Send and
//! atomics (FetchAdd), in bandwidth and latency modes.
//!
//! Control exchange: the client's MPA Request private data carries a [`Hello`] (test, size,
//! its buffer), the server's Reply private data its buffer ([`Offer`]). One connection per
//! QP and per message size; the server serves connections until the client's last one
//! (flagged in the hello) disconnects. perftest's own rdma_cm exchange (`-R`) would be a
//! second implementation of these two records over Send/Recv.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::clock::{self, Instant};

use iwarp::verbs::Sgl;
use iwarp::verbs::{
    Access, CompletionStatus, QpId, RecvWr, RemoteBuf, STag, SendOp, SendWr, SqOp, WcOpcode,
    WorkCompletion,
};
use iwarp::wire::atomic::AtomicOp;
use rustc_hash::FxHashMap;
use tcp::ConnId;

use super::{all_rights, App, AppError, ConnectFailure, Resources, Step};
use crate::rdma::{CmEvent, RdmaHandler, Region};

/// Which operation to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerfOp {
    /// RDMA Write.
    Write,
    /// RDMA Read.
    Read,
    /// Send.
    Send,
    /// FetchAdd.
    Atomic,
}

/// Bandwidth or latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerfMode {
    /// Many operations in flight.
    Bw,
    /// One at a time (ping-pong for Write and Send).
    Lat,
}

impl PerfOp {
    fn code(self) -> u8 {
        match self {
            PerfOp::Write => 1,
            PerfOp::Read => 2,
            PerfOp::Send => 3,
            PerfOp::Atomic => 4,
        }
    }
    fn from_code(c: u8) -> Option<PerfOp> {
        Some(match c {
            1 => PerfOp::Write,
            2 => PerfOp::Read,
            3 => PerfOp::Send,
            4 => PerfOp::Atomic,
            _ => return None,
        })
    }
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            PerfOp::Write => "write",
            PerfOp::Read => "read",
            PerfOp::Send => "send",
            PerfOp::Atomic => "atomic",
        }
    }
}

const MAGIC: &[u8; 4] = b"DPPF";
const VERSION: u8 = 1;
/// Receives the Send server keeps posted per connection (the client's send credits).
const SEND_CREDITS: u32 = 512;
/// Receives the client keeps posted for credit returns.
const CREDIT_RECVS: u32 = 64;
/// The server returns credits after this many receives.
const CREDIT_BATCH: u32 = SEND_CREDITS / 8;
/// Half-open connections the server keeps: as many as the data plane RNIC has QPs, so
/// that a client connecting all of them at once loses no SYN (a lost SYN waits a 1 s RTO).
const SERVER_BACKLOG: usize = 16384;
/// Bandwidth runs: WRs in flight over all QPs at most (a QP keeps at least one); fewer than
/// `tx_depth` each with more than 64 QPs at the default depth of 128.
pub const MAX_IN_FLIGHT: u32 = 8192;

/// With debug logging, a bandwidth run whose completions stood still this long logs the
/// state of the QPs that still wait (at most [`STALL_DUMP_QPS`] of them), and again every
/// such interval while it lasts.
pub const STALL_DUMP: Duration = Duration::from_secs(1);
/// QPs a stall dump describes at most.
pub const STALL_DUMP_QPS: usize = 8;

/// The client's test description (MPA Request private data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Operation.
    pub op: PerfOp,
    /// Mode.
    pub mode: PerfMode,
    /// The last connection of the run.
    pub last: bool,
    /// Message size of this connection.
    pub size: u32,
    /// Largest message size of the run (buffer size).
    pub max_size: u32,
    /// QP slot (0..qps).
    pub slot: u16,
    /// The client's buffer (ping-pong target).
    pub addr: u64,
    /// Its STag.
    pub rkey: u32,
}

/// Length of [`Hello`] on the wire.
pub const HELLO_LEN: usize = 32;

impl Hello {
    /// Wire form.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HELLO_LEN);
        b.extend_from_slice(MAGIC);
        b.push(VERSION);
        b.push(self.op.code());
        b.push(u8::from(self.mode == PerfMode::Lat));
        b.push(u8::from(self.last));
        b.extend_from_slice(&self.size.to_be_bytes());
        b.extend_from_slice(&self.max_size.to_be_bytes());
        b.extend_from_slice(&self.slot.to_be_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&self.addr.to_be_bytes());
        b.extend_from_slice(&self.rkey.to_be_bytes());
        b
    }

    /// Parses the wire form.
    pub fn parse(b: &[u8]) -> Option<Hello> {
        if b.len() < HELLO_LEN || &b[..4] != MAGIC || b[4] != VERSION {
            return None;
        }
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some(Hello {
            op: PerfOp::from_code(b[5])?,
            mode: if b[6] == 1 {
                PerfMode::Lat
            } else {
                PerfMode::Bw
            },
            last: b[7] == 1,
            size: u32_at(8),
            max_size: u32_at(12),
            slot: u16::from_be_bytes([b[16], b[17]]),
            addr: u64::from_be_bytes(b[20..28].try_into().ok()?),
            rkey: u32_at(28),
        })
    }
}

/// The server's buffer (MPA Reply private data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    /// Tagged address.
    pub addr: u64,
    /// STag.
    pub rkey: u32,
    /// Length.
    pub len: u32,
}

impl Offer {
    /// Wire form.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(24);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&[VERSION, 0, 0, 0]);
        b.extend_from_slice(&self.addr.to_be_bytes());
        b.extend_from_slice(&self.rkey.to_be_bytes());
        b.extend_from_slice(&self.len.to_be_bytes());
        b
    }

    /// Parses the wire form.
    pub fn parse(b: &[u8]) -> Option<Offer> {
        if b.len() < 24 || &b[..4] != MAGIC || b[4] != VERSION {
            return None;
        }
        Some(Offer {
            addr: u64::from_be_bytes(b[8..16].try_into().ok()?),
            rkey: u32::from_be_bytes(b[16..20].try_into().ok()?),
            len: u32::from_be_bytes(b[20..24].try_into().ok()?),
        })
    }
}

/// Why a perf run failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PerfError {
    /// Work for a QP whose server buffer is not known yet.
    #[error("no server buffer")]
    NoServerBuffer,
    /// The server's MPA Reply has no [`Offer`].
    #[error("the server's reply carries no buffer")]
    NoOffer,
    /// The server closed a connection before the client was done with it.
    #[error("the server disconnected")]
    ServerDisconnected,
    /// A failure every application can have.
    #[error(transparent)]
    App(#[from] AppError),
}

// ------------------------------------------------------------------ server

struct ServerConn {
    hello: Hello,
    qp: QpId,
    buf: Region,
    /// Receives completed since the last credit return.
    since_credit: u32,
    /// Ping-pong: the last sequence byte seen.
    seen: u8,
}

/// The perf server: serves connections until the client's last one is gone.
pub struct PerfServer {
    res: Resources,
    /// Latency runs: one buffer per QP slot; bandwidth runs share slot 0's (the data is
    /// not checked, and thousands of QPs then cost no memory each).
    bufs: HashMap<u16, Region>,
    /// Keyed by the handler's own connection ids: a fast unkeyed hash.
    conns: FxHashMap<ConnId, ServerConn>,
    /// The connection of each QP (completions name the QP).
    by_qp: FxHashMap<QpId, ConnId>,
    /// Write latency connections (they answer ping-pong writes).
    pong: Vec<ConnId>,
    last_seen: bool,
    /// Connections served.
    pub served: u32,
    /// Check, when a Write or Send bandwidth connection ends, that its buffer holds the
    /// client's pattern ([`source_byte`]) in every octet of the message size.
    pub verify: bool,
    /// Octets found as the client wrote them ([`PerfServer::verify`]).
    pub verified_bytes: u64,
    /// Connections whose buffer did not hold the client's pattern.
    pub verify_failures: u32,
}

/// Octet `i` of the perf client's source buffer (a recognisable pattern).
pub fn source_byte(i: usize) -> u8 {
    (i * 31 + 7) as u8
}

impl PerfServer {
    /// Listens on `addr` (IPv4 or IPv6).
    pub fn new(h: &mut RdmaHandler, addr: impl Into<SocketAddr>) -> Result<PerfServer, AppError> {
        let res = Resources::new(h, 8192, 1024, SEND_CREDITS + 8, 16)?;
        // A client with thousands of QPs connects them all at once.
        h.set_listen_backlog(SERVER_BACKLOG);
        h.listen(addr, res.init)?;
        Ok(PerfServer {
            res,
            bufs: HashMap::new(),
            conns: FxHashMap::default(),
            by_qp: FxHashMap::default(),
            pong: Vec::new(),
            last_seen: false,
            served: 0,
            verify: false,
            verified_bytes: 0,
            verify_failures: 0,
        })
    }

    /// Checks the buffer of an ending connection (see [`PerfServer::verify`]).
    fn check_buffer(&mut self, h: &RdmaHandler, c: &ServerConn) {
        let moves_data = matches!(c.hello.op, PerfOp::Write | PerfOp::Send);
        if !self.verify || !moves_data || c.hello.mode != PerfMode::Bw || c.hello.size == 0 {
            return;
        }
        let size = c.hello.size as usize;
        let bytes = &c.buf.bytes(h.rnic())[..size];
        match bytes
            .iter()
            .enumerate()
            .position(|(i, &b)| b != source_byte(i))
        {
            None => self.verified_bytes += size as u64,
            Some(i) => {
                log::error!(
                    "perf server: slot {} octet {i} is {:#04x}, the client wrote {:#04x}",
                    c.hello.slot,
                    bytes[i],
                    source_byte(i)
                );
                self.verify_failures += 1;
            }
        }
    }

    fn buffer(&mut self, h: &mut RdmaHandler, hello: &Hello) -> Result<Region, AppError> {
        let want = (hello.max_size as usize).max(64);
        let slot = if hello.mode == PerfMode::Lat {
            hello.slot
        } else {
            0
        };
        if let Some(r) = self.bufs.get(&slot) {
            if r.len >= want {
                return Ok(*r);
            }
        }
        let r = self.res.buffer(h, want, all_rights())?;
        self.bufs.insert(slot, r);
        Ok(r)
    }

    fn request(
        &mut self,
        h: &mut RdmaHandler,
        id: ConnId,
        qp: QpId,
        pd: &[u8],
    ) -> Result<(), AppError> {
        let Some(hello) = Hello::parse(pd) else {
            let _ = h.reject(id, b"not a dataplane perf client");
            return Ok(());
        };
        let buf = self.buffer(h, &hello)?;
        buf.bytes_mut(h.rnic_mut()).fill(0);
        if hello.op == PerfOp::Send {
            let n = if hello.mode == PerfMode::Lat {
                1
            } else {
                SEND_CREDITS
            };
            let wrs = (0..n)
                .map(|_| RecvWr {
                    wr_id: 0,
                    sgl: vec![buf.sge(0, hello.size as usize)],
                })
                .collect();
            h.rnic_mut()
                .post_rq(qp, wrs)
                .map_err(AppError::post("recv"))?;
        }
        let offer = Offer {
            addr: buf.addr(0),
            rkey: buf.stag.0,
            len: buf.len as u32,
        };
        h.accept(id, &offer.to_bytes())?;
        self.by_qp.insert(qp, id);
        if hello.op == PerfOp::Write && hello.mode == PerfMode::Lat && hello.size > 0 {
            self.pong.push(id);
        }
        self.conns.insert(
            id,
            ServerConn {
                hello,
                qp,
                buf,
                since_credit: 0,
                seen: 0,
            },
        );
        Ok(())
    }

    fn completion(&mut self, h: &mut RdmaHandler, wc: WorkCompletion) -> Result<(), AppError> {
        if wc.status == CompletionStatus::Flushed {
            return Ok(());
        }
        if wc.status != CompletionStatus::Success {
            return Err(AppError::completion(&wc));
        }
        if wc.opcode != WcOpcode::Receive {
            return Ok(());
        }
        let Some(c) = self.by_qp.get(&wc.qp).and_then(|id| self.conns.get_mut(id)) else {
            return Ok(());
        };
        let rnic = h.rnic_mut();
        rnic.post_rq(
            c.qp,
            vec![RecvWr {
                wr_id: 0,
                sgl: vec![c.buf.sge(0, c.hello.size as usize)],
            }],
        )
        .map_err(AppError::post("recv"))?;
        let reply = if c.hello.mode == PerfMode::Lat {
            Some(wc.byte_len as usize)
        } else {
            c.since_credit += 1;
            if c.since_credit >= CREDIT_BATCH {
                c.since_credit = 0;
                Some(0)
            } else {
                None
            }
        };
        if let Some(len) = reply {
            let wr = SendWr::message(
                1,
                SendOp::Send {
                    sgl: if len == 0 {
                        Sgl::new()
                    } else {
                        Sgl::one(c.buf.sge(0, len))
                    },
                    solicited: false,
                    invalidate: None,
                },
            )
            .unsignaled();
            rnic.post_sq_one(c.qp, wr).map_err(AppError::post("send"))?;
        }
        Ok(())
    }

    /// Write ping-pong: answer each new sequence byte with a write of our own.
    fn write_pong(&mut self, h: &mut RdmaHandler) -> Result<(), AppError> {
        let rnic = h.rnic_mut();
        for id in &self.pong {
            let Some(c) = self.conns.get_mut(id) else {
                continue;
            };
            let size = c.hello.size as usize;
            let b = c.buf.bytes(rnic)[size - 1];
            if b == c.seen {
                continue;
            }
            c.seen = b;
            let wr = SendWr::message(
                1,
                SendOp::Write {
                    sgl: Sgl::one(c.buf.sge(0, size)),
                    remote: RemoteBuf {
                        stag: STag(c.hello.rkey),
                        to: c.hello.addr,
                    },
                },
            )
            .unsignaled();
            rnic.post_sq_one(c.qp, wr)
                .map_err(AppError::post("write"))?;
        }
        Ok(())
    }
}

impl App for PerfServer {
    type Error = PerfError;

    fn step(&mut self, h: &mut RdmaHandler, _now: Instant) -> Step<PerfError> {
        while let Some(ev) = h.poll_cm_event() {
            match ev {
                // Only a pending listener reports these; this tool listens with a QP template.
                CmEvent::Request { .. } | CmEvent::RequestWithdrawn { .. } => {}
                CmEvent::ConnectRequest {
                    id,
                    qp,
                    private_data,
                    ..
                } => {
                    if let Err(e) = self.request(h, id, qp, &private_data) {
                        return Step::Done(Err(e.into()));
                    }
                }
                CmEvent::Established { id, .. } => {
                    if let Some(c) = self.conns.get(&id) {
                        self.last_seen |= c.hello.last;
                    }
                    self.served += 1;
                }
                CmEvent::Disconnected { id, .. } | CmEvent::ConnectError { id, .. } => {
                    if let Some(c) = self.conns.remove(&id) {
                        self.by_qp.remove(&c.qp);
                        self.pong.retain(|p| *p != id);
                        self.check_buffer(h, &c);
                    }
                    if self.last_seen && self.conns.is_empty() {
                        return Step::Done(Ok(()));
                    }
                }
                CmEvent::Rejected { .. } => {}
            }
        }
        while let Some(wc) = self.res.poll_cq(h) {
            if let Err(e) = self.completion(h, wc) {
                return Step::Done(Err(e.into()));
            }
        }
        if let Err(e) = self.write_pong(h) {
            return Step::Done(Err(e.into()));
        }
        Step::Continue
    }
}

// ------------------------------------------------------------------ client

/// What the client runs.
#[derive(Debug, Clone)]
pub struct PerfParams {
    /// Operation.
    pub op: PerfOp,
    /// Mode.
    pub mode: PerfMode,
    /// Message sizes, in order.
    pub sizes: Vec<usize>,
    /// Iterations per size (ignored with `duration`).
    pub iters: u64,
    /// Run each size this long instead.
    pub duration: Option<Duration>,
    /// QPs (connections) in parallel (bandwidth modes).
    pub qps: u16,
    /// Work requests in flight per QP (bandwidth modes; at most [`MAX_IN_FLIGHT`] over all
    /// QPs).
    pub tx_depth: u32,
    /// Largest payload posted inline (Write, Send).
    pub inline: usize,
}

/// One line of the results table.
#[derive(Debug, Clone, PartialEq)]
pub enum PerfResult {
    /// Bandwidth.
    Bw {
        /// Message size.
        bytes: usize,
        /// Operations completed.
        iters: u64,
        /// Best 10 ms window, MB/s (2^20 octets per second, as perftest).
        peak_mbs: f64,
        /// Over the whole run, MB/s.
        avg_mbs: f64,
        /// Million messages per second.
        mpps: f64,
    },
    /// Latency (µs; half round trip for Write and Send ping-pong, as perftest).
    Lat {
        /// Message size.
        bytes: usize,
        /// Samples.
        iters: u64,
        /// Minimum.
        min: f64,
        /// Maximum.
        max: f64,
        /// Median.
        typical: f64,
        /// Mean.
        avg: f64,
        /// Standard deviation.
        stdev: f64,
        /// 99th percentile.
        p99: f64,
        /// 99.9th percentile.
        p999: f64,
    },
}

impl PerfResult {
    /// The table header for `mode`.
    pub fn header(mode: PerfMode) -> &'static str {
        match mode {
            PerfMode::Bw => " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]",
            PerfMode::Lat => " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]",
        }
    }

    /// The row.
    pub fn row(&self) -> String {
        match self {
            PerfResult::Bw {
                bytes,
                iters,
                peak_mbs,
                avg_mbs,
                mpps,
            } => format!(
                " {bytes:<10} {iters:<14} {peak_mbs:<18.2} {avg_mbs:<20.2} {mpps:.6}"
            ),
            PerfResult::Lat {
                bytes,
                iters,
                min,
                max,
                typical,
                avg,
                stdev,
                p99,
                p999,
            } => format!(
                " {bytes:<6} {iters:<11} {min:<14.2} {max:<14.2} {typical:<16.2} {avg:<14.2} {stdev:<15.2} {p99:<22.2} {p999:.2}"
            ),
        }
    }
}

/// Latency statistics over samples in µs.
pub fn latency_result(bytes: usize, mut s: Vec<f64>) -> PerfResult {
    let n = s.len().max(1);
    let avg = s.iter().sum::<f64>() / n as f64;
    let var = s.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
    let min = s.iter().copied().min_by(f64::total_cmp).unwrap_or(0.0);
    let max = s.iter().copied().max_by(f64::total_cmp).unwrap_or(0.0);
    let len = s.len();
    let rank = |p: f64| ((len as f64 * p) as usize).min(len.saturating_sub(1));
    let [typical, p99, p999] = ranked(&mut s, [rank(0.5), rank(0.99), rank(0.999)]);
    PerfResult::Lat {
        bytes,
        iters: len as u64,
        min,
        max,
        typical,
        avg,
        stdev: var.sqrt(),
        p99,
        p999,
    }
}

/// The samples of the given ranks (ascending) in sorted order, found by selection: each
/// rank partitions only what lies above the one before, so the whole costs a few passes
/// instead of a sort. 0.0 for an empty slice.
fn ranked<const N: usize>(s: &mut [f64], ranks: [usize; N]) -> [f64; N] {
    let mut from = 0;
    ranks.map(|i| {
        if i >= from && i < s.len() {
            s[from..].select_nth_unstable_by(i - from, f64::total_cmp);
            from = i + 1;
        }
        s.get(i).copied().unwrap_or(0.0)
    })
}

#[cfg(test)]
mod latency_tests {
    use super::*;

    /// The statistics of a sorted copy, as `latency_result` computed them by sorting.
    fn by_sorting(mut s: Vec<f64>) -> [f64; 5] {
        s.sort_unstable_by(f64::total_cmp);
        let pct = |p: f64| s[((s.len() as f64 * p) as usize).min(s.len() - 1)];
        [s[0], s[s.len() - 1], pct(0.5), pct(0.99), pct(0.999)]
    }

    // Selection gives the same order statistics as a sort, for every size around the
    // ranks' boundaries, with repeated values and in any input order.
    #[test]
    fn selected_ranks_match_the_sorted_samples() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in [1usize, 2, 3, 99, 100, 101, 999, 1000, 1001, 4321] {
            for modulus in [3u64, 1_000_000] {
                let s: Vec<f64> = (0..len)
                    .map(|_| {
                        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                        ((x >> 33) % modulus) as f64 * 0.25
                    })
                    .collect();
                let want = by_sorting(s.clone());
                let PerfResult::Lat {
                    min,
                    max,
                    typical,
                    p99,
                    p999,
                    iters,
                    ..
                } = latency_result(8, s)
                else {
                    panic!("not a latency result");
                };
                assert_eq!(iters, len as u64);
                assert_eq!([min, max, typical, p99, p999], want, "len {len}");
            }
        }
        assert!(matches!(
            latency_result(8, Vec::new()),
            PerfResult::Lat { iters: 0, min, max, typical, .. } if min == 0.0 && max == 0.0 && typical == 0.0
        ));
    }
}

/// How evenly a bandwidth run's QPs shared the link: octets each QP's completed WRs
/// carried.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QpShares {
    /// Message size of the run.
    pub bytes: usize,
    /// QPs.
    pub qps: usize,
    /// Octets of the QP that moved least.
    pub min: u64,
    /// Octets of the QP that moved most.
    pub max: u64,
    /// Jain's fairness index over the QPs' octets: 1 when all are equal, 1/n when one QP
    /// moved everything.
    pub jain: f64,
}

impl QpShares {
    /// The summary of per-QP octet counts (`None` without QPs).
    pub fn of(bytes: usize, per_qp: &[u64]) -> Option<QpShares> {
        Some(QpShares {
            bytes,
            qps: per_qp.len(),
            min: *per_qp.iter().min()?,
            max: *per_qp.iter().max()?,
            jain: jain_index(per_qp),
        })
    }

    /// The `key: value` line `dataplane perf` prints.
    pub fn line(&self) -> String {
        format!(
            "perf-qp-share: {} B, {} QPs, min {} max {} octets, jain {:.4}",
            self.bytes, self.qps, self.min, self.max, self.jain
        )
    }
}

/// Jain's fairness index (sum x)^2 / (n * sum x^2): 1 for equal shares, 1/n when one
/// share holds everything; 1 for no shares or all zero.
pub fn jain_index(xs: &[u64]) -> f64 {
    let sum: f64 = xs.iter().map(|&x| x as f64).sum();
    let squares: f64 = xs.iter().map(|&x| (x as f64) * (x as f64)).sum();
    if squares == 0.0 {
        return 1.0;
    }
    sum * sum / (xs.len() as f64 * squares)
}

/// Receives each result as soon as it is known.
pub type ResultSink = Box<dyn FnMut(&PerfResult) + Send>;

/// The perf client's buffers, shared by all its QPs.
#[derive(Clone, Copy)]
struct ClientBufs {
    /// The source of every QP's Writes and Sends, the sink of its Reads and latency Sends.
    source: Region,
    /// Where the server's ping-pong Writes land.
    sink: Region,
    /// The atomics' original values.
    result: Region,
    /// The zero-length receives that carry Send credits.
    credit: Region,
}

/// One QP of the client: one cache line, what a completion and the next post read first
/// (the buffers are the client's, shared by all QPs: `PerfClient::bufs`).
#[repr(C, align(64))]
struct ClientQp {
    posted: u64,
    completed: u64,
    credits: u64,
    remote: Option<Offer>,
    id: ConnId,
    qp: QpId,
    /// In the client's refill list.
    queued: bool,
    established: bool,
    gone: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Connecting,
    Running,
    Disconnecting,
}

/// The perf client.
pub struct PerfClient {
    params: PerfParams,
    res: Resources,
    local_ip: IpAddr,
    server: SocketAddr,
    /// The buffers, shared by the QPs (the data is not checked, and thousands of QPs then
    /// cost no memory each).
    bufs: ClientBufs,
    qps: Vec<ClientQp>,
    /// Index in `qps` of each connection (CM events name them; completions carry the
    /// index as their work request ID).
    by_id: FxHashMap<ConnId, usize>,
    /// QPs that may post more (their completions or credits came back).
    refill: Vec<usize>,
    /// Completions and WRs in flight over all QPs.
    done: u64,
    in_flight: u64,
    /// QPs established, and gone, of the current size.
    established: usize,
    gone: usize,
    /// When the current size's connections were started.
    connect_start: Instant,
    /// How long each size's QPs took to all reach RTS, in order.
    pub connect_times: Vec<Duration>,
    /// Most QPs established at once.
    pub connected: usize,
    size_idx: usize,
    phase: Phase,
    start: Option<Instant>,
    window: (Instant, u64),
    peak: f64,
    samples: Vec<f64>,
    lat_sent: Option<Instant>,
    lat_seq: u8,
    last_progress: Option<Instant>,
    /// Completions at the last change of `done`, and when it changed ([`STALL_DUMP`]).
    last_done: (u64, Instant),
    /// When the last stall dump was logged.
    last_dump: Option<Instant>,
    /// Results, one per size.
    pub results: Vec<PerfResult>,
    /// Bandwidth runs: how the QPs shared each size's octets, one per size.
    pub shares: Vec<QpShares>,
    /// Print a progress line every second on stderr.
    pub progress: bool,
    /// Called with each result as it is ready.
    pub on_result: Option<ResultSink>,
}

impl PerfClient {
    /// Starts the first connection(s) from `local_ip` to `server` (of one family).
    pub fn new(
        h: &mut RdmaHandler,
        local_ip: impl Into<IpAddr>,
        server: impl Into<SocketAddr>,
        params: PerfParams,
    ) -> Result<PerfClient, AppError> {
        let (local_ip, server) = (local_ip.into(), server.into());
        let qps = if params.mode == PerfMode::Lat {
            1
        } else {
            params.qps.max(1)
        };
        // With many QPs each keeps fewer WRs in flight: all of them fit one CQ, and what
        // is queued when a timed run ends drains in a moment.
        let per_qp = (MAX_IN_FLIGHT / u32::from(qps)).max(1);
        let tx_depth = params.tx_depth.clamp(1, per_qp);
        let depth = tx_depth + 8;
        let cq_depth = (u32::from(qps) * (depth + CREDIT_RECVS + 8)).clamp(8192, 1 << 20);
        let mut res = Resources::new(h, cq_depth, depth, CREDIT_RECVS + 8, 16)?;
        let max = params.sizes.iter().copied().max().unwrap_or(0).max(64);
        let local = res.buffer(h, max, all_rights())?;
        let sink = res.buffer(h, max, all_rights())?;
        let result = res.buffer(h, 8, Access::LOCAL_WRITE | Access::LOCAL_READ)?;
        let credit = res.buffer(h, 64, Access::LOCAL_WRITE)?;
        // A recognisable source pattern.
        for (i, b) in local.bytes_mut(h.rnic_mut()).iter_mut().enumerate() {
            *b = source_byte(i);
        }
        let now = clock::now();
        let mut c = PerfClient {
            params: PerfParams {
                qps,
                tx_depth,
                ..params
            },
            res,
            local_ip,
            server,
            bufs: ClientBufs {
                source: local,
                sink,
                result,
                credit,
            },
            qps: Vec::new(),
            by_id: FxHashMap::default(),
            refill: Vec::new(),
            done: 0,
            in_flight: 0,
            established: 0,
            gone: 0,
            connect_start: now,
            connect_times: Vec::new(),
            connected: 0,
            size_idx: 0,
            phase: Phase::Connecting,
            start: None,
            window: (now, 0),
            peak: 0.0,
            samples: Vec::new(),
            lat_sent: None,
            lat_seq: 0,
            last_progress: None,
            last_done: (0, now),
            last_dump: None,
            results: Vec::new(),
            shares: Vec::new(),
            progress: false,
            on_result: None,
        };
        c.connect_all(h)?;
        Ok(c)
    }

    fn size(&self) -> usize {
        self.params.sizes[self.size_idx]
    }

    fn connect_all(&mut self, h: &mut RdmaHandler) -> Result<(), AppError> {
        let size = self.size();
        let last = self.size_idx + 1 == self.params.sizes.len();
        let max = self.params.sizes.iter().copied().max().unwrap_or(0);
        self.qps.clear();
        self.by_id.clear();
        self.refill.clear();
        (self.done, self.in_flight, self.established, self.gone) = (0, 0, 0, 0);
        self.connect_start = clock::now();
        let ClientBufs {
            source: local,
            sink,
            credit: credit_buf,
            ..
        } = self.bufs;
        sink.bytes_mut(h.rnic_mut()).fill(0);
        for slot in 0..self.params.qps {
            let hello = Hello {
                op: self.params.op,
                mode: self.params.mode,
                last,
                size: size as u32,
                max_size: max as u32,
                slot,
                addr: sink.addr(0),
                rkey: sink.stag.0,
            };
            let (id, qp) =
                h.connect(self.local_ip, self.server, self.res.init, &hello.to_bytes())?;
            if self.params.op == PerfOp::Send {
                let n = if self.params.mode == PerfMode::Lat {
                    1
                } else {
                    CREDIT_RECVS
                };
                let sge_len = if self.params.mode == PerfMode::Lat {
                    size
                } else {
                    0
                };
                let wrs = (0..n)
                    .map(|_| RecvWr {
                        wr_id: self.qps.len() as u64,
                        sgl: if sge_len == 0 {
                            vec![credit_buf.sge(0, 0)]
                        } else {
                            vec![local.sge(0, sge_len)]
                        },
                    })
                    .collect();
                h.rnic_mut()
                    .post_rq(qp, wrs)
                    .map_err(AppError::post("recv"))?;
            }
            self.by_id.insert(id, self.qps.len());
            self.qps.push(ClientQp {
                id,
                qp,
                remote: None,
                established: false,
                gone: false,
                posted: 0,
                completed: 0,
                credits: u64::from(SEND_CREDITS),
                queued: false,
            });
        }
        self.phase = Phase::Connecting;
        Ok(())
    }

    fn target(&self) -> u64 {
        if self.params.duration.is_some() {
            u64::MAX
        } else {
            self.params.iters.max(1)
        }
    }

    /// A WR of QP `i` moving `size` octets; its work request ID is `i`, so that its
    /// completion names the QP without a look-up.
    #[inline]
    fn wr(&self, i: usize, size: usize) -> Result<SendWr, PerfError> {
        let q = &self.qps[i];
        let ClientBufs {
            source: local,
            result,
            ..
        } = self.bufs;
        let remote = q.remote.ok_or(PerfError::NoServerBuffer)?;
        let rb = RemoteBuf {
            stag: STag(remote.rkey),
            to: remote.addr,
        };
        let op = match self.params.op {
            PerfOp::Write => SendOp::Write {
                sgl: Sgl::one(local.sge(0, size)),
                remote: rb,
            },
            PerfOp::Send => SendOp::Send {
                sgl: Sgl::one(local.sge(0, size)),
                solicited: false,
                invalidate: None,
            },
            PerfOp::Read => SendOp::Read {
                sink: RemoteBuf {
                    stag: local.stag,
                    to: local.addr(0),
                },
                remote: rb,
                len: size as u32,
            },
            PerfOp::Atomic => SendOp::Atomic {
                op: AtomicOp::FetchAdd,
                remote: rb,
                add_swap: 1,
                add_swap_mask: 0,
                compare: 0,
                compare_mask: 0,
                result: result.sge(0, 8),
            },
        };
        let inline = matches!(self.params.op, PerfOp::Write | PerfOp::Send)
            && size > 0
            && size <= self.params.inline;
        if inline {
            // The payload is copied at post time; the operation names no SGE.
            let op = match op {
                SendOp::Write { remote, .. } => SendOp::Write {
                    sgl: Sgl::new(),
                    remote,
                },
                SendOp::Send {
                    solicited,
                    invalidate,
                    ..
                } => SendOp::Send {
                    sgl: Sgl::new(),
                    solicited,
                    invalidate,
                },
                other => other,
            };
            Ok(SendWr::new(
                i as u64,
                SqOp::Inline {
                    op,
                    data: Vec::new(),
                },
            ))
        } else {
            Ok(SendWr::message(i as u64, op))
        }
    }

    fn post_bw(&mut self, h: &mut RdmaHandler) -> Result<(), PerfError> {
        let size = self.size();
        let target = self.target();
        let depth = u64::from(match self.params.op {
            PerfOp::Read | PerfOp::Atomic => self.params.tx_depth.clamp(1, 16),
            _ => self.params.tx_depth.max(1),
        });
        let mut refill = std::mem::take(&mut self.refill);
        for &i in &refill {
            self.qps[i].queued = false;
            let share = target / self.qps.len() as u64
                + u64::from((i as u64) < target % self.qps.len() as u64);
            // Each WR posted as it is built (no list to allocate: a refill is mostly one).
            loop {
                let q = &self.qps[i];
                if q.posted >= share
                    || q.posted - q.completed >= depth
                    || (self.params.op == PerfOp::Send && q.posted >= q.credits)
                {
                    break;
                }
                let mut wr = self.wr(i, size)?;
                if let SqOp::Inline { data, .. } = &mut wr.op {
                    *data = self.bufs.source.bytes(h.rnic())[..size].to_vec();
                }
                h.rnic_mut()
                    .post_sq_one(q.qp, wr)
                    .map_err(AppError::post(self.params.op.name()))?;
                self.qps[i].posted += 1;
                self.in_flight += 1;
            }
        }
        refill.clear();
        self.refill = refill;
        Ok(())
    }

    /// Lists QP `i` for the next [`PerfClient::post_bw`].
    fn wants_refill(&mut self, i: usize) {
        let q = &mut self.qps[i];
        if !q.queued {
            q.queued = true;
            self.refill.push(i);
        }
    }

    fn post_lat(&mut self, h: &mut RdmaHandler, now: Instant) -> Result<(), PerfError> {
        if self.lat_sent.is_some() {
            return Ok(());
        }
        let size = self.size();
        let q = &self.qps[0];
        if q.posted >= self.target() {
            return Ok(());
        }
        if self.params.op == PerfOp::Write {
            self.lat_seq = self.lat_seq.wrapping_add(1).max(1);
            let rnic = h.rnic_mut();
            // The last octet carries the sequence; the peer echoes it back.
            if size > 0 {
                self.bufs.source.bytes_mut(rnic)[size - 1] = self.lat_seq;
            }
        }
        let mut wr = self.wr(0, size)?;
        if self.params.op == PerfOp::Write {
            wr = wr.unsignaled();
        }
        if let SqOp::Inline { data, .. } = &mut wr.op {
            *data = self.bufs.source.bytes(h.rnic())[..size].to_vec();
        }
        h.rnic_mut()
            .post_sq_one(q.qp, wr)
            .map_err(AppError::post(self.params.op.name()))?;
        self.qps[0].posted += 1;
        self.in_flight += 1;
        self.lat_sent = Some(now);
        Ok(())
    }

    fn lat_done(&mut self, now: Instant) {
        if let Some(t) = self.lat_sent.take() {
            let us = now.saturating_since(t).as_secs_f64() * 1e6;
            let half = matches!(self.params.op, PerfOp::Write | PerfOp::Send);
            if self.samples.capacity() == 0 {
                // One allocation for a counted run's samples (a timed run grows from there).
                self.samples.reserve(self.target().min(1 << 20) as usize);
            }
            self.samples.push(if half { us / 2.0 } else { us });
            self.qps[0].completed += 1;
            self.done += 1;
            self.in_flight = self.in_flight.saturating_sub(1);
        }
    }

    fn completion(
        &mut self,
        h: &mut RdmaHandler,
        wc: WorkCompletion,
        now: Instant,
    ) -> Result<(), AppError> {
        if wc.status == CompletionStatus::Flushed && self.phase != Phase::Running {
            return Ok(());
        }
        if wc.status != CompletionStatus::Success {
            return Err(AppError::completion(&wc));
        }
        // Every WR of the client names its QP's index (`PerfClient::wr`, the receives).
        let i = usize::try_from(wc.wr_id).unwrap_or(usize::MAX);
        if self.qps.get(i).is_none_or(|q| q.qp != wc.qp) {
            return Ok(());
        }
        if wc.opcode == WcOpcode::Receive {
            let q = &mut self.qps[i];
            let sge = if self.params.mode == PerfMode::Lat {
                self.bufs.source.sge(0, self.params.sizes[self.size_idx])
            } else {
                q.credits += u64::from(CREDIT_BATCH);
                self.bufs.credit.sge(0, 0)
            };
            if self.params.mode == PerfMode::Bw {
                self.wants_refill(i);
            }
            let q = &self.qps[i];
            h.rnic_mut()
                .post_rq(
                    q.qp,
                    vec![RecvWr {
                        wr_id: i as u64,
                        sgl: vec![sge],
                    }],
                )
                .map_err(AppError::post("recv"))?;
            if self.params.mode == PerfMode::Lat {
                self.lat_done(now);
            }
            return Ok(());
        }
        match self.params.mode {
            PerfMode::Bw => {
                let size = self.size() as u64;
                self.qps[i].completed += 1;
                self.done += 1;
                self.in_flight = self.in_flight.saturating_sub(1);
                self.wants_refill(i);
                self.window.1 += size;
                let dt = now.saturating_since(self.window.0);
                if dt >= Duration::from_millis(10) {
                    let rate = self.window.1 as f64 / dt.as_secs_f64() / 1048576.0;
                    self.peak = self.peak.max(rate);
                    self.window = (now, 0);
                }
            }
            PerfMode::Lat => {
                if matches!(self.params.op, PerfOp::Read | PerfOp::Atomic) {
                    self.lat_done(now);
                }
            }
        }
        Ok(())
    }

    fn finish_size(&mut self, h: &mut RdmaHandler, now: Instant) {
        let size = self.size();
        let done = self.done;
        let r = match self.params.mode {
            PerfMode::Bw => {
                let secs = self
                    .start
                    .map_or(0.0, |s| now.saturating_since(s).as_secs_f64())
                    .max(1e-9);
                let avg = (done * size as u64) as f64 / secs / 1048576.0;
                PerfResult::Bw {
                    bytes: size,
                    iters: done,
                    peak_mbs: self.peak.max(avg),
                    avg_mbs: avg,
                    mpps: done as f64 / secs / 1e6,
                }
            }
            PerfMode::Lat => latency_result(size, std::mem::take(&mut self.samples)),
        };
        if let Some(f) = self.on_result.as_mut() {
            f(&r);
        }
        self.results.push(r);
        if self.params.mode == PerfMode::Bw {
            let per_qp: Vec<u64> = self.qps.iter().map(|q| q.completed * size as u64).collect();
            self.shares.extend(QpShares::of(size, &per_qp));
        }
        self.phase = Phase::Disconnecting;
        for q in &self.qps {
            let _ = h.disconnect(q.id);
        }
    }

    /// [`STALL_DUMP`]: the waiting QPs' WRs, refill state, QP and connection state, TCP
    /// state (cwnd, SND.UNA/NXT, the peer's window, RTO with backoff, timeouts) and the
    /// handler's timers.
    fn stall_dump(&mut self, h: &mut RdmaHandler, now: Instant) {
        if self.done != self.last_done.0 {
            self.last_done = (self.done, now);
            self.last_dump = None;
            return;
        }
        let quiet = now.saturating_since(self.last_done.1);
        let due = self
            .last_dump
            .is_none_or(|t| now.saturating_since(t) >= STALL_DUMP);
        if quiet < STALL_DUMP || !due || !log::log_enabled!(log::Level::Debug) {
            return;
        }
        self.last_dump = Some(now);
        let target = self.target();
        let n = self.qps.len() as u64;
        let waiting: Vec<usize> = (0..self.qps.len())
            .filter(|&i| {
                let q = &self.qps[i];
                let share = target / n + u64::from((i as u64) < target % n);
                q.completed < q.posted || q.posted < share
            })
            .collect();
        log::debug!(
            "perf: no completion for {quiet:?}: {} of {} done, {} in flight, {} QPs waiting, \
             {} to refill, TCP ready list {}, handler's next timer in {:?}",
            self.done,
            self.target(),
            self.in_flight,
            waiting.len(),
            self.refill.len(),
            h.tcp().ready_len(),
            h.next_timeout().map(|t| t.saturating_since(now)),
        );
        for &i in waiting.iter().take(STALL_DUMP_QPS) {
            let q = &self.qps[i];
            let conn = h.conn(q.id);
            log::debug!(
                "perf: qp {:?} conn {:?}: posted {} completed {} queued {}; \
                 qp {:?}; conn {:?} drained {:?} timer in {:?}; tcp ready/timer {:?} {:?}",
                q.qp,
                q.id,
                q.posted,
                q.completed,
                q.queued,
                h.rnic().query_qp(q.qp).map(|a| a.state),
                conn.map(|c| c.state()),
                conn.map(|c| c.is_drained()),
                conn.and_then(|c| c.poll_timeout())
                    .map(|t| t.saturating_since(now)),
                h.tcp()
                    .schedule_state(q.id)
                    .map(|(ready, t)| (ready, t.map(|t| t.saturating_since(now)))),
                h.tcp().info(q.id),
            );
        }
    }

    fn progress_line(&mut self, now: Instant) {
        if !self.progress {
            return;
        }
        let Some(start) = self.start else { return };
        let last = *self.last_progress.get_or_insert(start);
        if now.saturating_since(last) < Duration::from_secs(1) {
            return;
        }
        self.last_progress = Some(now);
        let done = self.done;
        let secs = now.saturating_since(start).as_secs_f64();
        eprintln!(
            "perf {} {} B: {:.0} s, {} iterations, {:.2} MB/sec",
            self.params.op.name(),
            self.size(),
            secs,
            done,
            (done * self.size() as u64) as f64 / secs / 1048576.0
        );
    }

    fn run_step(&mut self, h: &mut RdmaHandler, now: Instant) -> Result<Option<()>, PerfError> {
        while let Some(ev) = h.poll_cm_event() {
            match ev {
                // Only a pending listener reports these; this tool listens with a QP template.
                CmEvent::Request { .. } | CmEvent::RequestWithdrawn { .. } => {}
                CmEvent::Established { id, negotiated, .. } => {
                    if let Some(q) = self.by_id.get(&id).map(|&i| &mut self.qps[i]) {
                        if !q.established {
                            self.established += 1;
                            self.connected = self.connected.max(self.established);
                        }
                        q.established = true;
                        q.remote = Offer::parse(&negotiated.private_data);
                        if q.remote.is_none() {
                            return Err(PerfError::NoOffer);
                        }
                    }
                }
                CmEvent::Rejected { private_data, .. } => {
                    return Err(AppError::from(ConnectFailure::rejected(&private_data)).into())
                }
                CmEvent::ConnectError { reason, .. } => {
                    return Err(AppError::from(ConnectFailure::Failed(reason)).into())
                }
                CmEvent::Disconnected { id, .. } => {
                    if let Some(q) = self.by_id.get(&id).map(|&i| &mut self.qps[i]) {
                        if !q.gone {
                            self.gone += 1;
                        }
                        q.gone = true;
                    }
                    if self.phase != Phase::Disconnecting {
                        return Err(PerfError::ServerDisconnected);
                    }
                }
                CmEvent::ConnectRequest { id, .. } => {
                    let _ = h.reject(id, b"client");
                }
            }
        }
        while let Some(wc) = self.res.poll_cq(h) {
            self.completion(h, wc, now)?;
        }
        match self.phase {
            Phase::Connecting => {
                // The clock starts once work posted now goes out at once: an initiator
                // holds its first FPDUs for a while after the MPA Reply (the Linux siw
                // workaround), and a sample spanning that hold measures the hold.
                let ready = self.established == self.qps.len()
                    && self.qps.iter().all(|q| {
                        h.conn(q.id)
                            .and_then(|c| c.fpdu_hold_until())
                            .is_none_or(|t| now >= t)
                    });
                if ready {
                    if self.connect_times.len() == self.size_idx {
                        self.connect_times
                            .push(now.saturating_since(self.connect_start));
                    }
                    self.refill.clear();
                    for i in 0..self.qps.len() {
                        self.qps[i].queued = false;
                        self.wants_refill(i);
                    }
                    self.phase = Phase::Running;
                    self.start = Some(now);
                    self.last_done = (0, now);
                    self.last_dump = None;
                    self.window = (now, 0);
                    self.peak = 0.0;
                    self.last_progress = None;
                }
            }
            Phase::Running => {
                let time_up = self
                    .params
                    .duration
                    .zip(self.start)
                    .is_some_and(|(d, s)| now.saturating_since(s) >= d);
                let outstanding = self.in_flight > 0;
                if (self.done >= self.target() || time_up) && !outstanding {
                    self.finish_size(h, now);
                } else if !time_up {
                    if self.params.mode == PerfMode::Bw {
                        self.post_bw(h)?;
                        self.stall_dump(h, now);
                    } else {
                        if self.params.op == PerfOp::Write {
                            let size = self.size();
                            let back = size > 0
                                && self.bufs.sink.bytes(h.rnic())[size - 1] == self.lat_seq
                                && self.lat_sent.is_some();
                            // The peer's write carries our sequence back.
                            if back || (size == 0 && self.lat_sent.is_some()) {
                                if size > 0 {
                                    self.lat_done(now);
                                } else {
                                    return Err(AppError::WriteLatencyNeedsSize.into());
                                }
                            }
                        }
                        self.post_lat(h, now)?;
                    }
                    self.progress_line(now);
                }
            }
            Phase::Disconnecting => {
                if self.gone == self.qps.len() {
                    if self.size_idx + 1 == self.params.sizes.len() {
                        return Ok(Some(()));
                    }
                    self.size_idx += 1;
                    self.connect_all(h)?;
                }
            }
        }
        Ok(None)
    }
}

impl App for PerfClient {
    type Error = PerfError;

    fn step(&mut self, h: &mut RdmaHandler, now: Instant) -> Step<PerfError> {
        match self.run_step(h, now) {
            Ok(None) => Step::Continue,
            Ok(Some(())) => Step::Done(Ok(())),
            Err(e) => {
                for q in &self.qps {
                    let _ = h.terminate(q.id);
                }
                Step::Done(Err(e))
            }
        }
    }
}

/// perftest's `-a` sizes: 2 B … 8 MiB by powers of two, capped at `max`.
pub fn all_sizes(max: usize) -> Vec<usize> {
    (1..=23)
        .map(|k| 1usize << k)
        .filter(|&s| s <= max)
        .collect()
}

#[cfg(test)]
mod layout_tests {
    use super::ClientQp;

    /// With a thousand QPs each completion finds its QP's record cold: the record a
    /// completion and the next post read is one cache line (the buffers are the
    /// client's, not copied into each QP).
    #[test]
    fn a_client_qp_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<ClientQp>(), 64);
        assert_eq!(std::mem::align_of::<ClientQp>(), 64);
    }
}
