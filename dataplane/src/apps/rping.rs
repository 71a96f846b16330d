//! rping, wire-compatible with rdma-core's `rping`: each ping, the client advertises its
//! source buffer `{addr, rkey, size}` (16 octets, big-endian) in a Send, the server RDMA
//! Reads it and answers with a "go ahead" Send; the client advertises its sink buffer, the
//! server RDMA Writes the ping data back and sends "go ahead" again.

use crate::clock::Instant;
use std::net::{IpAddr, SocketAddr};

use iwarp::verbs::Sgl;
use iwarp::verbs::{Access, CompletionStatus, QpId, RemoteBuf, STag, SendOp, SendWr, WcOpcode};
use tcp::ConnId;

use super::{all_rights, App, AppError, ConnectFailure, Resources, Step};
use crate::rdma::{CmEvent, RdmaHandler, Region};
use crate::say;

/// Length of the `{addr, rkey, size}` record.
pub const INFO_LEN: usize = 16;
/// rping's smallest and largest ping sizes.
pub const MIN_SIZE: usize = 24;
/// Largest ping size (rping's 64 KiB buffer).
pub const MAX_SIZE: usize = 64 * 1024 - 1;

/// The buffer advertisement rping exchanges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaInfo {
    /// Tagged address.
    pub addr: u64,
    /// STag.
    pub rkey: u32,
    /// Length.
    pub size: u32,
}

impl RdmaInfo {
    /// The 16-octet wire form.
    pub fn to_bytes(self) -> [u8; INFO_LEN] {
        let mut b = [0; INFO_LEN];
        b[..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..].copy_from_slice(&self.size.to_be_bytes());
        b
    }

    /// Parses the wire form.
    pub fn parse(b: &[u8]) -> Option<RdmaInfo> {
        if b.len() != INFO_LEN {
            return None;
        }
        Some(RdmaInfo {
            addr: u64::from_be_bytes(b[..8].try_into().ok()?),
            rkey: u32::from_be_bytes(b[8..12].try_into().ok()?),
            size: u32::from_be_bytes(b[12..].try_into().ok()?),
        })
    }
}

/// rping's ping text for ping number `ping`: `rdma-ping-N: ` then rotating letters, NUL
/// terminated.
pub fn ping_data(ping: u32, size: usize) -> Vec<u8> {
    let mut v = format!("rdma-ping-{ping}: ").into_bytes();
    v.truncate(size);
    let mut c = b'A' + (ping % 58) as u8;
    while v.len() < size {
        v.push(c);
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    if let Some(last) = v.last_mut() {
        *last = 0;
    }
    v
}

/// Options shared by both roles.
#[derive(Debug, Clone)]
pub struct RpingOptions {
    /// Ping size in octets.
    pub size: usize,
    /// Pings (client; 0 = until stopped).
    pub count: u32,
    /// Print ping data.
    pub verbose: bool,
    /// Validate ping data (client).
    pub validate: bool,
}

/// Where a ping is (rdma-core rping's states).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Nothing yet.
    Idle,
    /// The client's connection is being set up.
    Connecting,
    /// The source buffer is advertised (client) or awaited (server).
    ReadAdv,
    /// The server's RDMA Read is under way.
    ReadComplete,
    /// The sink buffer is advertised (client) or awaited (server).
    WriteAdv,
    /// The server's RDMA Write is under way.
    WriteComplete,
    /// The last ping is done; the client disconnects.
    Disconnecting,
}

/// Why rping failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RpingError {
    /// Work for a connection that is not there.
    #[error("no connection")]
    NoConnection,
    /// A client step that needs the start buffer ran on the server.
    #[error("client without start buffer")]
    NoStartBuffer,
    /// The peer's buffer advertisement has the wrong size (rping's own message).
    #[error("Received bogus data, size {0}")]
    BogusData(u32),
    /// The peer's buffer advertisement does not parse.
    #[error("bad record")]
    BadRecord,
    /// The ping written back differs from the one sent (`-V`).
    #[error("data mismatch!")]
    DataMismatch,
    /// A Send arrived where the exchange has none.
    #[error("unexpected receive in state {0:?}")]
    UnexpectedReceive(State),
    /// The connection was reset or terminated at the end.
    #[error("connection aborted")]
    Aborted,
    /// The server left before the client's pings were done.
    #[error("disconnected after {pings} of {count} pings")]
    Disconnected {
        /// Pings completed.
        pings: u32,
        /// Pings asked for.
        count: u32,
    },
    /// A failure every application can have.
    #[error(transparent)]
    App(#[from] AppError),
}

/// Both roles of rping.
#[derive(Debug)]
pub struct Rping {
    server: bool,
    opts: RpingOptions,
    res: Resources,
    recv_buf: Region,
    send_buf: Region,
    rdma_buf: Region,
    start_buf: Option<Region>,
    conn: Option<(ConnId, QpId)>,
    state: State,
    ping: u32,
    remote: Option<RdmaInfo>,
    /// Pings completed.
    pub pings: u32,
    /// When the first ping could go out: the connection's establishment, or the end of the
    /// initiator's first-FPDU hold (the siw workaround), whichever is later.
    pub started: Option<Instant>,
    /// When the last ping finished.
    pub finished: Option<Instant>,
}

impl Rping {
    fn new(h: &mut RdmaHandler, server: bool, opts: RpingOptions) -> Result<Rping, AppError> {
        let mut res = Resources::new(h, 64, 16, 2, 1)?;
        let recv_buf = res.buffer(h, INFO_LEN, Access::LOCAL_WRITE)?;
        let send_buf = res.buffer(h, INFO_LEN, Access::LOCAL_READ)?;
        // The server takes whatever size the client advertises (up to rping's limit).
        let rdma_len = if server { MAX_SIZE + 1 } else { opts.size };
        let rdma_buf = res.buffer(h, rdma_len, all_rights())?;
        let start_buf = if server {
            None
        } else {
            Some(res.buffer(h, opts.size, all_rights())?)
        };
        Ok(Rping {
            server,
            opts,
            res,
            recv_buf,
            send_buf,
            rdma_buf,
            start_buf,
            conn: None,
            state: State::Idle,
            ping: 0,
            remote: None,
            pings: 0,
            started: None,
            finished: None,
        })
    }

    /// The server: listens on `addr` (IPv4 or IPv6) and serves one client until it
    /// disconnects.
    pub fn server(
        h: &mut RdmaHandler,
        addr: impl Into<SocketAddr>,
        opts: RpingOptions,
    ) -> Result<Rping, AppError> {
        let r = Rping::new(h, true, opts)?;
        h.listen(addr, r.res.init)?;
        Ok(r)
    }

    /// The client: connects from `local` to `remote` (addresses of one family).
    pub fn client(
        h: &mut RdmaHandler,
        local: impl Into<IpAddr>,
        remote: impl Into<SocketAddr>,
        opts: RpingOptions,
    ) -> Result<Rping, AppError> {
        let mut r = Rping::new(h, false, opts)?;
        let (id, qp) = h.connect(local, remote, r.res.init, &[])?;
        r.post_recv(h, qp)?;
        r.conn = Some((id, qp));
        r.state = State::Connecting;
        Ok(r)
    }

    fn post_recv(&self, h: &mut RdmaHandler, qp: QpId) -> Result<(), AppError> {
        h.rnic_mut()
            .post_rq(qp, vec![self.recv_buf.recv_wr(1, 0, INFO_LEN)])
            .map_err(AppError::post("recv"))?;
        Ok(())
    }

    fn post(&self, h: &mut RdmaHandler, wr: SendWr) -> Result<(), RpingError> {
        let (_, qp) = self.conn.ok_or(RpingError::NoConnection)?;
        h.rnic_mut()
            .post_sq(qp, vec![wr])
            .map_err(AppError::post("send"))?;
        Ok(())
    }

    fn send_info(&self, h: &mut RdmaHandler, info: Option<RdmaInfo>) -> Result<(), RpingError> {
        let bytes = info.map_or([0; INFO_LEN], RdmaInfo::to_bytes);
        {
            let rnic = h.rnic_mut();
            self.send_buf.bytes_mut(rnic)[..INFO_LEN].copy_from_slice(&bytes);
        }
        self.post(h, SendWr::message(2, self.send_buf.send(0, INFO_LEN)))
    }

    fn advertise(&self, h: &mut RdmaHandler, r: &Region) -> Result<(), RpingError> {
        self.send_info(
            h,
            Some(RdmaInfo {
                addr: r.addr(0),
                rkey: r.stag.0,
                size: self.opts.size as u32,
            }),
        )
    }

    fn start_ping(&mut self, h: &mut RdmaHandler) -> Result<(), RpingError> {
        let data = ping_data(self.ping, self.opts.size);
        let start = self.start_buf.ok_or(RpingError::NoStartBuffer)?;
        {
            let rnic = h.rnic_mut();
            start.bytes_mut(rnic)[..data.len()].copy_from_slice(&data);
            self.rdma_buf.bytes_mut(rnic).fill(0);
        }
        self.state = State::ReadAdv;
        self.advertise(h, &start)
    }

    fn cstr(bytes: &[u8]) -> String {
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        String::from_utf8_lossy(&bytes[..end]).into_owned()
    }

    fn completion(&mut self, h: &mut RdmaHandler, now: Instant) -> Result<bool, RpingError> {
        let Some(wc) = self.res.poll_cq(h) else {
            return Ok(false);
        };
        if wc.status == CompletionStatus::Flushed {
            return Ok(true);
        }
        if wc.status != CompletionStatus::Success {
            return Err(AppError::completion(&wc).into());
        }
        let (_, qp) = self.conn.ok_or(RpingError::NoConnection)?;
        match wc.opcode {
            WcOpcode::Receive => {
                if wc.byte_len as usize != INFO_LEN {
                    return Err(RpingError::BogusData(wc.byte_len));
                }
                let info = {
                    let rnic = h.rnic();
                    RdmaInfo::parse(&self.recv_buf.bytes(rnic)[..INFO_LEN])
                };
                self.post_recv(h, qp)?;
                if self.server {
                    let info = info.ok_or(RpingError::BadRecord)?;
                    self.remote = Some(info);
                    if self.state == State::WriteAdv {
                        // The client's sink: write the ping data back.
                        let len = {
                            let rnic = h.rnic();
                            let b = self.rdma_buf.bytes(rnic);
                            let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
                            (n + 1).min(info.size as usize).min(b.len())
                        };
                        self.state = State::WriteComplete;
                        self.post(
                            h,
                            SendWr::message(
                                3,
                                SendOp::Write {
                                    sgl: Sgl::one(self.rdma_buf.sge(0, len)),
                                    remote: RemoteBuf {
                                        stag: STag(info.rkey),
                                        to: info.addr,
                                    },
                                },
                            ),
                        )?;
                    } else {
                        // The client's source: read it.
                        let len = (info.size as usize).min(self.rdma_buf.len);
                        self.state = State::ReadComplete;
                        self.post(
                            h,
                            SendWr::message(
                                4,
                                SendOp::Read {
                                    sink: self.rdma_buf.remote(0),
                                    remote: RemoteBuf {
                                        stag: STag(info.rkey),
                                        to: info.addr,
                                    },
                                    len: len as u32,
                                },
                            ),
                        )?;
                    }
                } else if self.state == State::ReadAdv {
                    // Go ahead: the server read our ping; advertise the sink.
                    self.state = State::WriteAdv;
                    self.advertise(h, &self.rdma_buf)?;
                } else if self.state == State::WriteAdv {
                    // The server wrote the ping back.
                    self.state = State::WriteComplete;
                    let (got, want) = {
                        let rnic = h.rnic();
                        let start = self.start_buf.ok_or(RpingError::NoStartBuffer)?;
                        (
                            self.rdma_buf.bytes(rnic).to_vec(),
                            start.bytes(rnic).to_vec(),
                        )
                    };
                    if self.opts.validate && got != want {
                        return Err(RpingError::DataMismatch);
                    }
                    if self.opts.verbose {
                        say!("ping data: {}", Self::cstr(&got));
                    }
                    self.pings += 1;
                    self.finished = Some(now);
                    self.ping += 1;
                    if self.opts.count != 0 && self.ping >= self.opts.count {
                        self.state = State::Disconnecting;
                        if let Some((id, _)) = self.conn {
                            h.disconnect(id).map_err(AppError::from)?;
                        }
                    } else {
                        self.start_ping(h)?;
                    }
                } else {
                    return Err(RpingError::UnexpectedReceive(self.state));
                }
            }
            WcOpcode::RdmaRead if self.server => {
                if self.opts.verbose {
                    let rnic = h.rnic();
                    say!(
                        "server ping data: {}",
                        Self::cstr(self.rdma_buf.bytes(rnic))
                    );
                }
                self.pings += 1;
                self.state = State::WriteAdv;
                self.send_info(h, None)?;
            }
            WcOpcode::RdmaWrite if self.server => {
                self.state = State::ReadAdv;
                self.finished = Some(now);
                self.send_info(h, None)?;
            }
            WcOpcode::Send => {}
            other => return Err(AppError::UnexpectedCompletion(other).into()),
        }
        Ok(true)
    }

    fn cm(&mut self, h: &mut RdmaHandler, ev: CmEvent, now: Instant) -> Option<Step<RpingError>> {
        match ev {
            // Only a pending listener reports these; this tool listens with a QP template.
            CmEvent::Request { .. } | CmEvent::RequestWithdrawn { .. } => {}
            CmEvent::ConnectRequest { id, qp, remote, .. } => {
                if self.conn.is_some() {
                    let _ = h.reject(id, b"busy");
                    return None;
                }
                say!("rping: connect request from {remote}");
                if let Err(e) = self.post_recv(h, qp) {
                    return Some(Step::Done(Err(e.into())));
                }
                self.conn = Some((id, qp));
                self.state = State::ReadAdv;
                if let Err(e) = h.accept(id, &[]) {
                    return Some(Step::Done(Err(AppError::from(e).into())));
                }
            }
            CmEvent::Established { id, negotiated, .. } => {
                // The first ping is posted now but held until then: time from there.
                let held = h.conn(id).and_then(|c| c.fpdu_hold_until());
                self.started = Some(held.map_or(now, |t| t.max(now)));
                say!(
                    "rping: connected (MPA rev {}, CRC {}, markers {})",
                    negotiated.revision,
                    if negotiated.crc { "on" } else { "off" },
                    if negotiated.markers_tx || negotiated.markers_rx {
                        "on"
                    } else {
                        "off"
                    }
                );
                if !self.server {
                    if let Err(e) = self.start_ping(h) {
                        return Some(Step::Done(Err(e)));
                    }
                }
            }
            CmEvent::Rejected { private_data, .. } => {
                let failure = ConnectFailure::rejected(&private_data);
                return Some(Step::Done(Err(AppError::from(failure).into())));
            }
            CmEvent::ConnectError { reason, .. } => {
                let failure = ConnectFailure::Failed(reason);
                return Some(Step::Done(Err(AppError::from(failure).into())));
            }
            CmEvent::Disconnected { graceful, .. } => {
                say!(
                    "{} DISCONNECT EVENT...",
                    if self.server { "server" } else { "client" }
                );
                let done_ok = self.server || self.state == State::Disconnecting;
                return Some(Step::Done(if done_ok && graceful {
                    Ok(())
                } else if done_ok {
                    Err(RpingError::Aborted)
                } else {
                    Err(RpingError::Disconnected {
                        pings: self.pings,
                        count: self.opts.count,
                    })
                }));
            }
        }
        None
    }
}

impl App for Rping {
    type Error = RpingError;

    fn step(&mut self, h: &mut RdmaHandler, now: Instant) -> Step<RpingError> {
        while let Some(ev) = h.poll_cm_event() {
            if let Some(s) = self.cm(h, ev, now) {
                return s;
            }
        }
        loop {
            match self.completion(h, now) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    if let Some((id, _)) = self.conn {
                        let _ = h.terminate(id);
                    }
                    return Step::Done(Err(e));
                }
            }
        }
        Step::Continue
    }
}
