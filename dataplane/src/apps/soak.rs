//! The verified soak: an RDMA Write + Read + Send mix on many QPs in which every octet is
//! checked (`dataplane soak`, issue 8's robustness acceptance over a real link).
//!
//! Each round on each QP, the client
//!
//! 1. RDMA Writes a seeded pattern into the server's target buffer (random length and
//!    offset),
//! 2. RDMA Reads the same range back and compares every octet,
//! 3. RDMA Reads a random range of the server's source buffer (filled with the server's
//!    own seeded pattern) and compares every octet,
//! 4. Sends a message (sequence header + seeded pattern) that the server checks: sequence
//!    number, length and every payload octet.
//!
//! When the volume or time budget is spent, the client sends an END message carrying the
//! number of messages it sent on that QP; the server answers with a verdict Send (ok or the
//! reason of the first mismatch, with its own count of verified messages and octets), so
//! the client's result covers both sides. A server that finds a mismatch sends its verdict
//! at once. Any mismatch, failed completion or stall ends the run with an error.
//!
//! The client tells the server its seed and slot in the MPA Request's private data; the
//! server answers with its buffers in the Reply's (RFC 5044 §7.1 private data, RFC 6581
//! IRD/ORD in front of it).

use std::collections::HashMap;
use std::fmt::Display;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::clock::{self, Instant};

use iwarp::verbs::Sgl;
use iwarp::verbs::{
    Access, CompletionStatus, QpId, RemoteBuf, STag, SendOp, SendWr, WcOpcode, WorkCompletion,
};
use tcp::ConnId;

use super::{all_rights, App, AppError, ConnectFailure, Resources, Step};
use crate::rdma::{CmError, CmEvent, RdmaHandler, Region};

/// Private data and message magic ("SOAK").
const MAGIC: u32 = 0x534f_414b;
/// Length of a message header: magic, kind, length, sequence.
pub const HEADER_LEN: usize = 20;
/// Largest verdict message.
const VERDICT_LEN: usize = 256;
/// Receive buffers the server keeps posted per QP.
const RECV_SLOTS: usize = 4;
/// Most QPs of one run.
pub const MAX_QPS: usize = 64;

const KIND_DATA: u32 = 1;
const KIND_END: u32 = 2;
const KIND_VERDICT: u32 = 3;

/// Which pattern a seed is for.
const USE_WRITE: u64 = 0;
const USE_SOURCE: u64 = 1;
const USE_SEND: u64 = 2;

/// Why a soak run failed (either side). The server's text of it travels to the client in
/// the verdict.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SoakError {
    /// Something failed on one QP.
    #[error("QP {slot}: {failure}")]
    Qp {
        /// The QP's slot.
        slot: usize,
        /// What failed.
        failure: QpFailure,
    },
    /// A round's Reads brought back other data than the pattern (client).
    #[error("QP {slot} round {round}: {mismatch}")]
    Round {
        /// The QP's slot.
        slot: usize,
        /// The round.
        round: u64,
        /// Which Read and where.
        mismatch: RoundMismatch,
    },
    /// The server's verdict reports a failure: its text, as it came over the wire.
    #[error("server: {0}")]
    Server(String),
    /// What the server tells a QP's client when another QP failed first.
    #[error("another QP failed")]
    AnotherQp,
    /// No completion or connection event for the stall time (client).
    #[error(
        "stall: no completion for {:.0} s: {}",
        .after.as_secs_f64(),
        joined(.open)
    )]
    Stall {
        /// The stall time.
        after: Duration,
        /// The QPs not gone.
        open: Vec<OpenQp>,
    },
    /// Nothing happened for the stall time once a client came (server).
    #[error(
        "stall: nothing happened for {:.0} s (waiting for {})",
        .after.as_secs_f64(),
        joined(.waiting)
    )]
    ServerStall {
        /// The stall time.
        after: Duration,
        /// The QPs not gone.
        waiting: Vec<WaitingQp>,
    },
    /// A failure every application can have.
    #[error(transparent)]
    App(#[from] AppError),
}

impl SoakError {
    /// `failure` on the QP of `slot`.
    fn qp(slot: usize, failure: impl Into<QpFailure>) -> SoakError {
        SoakError::Qp {
            slot,
            failure: failure.into(),
        }
    }
}

/// What failed on one QP.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QpFailure {
    /// A received message does not start with a soak header (server).
    #[error("message without a soak header")]
    NoHeader,
    /// A message's length disagrees with its header (server).
    #[error("message {seq} is {len} bytes, header says {header}")]
    Length {
        /// Its sequence number.
        seq: u64,
        /// Octets received.
        len: usize,
        /// Octets the header gives.
        header: usize,
    },
    /// A message was repeated or skipped (server).
    #[error("message {seq} arrived, expected {expected}")]
    Sequence {
        /// The sequence number received.
        seq: u64,
        /// The one expected.
        expected: u64,
    },
    /// A message's payload differs from the pattern (server).
    #[error("message {seq}: payload differs at octet {at}")]
    Payload {
        /// Its sequence number.
        seq: u64,
        /// The first octet that differs, from the header on.
        at: usize,
    },
    /// The client's END counts other messages than arrived (server).
    #[error("the client sent {sent} messages, {arrived} arrived")]
    Count {
        /// The END's count.
        sent: u64,
        /// Messages verified.
        arrived: u64,
    },
    /// A message of a kind the soak does not send (server).
    #[error("unknown message kind {0}")]
    Kind(u32),
    /// A receive longer than the receive buffer (server).
    #[error("message of {0} bytes")]
    Oversized(u32),
    /// The connection went before the client's END (server).
    #[error(
        "connection {} after {messages} messages, before the client's END",
        if *.graceful { "closed" } else { "lost" }
    )]
    EndedEarly {
        /// It closed in order.
        graceful: bool,
        /// Messages verified.
        messages: u64,
    },
    /// The server's registered memory is too small for the QP's buffers.
    #[error("{0} (give the server more --mem-mb)")]
    Memory(AppError),
    /// Accepting the connection failed (server).
    #[error("accept: {0}")]
    Accept(CmError),
    /// The server's MPA Reply has no [`Offer`] (client).
    #[error("the server's Reply has no buffers")]
    NoOffer,
    /// The server's buffers are smaller than the largest Write/Read (client).
    #[error("server buffers too small")]
    SmallBuffers,
    /// A receive that is not a verdict (client).
    #[error("the server sent no verdict")]
    NoVerdict,
    /// A verdict before the client's END (client).
    #[error("verdict before the END")]
    EarlyVerdict,
    /// The server's verdict counts other messages than were sent (client).
    #[error(
        "the server verified {messages} messages ({bytes} bytes), {sent} ({sent_bytes} bytes) were sent"
    )]
    Unverified {
        /// Messages the server verified.
        messages: u64,
        /// Their octets.
        bytes: u64,
        /// Messages sent.
        sent: u64,
        /// Their octets.
        sent_bytes: u64,
    },
    /// The connection went before the run was over (client).
    #[error(
        "connection {} ({phase:?}, round {round})",
        if *.graceful { "closed by the server" } else { "lost" }
    )]
    Gone {
        /// The server closed it in order.
        graceful: bool,
        /// Where the QP was.
        phase: QpPhase,
        /// Rounds done.
        round: u64,
    },
    /// The graceful disconnect failed (client).
    #[error("disconnect: {0}")]
    Disconnect(CmError),
    /// A refused post, failed completion or connection failure.
    #[error(transparent)]
    App(#[from] AppError),
}

/// Which Read of a round differs from the pattern.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoundMismatch {
    /// The read-back of the round's Write.
    #[error(
        "the Write of {len} bytes at target offset {offset} read back different at octet {at}"
    )]
    Write {
        /// Octets written.
        len: usize,
        /// Where in the server's target buffer.
        offset: usize,
        /// The first octet that differs.
        at: usize,
    },
    /// The Read of the server's source buffer.
    #[error("the Read of {len} bytes at source offset {offset} differs at octet {at}")]
    Read {
        /// Octets read.
        len: usize,
        /// Where in the server's source buffer.
        offset: usize,
        /// The first octet that differs.
        at: usize,
    },
}

/// A QP still open when the client stalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenQp {
    /// Its slot.
    pub slot: usize,
    /// Where it is.
    pub phase: QpPhase,
    /// Rounds done.
    pub rounds: u64,
    /// Operations of the current round not completed.
    pub ops_open: Option<u8>,
}

impl Display for OpenQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QP {} {:?} round {}", self.slot, self.phase, self.rounds)?;
        if let Some(n) = self.ops_open {
            write!(f, " ({n} of 4 operations open)")?;
        }
        Ok(())
    }
}

/// A QP the server still waited on when it stalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitingQp {
    /// Its slot.
    pub slot: usize,
    /// Messages verified.
    pub messages: u64,
}

impl Display for WaitingQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QP {} after {} messages", self.slot, self.messages)
    }
}

/// `items` separated by commas.
fn joined<T: Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A volume that does not parse ([`parse_bytes`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BytesError {
    /// No number in front.
    #[error("{0:?} is not a number of bytes")]
    NotANumber(String),
    /// A suffix other than K, M, G or T.
    #[error("{0:?}: unknown unit (use K, M, G or T, e.g. 64MiB)")]
    UnknownUnit(String),
    /// Zero, negative or too large.
    #[error("{0:?} is not a positive number of bytes")]
    NotPositive(String),
}

/// A setting of [`SoakParams`] out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    /// `--qps`.
    #[error("--qps: 1 to {}", MAX_QPS)]
    Qps,
    /// `--max-io`.
    #[error("--max-io: 1 byte to 16 MiB")]
    MaxIo,
    /// `--max-msg`.
    #[error("--max-msg: {} bytes to 1 MiB", HEADER_LEN)]
    MaxMsg,
    /// Neither a volume nor a duration.
    #[error("give a volume or a duration")]
    NoBudget,
}

fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The seed of one pattern: run seed, QP slot, round and use.
pub fn pattern_seed(seed: u64, slot: usize, round: u64, usage: u64) -> u64 {
    mix64(seed ^ mix64(((slot as u64) << 48) ^ (round << 2) ^ usage))
}

/// Fills `buf` with the pattern of `seed` from position `offset` on. The pattern is a
/// function of (seed, position) only, so any slice of it can be checked on its own; it has
/// no zero octet (zero marks "nothing placed").
pub fn pattern_fill(seed: u64, offset: usize, buf: &mut [u8]) {
    let mut pos = offset;
    let mut i = 0;
    while i < buf.len() {
        let block = mix64(seed ^ (pos as u64 / 8).wrapping_mul(0xd6e8_feb8_6659_fd93));
        let bytes = block.to_le_bytes();
        let from = pos % 8;
        let n = (8 - from).min(buf.len() - i);
        for k in 0..n {
            buf[i + k] = bytes[from + k].max(1);
        }
        i += n;
        pos += n;
    }
}

/// The pattern of `seed` over `offset..offset + len`.
pub fn pattern(seed: u64, offset: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    pattern_fill(seed, offset, &mut v);
    v
}

/// Index of the first octet of `buf` that differs from the pattern of `seed` at `offset`.
pub fn pattern_mismatch(seed: u64, offset: usize, buf: &[u8]) -> Option<usize> {
    let mut want = [0u8; 4096];
    let mut i = 0;
    while i < buf.len() {
        let n = (buf.len() - i).min(want.len());
        pattern_fill(seed, offset + i, &mut want[..n]);
        if buf[i..i + n] != want[..n] {
            let k = buf[i..i + n]
                .iter()
                .zip(&want[..n])
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Some(i + k);
        }
        i += n;
    }
    None
}

/// Parses a volume: a number with an optional binary suffix (`K`, `M`, `G`, `T`, each
/// optionally followed by `i` and/or `B`: `64MiB`, `1G`, `512k`).
pub fn parse_bytes(s: &str) -> Result<u64, BytesError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().map_err(|_| BytesError::NotANumber(s.into()))?;
    let unit = unit.trim().to_ascii_lowercase();
    let unit = unit.strip_suffix('b').unwrap_or(&unit);
    let unit = unit.strip_suffix('i').unwrap_or(unit);
    let mult: u64 = match unit {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        _ => return Err(BytesError::UnknownUnit(s.into())),
    };
    let bytes = v * mult as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(BytesError::NotPositive(s.into()));
    }
    Ok(bytes as u64)
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}
fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}
fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]))
}
fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]))
}

/// What the client says in each MPA Request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// This QP's index.
    pub slot: u32,
    /// QPs of the run.
    pub qps: u32,
    /// Run seed.
    pub seed: u64,
    /// Largest Write/Read: the size of the server's target and source buffers.
    pub max_io: u32,
    /// Largest Send: the size of the server's receive buffers.
    pub max_msg: u32,
}

impl Hello {
    const LEN: usize = 28;

    /// Wire form.
    pub fn to_bytes(self) -> Vec<u8> {
        let mut b = vec![0; Self::LEN];
        put_u32(&mut b, 0, MAGIC);
        put_u32(&mut b, 4, self.slot);
        put_u32(&mut b, 8, self.qps);
        put_u64(&mut b, 12, self.seed);
        put_u32(&mut b, 20, self.max_io);
        put_u32(&mut b, 24, self.max_msg);
        b
    }

    /// Parses the wire form.
    pub fn parse(b: &[u8]) -> Option<Hello> {
        if b.len() != Self::LEN || get_u32(b, 0) != MAGIC {
            return None;
        }
        Some(Hello {
            slot: get_u32(b, 4),
            qps: get_u32(b, 8),
            seed: get_u64(b, 12),
            max_io: get_u32(b, 20),
            max_msg: get_u32(b, 24),
        })
    }
}

/// What the server answers in the MPA Reply: its target and source buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    /// Where the client writes (and reads back).
    pub target: RemoteBuf,
    /// The server's patterned buffer the client reads.
    pub source: RemoteBuf,
    /// Length of each.
    pub len: u32,
}

impl Offer {
    const LEN: usize = 32;

    /// Wire form.
    pub fn to_bytes(self) -> Vec<u8> {
        let mut b = vec![0; Self::LEN];
        put_u32(&mut b, 0, MAGIC);
        put_u32(&mut b, 4, self.target.stag.0);
        put_u64(&mut b, 8, self.target.to);
        put_u32(&mut b, 16, self.source.stag.0);
        put_u64(&mut b, 20, self.source.to);
        put_u32(&mut b, 28, self.len);
        b
    }

    /// Parses the wire form.
    pub fn parse(b: &[u8]) -> Option<Offer> {
        if b.len() != Self::LEN || get_u32(b, 0) != MAGIC {
            return None;
        }
        Some(Offer {
            target: RemoteBuf {
                stag: STag(get_u32(b, 4)),
                to: get_u64(b, 8),
            },
            source: RemoteBuf {
                stag: STag(get_u32(b, 16)),
                to: get_u64(b, 20),
            },
            len: get_u32(b, 28),
        })
    }
}

/// A message header: magic, kind, total length, sequence number (or count).
fn header(kind: u32, len: usize, seq: u64) -> [u8; HEADER_LEN] {
    let mut b = [0; HEADER_LEN];
    put_u32(&mut b, 0, MAGIC);
    put_u32(&mut b, 4, kind);
    put_u32(&mut b, 8, len as u32);
    put_u64(&mut b, 12, seq);
    b
}

/// The server's verdict on one QP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Messages verified.
    pub messages: u64,
    /// Octets of those messages verified.
    pub bytes: u64,
    /// `None` when everything matched, else what did not.
    pub failure: Option<String>,
}

impl Verdict {
    fn to_bytes(&self) -> Vec<u8> {
        let reason = self.failure.as_deref().unwrap_or("");
        let text = &reason.as_bytes()[..reason.len().min(VERDICT_LEN - HEADER_LEN - 9)];
        let len = HEADER_LEN + 9 + text.len();
        let mut b = header(KIND_VERDICT, len, self.messages).to_vec();
        b.push(u8::from(self.failure.is_none()));
        b.extend_from_slice(&self.bytes.to_be_bytes());
        b.extend_from_slice(text);
        b
    }

    fn parse(b: &[u8]) -> Option<Verdict> {
        if b.len() < HEADER_LEN + 9
            || get_u32(b, 0) != MAGIC
            || get_u32(b, 4) != KIND_VERDICT
            || get_u32(b, 8) as usize != b.len()
        {
            return None;
        }
        let ok = b[HEADER_LEN] == 1;
        Some(Verdict {
            messages: get_u64(b, 12),
            bytes: get_u64(b, HEADER_LEN + 1),
            failure: (!ok).then(|| String::from_utf8_lossy(&b[HEADER_LEN + 9..]).into_owned()),
        })
    }
}

/// Totals of a run (either side).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SoakTally {
    /// Rounds completed and verified.
    pub rounds: u64,
    /// Octets RDMA written (each verified by the read-back).
    pub written: u64,
    /// Octets RDMA read and verified (read-backs and server-source reads).
    pub read: u64,
    /// Octets of Send payload (client: sent; server: received and verified).
    pub sent: u64,
    /// Octets the server reported verified in its verdicts (client).
    pub server_verified: u64,
    /// Successful RDMA Write completions.
    pub writes: u64,
    /// Successful RDMA Read completions.
    pub reads: u64,
    /// Successful Send completions (client) or verified messages (server).
    pub sends: u64,
}

impl SoakTally {
    /// Octets moved: written + read + sent.
    pub fn bytes(&self) -> u64 {
        self.written + self.read + self.sent
    }
}

/// Settings of the client.
#[derive(Debug, Clone)]
pub struct SoakParams {
    /// Connections.
    pub qps: usize,
    /// Stop starting rounds once this many octets moved (Write + Read + Send).
    pub bytes: Option<u64>,
    /// Stop starting rounds after this long.
    pub duration: Option<Duration>,
    /// Run seed.
    pub seed: u64,
    /// Largest RDMA Write / Read.
    pub max_io: usize,
    /// Largest Send.
    pub max_msg: usize,
    /// Fail after this long without any completion or connection event.
    pub stall: Duration,
}

impl Default for SoakParams {
    fn default() -> Self {
        SoakParams {
            qps: 8,
            bytes: Some(64 << 20),
            duration: None,
            seed: 1,
            max_io: 64 * 1024,
            max_msg: 32 * 1024,
            stall: Duration::from_secs(30),
        }
    }
}

impl SoakParams {
    /// Checks the settings.
    pub fn check(&self) -> Result<(), ParamsError> {
        if !(1..=MAX_QPS).contains(&self.qps) {
            return Err(ParamsError::Qps);
        }
        if !(1..=16 << 20).contains(&self.max_io) {
            return Err(ParamsError::MaxIo);
        }
        if !(HEADER_LEN..=1 << 20).contains(&self.max_msg) {
            return Err(ParamsError::MaxMsg);
        }
        if self.bytes.is_none() && self.duration.is_none() {
            return Err(ParamsError::NoBudget);
        }
        Ok(())
    }

    /// Registered memory the client needs, in octets.
    pub fn client_memory(&self) -> usize {
        self.qps * (3 * self.max_io + self.max_msg + VERDICT_LEN + 3 * 4096)
    }

    /// Registered memory the server needs for these settings, in octets.
    pub fn server_memory(&self) -> usize {
        self.qps * (2 * self.max_io + RECV_SLOTS * self.max_msg + VERDICT_LEN + 3 * 4096)
    }
}

// ------------------------------------------------------------------ server

#[derive(Debug)]
struct ServerQp {
    id: Option<ConnId>,
    slot: usize,
    seed: u64,
    max_msg: usize,
    recv: Region,
    verdict_buf: Region,
    /// Next expected message sequence number = messages verified.
    next_seq: u64,
    bytes: u64,
    failure: Option<SoakError>,
    verdict_sent: bool,
    ended: bool,
    gone: bool,
}

/// The server's first failure and when it happened.
#[derive(Debug, Default)]
struct FirstFailure {
    why: Option<SoakError>,
    at: Option<Instant>,
}

impl FirstFailure {
    /// Keeps `why` unless a failure came first.
    fn record(&mut self, why: SoakError, now: Instant) {
        if self.why.is_none() {
            log::error!("soak server: {why}");
            self.why = Some(why);
            self.at = Some(now);
        }
    }
}

/// The server: accepts the client's QPs, serves their Writes and Reads, checks every Send
/// and answers each END with its verdict. Done when every QP of the run has gone.
#[derive(Debug)]
pub struct SoakServer {
    res: Resources,
    qps: HashMap<QpId, ServerQp>,
    expected: Option<usize>,
    slots_seen: Vec<bool>,
    failure: FirstFailure,
    last_event: Option<Instant>,
    /// When [`SoakServer::step`] last ran (see [`discount_pause`]).
    last_step: Option<Instant>,
    stall: Duration,
    /// What the server verified.
    pub tally: SoakTally,
}

impl SoakServer {
    /// Listens on `addr` (IPv4 or IPv6); `stall` bounds the time without any event once a
    /// client came.
    pub fn new(
        h: &mut RdmaHandler,
        addr: impl Into<SocketAddr>,
        stall: Duration,
    ) -> Result<SoakServer, AppError> {
        let mut res = Resources::new(h, 8192, 16, (RECV_SLOTS + 2) as u32, 16)?;
        res.init.rq_depth = (RECV_SLOTS + 2) as u32;
        h.listen(addr, res.init)?;
        Ok(SoakServer {
            res,
            qps: HashMap::new(),
            expected: None,
            slots_seen: Vec::new(),
            failure: FirstFailure::default(),
            last_event: None,
            last_step: None,
            stall,
            tally: SoakTally::default(),
        })
    }

    /// Connections accepted so far and still alive.
    pub fn live(&self) -> usize {
        self.qps.values().filter(|q| !q.gone).count()
    }

    fn request(
        &mut self,
        h: &mut RdmaHandler,
        id: ConnId,
        qp: QpId,
        private_data: &[u8],
    ) -> Result<(), SoakError> {
        let Some(hello) = Hello::parse(private_data) else {
            let _ = h.reject(id, b"not a soak client");
            return Ok(());
        };
        let qps = hello.qps as usize;
        let slot = hello.slot as usize;
        if !(1..=MAX_QPS).contains(&qps)
            || slot >= qps
            || self.expected.is_some_and(|e| e != qps)
            || self.slots_seen.get(slot).copied().unwrap_or(false)
            || !(1..=16 << 20).contains(&hello.max_io)
            || !(HEADER_LEN as u32..=1 << 20).contains(&hello.max_msg)
        {
            let _ = h.reject(id, b"unexpected soak QP");
            return Ok(());
        }
        self.expected = Some(qps);
        self.slots_seen.resize(qps, false);
        self.slots_seen[slot] = true;
        let io = hello.max_io as usize;
        let msg = hello.max_msg as usize;
        let mut alloc = |len: usize, access: Access| self.res.buffer(h, len, access);
        let bufs = (|| {
            Ok::<_, AppError>((
                alloc(io, all_rights())?,
                alloc(io, all_rights())?,
                alloc(msg * RECV_SLOTS, Access::LOCAL_WRITE)?,
                alloc(VERDICT_LEN, Access::LOCAL_READ)?,
            ))
        })();
        let (target, source, recv, verdict_buf) = match bufs {
            Ok(b) => b,
            Err(e) => {
                // Tell the client why (it stops at the reject) and fail.
                let why = SoakError::qp(slot, QpFailure::Memory(e));
                let _ = h.reject(id, why.to_string().as_bytes());
                return Err(why);
            }
        };
        {
            let rnic = h.rnic_mut();
            pattern_fill(
                pattern_seed(hello.seed, slot, 0, USE_SOURCE),
                0,
                source.bytes_mut(rnic),
            );
            target.bytes_mut(rnic).fill(0);
            let wrs = (0..RECV_SLOTS)
                .map(|s| recv.recv_wr(s as u64, s * msg, msg))
                .collect();
            rnic.post_rq(qp, wrs)
                .map_err(AppError::post("receives"))
                .map_err(|e| SoakError::qp(slot, e))?;
        }
        let offer = Offer {
            target: target.remote(0),
            source: source.remote(0),
            len: io as u32,
        };
        h.accept(id, &offer.to_bytes())
            .map_err(|e| SoakError::qp(slot, QpFailure::Accept(e)))?;
        self.qps.insert(
            qp,
            ServerQp {
                id: Some(id),
                slot,
                seed: hello.seed,
                max_msg: msg,
                recv,
                verdict_buf,
                next_seq: 0,
                bytes: 0,
                failure: None,
                verdict_sent: false,
                ended: false,
                gone: false,
            },
        );
        Ok(())
    }

    /// Checks one received message; returns whether a verdict is due.
    fn check_message(q: &mut ServerQp, msg: &[u8]) -> Result<bool, SoakError> {
        let slot = q.slot;
        let fail = |failure| Err(SoakError::qp(slot, failure));
        if msg.len() < HEADER_LEN || get_u32(msg, 0) != MAGIC {
            return fail(QpFailure::NoHeader);
        }
        let kind = get_u32(msg, 4);
        let len = get_u32(msg, 8) as usize;
        let seq = get_u64(msg, 12);
        if len != msg.len() {
            return fail(QpFailure::Length {
                seq,
                len: msg.len(),
                header: len,
            });
        }
        match kind {
            KIND_DATA => {
                if seq != q.next_seq {
                    return fail(QpFailure::Sequence {
                        seq,
                        expected: q.next_seq,
                    });
                }
                let body = &msg[HEADER_LEN..];
                if let Some(at) =
                    pattern_mismatch(pattern_seed(q.seed, slot, seq, USE_SEND), 0, body)
                {
                    return fail(QpFailure::Payload {
                        seq,
                        at: HEADER_LEN + at,
                    });
                }
                q.next_seq += 1;
                q.bytes += msg.len() as u64;
                Ok(false)
            }
            KIND_END => {
                if seq != q.next_seq {
                    return fail(QpFailure::Count {
                        sent: seq,
                        arrived: q.next_seq,
                    });
                }
                q.ended = true;
                Ok(true)
            }
            k => fail(QpFailure::Kind(k)),
        }
    }

    fn send_verdict(h: &mut RdmaHandler, qp: QpId, q: &mut ServerQp) -> Result<(), SoakError> {
        if q.verdict_sent {
            return Ok(());
        }
        q.verdict_sent = true;
        let v = Verdict {
            messages: q.next_seq,
            bytes: q.bytes,
            failure: q.failure.as_ref().map(ToString::to_string),
        }
        .to_bytes();
        let rnic = h.rnic_mut();
        q.verdict_buf.bytes_mut(rnic)[..v.len()].copy_from_slice(&v);
        rnic.post_sq(qp, vec![SendWr::message(0, q.verdict_buf.send(0, v.len()))])
            .map_err(AppError::post("verdict"))
            .map_err(|e| SoakError::qp(q.slot, e))?;
        Ok(())
    }

    fn completion(&mut self, h: &mut RdmaHandler, wc: WorkCompletion, now: Instant) {
        let Some(q) = self.qps.get_mut(&wc.qp) else {
            return;
        };
        if wc.status != CompletionStatus::Success {
            if wc.status != CompletionStatus::Flushed || !q.ended {
                let why = SoakError::qp(q.slot, AppError::completion(&wc));
                q.failure.get_or_insert(why.clone());
                self.failure.record(why, now);
            }
            return;
        }
        if wc.opcode != WcOpcode::Receive {
            return;
        }
        let slot = wc.wr_id as usize;
        let msg_len = q.max_msg;
        let checked = {
            let rnic = h.rnic();
            let buf = &q.recv.bytes(rnic)[slot * msg_len..(slot + 1) * msg_len];
            match buf.get(..wc.byte_len as usize) {
                Some(m) => Self::check_message(q, m),
                None => Err(SoakError::qp(q.slot, QpFailure::Oversized(wc.byte_len))),
            }
        };
        let verdict_due = match checked {
            Ok(due) => {
                if !due {
                    self.tally.sends += 1;
                    self.tally.sent += u64::from(wc.byte_len);
                }
                due
            }
            Err(why) => {
                q.failure.get_or_insert(why.clone());
                self.failure.record(why, now);
                true
            }
        };
        {
            let rnic = h.rnic_mut();
            q.recv.bytes_mut(rnic)[slot * msg_len..(slot + 1) * msg_len].fill(0);
            if let Err(e) = rnic.post_rq(
                wc.qp,
                vec![q.recv.recv_wr(slot as u64, slot * msg_len, msg_len)],
            ) {
                let why = SoakError::qp(q.slot, AppError::post("receive")(e));
                self.failure.record(why, now);
                return;
            }
        }
        if verdict_due {
            if let Err(why) = Self::send_verdict(h, wc.qp, q) {
                self.failure.record(why, now);
            }
        }
    }

    fn finished(&self) -> bool {
        self.expected
            .is_some_and(|e| self.qps.len() == e && self.qps.values().all(|q| q.gone))
    }
}

impl App for SoakServer {
    type Error = SoakError;

    fn step(&mut self, h: &mut RdmaHandler, now: Instant) -> Step<SoakError> {
        if let Some(last) = &mut self.last_event {
            discount_pause(last, self.last_step, now);
        }
        self.last_step = Some(now);
        while let Some(ev) = h.poll_cm_event() {
            self.last_event = Some(now);
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
                        self.failure.record(e, now);
                    }
                }
                CmEvent::Disconnected { qp, graceful, .. } => {
                    if let Some(q) = self.qps.get_mut(&qp) {
                        q.gone = true;
                        // After its END a QP may go either way (the client aborts the
                        // others when one fails); before it, the run was cut short.
                        if !q.ended {
                            let why = SoakError::qp(
                                q.slot,
                                QpFailure::EndedEarly {
                                    graceful,
                                    messages: q.next_seq,
                                },
                            );
                            q.failure.get_or_insert(why.clone());
                            self.failure.record(why, now);
                        }
                    }
                }
                CmEvent::ConnectError { qp, reason, .. } => {
                    if let Some(q) = self.qps.get_mut(&qp) {
                        q.gone = true;
                        let why =
                            SoakError::qp(q.slot, AppError::from(ConnectFailure::Failed(reason)));
                        self.failure.record(why, now);
                    }
                }
                CmEvent::Established { .. } | CmEvent::Rejected { .. } => {}
            }
        }
        while let Some(wc) = self.res.poll_cq(h) {
            self.last_event = Some(now);
            self.completion(h, wc, now);
        }
        if self.failure.why.is_some() {
            // Tell every QP's client (it stops at the first failed verdict).
            for (&qp, q) in &mut self.qps {
                if !q.gone && !q.verdict_sent {
                    q.failure.get_or_insert(SoakError::AnotherQp);
                    let _ = Self::send_verdict(h, qp, q);
                }
            }
        }
        if self.finished() {
            let r = match &self.failure.why {
                Some(why) => Err(why.clone()),
                None => Ok(()),
            };
            return Step::Done(r);
        }
        if let (Some(why), Some(at)) = (&self.failure.why, self.failure.at) {
            // Give the verdict time to reach the client, then stop.
            if now.saturating_since(at) > Duration::from_secs(2) {
                for id in self.qps.values().filter(|q| !q.gone).filter_map(|q| q.id) {
                    let _ = h.terminate(id);
                }
                return Step::Done(Err(why.clone()));
            }
        }
        if let Some(last) = self.last_event {
            if now.saturating_since(last) > self.stall {
                let waiting = self
                    .qps
                    .values()
                    .filter(|q| !q.gone)
                    .map(|q| WaitingQp {
                        slot: q.slot,
                        messages: q.next_seq,
                    })
                    .collect();
                return Step::Done(Err(SoakError::ServerStall {
                    after: self.stall,
                    waiting,
                }));
            }
        }
        Step::Continue
    }
}

/// A gap between two steps longer than this is a pause of the whole process (a machine
/// that stopped or starved it), not a silence of the peer.
const PAUSE: Duration = Duration::from_secs(1);

/// Moves `last_event` forward by the time since `last_step` when that was a pause: the
/// stall clocks count only the time the process ran (a machine paused for longer than the
/// stall time made both sides give up at once when it resumed).
fn discount_pause(last_event: &mut Instant, last_step: Option<Instant>, now: Instant) {
    if let Some(prev) = last_step {
        let gap = now.saturating_since(prev);
        if gap > PAUSE {
            log::info!("soak: the process did not run for {gap:?}: not counted as a stall");
            *last_event = *last_event + gap;
        }
    }
}

// ------------------------------------------------------------------ client

#[derive(Debug, Clone, Copy)]
struct Round {
    n: u64,
    write_off: usize,
    write_len: usize,
    read_off: usize,
    read_len: usize,
    send_len: usize,
    left: u8,
}

/// Where one of the client's QPs is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpPhase {
    /// The connection is being set up.
    Connecting,
    /// Running rounds.
    Running,
    /// The END is sent; waiting for the verdict.
    EndSent,
    /// The server's verdict is in.
    Verdict,
    /// The connection is gone.
    Gone,
}

#[derive(Debug)]
struct ClientQp {
    id: ConnId,
    qp: QpId,
    slot: usize,
    src: Region,
    sink: Region,
    source_sink: Region,
    verdict_buf: Region,
    offer: Option<Offer>,
    phase: QpPhase,
    round: Option<Round>,
    rounds: u64,
    sent_bytes: u64,
}

/// The client: connects `qps` QPs and runs verified rounds until the budget is spent, then
/// collects the server's verdicts and disconnects.
#[derive(Debug)]
pub struct SoakClient {
    params: SoakParams,
    res: Resources,
    qps: Vec<ClientQp>,
    by_qp: HashMap<QpId, usize>,
    start: Option<Instant>,
    last_event: Instant,
    /// When [`SoakClient::step`] last ran (see [`discount_pause`]).
    last_step: Option<Instant>,
    disconnecting: bool,
    /// What the client did and verified.
    pub tally: SoakTally,
    /// When the first QP was established and when the last verdict arrived.
    pub elapsed: Duration,
}

fn lcg_pick(seed: u64, slot: usize, n: u64, what: u64, below: usize) -> usize {
    (mix64(pattern_seed(seed, slot, n, 8 + what)) % below.max(1) as u64) as usize
}

impl SoakClient {
    /// Connects every QP from `local` to the server at `remote` (of one family).
    pub fn new(
        h: &mut RdmaHandler,
        local: impl Into<IpAddr>,
        remote: impl Into<SocketAddr>,
        params: SoakParams,
    ) -> Result<SoakClient, AppError> {
        let (local, remote) = (local.into(), remote.into());
        let mut res = Resources::new(h, 8192, 16, 2, 16)?;
        let mut qps = Vec::new();
        let mut by_qp = HashMap::new();
        for slot in 0..params.qps {
            let src = res.buffer(h, params.max_io + params.max_msg, Access::LOCAL_READ)?;
            let sink = res.buffer(h, params.max_io, all_rights())?;
            let source_sink = res.buffer(h, params.max_io, all_rights())?;
            let verdict_buf = res.buffer(h, VERDICT_LEN, Access::LOCAL_WRITE)?;
            let hello = Hello {
                slot: slot as u32,
                qps: params.qps as u32,
                seed: params.seed,
                max_io: params.max_io as u32,
                max_msg: params.max_msg as u32,
            };
            let (id, qp) = h.connect(local, remote, res.init, &hello.to_bytes())?;
            h.rnic_mut()
                .post_rq(qp, vec![verdict_buf.recv_wr(0, 0, VERDICT_LEN)])
                .map_err(|e| AppError::Verbs(e.error))?;
            by_qp.insert(qp, slot);
            qps.push(ClientQp {
                id,
                qp,
                slot,
                src,
                sink,
                source_sink,
                verdict_buf,
                offer: None,
                phase: QpPhase::Connecting,
                round: None,
                rounds: 0,
                sent_bytes: 0,
            });
        }
        Ok(SoakClient {
            params,
            res,
            qps,
            by_qp,
            start: None,
            last_event: clock::now(),
            last_step: None,
            disconnecting: false,
            tally: SoakTally::default(),
            elapsed: Duration::ZERO,
        })
    }

    /// QPs established so far (and not gone).
    pub fn established(&self) -> usize {
        self.qps
            .iter()
            .filter(|q| !matches!(q.phase, QpPhase::Connecting | QpPhase::Gone))
            .count()
    }

    fn budget_left(&self, now: Instant) -> bool {
        let elapsed = self
            .start
            .map_or(Duration::ZERO, |s| now.saturating_since(s));
        self.params.bytes.is_none_or(|b| self.tally.bytes() < b)
            && self.params.duration.is_none_or(|d| elapsed < d)
    }

    fn start_round(&mut self, h: &mut RdmaHandler, i: usize) -> Result<(), SoakError> {
        let p = &self.params;
        let q = &mut self.qps[i];
        let offer = q
            .offer
            .ok_or_else(|| SoakError::qp(q.slot, QpFailure::NoOffer))?;
        let (seed, slot, n) = (p.seed, q.slot, q.rounds);
        let io = p.max_io;
        let write_len = 1 + lcg_pick(seed, slot, n, 0, io);
        let write_off = lcg_pick(seed, slot, n, 1, io - write_len + 1);
        let read_len = 1 + lcg_pick(seed, slot, n, 2, io);
        let read_off = lcg_pick(seed, slot, n, 3, io - read_len + 1);
        let send_len = HEADER_LEN + lcg_pick(seed, slot, n, 4, p.max_msg - HEADER_LEN + 1);
        {
            let rnic = h.rnic_mut();
            let src = q.src.bytes_mut(rnic);
            pattern_fill(
                pattern_seed(seed, slot, n, USE_WRITE),
                0,
                &mut src[..write_len],
            );
            // The message: header, then the pattern (its own area after the Write's).
            let msg = &mut src[io..io + send_len];
            msg[..HEADER_LEN].copy_from_slice(&header(KIND_DATA, send_len, n));
            pattern_fill(
                pattern_seed(seed, slot, n, USE_SEND),
                0,
                &mut msg[HEADER_LEN..],
            );
            q.sink.bytes_mut(rnic)[..write_len].fill(0);
            q.source_sink.bytes_mut(rnic)[..read_len].fill(0);
        }
        let target = RemoteBuf {
            stag: offer.target.stag,
            to: offer.target.to + write_off as u64,
        };
        let wr = |k: u64, op| SendWr::message((n << 3) | k, op);
        let wrs = vec![
            wr(
                0,
                SendOp::Write {
                    sgl: Sgl::one(q.src.sge(0, write_len)),
                    remote: target,
                },
            ),
            wr(
                1,
                SendOp::Read {
                    sink: q.sink.remote(0),
                    remote: target,
                    len: write_len as u32,
                },
            ),
            wr(
                2,
                SendOp::Read {
                    sink: q.source_sink.remote(0),
                    remote: RemoteBuf {
                        stag: offer.source.stag,
                        to: offer.source.to + read_off as u64,
                    },
                    len: read_len as u32,
                },
            ),
            wr(3, q.src.send(io, send_len)),
        ];
        h.rnic_mut()
            .post_sq(q.qp, wrs)
            .map_err(AppError::post("round"))
            .map_err(|e| SoakError::qp(slot, e))?;
        q.round = Some(Round {
            n,
            write_off,
            write_len,
            read_off,
            read_len,
            send_len,
            left: 4,
        });
        Ok(())
    }

    /// Verifies a finished round; every octet of both Read sinks.
    fn finish_round(&mut self, h: &mut RdmaHandler, i: usize) -> Result<(), SoakError> {
        let seed = self.params.seed;
        let q = &mut self.qps[i];
        let Some(r) = q.round.take() else {
            return Ok(());
        };
        let rnic = h.rnic();
        let back = &q.sink.bytes(rnic)[..r.write_len];
        if let Some(at) = pattern_mismatch(pattern_seed(seed, q.slot, r.n, USE_WRITE), 0, back) {
            return Err(SoakError::Round {
                slot: q.slot,
                round: r.n,
                mismatch: RoundMismatch::Write {
                    len: r.write_len,
                    offset: r.write_off,
                    at,
                },
            });
        }
        let got = &q.source_sink.bytes(rnic)[..r.read_len];
        if let Some(at) =
            pattern_mismatch(pattern_seed(seed, q.slot, 0, USE_SOURCE), r.read_off, got)
        {
            return Err(SoakError::Round {
                slot: q.slot,
                round: r.n,
                mismatch: RoundMismatch::Read {
                    len: r.read_len,
                    offset: r.read_off,
                    at,
                },
            });
        }
        q.rounds += 1;
        q.sent_bytes += r.send_len as u64;
        self.tally.rounds += 1;
        self.tally.written += r.write_len as u64;
        self.tally.read += (r.write_len + r.read_len) as u64;
        self.tally.sent += r.send_len as u64;
        Ok(())
    }

    fn send_end(&mut self, h: &mut RdmaHandler, i: usize) -> Result<(), SoakError> {
        let io = self.params.max_io;
        let q = &mut self.qps[i];
        let rnic = h.rnic_mut();
        q.src.bytes_mut(rnic)[io..io + HEADER_LEN]
            .copy_from_slice(&header(KIND_END, HEADER_LEN, q.rounds));
        rnic.post_sq(q.qp, vec![SendWr::message(7, q.src.send(io, HEADER_LEN))])
            .map_err(AppError::post("END"))
            .map_err(|e| SoakError::qp(q.slot, e))?;
        q.phase = QpPhase::EndSent;
        Ok(())
    }

    fn completion(
        &mut self,
        h: &mut RdmaHandler,
        wc: WorkCompletion,
        now: Instant,
    ) -> Result<(), SoakError> {
        let Some(&i) = self.by_qp.get(&wc.qp) else {
            return Ok(());
        };
        let q = &mut self.qps[i];
        if wc.status != CompletionStatus::Success {
            if wc.status == CompletionStatus::Flushed && q.phase == QpPhase::Gone {
                return Ok(());
            }
            return Err(SoakError::qp(q.slot, AppError::completion(&wc)));
        }
        match wc.opcode {
            WcOpcode::Receive => {
                let v = {
                    let rnic = h.rnic();
                    let b = q.verdict_buf.bytes(rnic);
                    b.get(..wc.byte_len as usize).and_then(Verdict::parse)
                };
                let v = v.ok_or_else(|| SoakError::qp(q.slot, QpFailure::NoVerdict))?;
                if let Some(why) = v.failure {
                    return Err(SoakError::Server(why));
                }
                if q.phase != QpPhase::EndSent {
                    return Err(SoakError::qp(q.slot, QpFailure::EarlyVerdict));
                }
                if v.messages != q.rounds || v.bytes != q.sent_bytes {
                    return Err(SoakError::qp(
                        q.slot,
                        QpFailure::Unverified {
                            messages: v.messages,
                            bytes: v.bytes,
                            sent: q.rounds,
                            sent_bytes: q.sent_bytes,
                        },
                    ));
                }
                q.phase = QpPhase::Verdict;
                self.tally.server_verified += v.bytes;
                if self.qps.iter().all(|q| q.phase == QpPhase::Verdict) {
                    self.elapsed = self
                        .start
                        .map_or(Duration::ZERO, |s| now.saturating_since(s));
                }
            }
            WcOpcode::RdmaWrite => self.tally.writes += 1,
            WcOpcode::RdmaRead => self.tally.reads += 1,
            WcOpcode::Send => {
                if wc.wr_id & 7 == 3 {
                    self.tally.sends += 1;
                }
            }
            other => return Err(SoakError::qp(q.slot, AppError::UnexpectedCompletion(other))),
        }
        if wc.opcode != WcOpcode::Receive && wc.wr_id & 7 != 7 {
            let q = &mut self.qps[i];
            if let Some(r) = q.round.as_mut() {
                r.left = r.left.saturating_sub(1);
                if r.left == 0 {
                    self.finish_round(h, i)?;
                }
            }
        }
        Ok(())
    }

    fn cm(&mut self, h: &mut RdmaHandler, ev: CmEvent, now: Instant) -> Result<(), SoakError> {
        match ev {
            // Only a pending listener reports these; this tool listens with a QP template.
            CmEvent::Request { .. } | CmEvent::RequestWithdrawn { .. } => {}
            CmEvent::Established { qp, negotiated, .. } => {
                let Some(&i) = self.by_qp.get(&qp) else {
                    return Ok(());
                };
                let q = &mut self.qps[i];
                q.offer = Offer::parse(&negotiated.private_data);
                let offer = q
                    .offer
                    .ok_or_else(|| SoakError::qp(q.slot, QpFailure::NoOffer))?;
                if (offer.len as usize) < self.params.max_io {
                    return Err(SoakError::qp(q.slot, QpFailure::SmallBuffers));
                }
                q.phase = QpPhase::Running;
                self.start.get_or_insert(now);
            }
            CmEvent::Rejected { private_data, .. } => {
                return Err(AppError::from(ConnectFailure::rejected(&private_data)).into())
            }
            CmEvent::ConnectError { reason, .. } => {
                return Err(AppError::from(ConnectFailure::Failed(reason)).into())
            }
            CmEvent::Disconnected { qp, graceful, .. } => {
                if let Some(&i) = self.by_qp.get(&qp) {
                    let q = &mut self.qps[i];
                    let was = q.phase;
                    q.phase = QpPhase::Gone;
                    if !self.disconnecting || !graceful {
                        return Err(SoakError::qp(
                            q.slot,
                            QpFailure::Gone {
                                graceful,
                                phase: was,
                                round: q.rounds,
                            },
                        ));
                    }
                }
            }
            CmEvent::ConnectRequest { id, .. } => {
                let _ = h.reject(id, b"soak client");
            }
        }
        Ok(())
    }

    fn run_step(&mut self, h: &mut RdmaHandler, now: Instant) -> Result<bool, SoakError> {
        while let Some(ev) = h.poll_cm_event() {
            self.last_event = now;
            self.cm(h, ev, now)?;
        }
        while let Some(wc) = self.res.poll_cq(h) {
            self.last_event = now;
            self.completion(h, wc, now)?;
        }
        let more = self.budget_left(now);
        for i in 0..self.qps.len() {
            let q = &self.qps[i];
            if q.phase != QpPhase::Running || q.round.is_some() {
                continue;
            }
            if more {
                self.start_round(h, i)?;
            } else {
                self.send_end(h, i)?;
            }
        }
        if !self.disconnecting && self.qps.iter().all(|q| q.phase == QpPhase::Verdict) {
            self.disconnecting = true;
            for q in &self.qps {
                h.disconnect(q.id)
                    .map_err(|e| SoakError::qp(q.slot, QpFailure::Disconnect(e)))?;
            }
        }
        if self.disconnecting && self.qps.iter().all(|q| q.phase == QpPhase::Gone) {
            return Ok(true);
        }
        if now.saturating_since(self.last_event) > self.params.stall {
            let open = self
                .qps
                .iter()
                .filter(|q| q.phase != QpPhase::Gone)
                .map(|q| OpenQp {
                    slot: q.slot,
                    phase: q.phase,
                    rounds: q.rounds,
                    ops_open: q.round.map(|r| r.left),
                })
                .collect();
            return Err(SoakError::Stall {
                after: self.params.stall,
                open,
            });
        }
        Ok(false)
    }

    /// Seconds since the first QP was established.
    pub fn running_for(&self, now: Instant) -> Duration {
        self.start
            .map_or(Duration::ZERO, |s| now.saturating_since(s))
    }
}

impl App for SoakClient {
    type Error = SoakError;

    fn step(&mut self, h: &mut RdmaHandler, now: Instant) -> Step<SoakError> {
        discount_pause(&mut self.last_event, self.last_step, now);
        self.last_step = Some(now);
        match self.run_step(h, now) {
            Ok(false) => Step::Continue,
            Ok(true) => Step::Done(Ok(())),
            Err(e) => {
                for q in &self.qps {
                    if q.phase != QpPhase::Gone {
                        let _ = h.terminate(q.id);
                    }
                }
                Step::Done(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_of_the_process_is_not_counted_as_silence() {
        let t0 = clock::now();
        let mut last = t0;
        // Steps a millisecond apart: the silence counts.
        discount_pause(&mut last, Some(t0), t0 + Duration::from_millis(1));
        assert_eq!(last, t0);
        // A step 40 s after the one before: the process did not run, the clock moves on.
        let later = t0 + Duration::from_secs(41);
        discount_pause(&mut last, Some(t0 + Duration::from_secs(1)), later);
        assert_eq!(later.saturating_since(last), Duration::from_secs(1));
        // The first step has nothing to compare with.
        discount_pause(&mut last, None, later + Duration::from_secs(60));
        assert_eq!(later.saturating_since(last), Duration::from_secs(1));
    }

    #[test]
    fn pattern_is_positional() {
        let whole = pattern(42, 0, 1000);
        assert!(whole.iter().all(|&b| b != 0));
        assert_eq!(pattern(42, 13, 100), whole[13..113]);
        assert_eq!(pattern_mismatch(42, 13, &whole[13..513]), None);
        let mut bad = whole[5..900].to_vec();
        bad[777] ^= 0x40;
        assert_eq!(pattern_mismatch(42, 5, &bad), Some(777));
        assert_ne!(pattern(43, 0, 64), whole[..64]);
    }

    fn server_qp() -> ServerQp {
        let r = Region {
            offset: 0,
            len: 4096,
            stag: STag(1),
        };
        ServerQp {
            id: None,
            slot: 2,
            seed: 99,
            max_msg: 4096,
            recv: r,
            verdict_buf: r,
            next_seq: 0,
            bytes: 0,
            failure: None,
            verdict_sent: false,
            ended: false,
            gone: false,
        }
    }

    fn message(seq: u64, len: usize) -> Vec<u8> {
        let mut m = header(KIND_DATA, len, seq).to_vec();
        m.resize(len, 0);
        pattern_fill(pattern_seed(99, 2, seq, USE_SEND), 0, &mut m[HEADER_LEN..]);
        m
    }

    // RFC 5040 §5.3: Sends arrive in order, each exactly once; the server checks sequence,
    // length and every payload octet, and counts what the client announces in its END.
    #[test]
    fn server_checks_every_message() {
        let mut q = server_qp();
        assert_eq!(
            SoakServer::check_message(&mut q, &message(0, 100)),
            Ok(false)
        );
        assert_eq!(
            SoakServer::check_message(&mut q, &message(1, HEADER_LEN)),
            Ok(false)
        );
        assert_eq!((q.next_seq, q.bytes), (2, 100 + HEADER_LEN as u64));
        // A repeated or skipped message.
        let e = SoakServer::check_message(&mut q, &message(1, 50)).unwrap_err();
        assert!(
            e.to_string().contains("message 1 arrived, expected 2"),
            "{e}"
        );
        // One flipped bit in the payload.
        let mut m = message(2, 300);
        m[HEADER_LEN + 123] ^= 0x10;
        let e = SoakServer::check_message(&mut q, &m).unwrap_err();
        assert!(e.to_string().contains("differs at octet 143"), "{e}");
        // Truncated: the header's length disagrees.
        let m = message(2, 300);
        assert!(SoakServer::check_message(&mut q, &m[..299]).is_err());
        assert!(SoakServer::check_message(&mut q, &m[..10]).is_err());
        assert_eq!(q.next_seq, 2);
        // END with the wrong count, then the right one.
        let e = SoakServer::check_message(&mut q, &header(KIND_END, HEADER_LEN, 3)).unwrap_err();
        assert!(e.to_string().contains("sent 3 messages, 2 arrived"), "{e}");
        assert_eq!(
            SoakServer::check_message(&mut q, &header(KIND_END, HEADER_LEN, 2)),
            Ok(true)
        );
        assert!(q.ended);
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_bytes("64M"), Ok(64 << 20));
        assert_eq!(parse_bytes("512k"), Ok(512 << 10));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert_eq!(parse_bytes("1.5KiB"), Ok(1536));
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("MiB").is_err());
    }

    #[test]
    fn wire_forms() {
        let h = Hello {
            slot: 3,
            qps: 8,
            seed: 0x1122_3344_5566_7788,
            max_io: 65536,
            max_msg: 4096,
        };
        assert_eq!(Hello::parse(&h.to_bytes()), Some(h));
        assert_eq!(Hello::parse(&h.to_bytes()[1..]), None);
        let o = Offer {
            target: RemoteBuf {
                stag: STag(0x100),
                to: 0x7f00_0000_1000,
            },
            source: RemoteBuf {
                stag: STag(0x200),
                to: 0x7f00_0000_9000,
            },
            len: 65536,
        };
        assert_eq!(Offer::parse(&o.to_bytes()), Some(o));
        let v = Verdict {
            messages: 10,
            bytes: 12345,
            failure: Some("QP 1: message 3: payload differs".into()),
        };
        assert_eq!(Verdict::parse(&v.to_bytes()), Some(v));
        let ok = Verdict {
            messages: 1,
            bytes: 20,
            failure: None,
        };
        assert_eq!(Verdict::parse(&ok.to_bytes()), Some(ok));
    }
}
