//! `dataplane inspect FILE`: decodes the iWARP traffic of a capture (pcap or pcapng).
//!
//! Every TCP connection is reassembled per direction; the MPA Request/Reply is decoded
//! (RFC 5044 §7.1, RFC 6581), then each direction's FPDUs are parsed by the same MPA receiver
//! the data plane uses (markers stripped, CRC checked when negotiated) and their DDP/RDMAP
//! headers decoded (RFC 5041 §4, RFC 5040 §4). One line per FPDU, then a summary; `--json`
//! prints one JSON object instead. Malformed iWARP data ends with a non-zero exit.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

use serde::Serialize;

use dataplane::pcap::{self, TcpConnection, TcpStream};
use iwarp::mpa::crc::crc32c;
use iwarp::mpa::{CrcCheck, CrcErrorPolicy, Receiver, ReceiverConfig};
use iwarp::wire::ddp::{ParseError, Segment, DDP_VERSION, TAGGED_HEADER_LEN};
use iwarp::wire::mpa::{
    fpdu_len, Frame, FrameKind, FrameRepr, ReservedBits, FRAME_HEADER_LEN, REPLY_KEY, REQUEST_KEY,
};
use iwarp::wire::rdmap::{Opcode, RDMAP_VERSION};
use iwarp::wire::terminate::{ControlOrder, Terminate};

use super::common::CmdError;

/// Arguments of `dataplane inspect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Capture file (pcap or pcapng).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Print one JSON object (with an `fpdus` array) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One decoded FPDU.
#[derive(Debug, Clone, Serialize)]
pub struct FpduRecord {
    /// Frame that completed the FPDU.
    pub frame: u64,
    /// Sender.
    pub src: String,
    /// Receiver.
    pub dst: String,
    /// Sequence number of the ULPDU_Length field.
    pub seq: u32,
    /// RDMAP opcode.
    pub opcode: u8,
    /// Opcode name.
    pub name: &'static str,
    /// ULPDU_Length: DDP header + payload.
    pub len: usize,
    /// Octets after the DDP header.
    pub payload_len: usize,
    /// "good", "bad" or "off".
    pub crc: &'static str,
    /// DDP tagged buffer model.
    pub tagged: bool,
    /// DDP last flag.
    pub last: bool,
    /// STag (tagged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stag: Option<u32>,
    /// Tagged offset (tagged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<u64>,
    /// Queue number (untagged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qn: Option<u32>,
    /// Message sequence number (untagged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub msn: Option<u32>,
    /// Message offset (untagged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mo: Option<u32>,
    /// Terminate cause `layer/etype/code` (RFC 5040 §4.8), as the sender meant it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminate: Option<String>,
    /// The Terminate Control came with its Layer and EType nibbles swapped (Linux siw).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub terminate_swapped: bool,
}

/// One decoded MPA Request or Reply.
#[derive(Debug, Clone, Serialize)]
pub struct MpaRecord {
    /// Frame that completed the frame.
    pub frame: u64,
    /// Sender.
    pub src: String,
    /// Receiver.
    pub dst: String,
    /// "request" or "reply".
    pub kind: &'static str,
    /// Revision.
    pub revision: u8,
    /// M bit.
    pub markers: bool,
    /// C bit.
    pub crc: bool,
    /// R bit.
    pub reject: bool,
    /// RFC 6581 IRD (with H set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ird: Option<u16>,
    /// RFC 6581 ORD (with H set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ord: Option<u16>,
    /// Peer-to-peer bit.
    pub p2p: bool,
    /// RTR types offered or chosen ("send", "write", "read").
    pub rtr: Vec<&'static str>,
    /// ULP private data length (after IRD/ORD).
    pub private_data_len: usize,
}

/// Totals.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// TCP connections in the capture.
    pub connections: usize,
    /// Connections with iWARP traffic.
    pub iwarp_connections: usize,
    /// FPDUs decoded.
    pub fpdus: usize,
    /// FPDUs per opcode name.
    pub by_opcode: BTreeMap<&'static str, usize>,
    /// FPDUs with a good CRC.
    pub crc_good: usize,
    /// FPDUs with a bad CRC.
    pub crc_bad: usize,
    /// FPDUs without CRC.
    pub crc_off: usize,
    /// Errors found.
    pub errors: usize,
    /// Warnings.
    pub warnings: usize,
}

/// Everything `inspect` found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// MPA Requests and Replies.
    pub mpa: Vec<MpaRecord>,
    /// FPDUs, by frame.
    pub fpdus: Vec<FpduRecord>,
    /// Totals.
    pub summary: Summary,
    /// Malformed iWARP data.
    pub errors: Vec<String>,
    /// Incomplete captures and guesses.
    pub warnings: Vec<String>,
}

/// Runs `dataplane inspect`.
pub fn run(args: Args) -> Result<(), CmdError> {
    let packets = pcap::read_file(&args.file).map_err(|e| CmdError::Runtime(e.to_string()))?;
    let report = analyze(&packets);
    for w in &report.warnings {
        eprintln!("dataplane: warning: {w}");
    }
    let text = if args.json {
        let mut t = serde_json::to_string_pretty(&report)
            .map_err(|e| CmdError::Runtime(format!("cannot encode JSON: {e}")))?;
        t.push('\n');
        t
    } else {
        render_text(&report)
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => {}
        // A closed pipe (`| head`) is not an error of ours.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => return Err(CmdError::Runtime(format!("cannot write the report: {e}"))),
    }
    match report.errors.len() {
        0 => Ok(()),
        n => {
            for e in &report.errors[..n - 1] {
                eprintln!("dataplane: error: {e}");
            }
            Err(CmdError::Runtime(report.errors[n - 1].clone()))
        }
    }
}

fn render_text(report: &Report) -> String {
    let mut out = String::new();
    for m in &report.mpa {
        let mut extra = String::new();
        if let (Some(ird), Some(ord)) = (m.ird, m.ord) {
            extra.push_str(&format!(" IRD {ird} ORD {ord}"));
        }
        if m.p2p {
            extra.push_str(&format!(" P2P RTR {}", m.rtr.join(",")));
        }
        let _ = writeln!(
            out,
            "{:>6}  {} -> {}  MPA {} rev {} M{} C{} R{}{} pd {}",
            m.frame,
            m.src,
            m.dst,
            if m.kind == "request" {
                "Request"
            } else {
                "Reply"
            },
            m.revision,
            m.markers as u8,
            m.crc as u8,
            m.reject as u8,
            extra,
            m.private_data_len
        );
    }
    for f in &report.fpdus {
        let where_ = match (f.stag, f.to, f.qn, f.msn, f.mo) {
            (Some(stag), Some(to), ..) => format!("stag {stag:#010x} to {to:#x}"),
            (_, _, Some(qn), Some(msn), Some(mo)) => format!("qn {qn} msn {msn} mo {mo}"),
            _ => String::new(),
        };
        let cause = f
            .terminate
            .as_ref()
            .map(|c| {
                let order = if f.terminate_swapped {
                    " (Layer/EType nibbles swapped, as siw sends them)"
                } else {
                    ""
                };
                format!("  cause {c}{order}")
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{:>6}  {} -> {}  {:<27} {}{}  len {}  crc {}{}",
            f.frame,
            f.src,
            f.dst,
            f.name,
            where_,
            if f.last { " L" } else { "" },
            f.len,
            f.crc,
            cause
        );
    }
    let s = &report.summary;
    let _ = writeln!(
        out,
        "summary: {} TCP connection(s), {} with iWARP; {} FPDU(s); CRC good {} bad {} off {}; {} error(s), {} warning(s)",
        s.connections, s.iwarp_connections, s.fpdus, s.crc_good, s.crc_bad, s.crc_off, s.errors, s.warnings
    );
    for (name, n) in &s.by_opcode {
        let _ = writeln!(out, "  {name:<27} {n}");
    }
    out
}

/// Decodes every connection of a capture.
pub fn analyze(packets: &[pcap::Packet]) -> Report {
    let mut report = Report::default();
    let conns = pcap::reassemble(packets);
    report.summary.connections = conns.len();
    for conn in &conns {
        if analyze_connection(conn, &mut report) {
            report.summary.iwarp_connections += 1;
        }
    }
    report.fpdus.sort_by_key(|f| f.frame);
    let s = &mut report.summary;
    s.fpdus = report.fpdus.len();
    for f in &report.fpdus {
        *s.by_opcode.entry(f.name).or_default() += 1;
        match f.crc {
            "good" => s.crc_good += 1,
            "bad" => s.crc_bad += 1,
            _ => s.crc_off += 1,
        }
    }
    s.errors = report.errors.len();
    s.warnings = report.warnings.len();
    report
}

/// A direction's in-order octets with the frame of every octet.
struct DirBytes<'a> {
    stream: &'a TcpStream,
    data: Vec<u8>,
    starts: Vec<(usize, u64)>,
}

impl<'a> DirBytes<'a> {
    fn new(stream: &'a TcpStream) -> Self {
        let mut data = Vec::new();
        let mut starts = Vec::new();
        for c in &stream.chunks {
            starts.push((data.len(), c.frame));
            data.extend_from_slice(&c.data);
        }
        DirBytes {
            stream,
            data,
            starts,
        }
    }

    /// Frame that carried the octet at `offset`.
    fn frame_at(&self, offset: usize) -> u64 {
        let i = self.starts.partition_point(|&(o, _)| o <= offset);
        self.starts[i.saturating_sub(1)].1
    }

    fn src(&self) -> String {
        self.stream.src.to_string()
    }

    fn dst(&self) -> String {
        self.stream.dst.to_string()
    }
}

fn label(s: &TcpStream) -> String {
    format!("{} -> {}", s.src, s.dst)
}

/// The MPA frame at the start of a direction, when complete.
fn mpa_frame<'d>(d: &'d DirBytes<'_>) -> Option<(Frame<&'d [u8]>, usize)> {
    if d.data.len() < FRAME_HEADER_LEN {
        return None;
    }
    let f = Frame::new_unchecked(&d.data[..]);
    let total = f.total_len();
    (d.data.len() >= total).then(|| (Frame::new_unchecked(&d.data[..total]), total))
}

fn mpa_record(d: &DirBytes<'_>, repr: &FrameRepr<'_>, end: usize) -> MpaRecord {
    let io = repr.ird_ord;
    let mut rtr = Vec::new();
    if let Some(io) = io {
        if io.rtr.send {
            rtr.push("send");
        }
        if io.rtr.write {
            rtr.push("write");
        }
        if io.rtr.read {
            rtr.push("read");
        }
    }
    MpaRecord {
        frame: d.frame_at(end.saturating_sub(1)),
        src: d.src(),
        dst: d.dst(),
        kind: match repr.kind {
            FrameKind::Request => "request",
            FrameKind::Reply => "reply",
        },
        revision: repr.revision,
        markers: repr.markers,
        crc: repr.crc,
        reject: repr.reject,
        ird: io.map(|i| i.ird),
        ord: io.map(|i| i.ord),
        p2p: io.is_some_and(|i| i.p2p),
        rtr,
        private_data_len: repr.private_data.len(),
    }
}

/// Decodes one connection; returns whether it carried iWARP.
fn analyze_connection(conn: &TcpConnection, report: &mut Report) -> bool {
    let dirs = [DirBytes::new(&conn.dirs[0]), DirBytes::new(&conn.dirs[1])];
    for d in &dirs {
        if let Some((seq, missing)) = d.stream.hole {
            report.warnings.push(format!(
                "{}: {missing} octet(s) missing at seq {seq} (not captured); decoding of this direction stops there",
                label(d.stream)
            ));
        }
    }
    let starts_with = |d: &DirBytes<'_>, key: &[u8; 16]| d.data.starts_with(key);
    let ini = match (
        starts_with(&dirs[0], REQUEST_KEY),
        starts_with(&dirs[1], REQUEST_KEY),
    ) {
        (true, _) => 0,
        (false, true) => 1,
        (false, false) => return analyze_mid_stream(&dirs, report),
    };
    let (di, dr) = (&dirs[ini], &dirs[1 - ini]);
    let Some(req) = read_mpa(di, "Request", report) else {
        return true;
    };
    if !starts_with(dr, REPLY_KEY) {
        if dr.data.len() < REPLY_KEY.len() && REPLY_KEY.starts_with(&dr.data) {
            report.warnings.push(format!(
                "{}: no MPA Reply captured; FPDUs of this connection not decoded",
                label(dr.stream)
            ));
        } else {
            report.errors.push(format!(
                "frame {} ({}): invalid MPA Reply: bad key (Terminate 2/0/04)",
                dr.frame_at(0),
                label(dr.stream)
            ));
        }
        return true;
    }
    let Some(rep) = read_mpa(dr, "Reply", report) else {
        return true;
    };
    if rep.reject {
        return true;
    }
    // RFC 5044 §7.1: CRC if either side asks; M asks the peer to send markers.
    let crc = req.crc || rep.crc;
    decode_fpdus(di, req.len, crc, rep.markers, report, false);
    decode_fpdus(dr, rep.len, crc, req.markers, report, false);
    true
}

/// What decoding a connection's FPDUs needs of its MPA Request or Reply.
struct MpaHeader {
    /// Octets of the MPA frame (where the FPDUs start).
    len: usize,
    crc: bool,
    markers: bool,
    reject: bool,
}

/// Reads and records the MPA `what` (Request or Reply) at the start of `d`; `None`,
/// reported, when the capture ends inside it or it is invalid.
fn read_mpa(d: &DirBytes<'_>, what: &str, report: &mut Report) -> Option<MpaHeader> {
    let Some((frame, len)) = mpa_frame(d) else {
        report.warnings.push(format!(
            "{}: capture ends inside the MPA {what}",
            label(d.stream)
        ));
        return None;
    };
    let repr = match FrameRepr::parse(&frame, ReservedBits::Reject) {
        Ok(r) => r,
        Err(e) => {
            report.errors.push(format!(
                "frame {} ({}): invalid MPA {what}: {e} (Terminate 2/0/04)",
                d.frame_at(0),
                label(d.stream)
            ));
            return None;
        }
    };
    report.mpa.push(mpa_record(d, &repr, len));
    Some(MpaHeader {
        len,
        crc: repr.crc,
        markers: repr.markers,
        reject: repr.reject,
    })
}

/// A connection without a captured MPA Request: assume every direction starts with an FPDU
/// (as MPA-aware senders align segments), no markers, CRC if the first FPDU's CRC matches.
fn analyze_mid_stream(dirs: &[DirBytes<'_>; 2], report: &mut Report) -> bool {
    let looks_like_fpdus = dirs.iter().any(|d| first_fpdu_plausible(&d.data));
    if !looks_like_fpdus || dirs.iter().all(|d| d.stream.syn_seen) {
        return false;
    }
    for d in dirs.iter().filter(|d| !d.data.is_empty()) {
        let crc = first_fpdu_crc_ok(&d.data);
        report.warnings.push(format!(
            "{}: capture starts mid-stream (no MPA Request/Reply); assuming FPDUs from seq {}, no markers, CRC {}",
            label(d.stream),
            d.stream.start_seq,
            if crc { "on (first CRC matches)" } else { "off" }
        ));
        decode_fpdus(d, 0, crc, false, report, true);
    }
    true
}

fn first_fpdu_plausible(data: &[u8]) -> bool {
    if data.len() < 2 + TAGGED_HEADER_LEN {
        return false;
    }
    let len = u16::from_be_bytes([data[0], data[1]]) as usize;
    len >= TAGGED_HEADER_LEN && data[2] & 0x03 == DDP_VERSION && data[3] >> 6 == RDMAP_VERSION
}

fn first_fpdu_crc_ok(data: &[u8]) -> bool {
    let len = u16::from_be_bytes([data[0], data[1]]) as usize;
    let total = fpdu_len(len);
    if data.len() < total {
        return false;
    }
    let wire = u32::from_le_bytes([
        data[total - 4],
        data[total - 3],
        data[total - 2],
        data[total - 1],
    ]);
    wire != 0 && wire == crc32c(&data[..total - 4])
}

fn opcode_name(op: u8) -> &'static str {
    match Opcode::from_u4(op) {
        Some(Opcode::Write) => "RDMA Write",
        Some(Opcode::ReadRequest) => "RDMA Read Request",
        Some(Opcode::ReadResponse) => "RDMA Read Response",
        Some(Opcode::Send) => "Send",
        Some(Opcode::SendInvalidate) => "Send with Invalidate",
        Some(Opcode::SendSe) => "Send with SE",
        Some(Opcode::SendSeInvalidate) => "Send with SE and Invalidate",
        Some(Opcode::Terminate) => "Terminate",
        Some(Opcode::ImmediateData) => "Immediate Data",
        Some(Opcode::ImmediateDataSe) => "Immediate Data with SE",
        Some(Opcode::AtomicRequest) => "Atomic Request",
        Some(Opcode::AtomicResponse) => "Atomic Response",
        None => "reserved",
    }
}

/// Runs the MPA receiver over one direction, from stream offset `from`.
fn decode_fpdus(
    d: &DirBytes<'_>,
    from: usize,
    crc: bool,
    markers: bool,
    report: &mut Report,
    guessed: bool,
) {
    let start_seq = d.stream.start_seq.wrapping_add(from as u32);
    let mut rx = Receiver::new(ReceiverConfig {
        crc,
        markers,
        start_seq,
        min_ulpdu_len: TAGGED_HEADER_LEN as u16,
        max_ulpdu_len: u16::MAX,
        crc_errors: CrcErrorPolicy::Deliver,
    });
    let mut problems = Vec::new();
    let mut offset = 0usize;
    for chunk in &d.stream.chunks {
        let end = offset + chunk.data.len();
        if end <= from {
            offset = end;
            continue;
        }
        let skip = from.saturating_sub(offset);
        let seq = chunk.seq.wrapping_add(skip as u32);
        let mut records = Vec::new();
        let r = rx.handle_in_order(seq, &chunk.data[skip..], |dl| {
            if let CrcCheck::Bad { computed, received } = dl.crc {
                problems.push(format!(
                    "frame {} ({}): MPA CRC error at seq {}: received {received:#010x}, computed {computed:#010x} (Terminate 2/0/02)",
                    chunk.frame,
                    label(d.stream),
                    dl.seq
                ));
            }
            records.push(decode_ulpdu(d, chunk.frame, dl.seq, dl.ulpdu, dl.crc))
        });
        for rec in records {
            match rec {
                Ok(f) => report.fpdus.push(f),
                Err(e) => problems.push(e.to_string()),
            }
        }
        if let Err(e) = r {
            let c = e.terminate_cause();
            problems.push(format!(
                "frame {} ({}): {e} (Terminate {}/{}/{:02x}); rest of this direction not decoded",
                chunk.frame,
                label(d.stream),
                c.layer,
                c.etype,
                c.code
            ));
            break;
        }
        offset = end;
    }
    if problems.is_empty() && !rx.is_at_boundary() {
        report.warnings.push(format!(
            "{}: capture ends inside an FPDU (at seq {})",
            label(d.stream),
            rx.next_seq()
        ));
    }
    if guessed {
        report.warnings.extend(problems);
    } else {
        report.errors.extend(problems);
    }
}

/// Why a ULPDU's DDP/RDMAP headers do not decode.
#[derive(Debug, thiserror::Error)]
enum UlpduProblem {
    /// Shorter than the DDP header.
    #[error("DDP segment of {0} octets is shorter than its header (RFC 5041 §4)")]
    Short(usize),
    /// DV is not 01b.
    #[error("DDP version {0} (expected {want}, RFC 5041 §4.1)", want = DDP_VERSION)]
    DdpVersion(u8),
    /// RV is not the RDMAP version.
    #[error("RDMAP version {0} (expected {want}, RFC 5040 §4.1)", want = RDMAP_VERSION)]
    RdmapVersion(u8),
    /// A reserved opcode.
    #[error("reserved RDMAP opcode {0:#x} (RFC 5040 Fig. 4)")]
    ReservedOpcode(u8),
    /// The T bit disagrees with the opcode.
    #[error(
        "{} with the DDP T bit {} (RFC 5040 Fig. 4)",
        opcode_name(*.opcode),
        if *.tagged { "set" } else { "clear" }
    )]
    TaggedBit {
        /// The RDMAP opcode.
        opcode: u8,
        /// The T bit.
        tagged: bool,
    },
    /// The Terminate header does not parse.
    #[error("Terminate header of {len} octets: {err} (RFC 5040 §4.8)")]
    Terminate {
        /// Octets after the DDP header.
        len: usize,
        /// Why.
        err: ParseError,
    },
}

/// A ULPDU that does not decode, with where it is.
#[derive(Debug, thiserror::Error)]
#[error("frame {frame} ({stream}): {problem}")]
struct UlpduError {
    frame: u64,
    stream: String,
    problem: UlpduProblem,
}

fn decode_ulpdu(
    d: &DirBytes<'_>,
    frame: u64,
    seq: u32,
    ulpdu: &[u8],
    crc: CrcCheck,
) -> Result<FpduRecord, UlpduError> {
    let at = |problem| UlpduError {
        frame,
        stream: label(d.stream),
        problem,
    };
    let seg = Segment::new_checked(ulpdu).map_err(|_| at(UlpduProblem::Short(ulpdu.len())))?;
    if seg.version() != DDP_VERSION {
        return Err(at(UlpduProblem::DdpVersion(seg.version())));
    }
    let ctrl = seg.rsvd_ulp();
    if ctrl >> 6 != RDMAP_VERSION {
        return Err(at(UlpduProblem::RdmapVersion(ctrl >> 6)));
    }
    let opcode = ctrl & 0x0f;
    let op = Opcode::from_u4(opcode).ok_or_else(|| at(UlpduProblem::ReservedOpcode(opcode)))?;
    if op.is_tagged() != seg.tagged() {
        return Err(at(UlpduProblem::TaggedBit {
            opcode,
            tagged: seg.tagged(),
        }));
    }
    let tagged = seg.tagged();
    let terminate = if op == Opcode::Terminate {
        let t = Terminate::new_checked(seg.payload()).map_err(|err| {
            at(UlpduProblem::Terminate {
                len: seg.payload().len(),
                err,
            })
        })?;
        Some(t.decoded_cause())
    } else {
        None
    };
    let terminate_swapped = matches!(terminate, Some((_, ControlOrder::NibbleSwapped)));
    let terminate = terminate.map(|(c, _)| format!("{}/{}/{:02x}", c.layer, c.etype, c.code));
    Ok(FpduRecord {
        frame,
        src: d.src(),
        dst: d.dst(),
        seq,
        opcode,
        name: opcode_name(opcode),
        len: ulpdu.len(),
        payload_len: seg.payload().len(),
        crc: match crc {
            CrcCheck::Off => "off",
            CrcCheck::Good => "good",
            CrcCheck::Bad { .. } => "bad",
        },
        tagged,
        last: seg.last(),
        stag: tagged.then(|| seg.stag()),
        to: tagged.then(|| seg.to()),
        qn: (!tagged).then(|| seg.qn()),
        msn: (!tagged).then(|| seg.msn()),
        mo: (!tagged).then(|| seg.mo()),
        terminate,
        terminate_swapped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rping capture whose first client Send (frame 8, 16 octets on QN 0) is rewritten
    /// into a Terminate (QN 2) carrying `control` and zero flags, as siw would send it.
    fn with_terminate(control: [u8; 2]) -> Report {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/captures");
        let dir = if dir.is_dir() {
            dir
        } else {
            PathBuf::from("/work/shared/captures")
        };
        let mut packets = pcap::read_file(&dir.join("siw-rping-mpa2.pcap")).expect("capture");
        let p = &mut packets[7];
        let seg = pcap::tcp_segment(p).expect("tcp");
        let off = p.data.len() - seg.payload.len();
        let f = &mut p.data[off..];
        // ULPDU_Length, DDP control, RDMAP control (opcode 3 → 7), rsvd, QN, MSN, MO.
        assert_eq!(f[3] & 0x0f, 0x3, "frame 8 is a Send");
        f[3] = (f[3] & 0xf0) | 0x7;
        f[8..12].copy_from_slice(&2u32.to_be_bytes());
        f[12..16].copy_from_slice(&1u32.to_be_bytes());
        f[20..24].copy_from_slice(&[control[0], control[1], 0, 0]);
        analyze(&packets)
    }

    // RFC 5040 §4.8 puts the Layer in the high nibble; siw sends "LLP, MPA, no matching
    // RTR" (2/0/07, RFC 6581 §9) as 0x02 0x07 (siwlab README).
    #[test]
    fn siw_nibble_swapped_terminate_is_decoded() {
        let r = with_terminate([0x02, 0x07]);
        let t: Vec<_> = r.fpdus.iter().filter(|f| f.terminate.is_some()).collect();
        assert_eq!(t.len(), 1, "{:?}", r.errors);
        assert_eq!(t[0].terminate.as_deref(), Some("2/0/07"));
        assert!(t[0].terminate_swapped);
        assert!(render_text(&r).contains("cause 2/0/07 (Layer/EType nibbles swapped"));
        // The same cause in RFC order is decoded as sent.
        let r = with_terminate([0x20, 0x07]);
        let t: Vec<_> = r.fpdus.iter().filter(|f| f.terminate.is_some()).collect();
        assert_eq!(t[0].terminate.as_deref(), Some("2/0/07"));
        assert!(!t[0].terminate_swapped);
    }
}
