//! Builds the seed corpora (`seeds/<target>/`) from the real Linux siw captures:
//! `cargo run --example make_seeds -- <captures dir> <seeds dir>` (testbed/fuzz --seeds).
//!
//! MPA Request/Reply frames, FPDU streams cut as captured, DDP segments and TCP payloads
//! are written in each target's input format (see `iwarp_fuzz::format`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use dataplane::pcap;
use iwarp::mpa::{CrcErrorPolicy, Receiver, ReceiverConfig};
use iwarp::wire::mpa::{Frame, FrameRepr, ReservedBits};
use iwarp_fuzz::format::{engine, receiver, tcp};
use iwarp_fuzz::Output;

struct Seeds {
    dir: PathBuf,
    written: BTreeSet<(String, Vec<u8>)>,
}

impl Seeds {
    fn put(&mut self, target: &str, name: &str, bytes: &[u8]) {
        if !self.written.insert((target.to_string(), bytes.to_vec())) {
            return;
        }
        let d = self.dir.join(target);
        std::fs::create_dir_all(&d).expect("seed dir");
        std::fs::write(d.join(name), bytes).expect("write seed");
    }
}

/// One direction of an iWARP connection: the MPA frame and the FPDU stream after it.
struct Direction {
    name: String,
    frame: Vec<u8>,
    crc: bool,
    start_seq: u32,
    chunks: Vec<(u32, Vec<u8>)>,
    ulpdus: Vec<Vec<u8>>,
    fpdu_stream: Vec<u8>,
}

fn directions(path: &Path) -> Vec<Direction> {
    let packets = pcap::read_file(path).expect("capture");
    let stem = path.file_stem().unwrap().to_string_lossy().to_string();
    let mut out = Vec::new();
    for (ci, conn) in pcap::reassemble(&packets).iter().enumerate() {
        for (di, d) in conn.dirs.iter().enumerate() {
            let stream: Vec<u8> = d.chunks.iter().flat_map(|c| c.data.clone()).collect();
            let Ok(f) = Frame::new_checked(&stream[..]) else {
                continue;
            };
            let Ok(repr) = FrameRepr::parse(&f, ReservedBits::Ignore) else {
                continue;
            };
            let flen = f.total_len();
            let start_seq = d.start_seq.wrapping_add(flen as u32);
            let mut chunks = Vec::new();
            let mut pos = 0usize;
            for c in &d.chunks {
                let end = pos + c.data.len();
                if end > flen {
                    let skip = flen.saturating_sub(pos);
                    chunks.push((c.seq.wrapping_add(skip as u32), c.data[skip..].to_vec()));
                }
                pos = end;
            }
            let fpdu_stream = stream[flen..].to_vec();
            // The CRC setting is the one under which the stream parses.
            let mut best: (bool, Vec<Vec<u8>>) = (false, Vec::new());
            for crc in [true, false] {
                let mut rx = Receiver::new(ReceiverConfig {
                    crc,
                    markers: false,
                    start_seq,
                    min_ulpdu_len: 14,
                    max_ulpdu_len: u16::MAX,
                    crc_errors: CrcErrorPolicy::Fail,
                });
                let mut got = Vec::new();
                let _ = rx.handle_in_order(start_seq, &fpdu_stream, |d| got.push(d.ulpdu.to_vec()));
                if got.len() > best.1.len() {
                    best = (crc, got);
                }
            }
            out.push(Direction {
                name: format!("{stem}-c{ci}-d{di}-{:?}", repr.kind).to_lowercase(),
                frame: stream[..flen].to_vec(),
                crc: best.0,
                start_seq,
                chunks,
                ulpdus: best.1,
                fpdu_stream,
            });
        }
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let captures = PathBuf::from(
        args.get(1)
            .map(String::as_str)
            .unwrap_or("../../shared/captures"),
    );
    let mut seeds = Seeds {
        dir: PathBuf::from(args.get(2).map(String::as_str).unwrap_or("seeds")),
        written: BTreeSet::new(),
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&captures)
        .expect("captures dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    files.sort();
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let bytes = std::fs::read(path).expect("capture");
        seeds.put("pcap", &name, &bytes);
        for d in directions(path) {
            // mpa_frame: the frame alone, cut into pieces, and followed by the first FPDUs;
            // as responder and initiator input with default and peer-to-peer policies.
            for (cfg, ird, cuts) in [(0x00u8, 0x09u8, &[][..]), (0x12, 0x4f, &[5u8, 7, 11][..])] {
                let mut o = Output::new();
                o.u8(cfg)
                    .u8(ird)
                    .u8(cuts.len() as u8)
                    .bytes(cuts)
                    .bytes(&d.frame);
                seeds.put("mpa_frame", &format!("{}-{cfg:02x}", d.name), &o.buf);
                let tail = &d.fpdu_stream[..d.fpdu_stream.len().min(64)];
                o.bytes(tail);
                seeds.put("mpa_frame", &format!("{}-{cfg:02x}-fpdus", d.name), &o.buf);
            }
            if d.ulpdus.is_empty() {
                continue;
            }
            // mpa_receiver (raw): the segments as captured, in order and reversed.
            for reversed in [false, true] {
                let mut o = Output::new();
                o.u8(u8::from(d.crc)).u32(d.start_seq).u8(14).u16(0);
                let mut chunks: Vec<&(u32, Vec<u8>)> = d.chunks.iter().take(24).collect();
                if reversed {
                    chunks.reverse();
                }
                for (seq, data) in chunks {
                    let kind = if reversed {
                        receiver::SEGMENT_AHEAD
                    } else {
                        receiver::SEGMENT_IN_ORDER
                    };
                    o.u8(kind)
                        .u32(seq.wrapping_sub(d.start_seq))
                        .chunk(&data[..data.len().min(4096)]);
                }
                let suffix = if reversed { "-reversed" } else { "" };
                seeds.put("mpa_receiver", &format!("{}{suffix}", d.name), &o.buf);
            }
            // ddp_rdmap_headers: each distinct DDP segment header (+ up to 64 payload octets).
            for u in &d.ulpdus {
                let cut = &u[..u.len().min(82)];
                let key = format!("{}-{:02x}{:02x}", d.name, u[0], u[1]);
                seeds.put("ddp_rdmap_headers", &key, cut);
            }
            // rdmap_engine: receive buffers posted, then the captured segments in order.
            let mut o = Output::new();
            o.u8(0x41).u8(0x44);
            for _ in 0..4 {
                o.u8(engine::POST_RECV).u8(0).u8(0).u16(0).u16(4000).u16(1);
            }
            for u in d.ulpdus.iter().take(40) {
                o.u8(engine::RAW_SEGMENT).u8(0).chunk(u);
                o.u8(engine::TRANSMIT).u16(1400).u8(1);
            }
            seeds.put("rdmap_engine", &d.name, &o.buf);
            // tcp_segment: the stream (frame and FPDUs) as the peer's data segments.
            let mut o = Output::new();
            o.u8(0x03).u16(4096);
            let mut first = true;
            for (_, data) in d.chunks.iter().take(24) {
                let payload = if first {
                    let mut p = d.frame.clone();
                    p.extend_from_slice(data);
                    p
                } else {
                    data.clone()
                };
                first = false;
                o.u8(tcp::SEGMENT)
                    .u8(0)
                    .u8(0x18)
                    .u16(0)
                    .u16(0)
                    .u16(0xffff)
                    .u8(0);
                o.chunk(&payload[..payload.len().min(1400)]);
                o.u8(tcp::ADVANCE).u8(2);
            }
            o.u8(tcp::APP).u8(0).u16(3000);
            o.u8(tcp::ADVANCE).u8(0x81);
            seeds.put("tcp_segment", &d.name, &o.buf);
        }
    }
    // mpa_receiver (model): valid streams, each CRC / marker setting.
    for mode in 0..4u8 {
        let mut o = Output::new();
        o.u8(receiver::MODE_MODEL | mode)
            .u32(0xffff_f000)
            .u16(600)
            .u8(12);
        for i in 0..12u16 {
            o.u16(i * 97);
        }
        for _ in 0..12 {
            o.u8(3).u16(77);
        }
        o.bytes(&[1, 5, 2, 7, 0, 3]);
        seeds.put("mpa_receiver", &format!("model-{mode}"), &o.buf);
    }
    // config: the shipped configuration files, with and without fault overrides.
    let configs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    if let Ok(rd) = std::fs::read_dir(&configs) {
        let mut files: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for p in files {
            let Ok(text) = std::fs::read(&p) else {
                continue;
            };
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            seeds.put("config", &name, &text);
            let mut with = text.clone();
            with.push(0);
            with.extend_from_slice(b"drop=1%,reorder=200ppm,seed=7,direction=both");
            seeds.put("config", &format!("{name}-fault"), &with);
        }
    }
    let mut n = std::collections::BTreeMap::new();
    for (t, _) in &seeds.written {
        *n.entry(t.clone()).or_insert(0) += 1;
    }
    for (t, c) in n {
        println!("{t}: {c} seeds");
    }
}
