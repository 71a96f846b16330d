//! One perftest `-R` run, either role, as an [`App`]: the control connection's exchange
//! script, the data connection, and the data phase of `ib_write_bw`, `ib_read_bw`,
//! `ib_send_bw`, `ib_write_lat`, `ib_read_lat` or `ib_send_lat`.
//!
//! The script (perftest 4.5, checked against siw captures): version, cycle buffer, cache
//! line, MTU, a zero `pingpong_dest` (sync), then the data connection is made, another
//! sync, then the `pingpong_dest` records (three for write/read bandwidth, four for the
//! others), the data phase, and the closing exchanges: for write/read bandwidth a record,
//! the client's five report fields and a last record; for send bandwidth and read/send
//! latency one record; for write latency none.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::clock::Instant;

use iwarp::verbs::Sgl;
use iwarp::verbs::{
    Access, CompletionStatus, QpId, RecvWr, RemoteBuf, STag, SendOp, SendWr, WcOpcode,
    WorkCompletion,
};
use tcp::ConnId;

use super::wire::{self, BwReport, Dest, IbMtu, RecordError, Version, REPORT_FIELDS};
use crate::apps::perf::{latency_result, PerfResult, ResultSink};
use crate::apps::{all_rights, App, AppError, ConnectFailure, Resources, Step};
use crate::rdma::{CmError, CmEvent, RdmaHandler, Region};

/// The perftest tool both sides run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    /// `ib_write_bw`.
    WriteBw,
    /// `ib_read_bw`.
    ReadBw,
    /// `ib_send_bw`.
    SendBw,
    /// `ib_write_lat`.
    WriteLat,
    /// `ib_read_lat`.
    ReadLat,
    /// `ib_send_lat`.
    SendLat,
}

impl Test {
    /// perftest's program name.
    pub fn name(self) -> &'static str {
        match self {
            Test::WriteBw => "ib_write_bw",
            Test::ReadBw => "ib_read_bw",
            Test::SendBw => "ib_send_bw",
            Test::WriteLat => "ib_write_lat",
            Test::ReadLat => "ib_read_lat",
            Test::SendLat => "ib_send_lat",
        }
    }

    /// Latency rather than bandwidth.
    pub fn is_lat(self) -> bool {
        matches!(self, Test::WriteLat | Test::ReadLat | Test::SendLat)
    }

    /// RDMA Reads (IRD/ORD and `out_reads` 128).
    fn reads(self) -> bool {
        matches!(self, Test::ReadBw | Test::ReadLat)
    }

    /// Sends on the data connection (receives to post).
    fn sends(self) -> bool {
        matches!(self, Test::SendBw | Test::SendLat)
    }

    /// The operation measured: `write`, `read` or `send`.
    fn op_name(self) -> &'static str {
        match self {
            Test::WriteBw | Test::WriteLat => "write",
            Test::ReadBw | Test::ReadLat => "read",
            Test::SendBw | Test::SendLat => "send",
        }
    }
}

/// perftest's default page-sized cycle buffer.
pub const CYCLE_BUFFER: u32 = 4096;
/// perftest's cache line size.
pub const CACHE_LINE: u32 = 64;
/// RDMA Reads in flight (perftest's `out_reads`) and the IRD/ORD of `ib_read_bw`.
pub const READ_DEPTH: u32 = 128;
/// RDMA Reads our client keeps outstanding, below the ORD perftest negotiates: Linux siw 6.1
/// under emulation stopped sending Read Responses for good (the VM livelocked) once with
/// 100 Reads queued and CRC on; with 16 it never did.
const READS_IN_FLIGHT: u64 = 16;
/// The RNIC's per-QP IRD/ORD limit.
const QP_MAX_IRD_ORD: u32 = 64;
/// Connect attempts for the data connection (perftest's client retries 10 times).
const DATA_CONNECT_TRIES: u32 = 10;
/// Pause between them.
const DATA_CONNECT_PAUSE: Duration = Duration::from_millis(100);
/// How long a side that finished first waits for the peer to close before it closes.
const CLOSE_LINGER: Duration = Duration::from_millis(200);
/// Control receives kept posted and control send buffers.
const CTRL_SLOTS: usize = 4;
/// Control buffer size (the largest record is 56 octets).
const CTRL_BUF: usize = 64;

// wr_id tags: the kind in the top byte, an index below.
const TAG_CTRL_RECV: u64 = 1 << 56;
const TAG_CTRL_SEND: u64 = 2 << 56;
const TAG_DATA: u64 = 3 << 56;
const TAG_DATA_RECV: u64 = 4 << 56;
const TAG_CREDIT: u64 = 5 << 56;
const TAG_MASK: u64 = 0xff << 56;

/// What one side runs.
#[derive(Debug, Clone)]
pub struct PerftestParams {
    /// The tool.
    pub test: Test,
    /// Message size.
    pub size: usize,
    /// Iterations (both sides need the same, as perftest's `-n`).
    pub iters: u64,
    /// Work requests in flight (perftest: 128, at most `iters`).
    pub tx_depth: u32,
    /// Receives the `ib_send_bw` server keeps posted (perftest: 512, at most `iters`).
    pub rx_depth: u32,
    /// The port's MAC (the GID of our records).
    pub mac: [u8; 6],
    /// The MTU of the link (IB MTU enum exchanged).
    pub mtu: usize,
}

impl PerftestParams {
    /// perftest's defaults for `test` with `size` and `iters`.
    pub fn new(test: Test, size: usize, iters: u64) -> PerftestParams {
        let cap = u32::try_from(iters.max(1)).unwrap_or(u32::MAX);
        PerftestParams {
            test,
            size,
            iters,
            tx_depth: 128.min(cap),
            rx_depth: 512.min(cap),
            mac: [0; 6],
            mtu: 1500,
        }
    }

    /// IRD and ORD perftest's data connection asks for: `out_reads` for reads, else 0.
    pub fn ird_ord(&self) -> u32 {
        if self.test.reads() {
            READ_DEPTH
        } else {
            0
        }
    }

    /// IRD and ORD of our data QPs: perftest's, within the RNIC's per-QP limit.
    fn qp_ird_ord(&self) -> u32 {
        self.ird_ord().min(QP_MAX_IRD_ORD)
    }
}

/// One of the two connections of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// The control connection (the records).
    Control,
    /// The data connection (the test traffic).
    Data,
}

impl std::fmt::Display for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Channel::Control => "control",
            Channel::Data => "data",
        })
    }
}

/// Why a run failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PerftestError {
    /// A control record from the peer did not parse.
    #[error("malformed {stage} record from the peer: {err}")]
    Record {
        /// The exchange it belonged to.
        stage: &'static str,
        /// What was wrong.
        err: RecordError,
    },
    /// The peer's `pingpong_dest` names no buffer where the test needs one.
    #[error("peer's pingpong_dest names no buffer (rkey and vaddr 0)")]
    NoPeerBuffer,
    /// Data work before the peer's buffer was exchanged.
    #[error("peer's buffer unknown")]
    PeerBufferUnknown,
    /// A credit return before the peer's credit buffer was exchanged.
    #[error("peer's credit buffer unknown")]
    PeerCreditBufferUnknown,
    /// Work for a connection that is not there.
    #[error("no {0} connection")]
    NoConnection(Channel),
    /// A data receive completed without a data connection.
    #[error("receive without a data connection")]
    ReceiveWithoutData,
    /// The client has no server address for the data connection.
    #[error("no server address")]
    NoServerAddress,
    /// Accepting a connection failed.
    #[error("accept: {0}")]
    Accept(CmError),
    /// Starting the data connection failed.
    #[error("data connection: {0}")]
    DataConnect(CmError),
    /// A connection was rejected or failed to come up.
    #[error("{channel} connection: {why}")]
    Connect {
        /// Which connection.
        channel: Channel,
        /// Why.
        why: ConnectFailure,
    },
    /// The data connection failed on every attempt.
    #[error("data connection failed {tries} times: {why}")]
    DataConnectTries {
        /// Attempts made.
        tries: u32,
        /// Why the last one failed.
        why: ConnectFailure,
    },
    /// A work request completed in error.
    #[error("{channel} completion {opcode}: {status}")]
    Completion {
        /// The connection of the QP.
        channel: Channel,
        /// The operation.
        opcode: WcOpcode,
        /// Its completion status.
        status: CompletionStatus,
    },
    /// A connection went away before the script was over.
    #[error(
        "the {channel} connection {} during {during}",
        if *.graceful { "was closed by the peer" } else { "broke (reset or Terminate)" }
    )]
    Closed {
        /// Which connection.
        channel: Channel,
        /// It closed in order (else reset or Terminate).
        graceful: bool,
        /// Where the script was.
        during: String,
    },
    /// A failure every application can have.
    #[error(transparent)]
    App(#[from] AppError),
}

/// The control exchanges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rec {
    Version,
    CycleBuffer,
    CacheLine,
    Mtu,
    Sync,
    Dest,
    Report(usize),
}

impl Rec {
    fn name(self) -> &'static str {
        match self {
            Rec::Version => "version",
            Rec::CycleBuffer => "cycle buffer",
            Rec::CacheLine => "cache line",
            Rec::Mtu => "MTU",
            Rec::Sync => "sync",
            Rec::Dest => "pingpong_dest",
            Rec::Report(_) => "bandwidth report",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Xchg(Rec),
    ConnectData,
    Data,
}

/// The exchange script of `test` (identical for both roles).
fn script(test: Test) -> Vec<Stage> {
    use Stage::*;
    let mut s = vec![
        Xchg(Rec::Version),
        Xchg(Rec::CycleBuffer),
        Xchg(Rec::CacheLine),
        Xchg(Rec::Mtu),
        Xchg(Rec::Sync),
        ConnectData,
        Xchg(Rec::Sync),
        Xchg(Rec::Dest),
        Xchg(Rec::Dest),
        Xchg(Rec::Dest),
    ];
    match test {
        Test::WriteBw | Test::ReadBw => {
            s.extend([Data, Xchg(Rec::Dest)]);
            s.extend((0..REPORT_FIELDS).map(|i| Xchg(Rec::Report(i))));
            s.push(Xchg(Rec::Dest));
        }
        Test::SendBw | Test::ReadLat | Test::SendLat => {
            s.extend([Xchg(Rec::Dest), Data, Xchg(Rec::Dest)])
        }
        Test::WriteLat => s.extend([Xchg(Rec::Dest), Data]),
    }
    s
}

/// Whether position `pos` of `script` is past its data phase.
fn passed_data(script: &[Stage], pos: usize) -> bool {
    script[..pos.min(script.len())].contains(&Stage::Data)
}

#[derive(Debug, Clone, Copy)]
struct Conn {
    id: ConnId,
    qp: QpId,
    established: bool,
    gone: bool,
    /// It closed in order (no reset, no Terminate).
    graceful: bool,
    /// ORD negotiated (Reads the client may keep outstanding).
    ord: u16,
}

impl Conn {
    /// A connection just requested or accepted.
    fn new(id: ConnId, qp: QpId) -> Self {
        Conn {
            id,
            qp,
            established: false,
            gone: false,
            graceful: false,
            ord: 0,
        }
    }
}

/// Data-phase counters and timing.
#[derive(Debug, Default)]
struct DataPhase {
    posted: u64,
    completed: u64,
    received: u64,
    recvs_posted: u64,
    start: Option<Instant>,
    end: Option<Instant>,
    window: Option<(Instant, u64)>,
    peak: f64,
    /// Latency: the time of each posted Write.
    posts: Vec<Instant>,
    /// Latency: waiting for the peer's next Write or Send.
    awaiting: bool,
    /// `ib_send_lat`: Sends received so far.
    arrived: u64,
    /// `ib_read_lat`: each Read's round trip, µs.
    samples: Vec<f64>,
}

/// One side of a perftest `-R` run.
pub struct PerftestSession {
    server: bool,
    params: PerftestParams,
    res: Resources,
    local: SocketAddr,
    remote: Option<SocketAddr>,
    /// Data buffer: our source at 0, the half the peer targets at `adv_off`.
    buf: Region,
    adv_off: usize,
    credit: Region,
    ctrl_recv: Region,
    ctrl_send: Region,
    ctrl_send_next: usize,
    /// Control Sends not completed yet (we close only after the last one left).
    ctrl_sends_pending: u32,
    ctrl: Option<Conn>,
    data: Option<Conn>,
    data_tries: u32,
    data_retry_at: Option<Instant>,
    inbox: VecDeque<Vec<u8>>,
    script: Vec<Stage>,
    pos: usize,
    sent: bool,
    peer_dest: Option<Dest>,
    peer_version: Option<String>,
    report: BwReport,
    peer_report: BwReport,
    data_phase: DataPhase,
    /// When the script is over and the peer has not closed: close at this time.
    close_at: Option<Instant>,
    finishing: bool,
    /// The result (client: its measurement; server: the client's report for write/read
    /// bandwidth, its own measurement otherwise).
    pub result: Option<PerfResult>,
    /// Called with the result as soon as it is known.
    pub on_result: Option<ResultSink>,
}

impl PerftestSession {
    fn new(
        h: &mut RdmaHandler,
        server: bool,
        local: SocketAddr,
        remote: Option<SocketAddr>,
        params: PerftestParams,
    ) -> Result<PerftestSession, AppError> {
        if params.test.reads() {
            // perftest offers out_reads (128) both ways on the data connection; MPA
            // revision 1 exchanges nothing, and the peer then keeps that many in flight.
            h.set_ird_ord(READ_DEPTH as u16, READ_DEPTH as u16);
        }
        let depth = params.tx_depth.max(1) + 8;
        let rq = params.rx_depth.max(1) + CTRL_SLOTS as u32 + 8;
        let mut res = Resources::new(h, 8192, depth.max(16), rq, 0)?;
        let half = params.size.max(CYCLE_BUFFER as usize);
        // perftest cycles its remote offset through one cycle buffer for small messages.
        let buf = res.buffer(h, 2 * half + CYCLE_BUFFER as usize, all_rights())?;
        let credit = res.buffer(
            h,
            8,
            Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )?;
        let ctrl_recv = res.buffer(h, CTRL_SLOTS * CTRL_BUF, Access::LOCAL_WRITE)?;
        let ctrl_send = res.buffer(
            h,
            CTRL_SLOTS * CTRL_BUF,
            Access::LOCAL_READ | Access::LOCAL_WRITE,
        )?;
        {
            let rnic = h.rnic_mut();
            for (i, b) in buf.bytes_mut(rnic).iter_mut().enumerate() {
                *b = (i * 31 + 7) as u8;
            }
            // The latency poll octet and the credit count start at zero.
            if params.size > 0 {
                buf.bytes_mut(rnic)[half + params.size - 1] = 0;
            }
            credit.bytes_mut(rnic).fill(0);
        }
        Ok(PerftestSession {
            server,
            script: script(params.test),
            params,
            res,
            local,
            remote,
            buf,
            adv_off: half,
            credit,
            ctrl_recv,
            ctrl_send,
            ctrl_send_next: 0,
            ctrl_sends_pending: 0,
            ctrl: None,
            data: None,
            data_tries: 0,
            data_retry_at: None,
            inbox: VecDeque::new(),
            pos: 0,
            sent: false,
            peer_dest: None,
            peer_version: None,
            report: BwReport::default(),
            peer_report: BwReport::default(),
            data_phase: DataPhase::default(),
            close_at: None,
            finishing: false,
            result: None,
            on_result: None,
        })
    }

    /// The server: listens on `addr` (IPv4 or IPv6) for the control and then the data
    /// connection.
    pub fn server(
        h: &mut RdmaHandler,
        addr: impl Into<SocketAddr>,
        params: PerftestParams,
    ) -> Result<PerftestSession, AppError> {
        let addr = addr.into();
        let s = PerftestSession::new(h, true, addr, None, params)?;
        let mut init = s.res.init;
        init.ird = s.params.qp_ird_ord();
        init.ord = s.params.qp_ird_ord();
        h.listen(addr, init)?;
        Ok(s)
    }

    /// The client: connects the control connection from `local` to `server` (of one
    /// family).
    pub fn client(
        h: &mut RdmaHandler,
        local: impl Into<IpAddr>,
        server: impl Into<SocketAddr>,
        params: PerftestParams,
    ) -> Result<PerftestSession, AppError> {
        let (local, server) = (local.into(), server.into());
        let mut s =
            PerftestSession::new(h, false, SocketAddr::new(local, 0), Some(server), params)?;
        let (id, qp) = h.connect(local, server, s.res.init, &[])?;
        s.post_ctrl_recvs(h, qp)?;
        s.ctrl = Some(Conn::new(id, qp));
        Ok(s)
    }

    /// The peer's version string, once exchanged.
    pub fn peer_version(&self) -> Option<&str> {
        self.peer_version.as_deref()
    }

    fn post_ctrl_recvs(&self, h: &mut RdmaHandler, qp: QpId) -> Result<(), AppError> {
        let wrs = (0..CTRL_SLOTS)
            .map(|i| RecvWr {
                wr_id: TAG_CTRL_RECV | i as u64,
                sgl: vec![self.ctrl_recv.sge(i * CTRL_BUF, CTRL_BUF)],
            })
            .collect();
        h.rnic_mut()
            .post_rq(qp, wrs)
            .map_err(AppError::post("receive"))?;
        Ok(())
    }

    fn post_data_recvs(&mut self, h: &mut RdmaHandler, qp: QpId, n: u64) -> Result<(), AppError> {
        if n == 0 {
            return Ok(());
        }
        let size = self.params.size;
        let wrs = (0..n)
            .map(|_| RecvWr {
                wr_id: TAG_DATA_RECV,
                sgl: if size == 0 {
                    Vec::new()
                } else {
                    vec![self.buf.sge(self.adv_off, size)]
                },
            })
            .collect();
        h.rnic_mut()
            .post_rq(qp, wrs)
            .map_err(AppError::post("receive"))?;
        self.data_phase.recvs_posted += n;
        Ok(())
    }

    /// Our record: the buffer the peer targets (the credit buffer for `ib_send_bw`).
    fn my_dest(&self) -> Dest {
        let (rkey, vaddr) = if self.params.test == Test::SendBw {
            (self.credit.stag.0, self.credit.addr(0))
        } else {
            (self.buf.stag.0, self.buf.addr(self.adv_off))
        };
        let qpn = self.data.map_or(0, |c| c.qp.0);
        Dest {
            lid: 0,
            out_reads: if self.params.test.reads() {
                READ_DEPTH
            } else {
                1
            },
            qpn,
            // perftest draws a random 24-bit PSN; iWARP has no use for it.
            psn: (qpn.wrapping_mul(0x9e37_79b9) ^ self.buf.stag.0) & 0xff_ffff,
            rkey,
            vaddr,
            gid: Dest::gid_from_mac(self.params.mac),
            srqn: 0,
            gid_index: 0,
        }
    }

    fn record_bytes(&self, rec: Rec) -> Vec<u8> {
        match rec {
            Rec::Version => Version::ours().to_bytes().to_vec(),
            Rec::CycleBuffer => wire::u32_to_bytes(CYCLE_BUFFER).to_vec(),
            Rec::CacheLine => wire::u32_to_bytes(CACHE_LINE).to_vec(),
            Rec::Mtu => IbMtu::for_ethernet(self.params.mtu).to_bytes().to_vec(),
            Rec::Sync => Dest::SYNC.to_bytes().to_vec(),
            Rec::Dest => self.my_dest().to_bytes().to_vec(),
            Rec::Report(i) => self.report.field_bytes(i).to_vec(),
        }
    }

    fn take_record(&mut self, rec: Rec, b: &[u8]) -> Result<(), PerftestError> {
        let bad = |err| PerftestError::Record {
            stage: rec.name(),
            err,
        };
        match rec {
            Rec::Version => self.peer_version = Some(Version::parse(b).map_err(bad)?.0),
            Rec::CycleBuffer | Rec::CacheLine => {
                wire::parse_u32(b, rec.name()).map_err(bad)?;
            }
            Rec::Mtu => {
                IbMtu::parse(b).map_err(bad)?;
            }
            Rec::Sync => {
                Dest::parse(b).map_err(bad)?;
            }
            Rec::Dest => {
                let d = Dest::parse(b).map_err(bad)?;
                let needs_buffer = match self.params.test {
                    Test::WriteBw | Test::ReadBw | Test::ReadLat => !self.server,
                    Test::SendBw => self.server,
                    Test::WriteLat => true,
                    Test::SendLat => false,
                };
                if needs_buffer && d.rkey == 0 && d.vaddr == 0 {
                    return Err(PerftestError::NoPeerBuffer);
                }
                self.peer_dest = Some(d);
            }
            Rec::Report(i) => self.peer_report.set_field(i, b).map_err(bad)?,
        }
        Ok(())
    }

    fn send_ctrl(&mut self, h: &mut RdmaHandler, bytes: &[u8]) -> Result<(), PerftestError> {
        let c = self
            .ctrl
            .ok_or(PerftestError::NoConnection(Channel::Control))?;
        let slot = self.ctrl_send_next;
        self.ctrl_send_next = (slot + 1) % CTRL_SLOTS;
        let off = slot * CTRL_BUF;
        let rnic = h.rnic_mut();
        self.ctrl_send.bytes_mut(rnic)[off..off + bytes.len()].copy_from_slice(bytes);
        let wr = SendWr::message(
            TAG_CTRL_SEND | slot as u64,
            SendOp::Send {
                sgl: Sgl::one(self.ctrl_send.sge(off, bytes.len())),
                solicited: false,
                invalidate: None,
            },
        );
        rnic.post_sq_one(c.qp, wr)
            .map_err(AppError::post("control send"))?;
        self.ctrl_sends_pending += 1;
        Ok(())
    }

    // ------------------------------------------------------------ connection manager

    fn cm_event(
        &mut self,
        h: &mut RdmaHandler,
        ev: CmEvent,
        now: Instant,
    ) -> Result<(), PerftestError> {
        match ev {
            // Only a pending listener reports these; this tool listens with a QP template.
            CmEvent::Request { .. } | CmEvent::RequestWithdrawn { .. } => {}
            CmEvent::ConnectRequest { id, qp, .. } => {
                if !self.server {
                    let _ = h.reject(id, &[]);
                } else if self.ctrl.is_none() {
                    self.post_ctrl_recvs(h, qp)?;
                    h.accept(id, &[]).map_err(PerftestError::Accept)?;
                    self.ctrl = Some(Conn::new(id, qp));
                } else if self.data.is_none() {
                    if self.params.test.sends() {
                        let n = u64::from(self.params.rx_depth.max(1)).min(self.params.iters);
                        self.post_data_recvs(h, qp, n)?;
                    }
                    h.accept(id, &[]).map_err(PerftestError::Accept)?;
                    self.data = Some(Conn::new(id, qp));
                } else {
                    let _ = h.reject(id, &[]);
                }
            }
            CmEvent::Established { id, negotiated, .. } => {
                for c in [&mut self.ctrl, &mut self.data].into_iter().flatten() {
                    if c.id == id {
                        c.established = true;
                        c.ord = negotiated.ord;
                    }
                }
            }
            CmEvent::Rejected { id, .. } | CmEvent::ConnectError { id, .. } => {
                // perftest's peers reject without a reason: the bare "rejected".
                let why = match ev {
                    CmEvent::ConnectError { reason, .. } => ConnectFailure::Failed(reason),
                    _ => ConnectFailure::rejected(&[]),
                };
                if self.data.is_some_and(|c| c.id == id) && !self.server {
                    // perftest's server may not listen yet for the data connection.
                    self.data = None;
                    if self.data_tries >= DATA_CONNECT_TRIES {
                        return Err(PerftestError::DataConnectTries {
                            tries: DATA_CONNECT_TRIES,
                            why,
                        });
                    }
                    self.data_retry_at = Some(now + DATA_CONNECT_PAUSE);
                } else if self.ctrl.is_some_and(|c| c.id == id) {
                    return Err(PerftestError::Connect {
                        channel: Channel::Control,
                        why,
                    });
                } else if self.data.is_some_and(|c| c.id == id) {
                    return Err(PerftestError::Connect {
                        channel: Channel::Data,
                        why,
                    });
                }
            }
            CmEvent::Disconnected { id, graceful, .. } => {
                for c in [&mut self.ctrl, &mut self.data].into_iter().flatten() {
                    if c.id == id {
                        c.gone = true;
                        c.graceful = graceful;
                    }
                }
            }
        }
        Ok(())
    }

    fn connect_data(&mut self, h: &mut RdmaHandler) -> Result<(), PerftestError> {
        let remote = self.remote.ok_or(PerftestError::NoServerAddress)?;
        let mut init = self.res.init;
        init.ird = self.params.qp_ird_ord();
        init.ord = self.params.qp_ird_ord();
        let (id, qp) = h
            .connect(self.local.ip(), remote, init, &[])
            .map_err(PerftestError::DataConnect)?;
        self.data_tries += 1;
        if self.params.test == Test::SendLat {
            self.data_phase.recvs_posted = 0;
            let n = u64::from(self.params.rx_depth.max(1)).min(self.params.iters);
            self.post_data_recvs(h, qp, n)?;
        }
        self.data = Some(Conn::new(id, qp));
        Ok(())
    }

    // ------------------------------------------------------------ completions

    fn completion(
        &mut self,
        h: &mut RdmaHandler,
        wc: WorkCompletion,
        now: Instant,
    ) -> Result<(), PerftestError> {
        let tag = wc.wr_id & TAG_MASK;
        if wc.status == CompletionStatus::Flushed {
            // The QP left RTS (the peer closed); whether that was too early is decided
            // by the script's progress.
            if tag == TAG_CTRL_SEND {
                self.ctrl_sends_pending = self.ctrl_sends_pending.saturating_sub(1);
            }
            return Ok(());
        }
        if wc.status != CompletionStatus::Success {
            return Err(PerftestError::Completion {
                channel: if self.ctrl.is_some_and(|c| c.qp == wc.qp) {
                    Channel::Control
                } else {
                    Channel::Data
                },
                opcode: wc.opcode,
                status: wc.status,
            });
        }
        match tag {
            TAG_CTRL_RECV => {
                let slot = (wc.wr_id & 0xff) as usize % CTRL_SLOTS;
                let off = slot * CTRL_BUF;
                let len = (wc.byte_len as usize).min(CTRL_BUF);
                let msg = self.ctrl_recv.bytes(h.rnic())[off..off + len].to_vec();
                self.inbox.push_back(msg);
                let qp = wc.qp;
                h.rnic_mut()
                    .post_rq(
                        qp,
                        vec![RecvWr {
                            wr_id: wc.wr_id,
                            sgl: vec![self.ctrl_recv.sge(off, CTRL_BUF)],
                        }],
                    )
                    .map_err(AppError::post("receive"))?;
            }
            TAG_DATA => {
                let d = &mut self.data_phase;
                d.completed += 1;
                d.end = Some(now);
                if self.params.test == Test::ReadLat {
                    if let Some(t) = d.posts.last() {
                        d.samples.push(now.saturating_since(*t).as_secs_f64() * 1e6);
                    }
                }
                if !self.params.test.is_lat() {
                    let (t0, bytes) = d.window.get_or_insert((now, 0));
                    *bytes += self.params.size as u64;
                    let dt = now.saturating_since(*t0);
                    if dt >= Duration::from_millis(10) {
                        let rate = *bytes as f64 / dt.as_secs_f64() / 1048576.0;
                        d.peak = d.peak.max(rate);
                        d.window = Some((now, 0));
                    }
                }
            }
            TAG_CTRL_SEND => self.ctrl_sends_pending = self.ctrl_sends_pending.saturating_sub(1),
            TAG_DATA_RECV if wc.opcode == WcOpcode::Receive => {
                if self.params.test == Test::SendBw {
                    self.data_received(h, now)?;
                } else {
                    self.lat_received(h, wc.qp)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// `ib_send_lat`: one ping received; keep receives posted for the rest.
    fn lat_received(&mut self, h: &mut RdmaHandler, qp: QpId) -> Result<(), PerftestError> {
        self.data_phase.arrived += 1;
        if self.data_phase.recvs_posted < self.params.iters {
            self.post_data_recvs(h, qp, 1)?;
        }
        Ok(())
    }

    /// `ib_send_bw` server: one Send received; repost, return credits as perftest does.
    fn data_received(&mut self, h: &mut RdmaHandler, now: Instant) -> Result<(), PerftestError> {
        let data = self.data.ok_or(PerftestError::ReceiveWithoutData)?;
        let d = &mut self.data_phase;
        d.received += 1;
        d.start.get_or_insert(now);
        d.end = Some(now);
        let received = d.received;
        if self.data_phase.recvs_posted < self.params.iters {
            self.post_data_recvs(h, data.qp, 1)?;
        }
        let rx = u64::from(self.params.rx_depth.max(1));
        let every = (rx / 3).max(1);
        if (received % rx).is_multiple_of(every) {
            let peer = self
                .peer_dest
                .ok_or(PerftestError::PeerCreditBufferUnknown)?;
            let rnic = h.rnic_mut();
            let count = u32::try_from(received).unwrap_or(u32::MAX);
            self.credit.bytes_mut(rnic)[..4].copy_from_slice(&wire::credit_to_bytes(count));
            let wr = SendWr::message(
                TAG_CREDIT,
                SendOp::Write {
                    sgl: Sgl::one(self.credit.sge(0, 4)),
                    remote: RemoteBuf {
                        stag: STag(peer.rkey),
                        to: peer.vaddr,
                    },
                },
            )
            .unsignaled();
            rnic.post_sq_one(data.qp, wr)
                .map_err(AppError::post("credit write"))?;
        }
        Ok(())
    }

    // ------------------------------------------------------------ data phase

    /// Advances the data phase; true when it is over.
    fn data_step(&mut self, h: &mut RdmaHandler, now: Instant) -> Result<bool, PerftestError> {
        let iters = self.params.iters;
        match (self.params.test, self.server) {
            (Test::WriteBw | Test::ReadBw | Test::ReadLat, true) => Ok(true),
            (Test::SendBw, true) => Ok(self.data_phase.received >= iters),
            (Test::WriteLat | Test::SendLat, _) => self.lat_step(h, now),
            (Test::ReadLat, false) => self.read_lat_step(h, now),
            (_, false) => {
                self.post_bw(h, now)?;
                Ok(self.data_phase.completed >= iters)
            }
        }
    }

    fn post_bw(&mut self, h: &mut RdmaHandler, now: Instant) -> Result<(), PerftestError> {
        let data = self
            .data
            .ok_or(PerftestError::NoConnection(Channel::Data))?;
        let peer = self.peer_dest.ok_or(PerftestError::PeerBufferUnknown)?;
        let mut depth = u64::from(self.params.tx_depth.max(1));
        if self.params.test == Test::ReadBw {
            depth = depth.min(u64::from(data.ord.max(1))).min(READS_IN_FLIGHT);
        }
        let rx = u64::from(self.params.rx_depth.max(1));
        let size = self.params.size;
        let mut wrs = Vec::new();
        let rnic = h.rnic_mut();
        let credit = u64::from(wire::parse_credit(
            self.credit.bytes(rnic)[..4].try_into().unwrap_or([0; 4]),
        ));
        let d = &mut self.data_phase;
        while d.posted < self.params.iters && d.posted - d.completed < depth {
            if self.params.test == Test::SendBw && (d.posted + 1).saturating_sub(credit) >= rx {
                break;
            }
            let remote = RemoteBuf {
                stag: STag(peer.rkey),
                to: peer.vaddr,
            };
            let op = match self.params.test {
                Test::ReadBw => SendOp::Read {
                    sink: RemoteBuf {
                        stag: self.buf.stag,
                        to: self.buf.addr(0),
                    },
                    remote,
                    len: size as u32,
                },
                Test::SendBw => SendOp::Send {
                    sgl: Sgl::one(self.buf.sge(0, size)),
                    solicited: false,
                    invalidate: None,
                },
                _ => SendOp::Write {
                    sgl: Sgl::one(self.buf.sge(0, size)),
                    remote,
                },
            };
            wrs.push(SendWr::message(TAG_DATA | d.posted, op));
            d.posted += 1;
        }
        if !wrs.is_empty() {
            d.start.get_or_insert(now);
            rnic.post_sq(data.qp, wrs)
                .map_err(AppError::post(self.params.test.op_name()))?;
        }
        Ok(())
    }

    /// `ib_write_lat`: ping-pong of `size`-octet Writes; the last octet carries the count.
    /// The server writes first.
    fn lat_step(&mut self, h: &mut RdmaHandler, now: Instant) -> Result<bool, PerftestError> {
        let iters = self.params.iters;
        let size = self.params.size;
        let write = self.params.test == Test::WriteLat;
        if write && size == 0 {
            return Err(AppError::WriteLatencyNeedsSize.into());
        }
        let data = self
            .data
            .ok_or(PerftestError::NoConnection(Channel::Data))?;
        let peer = self.peer_dest.ok_or(PerftestError::PeerBufferUnknown)?;
        let rnic = h.rnic_mut();
        let d = &mut self.data_phase;
        if d.start.is_none() {
            d.start = Some(now);
            // ib_write_lat's server writes first, ib_send_lat's client sends first.
            d.awaiting = if write { !self.server } else { self.server };
        }
        loop {
            if d.awaiting {
                if d.received >= iters {
                    d.awaiting = false;
                    continue;
                }
                let arrived = if write {
                    self.buf.bytes(rnic)[self.adv_off + size - 1] == (d.received + 1) as u8
                } else {
                    d.arrived > d.received
                };
                if !arrived {
                    break;
                }
                d.received += 1;
                d.awaiting = false;
            } else if d.posted < iters {
                d.posted += 1;
                let sgl = if size == 0 {
                    Sgl::new()
                } else {
                    self.buf.bytes_mut(rnic)[size - 1] = d.posted as u8;
                    Sgl::one(self.buf.sge(0, size))
                };
                let op = if write {
                    SendOp::Write {
                        sgl,
                        remote: RemoteBuf {
                            stag: STag(peer.rkey),
                            to: peer.vaddr,
                        },
                    }
                } else {
                    SendOp::Send {
                        sgl,
                        solicited: false,
                        invalidate: None,
                    }
                };
                let wr = SendWr::message(TAG_DATA | d.posted, op);
                rnic.post_sq_one(data.qp, wr)
                    .map_err(AppError::post(self.params.test.op_name()))?;
                d.posts.push(now);
                d.awaiting = true;
            } else {
                break;
            }
        }
        Ok(d.posted >= iters && d.received >= iters && d.completed >= iters)
    }

    /// `ib_read_lat` client: one Read at a time.
    fn read_lat_step(&mut self, h: &mut RdmaHandler, now: Instant) -> Result<bool, PerftestError> {
        let iters = self.params.iters;
        let data = self
            .data
            .ok_or(PerftestError::NoConnection(Channel::Data))?;
        let peer = self.peer_dest.ok_or(PerftestError::PeerBufferUnknown)?;
        let d = &mut self.data_phase;
        d.start.get_or_insert(now);
        if d.posted == d.completed && d.posted < iters {
            d.posted += 1;
            let wr = SendWr::message(
                TAG_DATA | d.posted,
                SendOp::Read {
                    sink: RemoteBuf {
                        stag: self.buf.stag,
                        to: self.buf.addr(0),
                    },
                    remote: RemoteBuf {
                        stag: STag(peer.rkey),
                        to: peer.vaddr,
                    },
                    len: self.params.size as u32,
                },
            );
            h.rnic_mut()
                .post_sq_one(data.qp, wr)
                .map_err(AppError::post(self.params.test.op_name()))?;
            d.posts.push(now);
        }
        Ok(d.completed >= iters)
    }

    fn data_done(&mut self) {
        let size = self.params.size;
        let d = &self.data_phase;
        let r = if self.params.test == Test::ReadLat && self.server {
            // The passive side measures nothing.
            None
        } else if self.params.test.is_lat() {
            let samples = if self.params.test == Test::ReadLat {
                d.samples.clone()
            } else {
                // perftest: half of each gap between consecutive posts (a round trip).
                d.posts
                    .windows(2)
                    .map(|w| w[1].saturating_since(w[0]).as_secs_f64() * 1e6 / 2.0)
                    .collect()
            };
            let mut r = latency_result(size, samples);
            if let PerfResult::Lat { iters, .. } = &mut r {
                *iters = self.params.iters;
            }
            Some(r)
        } else if !self.server || self.params.test == Test::SendBw {
            let n = if self.server { d.received } else { d.completed };
            let secs = match (d.start, d.end) {
                (Some(s), Some(e)) => e.saturating_since(s).as_secs_f64(),
                _ => 0.0,
            }
            .max(1e-9);
            let avg = (n * size as u64) as f64 / secs / 1048576.0;
            let mpps = n as f64 / secs / 1e6;
            self.report = BwReport {
                size: size as u64,
                iters: n,
                bw_peak: d.peak.max(avg),
                bw_avg: avg,
                msg_rate: mpps,
            };
            Some(bw_result(&self.report))
        } else {
            None
        };
        if let Some(r) = r {
            self.publish(r);
        }
    }

    fn publish(&mut self, r: PerfResult) {
        if let Some(f) = self.on_result.as_mut() {
            f(&r);
        }
        self.result = Some(r);
    }

    // ------------------------------------------------------------ the script

    /// Runs the script as far as it goes now; true when it is over.
    fn advance(&mut self, h: &mut RdmaHandler, now: Instant) -> Result<bool, PerftestError> {
        while let Some(&stage) = self.script.get(self.pos) {
            let done = match stage {
                Stage::Xchg(rec) => self.xchg(h, rec)?,
                Stage::ConnectData => self.connect_stage(h, now)?,
                Stage::Data => {
                    let over = self.data_step(h, now)?;
                    if over {
                        self.data_done();
                    }
                    over
                }
            };
            if !done {
                return Ok(false);
            }
            self.pos += 1;
            self.sent = false;
        }
        Ok(true)
    }

    fn xchg(&mut self, h: &mut RdmaHandler, rec: Rec) -> Result<bool, PerftestError> {
        if !self.ctrl.is_some_and(|c| c.established) {
            return Ok(false);
        }
        if !self.server && !self.sent {
            let b = self.record_bytes(rec);
            self.send_ctrl(h, &b)?;
            self.sent = true;
        }
        let Some(msg) = self.inbox.pop_front() else {
            return Ok(false);
        };
        self.take_record(rec, &msg)?;
        if self.server {
            let b = self.record_bytes(rec);
            self.send_ctrl(h, &b)?;
            if rec == Rec::Report(REPORT_FIELDS - 1) {
                // The server prints the client's measurement (perftest does).
                let r = bw_result(&self.peer_report);
                self.publish(r);
            }
        }
        Ok(true)
    }

    fn connect_stage(&mut self, h: &mut RdmaHandler, now: Instant) -> Result<bool, PerftestError> {
        if self.server {
            return Ok(self.data.is_some());
        }
        match self.data {
            // The next sync starts both sides' data phase: not while our first FPDUs on
            // the data connection are still held (the Linux siw workaround), or the
            // first sample or bandwidth interval measures the hold.
            Some(c) => Ok(c.established
                && h.conn(c.id)
                    .and_then(|x| x.fpdu_hold_until())
                    .is_none_or(|t| now >= t)),
            None => {
                if self.data_retry_at.is_some_and(|t| now < t) {
                    return Ok(false);
                }
                self.data_retry_at = None;
                self.connect_data(h)?;
                Ok(false)
            }
        }
    }

    /// The data phase is behind the script's position: what is left are control records,
    /// and a peer that closes its data connection now (perftest's client destroys its QP
    /// right after sending its last record, which may reach us after the close) is done
    /// with it, not failing.
    fn data_phase_over(&self) -> bool {
        passed_data(&self.script, self.pos)
    }

    fn stage_name(&self) -> String {
        match self.script.get(self.pos) {
            Some(Stage::Xchg(r)) => format!("the {} exchange (step {})", r.name(), self.pos + 1),
            Some(Stage::ConnectData) => "the data connection set-up".into(),
            Some(Stage::Data) => "the data phase".into(),
            None => "the end".into(),
        }
    }

    fn run_step(&mut self, h: &mut RdmaHandler, now: Instant) -> Result<bool, PerftestError> {
        while let Some(ev) = h.poll_cm_event() {
            self.cm_event(h, ev, now)?;
        }
        while let Some(wc) = self.res.poll_cq(h) {
            self.completion(h, wc, now)?;
        }
        if !self.finishing {
            if self.advance(h, now)? {
                if self.ctrl_sends_pending > 0 {
                    // Our last record is still queued: closing now would flush it.
                    return Ok(false);
                }
                // Give the peer a moment to complete its last work request: siw fails a
                // Send whose connection closes before it completed.
                let peer_closed = [self.ctrl, self.data].into_iter().flatten().any(|c| c.gone);
                let at = *self.close_at.get_or_insert(now + CLOSE_LINGER);
                if !peer_closed && now < at {
                    return Ok(false);
                }
                self.finishing = true;
                for c in [self.data, self.ctrl].into_iter().flatten() {
                    if !c.gone {
                        let _ = h.disconnect(c.id);
                    }
                }
            } else if let Some((channel, c)) = [
                (Channel::Control, self.ctrl),
                (Channel::Data, self.data.filter(|_| !self.data_phase_over())),
            ]
            .into_iter()
            .find_map(|(n, c)| c.filter(|c| c.gone).map(|c| (n, c)))
            {
                return Err(PerftestError::Closed {
                    channel,
                    graceful: c.graceful,
                    during: self.stage_name(),
                });
            }
        }
        Ok(self.finishing && [self.ctrl, self.data].into_iter().flatten().all(|c| c.gone))
    }
}

/// perftest's bandwidth row from a report.
fn bw_result(r: &BwReport) -> PerfResult {
    PerfResult::Bw {
        bytes: r.size as usize,
        iters: r.iters,
        peak_mbs: r.bw_peak,
        avg_mbs: r.bw_avg,
        mpps: r.msg_rate,
    }
}

impl App for PerftestSession {
    type Error = PerftestError;

    fn step(&mut self, h: &mut RdmaHandler, now: Instant) -> Step<PerftestError> {
        match self.run_step(h, now) {
            Ok(false) => Step::Continue,
            Ok(true) => Step::Done(Ok(())),
            Err(e) => {
                for c in [self.ctrl, self.data].into_iter().flatten() {
                    let _ = h.terminate(c.id);
                }
                Step::Done(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // perftest's client destroys its data QP right after its last record; the server may see
    // that close first. Only the positions after the data phase tolerate it.
    #[test]
    fn data_connection_close_is_tolerated_only_after_the_data_phase() {
        for t in [Test::WriteBw, Test::SendBw, Test::WriteLat, Test::SendLat] {
            let s = script(t);
            let data = s.iter().position(|x| *x == Stage::Data).unwrap();
            assert!((0..=data).all(|pos| !passed_data(&s, pos)), "{t:?}");
            assert!(
                (data + 1..=s.len()).all(|pos| passed_data(&s, pos)),
                "{t:?}"
            );
        }
    }

    // The exchange counts of perftest 4.5 -R seen in siw captures (Sends per direction on
    // the control connection): write/read bw 16, send bw 11, write lat 10.
    #[test]
    fn script_matches_capture_counts() {
        let sends = |t| {
            script(t)
                .iter()
                .filter(|s| matches!(s, Stage::Xchg(_)))
                .count()
        };
        assert_eq!(sends(Test::WriteBw), 16);
        assert_eq!(sends(Test::ReadBw), 16);
        assert_eq!(sends(Test::SendBw), 11);
        assert_eq!(sends(Test::WriteLat), 10);
        assert_eq!(sends(Test::ReadLat), 11);
        assert_eq!(sends(Test::SendLat), 11);
        // The data connection comes after the fifth exchange; data after the records.
        for t in [
            Test::WriteBw,
            Test::ReadBw,
            Test::SendBw,
            Test::WriteLat,
            Test::ReadLat,
            Test::SendLat,
        ] {
            let s = script(t);
            assert_eq!(s[5], Stage::ConnectData);
            let data = s.iter().position(|x| *x == Stage::Data).unwrap();
            let before = s[..data]
                .iter()
                .filter(|x| **x == Stage::Xchg(Rec::Dest))
                .count();
            assert_eq!(
                before,
                if matches!(t, Test::WriteBw | Test::ReadBw) {
                    3
                } else {
                    4
                }
            );
        }
    }

    #[test]
    fn params_follow_perftest_defaults() {
        let p = PerftestParams::new(Test::SendBw, 65536, 100);
        assert_eq!((p.tx_depth, p.rx_depth), (100, 100));
        let p = PerftestParams::new(Test::WriteBw, 65536, 5000);
        assert_eq!((p.tx_depth, p.rx_depth), (128, 512));
        assert_eq!(p.ird_ord(), 0);
        assert_eq!(
            PerftestParams::new(Test::ReadBw, 8, 10).ird_ord(),
            READ_DEPTH
        );
    }
}
