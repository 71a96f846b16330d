//! Emitting IPv4 / IPv6 + TCP packets and reading TCP headers with smoltcp's wire layer.

use std::net::{IpAddr, SocketAddr};

use smoltcp::phy::{Checksum, ChecksumCapabilities};

use smoltcp::wire::{
    IpAddress, IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, TcpControl, TcpPacket,
    TcpRepr, TcpSeqNumber, TcpTimestampRepr,
};

use crate::config::Config;
use crate::ip::ip_header_len;

/// Hop limit (TTL) of the packets the engine emits.
const HOP_LIMIT: u8 = 64;

/// Options carried only on SYN segments.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SynOptions {
    pub(crate) mss: u16,
    pub(crate) wscale: Option<u8>,
    pub(crate) sack_permitted: bool,
}

/// Header fields of one outgoing segment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Header {
    pub(crate) control: TcpControl,
    pub(crate) seq: u32,
    pub(crate) ack: Option<u32>,
    pub(crate) window: u16,
    pub(crate) syn: Option<SynOptions>,
    pub(crate) sack: [Option<(u32, u32)>; 3],
    pub(crate) timestamp: Option<(u32, u32)>,
}

/// Checksum capabilities from the configuration.
pub(crate) fn checksum_caps(cfg: &Config) -> ChecksumCapabilities {
    let mode = match (cfg.verify_checksums, cfg.fill_checksums) {
        (true, true) => Checksum::Both,
        (true, false) => Checksum::Rx,
        (false, true) => Checksum::Tx,
        (false, false) => Checksum::None,
    };
    let mut caps = ChecksumCapabilities::ignored();
    caps.ipv4 = mode;
    caps.tcp = mode;
    caps
}

/// Write an IPv4 or IPv6 packet (the family of `src` and `dst`, which agree) carrying `hdr` +
/// `payload` from `src` to `dst` into `buf`. SACK blocks are dropped (last first) until the
/// packet fits the MTU. Returns the packet length, or `None` when `buf` is too small.
pub(crate) fn write_packet(
    buf: &mut [u8],
    cfg: &Config,
    src: SocketAddr,
    dst: SocketAddr,
    hdr: &Header,
    payload: &[u8],
) -> Option<usize> {
    let mut repr = TcpRepr {
        src_port: src.port(),
        dst_port: dst.port(),
        control: hdr.control,
        seq_number: TcpSeqNumber(hdr.seq as i32),
        ack_number: hdr.ack.map(|a| TcpSeqNumber(a as i32)),
        window_len: hdr.window,
        window_scale: hdr.syn.and_then(|s| s.wscale),
        max_seg_size: hdr.syn.map(|s| s.mss),
        sack_permitted: hdr.syn.is_some_and(|s| s.sack_permitted),
        sack_ranges: hdr.sack,
        timestamp: hdr
            .timestamp
            .map(|(tsval, tsecr)| TcpTimestampRepr::new(tsval, tsecr)),
        payload,
    };
    let ip_len = ip_header_len(src.ip());
    let limit = cfg.mtu.min(buf.len());
    let mut blocks = repr.sack_ranges.iter().filter(|b| b.is_some()).count();
    while ip_len + repr.buffer_len() > limit && blocks > 0 {
        blocks -= 1;
        repr.sack_ranges[blocks] = None;
    }
    let total = ip_len + repr.buffer_len();
    if total > buf.len() {
        log::warn!(
            "transmit buffer of {} bytes too small for {total}",
            buf.len()
        );
        return None;
    }
    // The TCP checksum is ours (crate::checksum), filled in below.
    let mut caps = checksum_caps(cfg);
    caps.tcp = Checksum::None;
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Ipv4Repr {
            src_addr: s,
            dst_addr: d,
            next_header: IpProtocol::Tcp,
            payload_len: repr.buffer_len(),
            hop_limit: HOP_LIMIT,
        }
        .emit(&mut Ipv4Packet::new_unchecked(&mut buf[..total]), &caps),
        (IpAddr::V6(s), IpAddr::V6(d)) => Ipv6Repr {
            src_addr: s,
            dst_addr: d,
            next_header: IpProtocol::Tcp,
            payload_len: repr.buffer_len(),
            hop_limit: HOP_LIMIT,
        }
        .emit(&mut Ipv6Packet::new_unchecked(&mut buf[..total])),
        _ => {
            log::warn!("no packet from {src} to {dst}: the address families differ");
            return None;
        }
    }
    // The header is emitted without the payload, which is copied and summed in one pass.
    repr.payload = &[];
    let data_at = ip_len + repr.header_len();
    repr.emit(
        &mut TcpPacket::new_unchecked(&mut buf[ip_len..total]),
        &IpAddress::from(src.ip()),
        &IpAddress::from(dst.ip()),
        &caps,
    );
    let (head, data) = buf[..total].split_at_mut(data_at);
    if cfg.fill_checksums {
        let payload_sum = crate::checksum::copy_payload(data, payload);
        let segment = &mut head[ip_len..];
        let sum = crate::checksum::tcp_checksum_split(src.ip(), dst.ip(), segment, payload_sum);
        TcpPacket::new_unchecked(segment).set_checksum(sum);
    } else {
        data.copy_from_slice(payload);
    }
    Some(total)
}

/// TCP header length without options.
const TCP_HEADER_LEN: usize = 20;
/// NOP, NOP, Timestamps kind 8 length 10: the option layout of data segments with
/// timestamps (RFC 7323 Appendix A), which Linux sends.
const NOP_NOP_TIMESTAMP: [u8; 4] = [1, 1, 8, 10];
/// Timestamps kind 8 length 10 first, then two octets of padding (End of Option List, or
/// NOP and End or NOP): the layout smoltcp's emitter, and so this engine, sends.
const TIMESTAMP_FIRST: [u8; 2] = [8, 10];

/// Parses a TCP segment (header and payload; its checksum is checked elsewhere). A data or
/// ACK segment without SYN, FIN or RST whose options are none or NOP, NOP, Timestamps (nearly
/// every segment of a transfer) is read field by field; anything else goes through
/// smoltcp's parser. The result is the same either way (tested against smoltcp).
pub(crate) fn parse_segment(src: IpAddr, dst: IpAddr, segment: &[u8]) -> Option<TcpRepr<'_>> {
    if let Some(r) = parse_common(segment) {
        return Some(r);
    }
    let pkt = TcpPacket::new_checked(segment).ok()?;
    TcpRepr::parse(
        &pkt,
        &IpAddress::from(src),
        &IpAddress::from(dst),
        &ChecksumCapabilities::ignored(),
    )
    .ok()
}

/// The common case of [`parse_segment`], or `None` to leave the segment to smoltcp.
fn parse_common(s: &[u8]) -> Option<TcpRepr<'_>> {
    let word = |at: usize| u32::from_be_bytes([s[at], s[at + 1], s[at + 2], s[at + 3]]);
    if s.len() < TCP_HEADER_LEN {
        return None;
    }
    let header_len = usize::from(s[12] >> 4) * 4;
    let flags = s[13];
    // FIN 0x01, SYN 0x02, RST 0x04 take smoltcp's path; URG, ECE and CWR are ignored there.
    if flags & 0x07 != 0 || s.len() < header_len {
        return None;
    }
    let timestamp = match header_len {
        TCP_HEADER_LEN => None,
        32 if s[20..24] == NOP_NOP_TIMESTAMP => Some(TcpTimestampRepr::new(word(24), word(28))),
        32 if s[20..22] == TIMESTAMP_FIRST && (s[30] == 0 || (s[30] == 1 && s[31] <= 1)) => {
            Some(TcpTimestampRepr::new(word(22), word(26)))
        }
        _ => return None,
    };
    let src_port = u16::from_be_bytes([s[0], s[1]]);
    let dst_port = u16::from_be_bytes([s[2], s[3]]);
    if src_port == 0 || dst_port == 0 {
        return None;
    }
    Some(TcpRepr {
        src_port,
        dst_port,
        control: if flags & 0x08 != 0 {
            TcpControl::Psh
        } else {
            TcpControl::None
        },
        seq_number: TcpSeqNumber(word(4) as i32),
        ack_number: (flags & 0x10 != 0).then(|| TcpSeqNumber(word(8) as i32)),
        window_len: u16::from_be_bytes([s[14], s[15]]),
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp,
        payload: &s[header_len..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));

    fn smoltcp_parse(segment: &[u8]) -> Option<TcpRepr<'_>> {
        let pkt = TcpPacket::new_checked(segment).ok()?;
        let any = IpAddress::Ipv4(Ipv4Addr::new(10, 0, 0, 1));
        TcpRepr::parse(&pkt, &any, &any, &ChecksumCapabilities::ignored()).ok()
    }

    /// Options: none, NOP NOP Timestamps, Timestamps and two octets of padding (mostly End
    /// or NOP, sometimes anything), or arbitrary octets (SACK, MSS, garbage).
    fn options() -> impl Strategy<Value = Vec<u8>> {
        let pad = prop_oneof![Just(0u8), Just(1u8), any::<u8>()];
        prop_oneof![
            Just(Vec::new()),
            any::<[u8; 8]>().prop_map(|ts| {
                let mut o = NOP_NOP_TIMESTAMP.to_vec();
                o.extend_from_slice(&ts);
                o
            }),
            (any::<[u8; 8]>(), pad.clone(), pad).prop_map(|(ts, p0, p1)| {
                let mut o = TIMESTAMP_FIRST.to_vec();
                o.extend_from_slice(&ts);
                o.extend_from_slice(&[p0, p1]);
                o
            }),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(|mut o| {
                o.truncate(o.len() / 4 * 4);
                o
            }),
        ]
    }

    proptest! {
        // RFC 9293 §3.1 header layout, RFC 7323 §3.2 Timestamps: the direct reading and
        // smoltcp's parser agree on every header, also on those left to smoltcp.
        #[test]
        fn same_as_smoltcp(
            head in any::<[u8; 20]>(),
            opts in options(),
            payload in proptest::collection::vec(any::<u8>(), 0..64),
            offset_off in prop::bool::weighted(0.1),
        ) {
            let mut seg = head.to_vec();
            let words = (TCP_HEADER_LEN + opts.len()) / 4;
            // Mostly a consistent data offset; sometimes whatever the random octet says.
            if !offset_off {
                seg[12] = (seg[12] & 0x0f) | ((words as u8) << 4);
            }
            seg.extend_from_slice(&opts);
            seg.extend_from_slice(&payload);
            let ours = parse_segment(A, A, &seg);
            prop_assert_eq!(ours, smoltcp_parse(&seg));
        }
    }

    // The direct path takes the usual data segment: ACK + PSH with timestamps.
    #[test]
    fn data_segment_with_timestamps_takes_the_direct_path() {
        let mut seg = vec![0u8; 32];
        seg[0..2].copy_from_slice(&4000u16.to_be_bytes());
        seg[2..4].copy_from_slice(&5000u16.to_be_bytes());
        seg[4..8].copy_from_slice(&7u32.to_be_bytes());
        seg[8..12].copy_from_slice(&9u32.to_be_bytes());
        seg[12] = 8 << 4;
        seg[13] = 0x18;
        seg[20..24].copy_from_slice(&NOP_NOP_TIMESTAMP);
        seg[24..28].copy_from_slice(&11u32.to_be_bytes());
        seg[28..32].copy_from_slice(&13u32.to_be_bytes());
        seg.extend_from_slice(b"ddp");
        let r = parse_common(&seg).expect("direct path");
        assert_eq!(r.control, TcpControl::Psh);
        assert_eq!(r.ack_number, Some(TcpSeqNumber(9)));
        assert_eq!(r.timestamp, Some(TcpTimestampRepr::new(11, 13)));
        assert_eq!(r.payload, b"ddp");
        assert_eq!(Some(r), smoltcp_parse(&seg));
        seg[13] = 0x12; // SYN-ACK: smoltcp's path
        assert!(parse_common(&seg).is_none());
        assert!(parse_segment(A, A, &seg).is_some());
    }

    // So does a data segment as this engine writes it (smoltcp's option layout).
    #[test]
    fn own_data_segment_takes_the_direct_path() {
        let cfg = Config::default();
        let (src, dst): (SocketAddr, SocketAddr) = (
            "10.0.0.1:4000".parse().unwrap(),
            "10.0.0.2:5000".parse().unwrap(),
        );
        let hdr = Header {
            control: TcpControl::Psh,
            seq: 7,
            ack: Some(9),
            window: 100,
            syn: None,
            sack: [None; 3],
            timestamp: Some((11, 13)),
        };
        let mut buf = [0u8; 128];
        let len = write_packet(&mut buf, &cfg, src, dst, &hdr, b"ddp").expect("fits");
        let seg = &buf[crate::ip::IPV4_HEADER_LEN..len];
        let r = parse_common(seg).expect("direct path");
        assert_eq!(r.timestamp, Some(TcpTimestampRepr::new(11, 13)));
        assert_eq!(r.payload, b"ddp");
        assert_eq!(Some(r), smoltcp_parse(seg));
    }
}
