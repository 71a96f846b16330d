//! Reading captures: pcap and pcapng files, IPv4/TCP segment extraction and per-direction
//! TCP stream reassembly (for `dataplane inspect` and capture-based tests).

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use smoltcp::wire::{
    EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Packet, Ipv6Packet, TcpPacket,
};

/// Link type: Ethernet.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Link type: raw IP (BSD value).
pub const LINKTYPE_RAW_BSD: u32 = 12;
/// Link type: raw IP.
pub const LINKTYPE_RAW: u32 = 101;
/// Link type: Linux cooked capture v1.
pub const LINKTYPE_LINUX_SLL: u32 = 113;
/// Link type: raw IPv4.
pub const LINKTYPE_IPV4: u32 = 228;
/// Link type: raw IPv6.
pub const LINKTYPE_IPV6: u32 = 229;
/// Link type: Linux cooked capture v2.
pub const LINKTYPE_LINUX_SLL2: u32 = 276;

/// Why a capture could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// File name.
        path: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// Neither a pcap nor a pcapng magic number.
    #[error("not a pcap or pcapng file (magic {0:02x?})")]
    BadMagic([u8; 4]),
    /// A header or record runs past the end of the file.
    #[error("truncated {what} at offset {offset}")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// File offset.
        offset: usize,
    },
    /// A pcapng block is malformed.
    #[error("malformed pcapng block at offset {offset}: {why}")]
    BadBlock {
        /// File offset.
        offset: usize,
        /// What is wrong.
        why: &'static str,
    },
}

/// One captured frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// Frame number, from 1 (as Wireshark counts).
    pub number: u64,
    /// Link-layer type.
    pub linktype: u32,
    /// Captured octets.
    pub data: Vec<u8>,
    /// Length on the wire.
    pub orig_len: u32,
}

impl Packet {
    /// Whether the frame was cut by the snap length.
    pub fn truncated(&self) -> bool {
        (self.data.len() as u64) < self.orig_len as u64
    }
}

/// Reads a capture file.
pub fn read_file(path: &Path) -> Result<Vec<Packet>, PcapError> {
    let bytes = std::fs::read(path).map_err(|source| PcapError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse(&bytes)
}

/// Parses a pcap or pcapng capture held in memory.
pub fn parse(bytes: &[u8]) -> Result<Vec<Packet>, PcapError> {
    let magic: [u8; 4] =
        bytes
            .get(..4)
            .and_then(|m| m.try_into().ok())
            .ok_or(PcapError::Truncated {
                what: "file header",
                offset: 0,
            })?;
    match magic {
        [0x0a, 0x0d, 0x0d, 0x0a] => parse_pcapng(bytes),
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => parse_pcap(bytes, false),
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => parse_pcap(bytes, true),
        m => Err(PcapError::BadMagic(m)),
    }
}

/// The `N` bytes of `b` at `at`, when all are there, most significant first (stored so
/// when `be`, else reversed).
fn read_be<const N: usize>(b: &[u8], at: usize, be: bool) -> Option<[u8; N]> {
    let mut s: [u8; N] = b.get(at..at + N)?.try_into().ok()?;
    if !be {
        s.reverse();
    }
    Some(s)
}

fn read_u16(b: &[u8], at: usize, be: bool) -> Option<u16> {
    read_be(b, at, be).map(u16::from_be_bytes)
}

fn read_u32(b: &[u8], at: usize, be: bool) -> Option<u32> {
    read_be(b, at, be).map(u32::from_be_bytes)
}

fn parse_pcap(bytes: &[u8], be: bool) -> Result<Vec<Packet>, PcapError> {
    let linktype = read_u32(bytes, 20, be).ok_or(PcapError::Truncated {
        what: "pcap file header",
        offset: 0,
    })?;
    let mut packets = Vec::new();
    let mut off = 24;
    while off < bytes.len() {
        let rec = |what| PcapError::Truncated { what, offset: off };
        let incl = read_u32(bytes, off + 8, be).ok_or_else(|| rec("record header"))? as usize;
        let orig = read_u32(bytes, off + 12, be).ok_or_else(|| rec("record header"))?;
        let start = off + 16;
        let data = bytes
            .get(start..start.saturating_add(incl))
            .ok_or_else(|| rec("record data"))?;
        packets.push(Packet {
            number: packets.len() as u64 + 1,
            linktype,
            data: data.to_vec(),
            orig_len: orig,
        });
        off = start + incl;
    }
    Ok(packets)
}

fn parse_pcapng(bytes: &[u8]) -> Result<Vec<Packet>, PcapError> {
    let mut packets = Vec::new();
    let mut interfaces: Vec<u32> = Vec::new();
    let mut be = false;
    let mut off = 0;
    while off < bytes.len() {
        let trunc = PcapError::Truncated {
            what: "pcapng block",
            offset: off,
        };
        let btype = read_u32(bytes, off, false).ok_or(trunc)?;
        if btype == 0x0a0d_0d0a {
            // Section Header Block: the byte-order magic decides the endianness.
            match bytes.get(off + 8..off + 12) {
                Some([0x4d, 0x3c, 0x2b, 0x1a]) => be = false,
                Some([0x1a, 0x2b, 0x3c, 0x4d]) => be = true,
                Some(_) => {
                    return Err(PcapError::BadBlock {
                        offset: off,
                        why: "bad byte-order magic",
                    })
                }
                None => {
                    return Err(PcapError::Truncated {
                        what: "section header",
                        offset: off,
                    })
                }
            }
            interfaces.clear();
        }
        let btype = read_u32(bytes, off, be).ok_or(PcapError::Truncated {
            what: "pcapng block",
            offset: off,
        })?;
        let blen = read_u32(bytes, off + 4, be).ok_or(PcapError::Truncated {
            what: "pcapng block",
            offset: off,
        })? as usize;
        if blen < 12 || !blen.is_multiple_of(4) {
            return Err(PcapError::BadBlock {
                offset: off,
                why: "bad block length",
            });
        }
        let block = bytes
            .get(off..off.saturating_add(blen))
            .ok_or(PcapError::Truncated {
                what: "pcapng block body",
                offset: off,
            })?;
        let body = &block[8..blen - 4];
        let bad = |why| PcapError::BadBlock { offset: off, why };
        match btype {
            // Interface Description Block.
            0x0000_0001 => {
                let lt = read_u16(body, 0, be).ok_or(bad("short interface block"))?;
                interfaces.push(lt as u32);
            }
            // Enhanced Packet Block.
            0x0000_0006 => {
                let ifid = read_u32(body, 0, be).ok_or(bad("short packet block"))? as usize;
                let caplen = read_u32(body, 12, be).ok_or(bad("short packet block"))? as usize;
                let orig = read_u32(body, 16, be).ok_or(bad("short packet block"))?;
                let data = body
                    .get(20..20usize.saturating_add(caplen))
                    .ok_or(bad("packet data past the block"))?;
                let linktype = *interfaces.get(ifid).ok_or(bad("unknown interface"))?;
                packets.push(Packet {
                    number: packets.len() as u64 + 1,
                    linktype,
                    data: data.to_vec(),
                    orig_len: orig,
                });
            }
            // Simple Packet Block (interface 0, snaplen-limited).
            0x0000_0003 => {
                let orig = read_u32(body, 0, be).ok_or(bad("short simple packet block"))?;
                let data = &body[4..];
                let len = (orig as usize).min(data.len());
                let linktype = *interfaces.first().ok_or(bad("no interface"))?;
                packets.push(Packet {
                    number: packets.len() as u64 + 1,
                    linktype,
                    data: data[..len].to_vec(),
                    orig_len: orig,
                });
            }
            _ => {}
        }
        off += blen;
    }
    Ok(packets)
}

/// One TCP segment found in a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpSegment<'a> {
    /// Frame number.
    pub frame: u64,
    /// Sender.
    pub src: SocketAddr,
    /// Receiver.
    pub dst: SocketAddr,
    /// Sequence number of the first payload octet (of the SYN when `syn`).
    pub seq: u32,
    /// SYN flag.
    pub syn: bool,
    /// FIN flag.
    pub fin: bool,
    /// RST flag.
    pub rst: bool,
    /// The frame was cut: `payload` holds only the captured octets.
    pub truncated: bool,
    /// Payload.
    pub payload: &'a [u8],
}

/// The IPv4 or IPv6 packet inside a frame of `linktype`, when there is one.
fn ip_of(linktype: u32, data: &[u8]) -> Option<&[u8]> {
    let is_ip = |ethertype: u16| {
        matches!(
            EthernetProtocol::from(ethertype),
            EthernetProtocol::Ipv4 | EthernetProtocol::Ipv6
        )
    };
    match linktype {
        LINKTYPE_ETHERNET => {
            let eth = EthernetFrame::new_checked(data).ok()?;
            let mut ethertype = u16::from(eth.ethertype());
            let mut payload = &data[14..];
            // 802.1Q / 802.1ad tags.
            while ethertype == 0x8100 || ethertype == 0x88a8 {
                ethertype = u16::from_be_bytes([*payload.get(2)?, *payload.get(3)?]);
                payload = payload.get(4..)?;
            }
            is_ip(ethertype).then_some(payload)
        }
        LINKTYPE_RAW | LINKTYPE_RAW_BSD => matches!(data.first()? >> 4, 4 | 6).then_some(data),
        LINKTYPE_IPV4 => (data.first()? >> 4 == 4).then_some(data),
        LINKTYPE_IPV6 => (data.first()? >> 4 == 6).then_some(data),
        LINKTYPE_LINUX_SLL => {
            let proto = u16::from_be_bytes([*data.get(14)?, *data.get(15)?]);
            is_ip(proto).then(|| &data[16..])
        }
        LINKTYPE_LINUX_SLL2 => {
            let proto = u16::from_be_bytes([*data.first()?, *data.get(1)?]);
            data.get(20..).filter(|_| is_ip(proto))
        }
        _ => None,
    }
}

/// The addresses, the TCP bytes (cut at the capture's end) and whether the packet was cut,
/// of an unfragmented IPv4 packet or an IPv6 packet whose first Next Header is TCP.
fn tcp_of(bytes: &[u8]) -> Option<(IpAddr, IpAddr, &[u8], bool)> {
    match bytes.first()? >> 4 {
        4 => {
            if bytes.len() < 20 {
                return None;
            }
            let ip = Ipv4Packet::new_unchecked(bytes);
            let header_len = ip.header_len() as usize;
            let total = ip.total_len() as usize;
            if header_len < 20 || total < header_len || bytes.len() < header_len {
                return None;
            }
            if ip.next_header() != IpProtocol::Tcp || ip.more_frags() || ip.frag_offset() != 0 {
                return None;
            }
            let end = total.min(bytes.len());
            let (s, d) = (ip.src_addr(), ip.dst_addr());
            Some((s.into(), d.into(), &bytes[header_len..end], end < total))
        }
        6 => {
            if bytes.len() < 40 {
                return None;
            }
            let ip = Ipv6Packet::new_unchecked(bytes);
            if ip.next_header() != IpProtocol::Tcp {
                return None;
            }
            let total = 40 + usize::from(ip.payload_len());
            let end = total.min(bytes.len());
            let (s, d) = (ip.src_addr(), ip.dst_addr());
            Some((s.into(), d.into(), &bytes[40..end], end < total))
        }
        _ => None,
    }
}

/// The TCP segment of a frame (IPv4 unfragmented, or IPv6 without extension headers; VLAN
/// tags skipped), if any. A frame cut by the snap length gives the payload octets that were
/// captured (`truncated` is then set).
pub fn tcp_segment(packet: &Packet) -> Option<TcpSegment<'_>> {
    let bytes = ip_of(packet.linktype, &packet.data)?;
    let (src_ip, dst_ip, ip_payload, truncated) = tcp_of(bytes)?;
    let tcp = TcpPacket::new_checked(ip_payload).ok()?;
    let tcp_header_len = tcp.header_len() as usize;
    Some(TcpSegment {
        frame: packet.number,
        src: SocketAddr::new(src_ip, tcp.src_port()),
        dst: SocketAddr::new(dst_ip, tcp.dst_port()),
        seq: tcp.seq_number().0 as u32,
        syn: tcp.syn(),
        fin: tcp.fin(),
        rst: tcp.rst(),
        truncated,
        payload: &ip_payload[tcp_header_len..],
    })
}

/// New in-order octets of one direction, as the frame that carried them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamChunk {
    /// Frame number.
    pub frame: u64,
    /// Sequence number of the first octet.
    pub seq: u32,
    /// The octets (retransmitted octets removed).
    pub data: Vec<u8>,
}

/// One reassembled direction of a TCP connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpStream {
    /// Sender.
    pub src: SocketAddr,
    /// Receiver.
    pub dst: SocketAddr,
    /// Whether the sender's SYN was captured (else the capture starts mid-stream).
    pub syn_seen: bool,
    /// Sequence number of the first stream octet (ISN + 1, or the first captured octet).
    pub start_seq: u32,
    /// In-order data.
    pub chunks: Vec<StreamChunk>,
    /// Octets after a hole in the capture that could not be placed in order:
    /// `(sequence number of the hole, missing octets)`.
    pub hole: Option<(u32, u64)>,
    /// Whether a FIN or RST ended this direction.
    pub closed: bool,
    /// Segments that carried nothing new (retransmissions).
    pub retransmissions: u64,
}

impl TcpStream {
    fn new(src: SocketAddr, dst: SocketAddr) -> Self {
        TcpStream {
            src,
            dst,
            syn_seen: false,
            start_seq: 0,
            chunks: Vec::new(),
            hole: None,
            closed: false,
            retransmissions: 0,
        }
    }

    /// Total in-order octets.
    pub fn len(&self) -> u64 {
        self.chunks.iter().map(|c| c.data.len() as u64).sum()
    }

    /// Whether no in-order octet was captured.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }
}

impl fmt::Display for TcpStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {}", self.src, self.dst)
    }
}

/// A TCP connection: both directions, the first one being the side seen first (the SYN
/// sender when the handshake was captured).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpConnection {
    /// First frame of the connection.
    pub first_frame: u64,
    /// The two directions.
    pub dirs: [TcpStream; 2],
}

#[derive(Debug)]
struct DirState {
    stream: TcpStream,
    started: bool,
    /// Next expected position relative to `start_seq`.
    next: u64,
    pending: BTreeMap<u64, (u64, Vec<u8>)>,
}

impl DirState {
    fn new(src: SocketAddr, dst: SocketAddr) -> Self {
        DirState {
            stream: TcpStream::new(src, dst),
            started: false,
            next: 0,
            pending: BTreeMap::new(),
        }
    }

    fn rel(&self, seq: u32) -> Option<u64> {
        let cur = self.stream.start_seq.wrapping_add(self.next as u32);
        let d = seq.wrapping_sub(cur) as i32 as i64;
        u64::try_from(self.next as i64 + d).ok()
    }

    fn push(&mut self, seg: &TcpSegment<'_>) {
        let mut seq = seg.seq;
        if seg.syn {
            let first = seg.seq.wrapping_add(1);
            // A retransmitted SYN changes nothing; any other SYN starts the direction over
            // (a new connection on the same addresses), so that the chunks stay contiguous
            // from `start_seq`.
            if !(self.stream.syn_seen && self.stream.start_seq == first) {
                self.stream.syn_seen = true;
                self.stream.start_seq = first;
                self.stream.chunks.clear();
                self.stream.closed = false;
                self.started = true;
                self.next = 0;
                self.pending.clear();
            }
            seq = first;
        }
        if seg.fin || seg.rst {
            self.stream.closed = true;
        }
        if seg.payload.is_empty() {
            return;
        }
        if !self.started {
            self.stream.start_seq = seq;
            self.started = true;
        }
        let Some(start) = self.rel(seq) else {
            self.stream.retransmissions += 1;
            return;
        };
        let end = start + seg.payload.len() as u64;
        if end <= self.next {
            self.stream.retransmissions += 1;
            return;
        }
        if start > self.next {
            self.pending
                .entry(start)
                .or_insert((seg.frame, seg.payload.to_vec()));
            return;
        }
        let skip = (self.next - start) as usize;
        self.append(seg.frame, &seg.payload[skip..]);
        // Buffered segments that now fit.
        while let Some((&p, _)) = self.pending.iter().next() {
            if p > self.next {
                break;
            }
            let (_, (frame, data)) = self.pending.pop_first().expect("entry exists");
            let e = p + data.len() as u64;
            if e > self.next {
                let skip = (self.next - p) as usize;
                self.append(frame, &data[skip..]);
            }
        }
    }

    fn append(&mut self, frame: u64, data: &[u8]) {
        let seq = self.stream.start_seq.wrapping_add(self.next as u32);
        self.stream.chunks.push(StreamChunk {
            frame,
            seq,
            data: data.to_vec(),
        });
        self.next += data.len() as u64;
    }

    fn finish(mut self) -> TcpStream {
        if let Some((&p, _)) = self.pending.iter().next() {
            let seq = self.stream.start_seq.wrapping_add(self.next as u32);
            self.stream.hole = Some((seq, p - self.next));
        }
        self.stream
    }
}

/// Reassembles every IPv4 TCP connection of a capture, in order of first appearance.
pub fn reassemble(packets: &[Packet]) -> Vec<TcpConnection> {
    let mut order: Vec<(SocketAddr, SocketAddr)> = Vec::new();
    let mut conns: BTreeMap<(SocketAddr, SocketAddr), (u64, [DirState; 2])> = BTreeMap::new();
    for p in packets {
        let Some(seg) = tcp_segment(p) else {
            continue;
        };
        let key = if seg.src <= seg.dst {
            (seg.src, seg.dst)
        } else {
            (seg.dst, seg.src)
        };
        let entry = conns.entry(key).or_insert_with(|| {
            order.push(key);
            (
                p.number,
                [
                    DirState::new(seg.src, seg.dst),
                    DirState::new(seg.dst, seg.src),
                ],
            )
        });
        let dir = if entry.1[0].stream.src == seg.src {
            0
        } else {
            1
        };
        entry.1[dir].push(&seg);
    }
    order
        .into_iter()
        .filter_map(|k| conns.remove(&k))
        .map(|(first_frame, [a, b])| TcpConnection {
            first_frame,
            dirs: [a.finish(), b.finish()],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(src_port: u16, dst_port: u16, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12] = 0x08;
        let total = 20 + 20 + payload.len();
        let mut ip = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0,
            0,
            0x40,
            0,
            64,
            6,
            0,
            0,
        ];
        // The lower port is 10.0.0.1's, the other one 10.0.0.2's.
        if src_port < dst_port {
            ip.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        } else {
            ip.extend_from_slice(&[10, 0, 0, 2, 10, 0, 0, 1]);
        }
        f.extend_from_slice(&ip);
        f.extend_from_slice(&src_port.to_be_bytes());
        f.extend_from_slice(&dst_port.to_be_bytes());
        f.extend_from_slice(&seq.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        f.extend_from_slice(payload);
        f
    }

    fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
        let mut v = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        v.extend_from_slice(&65535u32.to_le_bytes());
        v.extend_from_slice(&1u32.to_le_bytes());
        for f in frames {
            v.extend_from_slice(&[0; 8]);
            v.extend_from_slice(&(f.len() as u32).to_le_bytes());
            v.extend_from_slice(&(f.len() as u32).to_le_bytes());
            v.extend_from_slice(f);
        }
        v
    }

    #[test]
    fn reassembles_out_of_order_and_retransmitted_segments() {
        let frames = vec![
            frame(1000, 2000, u32::MAX - 1, 0x02, b""),
            frame(1000, 2000, u32::MAX, 0x10, b"abc"),
            frame(1000, 2000, 5, 0x10, b"ghi"),
            frame(1000, 2000, 2, 0x10, b"def"),
            frame(1000, 2000, 0, 0x10, b"cdefg"),
            frame(2000, 1000, 77, 0x10, b"xyz"),
        ];
        let packets = parse(&pcap(&frames)).unwrap();
        assert_eq!(packets.len(), 6);
        let conns = reassemble(&packets);
        assert_eq!(conns.len(), 1);
        let [a, b] = &conns[0].dirs;
        assert!(a.syn_seen && !b.syn_seen);
        let data: Vec<u8> = a.chunks.iter().flat_map(|c| c.data.clone()).collect();
        assert_eq!(data, b"abcdefghi");
        assert_eq!(
            a.chunks.iter().map(|c| c.frame).collect::<Vec<_>>(),
            vec![2, 4, 3]
        );
        assert_eq!(a.retransmissions, 1);
        assert_eq!(a.hole, None);
        assert_eq!(b.start_seq, 77);
    }

    #[test]
    fn reports_holes_and_rejects_garbage() {
        let frames = vec![
            frame(1, 2, 100, 0x10, b"abcd"),
            frame(1, 2, 110, 0x10, b"zz"),
        ];
        let conns = reassemble(&parse(&pcap(&frames)).unwrap());
        assert_eq!(conns[0].dirs[0].hole, Some((104, 6)));
        assert!(matches!(parse(b"nope"), Err(PcapError::BadMagic(_))));
        assert!(matches!(parse(b"ab"), Err(PcapError::Truncated { .. })));
        let mut cut = pcap(&frames);
        cut.truncate(cut.len() - 3);
        assert!(matches!(parse(&cut), Err(PcapError::Truncated { .. })));
    }

    // IPv6 (RFC 8200) segments in 802.1Q-tagged Ethernet frames and in raw IPv6 records
    // (link type 229) decode to the same segment; one with an extension header does not.
    #[test]
    fn ipv6_and_tagged_frames() {
        use crate::frame::{Ends, Vlan};
        use crate::test_frames::{tcp_frame, TO_US6};
        let tagged = Ends {
            vlan: Some(Vlan {
                id: 100,
                priority: 0,
            }),
            ..TO_US6
        };
        let f = tcp_frame(tagged, b"over ipv6");
        let packets = parse(&pcap(std::slice::from_ref(&f))).unwrap();
        let seg = tcp_segment(&packets[0]).unwrap();
        assert_eq!(seg.src, SocketAddr::new(TO_US6.src_ip, 4000));
        assert_eq!(seg.dst, SocketAddr::new(TO_US6.dst_ip, 5000));
        assert_eq!(
            (seg.seq, seg.payload, seg.truncated),
            (1000, &b"over ipv6"[..], false)
        );
        let raw = Packet {
            linktype: LINKTYPE_IPV6,
            data: f[18..].to_vec(),
            ..packets[0].clone()
        };
        assert_eq!(tcp_segment(&raw).unwrap().payload, b"over ipv6");
        let cut = Packet {
            data: f[..f.len() - 3].to_vec(),
            ..packets[0].clone()
        };
        let seg = tcp_segment(&cut).unwrap();
        assert!(seg.truncated);
        assert_eq!(seg.payload, b"over i");
        let mut ext = f.clone();
        ext[18 + 6] = 60;
        let ext = Packet {
            data: ext,
            ..packets[0].clone()
        };
        assert!(tcp_segment(&ext).is_none());
    }
}
