//! Emitting IPv4 / IPv6 + TCP packets and reading TCP headers with smoltcp's wire layer.

use std::net::{IpAddr, SocketAddr};

use smoltcp::phy::{Checksum, ChecksumCapabilities};

use smoltcp::wire::{
    IpAddress, IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, TcpControl, TcpPacket,
    TcpRepr, TcpSeqNumber, TcpTimestampRepr,
};

use crate::config::Config;
use crate::ip::{ip_header_len, IPV4_HEADER_LEN, IPV6_HEADER_LEN};

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

/// How many of `hdr`'s SACK blocks fit beside `payload_len` octets of payload in one packet
/// of the MTU from `src` to `dst`: those [`write_packet`] keeps (it drops the others).
pub(crate) fn sack_blocks_that_fit(
    cfg: &Config,
    src: SocketAddr,
    dst: SocketAddr,
    hdr: &Header,
    payload_len: usize,
) -> usize {
    let mut repr = tcp_repr(src, dst, hdr);
    fit_sack_blocks(&mut repr, ip_header_len(src.ip()), payload_len, cfg.mtu)
}

/// `hdr` as smoltcp's TCP representation, without payload.
fn tcp_repr(src: SocketAddr, dst: SocketAddr, hdr: &Header) -> TcpRepr<'static> {
    TcpRepr {
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
        payload: &[],
    }
}

/// Drops `repr`'s SACK blocks, last first, until an `ip_len`-octet IP header, the TCP header
/// and `payload_len` octets fit in `limit`; returns how many blocks are left.
fn fit_sack_blocks(repr: &mut TcpRepr, ip_len: usize, payload_len: usize, limit: usize) -> usize {
    let mut blocks = repr.sack_ranges.iter().filter(|b| b.is_some()).count();
    while ip_len + repr.header_len() + payload_len > limit && blocks > 0 {
        blocks -= 1;
        repr.sack_ranges[blocks] = None;
    }
    blocks
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
    write_packet_summed(buf, cfg, src, dst, hdr, payload, None)
}

/// [`write_packet`] for a payload whose checksum sum is known when `known` holds it (taken
/// by the unit's source): the payload is then copied without summing it again.
pub(crate) fn write_packet_summed(
    buf: &mut [u8],
    cfg: &Config,
    src: SocketAddr,
    dst: SocketAddr,
    hdr: &Header,
    payload: &[u8],
    known: Option<crate::checksum::PayloadSum>,
) -> Option<usize> {
    let data_at = emit(buf, cfg, src, dst, hdr, payload.len())?;
    let total = data_at + payload.len();
    let (head, data) = buf[..total].split_at_mut(data_at);
    if cfg.fill_checksums {
        let payload_sum = match known {
            Some(sum) => {
                debug_assert_eq!(
                    sum.folded(),
                    crate::checksum::payload_sum(payload).folded(),
                    "a unit's sum is its payload's"
                );
                data.copy_from_slice(payload);
                sum
            }
            None => crate::checksum::copy_payload(data, payload),
        };
        set_tcp_checksum(head, src, dst, payload_sum);
    } else {
        data.copy_from_slice(payload);
    }
    Some(total)
}

/// Whether `hdr` is of the shape [`emit_common`] writes (and a template): a segment of a
/// transfer, no SYN and no SACK blocks.
pub(crate) fn common_shape(hdr: &Header) -> bool {
    hdr.control != TcpControl::Syn && hdr.syn.is_none() && hdr.sack.iter().all(Option::is_none)
}

/// Writes the IP and TCP headers of a segment whose payload (`payload_len` octets, summed
/// in `payload_sum` when checksums are filled) is sent from its own buffer, not copied
/// after them. Returns the headers' length, or `None` when `buf` is too small.
pub(crate) fn write_headers(
    buf: &mut [u8],
    cfg: &Config,
    src: SocketAddr,
    dst: SocketAddr,
    hdr: &Header,
    payload_len: usize,
    payload_sum: Option<crate::checksum::PayloadSum>,
) -> Option<usize> {
    let data_at = emit(buf, cfg, src, dst, hdr, payload_len)?;
    if let (true, Some(payload_sum)) = (cfg.fill_checksums, payload_sum) {
        set_tcp_checksum(&mut buf[..data_at], src, dst, payload_sum);
    }
    Some(data_at)
}

/// Writes the headers of a segment with `payload_len` octets of payload: the direct path for
/// common headers, else smoltcp's emitters. Returns where the payload starts.
fn emit(
    buf: &mut [u8],
    cfg: &Config,
    src: SocketAddr,
    dst: SocketAddr,
    hdr: &Header,
    payload_len: usize,
) -> Option<usize> {
    match emit_common(buf, cfg, src, dst, hdr, payload_len) {
        Some(at) => Some(at),
        None => emit_headers(buf, cfg, src, dst, hdr, payload_len),
    }
}

/// Fills the TCP checksum of the headers in `head` (IP header, TCP header), the payload
/// summed in `payload_sum`.
fn set_tcp_checksum(
    head: &mut [u8],
    src: SocketAddr,
    dst: SocketAddr,
    payload_sum: crate::checksum::PayloadSum,
) {
    let segment = &mut head[ip_header_len(src.ip())..];
    let sum = crate::checksum::tcp_checksum_split(src.ip(), dst.ip(), segment, payload_sum);
    TcpPacket::new_unchecked(segment).set_checksum(sum);
}

/// Writes the IP and TCP headers of a segment with `payload_len` octets of payload through
/// smoltcp's emitters, the TCP checksum left zero. Returns where the payload starts, or
/// `None` when `buf` is too small or the address families differ.
fn emit_headers(
    buf: &mut [u8],
    cfg: &Config,
    src: SocketAddr,
    dst: SocketAddr,
    hdr: &Header,
    payload_len: usize,
) -> Option<usize> {
    // The payload is copied (and summed) by the caller; smoltcp only needs its length.
    let mut repr = tcp_repr(src, dst, hdr);
    let ip_len = ip_header_len(src.ip());
    fit_sack_blocks(&mut repr, ip_len, payload_len, cfg.mtu.min(buf.len()));
    let tcp_len = repr.header_len() + payload_len;
    let total = ip_len + tcp_len;
    if total > buf.len() {
        log::warn!(
            "transmit buffer of {} bytes too small for {total}",
            buf.len()
        );
        return None;
    }
    // The TCP checksum is ours (crate::checksum), filled in by the caller.
    let mut caps = checksum_caps(cfg);
    caps.tcp = Checksum::None;
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Ipv4Repr {
            src_addr: s,
            dst_addr: d,
            next_header: IpProtocol::Tcp,
            payload_len: tcp_len,
            hop_limit: HOP_LIMIT,
        }
        .emit(&mut Ipv4Packet::new_unchecked(&mut buf[..total]), &caps),
        (IpAddr::V6(s), IpAddr::V6(d)) => Ipv6Repr {
            src_addr: s,
            dst_addr: d,
            next_header: IpProtocol::Tcp,
            payload_len: tcp_len,
            hop_limit: HOP_LIMIT,
        }
        .emit(&mut Ipv6Packet::new_unchecked(&mut buf[..total])),
        _ => {
            log::warn!("no packet from {src} to {dst}: the address families differ");
            return None;
        }
    }
    let data_at = ip_len + repr.header_len();
    repr.emit(
        &mut TcpPacket::new_unchecked(&mut buf[ip_len..data_at]),
        &IpAddress::from(src.ip()),
        &IpAddress::from(dst.ip()),
        &caps,
    );
    Some(data_at)
}

/// TCP flag bits (RFC 9293 §3.1).
const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const PSH: u8 = 0x08;
/// The ACK flag bit.
pub(crate) const TCP_FLAG_ACK: u8 = 0x10;

/// The flag bits of `control` (ACK aside).
pub(crate) fn control_flags(control: TcpControl) -> u8 {
    match control {
        TcpControl::None => 0,
        TcpControl::Psh => PSH,
        TcpControl::Fin => FIN,
        TcpControl::Rst => RST,
        TcpControl::Syn => SYN,
    }
}
/// The Timestamps option as smoltcp lays it out: kind, length, TSval, TSecr, End of Option
/// List and one octet of padding (zero here).
const TIMESTAMP_OPTION_LEN: usize = 12;

/// [`emit_headers`] for the segments of a transfer (no SYN, so no SYN options, and no SACK
/// blocks: data, ACKs, FIN, RST), written field by field: the octets smoltcp's emitters
/// write, except that the padding octet after End of Option List is zero rather than left
/// as it was (tested against smoltcp). Returns where the payload starts, or `None` to leave
/// the segment to [`emit_headers`] (which also reports a `buf` too small).
pub(crate) fn emit_common(
    buf: &mut [u8],
    cfg: &Config,
    src: SocketAddr,
    dst: SocketAddr,
    hdr: &Header,
    payload_len: usize,
) -> Option<usize> {
    if !common_shape(hdr) {
        return None;
    }
    let tcp_header_len = TCP_HEADER_LEN
        + if hdr.timestamp.is_some() {
            TIMESTAMP_OPTION_LEN
        } else {
            0
        };
    let tcp_len = tcp_header_len + payload_len;
    let ip_len = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total = IPV4_HEADER_LEN + tcp_len;
            if total > buf.len() || total > usize::from(u16::MAX) {
                return None;
            }
            let ip = &mut buf[..IPV4_HEADER_LEN];
            ip[0] = 0x45;
            ip[1] = 0;
            ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            // Identification 0, Don't Fragment, offset 0.
            ip[4..8].copy_from_slice(&[0, 0, 0x40, 0]);
            ip[8] = HOP_LIMIT;
            ip[9] = u8::from(IpProtocol::Tcp);
            ip[10..12].fill(0);
            ip[12..16].copy_from_slice(&s.octets());
            ip[16..20].copy_from_slice(&d.octets());
            if cfg.fill_checksums {
                let sum = !ipv4_header_sum(total as u16, s.octets(), d.octets());
                ip[10..12].copy_from_slice(&sum.to_be_bytes());
            }
            IPV4_HEADER_LEN
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let total = IPV6_HEADER_LEN + tcp_len;
            if total > buf.len() || tcp_len > usize::from(u16::MAX) {
                return None;
            }
            let ip = &mut buf[..IPV6_HEADER_LEN];
            // Version 6, traffic class 0, flow label 0.
            ip[0..4].copy_from_slice(&[0x60, 0, 0, 0]);
            ip[4..6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
            ip[6] = u8::from(IpProtocol::Tcp);
            ip[7] = HOP_LIMIT;
            ip[8..24].copy_from_slice(&s.octets());
            ip[24..40].copy_from_slice(&d.octets());
            IPV6_HEADER_LEN
        }
        _ => return None,
    };
    let tcp = &mut buf[ip_len..ip_len + tcp_header_len];
    tcp[0..2].copy_from_slice(&src.port().to_be_bytes());
    tcp[2..4].copy_from_slice(&dst.port().to_be_bytes());
    tcp[4..8].copy_from_slice(&hdr.seq.to_be_bytes());
    tcp[8..12].copy_from_slice(&hdr.ack.unwrap_or(0).to_be_bytes());
    tcp[12] = ((tcp_header_len / 4) as u8) << 4;
    tcp[13] = control_flags(hdr.control) | if hdr.ack.is_some() { TCP_FLAG_ACK } else { 0 };
    tcp[14..16].copy_from_slice(&hdr.window.to_be_bytes());
    // Checksum (filled by the caller) and urgent pointer.
    tcp[16..20].fill(0);
    if let Some((tsval, tsecr)) = hdr.timestamp {
        tcp[20..22].copy_from_slice(&TIMESTAMP_FIRST);
        tcp[22..26].copy_from_slice(&tsval.to_be_bytes());
        tcp[26..30].copy_from_slice(&tsecr.to_be_bytes());
        tcp[30..32].fill(0);
    }
    Some(ip_len + tcp_header_len)
}

/// The RFC 1071 sum (not complemented) of the IPv4 header [`emit_common`] writes, from its
/// fields rather than read back from the buffer: version and header length 0x45, total
/// length, Don't Fragment, [`HOP_LIMIT`] and TCP, the addresses.
fn ipv4_header_sum(total: u16, s: [u8; 4], d: [u8; 4]) -> u16 {
    let fixed =
        0x4500 + 0x4000 + (u32::from(HOP_LIMIT) << 8 | u32::from(u8::from(IpProtocol::Tcp)));
    let word = |hi: u8, lo: u8| u32::from(u16::from_be_bytes([hi, lo]));
    let mut acc = fixed
        + u32::from(total)
        + word(s[0], s[1])
        + word(s[2], s[3])
        + word(d[0], d[1])
        + word(d[2], d[3]);
    acc = (acc & 0xffff) + (acc >> 16);
    acc = (acc & 0xffff) + (acc >> 16);
    acc as u16
}

/// TCP header length without options.
pub(crate) const TCP_HEADER_LEN: usize = 20;
/// TCP header length with the Timestamps option (and two octets of padding or NOPs).
const TCP_TIMESTAMP_HEADER_LEN: usize = TCP_HEADER_LEN + TIMESTAMP_OPTION_LEN;
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
    // The fixed header and the options of the usual shape as arrays: one length check
    // each, the fields then read without further bounds checks.
    let h: &[u8; TCP_HEADER_LEN] = s.get(..TCP_HEADER_LEN)?.try_into().ok()?;
    let word = |b: [u8; 4]| u32::from_be_bytes(b);
    let header_len = usize::from(h[12] >> 4) * 4;
    let flags = h[13];
    // FIN 0x01, SYN 0x02, RST 0x04 take smoltcp's path; URG, ECE and CWR are ignored there.
    if flags & 0x07 != 0 || s.len() < header_len {
        return None;
    }
    let timestamp = common_options(s, header_len)?;
    let src_port = u16::from_be_bytes([h[0], h[1]]);
    let dst_port = u16::from_be_bytes([h[2], h[3]]);
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
        seq_number: TcpSeqNumber(word([h[4], h[5], h[6], h[7]]) as i32),
        ack_number: (flags & 0x10 != 0)
            .then(|| TcpSeqNumber(word([h[8], h[9], h[10], h[11]]) as i32)),
        window_len: u16::from_be_bytes([h[14], h[15]]),
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp,
        payload: &s[header_len..],
    })
}

/// The options of a header `header_len` octets long in the usual shapes: none (`Some(None)`),
/// or NOP, NOP, Timestamps, or Timestamps and two octets of padding (the timestamp); `None`
/// for anything else (left to smoltcp's parser).
#[inline]
fn common_options(s: &[u8], header_len: usize) -> Option<Option<TcpTimestampRepr>> {
    let word = |b: [u8; 4]| u32::from_be_bytes(b);
    match header_len {
        TCP_HEADER_LEN => Some(None),
        TCP_TIMESTAMP_HEADER_LEN => {
            let o: &[u8; TIMESTAMP_OPTION_LEN] = s
                .get(TCP_HEADER_LEN..TCP_TIMESTAMP_HEADER_LEN)?
                .try_into()
                .ok()?;
            if o[..4] == NOP_NOP_TIMESTAMP {
                Some(Some(TcpTimestampRepr::new(
                    word([o[4], o[5], o[6], o[7]]),
                    word([o[8], o[9], o[10], o[11]]),
                )))
            } else if o[..2] == TIMESTAMP_FIRST && (o[10] == 0 || (o[10] == 1 && o[11] <= 1)) {
                Some(Some(TcpTimestampRepr::new(
                    word([o[2], o[3], o[4], o[5]]),
                    word([o[6], o[7], o[8], o[9]]),
                )))
            } else {
                None
            }
        }
        _ => None,
    }
}

/// The fields of a plain data segment: ACK, perhaps PSH and no other flag, options none or
/// Timestamps alone (as [`parse_segment`] reads them directly), and a payload. What a
/// receive run takes ([`crate::tcb::Tcb::takes_run_segment`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DataSegment<'a> {
    /// Source and destination port, as the header's first four octets.
    pub(crate) ports: [u8; 4],
    pub(crate) seq: u32,
    pub(crate) ack: u32,
    pub(crate) window: u16,
    pub(crate) timestamp: Option<TcpTimestampRepr>,
    pub(crate) payload: &'a [u8],
}

/// Reads `s` as a [`DataSegment`], or `None` when it is anything else (another flag, other
/// options, no payload, a port 0): the fields are those [`parse_segment`] gives (tested).
#[inline]
pub(crate) fn parse_data(s: &[u8]) -> Option<DataSegment<'_>> {
    let h: &[u8; TCP_HEADER_LEN] = s.get(..TCP_HEADER_LEN)?.try_into().ok()?;
    // ACK, perhaps PSH; URG, ECE and CWR too are left to the general path.
    if h[13] & !PSH != TCP_FLAG_ACK {
        return None;
    }
    let header_len = usize::from(h[12] >> 4) * 4;
    if s.len() <= header_len || h[0..2] == [0, 0] || h[2..4] == [0, 0] {
        return None;
    }
    let timestamp = common_options(s, header_len)?;
    let word = |b: [u8; 4]| u32::from_be_bytes(b);
    Some(DataSegment {
        ports: [h[0], h[1], h[2], h[3]],
        seq: word([h[4], h[5], h[6], h[7]]),
        ack: word([h[8], h[9], h[10], h[11]]),
        window: u16::from_be_bytes([h[14], h[15]]),
        timestamp,
        payload: &s[header_len..],
    })
}

#[cfg(test)]
pub(crate) mod tests {
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
            // RFC 9293 §3.1: a plain data segment's fields, read for a receive run, are
            // smoltcp's; whatever else it is, it is left to the general path.
            let plain = smoltcp_parse(&seg).filter(|r| {
                matches!(r.control, TcpControl::None | TcpControl::Psh)
                    && r.ack_number.is_some()
                    && !r.payload.is_empty()
                    && seg[13] & 0xe0 == 0
            });
            match (parse_data(&seg), plain) {
                (Some(d), Some(r)) => {
                    prop_assert_eq!(d.ports, [seg[0], seg[1], seg[2], seg[3]]);
                    prop_assert_eq!(Some(TcpSeqNumber(d.seq as i32)), Some(r.seq_number));
                    prop_assert_eq!(Some(TcpSeqNumber(d.ack as i32)), r.ack_number);
                    prop_assert_eq!(d.window, r.window_len);
                    prop_assert_eq!(d.timestamp, r.timestamp);
                    prop_assert_eq!(d.payload, r.payload);
                    prop_assert!(r.sack_ranges.iter().all(Option::is_none));
                }
                (Some(d), None) => prop_assert!(false, "{:?} is no plain data segment", d),
                // Those with other options (SACK, MSS, ...) take the general path.
                (None, Some(r)) => prop_assert!(
                    r.sack_ranges.iter().any(Option::is_some)
                        || parse_common(&seg).is_none(),
                    "{:?} left out", r
                ),
                (None, None) => {}
            }
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

    /// Headers of the segments of a transfer: no SYN, no SACK blocks.
    pub(crate) fn common_header() -> impl Strategy<Value = Header> {
        (
            prop_oneof![
                Just(TcpControl::None),
                Just(TcpControl::Psh),
                Just(TcpControl::Fin),
                Just(TcpControl::Rst)
            ],
            any::<u32>(),
            any::<Option<u32>>(),
            any::<u16>(),
            any::<Option<(u32, u32)>>(),
        )
            .prop_map(|(control, seq, ack, window, timestamp)| Header {
                control,
                seq,
                ack,
                window,
                syn: None,
                sack: [None; 3],
                timestamp,
            })
    }

    pub(crate) fn endpoints() -> impl Strategy<Value = (SocketAddr, SocketAddr)> {
        let v4 = (any::<[u8; 4]>(), any::<[u8; 4]>())
            .prop_map(|(a, b)| (IpAddr::from(a), IpAddr::from(b)));
        let v6 = (any::<[u8; 16]>(), any::<[u8; 16]>())
            .prop_map(|(a, b)| (IpAddr::from(a), IpAddr::from(b)));
        // Ports 1..: port 0 names no TCP endpoint, and smoltcp's parser (which the tests
        // verify against) refuses a segment that carries it.
        (prop_oneof![v4, v6], 1..=u16::MAX, 1..=u16::MAX)
            .prop_map(|((a, b), p, q)| (SocketAddr::new(a, p), SocketAddr::new(b, q)))
    }

    proptest! {
        // The direct header writer and smoltcp's emitters write the same packet (both into
        // a zeroed buffer: smoltcp leaves the octet after End of Option List untouched).
        #[test]
        fn direct_emit_same_as_smoltcp(
            hdr in common_header(),
            (src, dst) in endpoints(),
            payload in proptest::collection::vec(any::<u8>(), 0..64),
            fill in any::<bool>(),
        ) {
            let cfg = Config { fill_checksums: fill, ..Config::default() };
            let mut direct = [0u8; 256];
            let mut smol = [0u8; 256];
            let at = emit_common(&mut direct, &cfg, src, dst, &hdr, payload.len());
            prop_assert!(at.is_some(), "a transfer's segment takes the direct path");
            let len = write_packet(&mut direct, &cfg, src, dst, &hdr, &payload);
            let at_smol = emit_headers(&mut smol, &cfg, src, dst, &hdr, payload.len());
            prop_assert_eq!(at, at_smol);
            let total = at_smol.unwrap() + payload.len();
            smol[at_smol.unwrap()..total].copy_from_slice(&payload);
            if fill {
                let ip_len = ip_header_len(src.ip());
                let mut pkt = TcpPacket::new_unchecked(&mut smol[ip_len..total]);
                pkt.fill_checksum(&IpAddress::from(src.ip()), &IpAddress::from(dst.ip()));
            }
            prop_assert_eq!(len, Some(total));
            prop_assert_eq!(&direct[..], &smol[..]);
        }

        // A payload whose sum its source took is written as one summed while copied.
        #[test]
        fn known_sum_writes_the_same_packet(
            hdr in common_header(),
            (src, dst) in endpoints(),
            payload in proptest::collection::vec(any::<u8>(), 0..2000),
        ) {
            let cfg = Config::default();
            let (mut copied, mut known) = ([0u8; 2200], [0u8; 2200]);
            let sum = crate::checksum::PayloadSum::from_folded(
                crate::checksum::sum(&payload),
                payload.len(),
            );
            let a = write_packet(&mut copied, &cfg, src, dst, &hdr, &payload);
            let b = write_packet_summed(&mut known, &cfg, src, dst, &hdr, &payload, Some(sum));
            prop_assert!(a.is_some());
            prop_assert_eq!(a, b);
            prop_assert_eq!(&copied[..], &known[..]);
        }
    }

    /// What smoltcp makes of a packet from `src` to `dst`: both checksums verified, the
    /// TCP header parsed.
    pub(crate) fn smoltcp_verifies(pkt: &[u8], src: SocketAddr, dst: SocketAddr) -> bool {
        let (s, d) = (IpAddress::from(src.ip()), IpAddress::from(dst.ip()));
        let ip_len = ip_header_len(src.ip());
        let ip_ok = match src.ip() {
            IpAddr::V4(_) => Ipv4Packet::new_checked(pkt).is_ok_and(|p| p.verify_checksum()),
            IpAddr::V6(_) => Ipv6Packet::new_checked(pkt).is_ok(),
        };
        ip_ok
            && TcpPacket::new_checked(&pkt[ip_len..]).is_ok_and(|t| {
                t.verify_checksum(&s, &d)
                    && TcpRepr::parse(&t, &s, &d, &ChecksumCapabilities::default()).is_ok()
            })
    }

    /// The endpoints and header of a data segment (Timestamps, no SACK block) the tests below
    /// write.
    pub(crate) fn data_segment() -> (SocketAddr, SocketAddr, Header) {
        let hdr = Header {
            control: TcpControl::Psh,
            seq: 7,
            ack: Some(9),
            window: 100,
            syn: None,
            sack: [None; 3],
            timestamp: Some((11, 13)),
        };
        (
            "10.0.0.1:4000".parse().unwrap(),
            "10.0.0.2:5000".parse().unwrap(),
            hdr,
        )
    }

    // SYN options and SACK blocks go through smoltcp's emitters.
    #[test]
    fn syn_and_sack_take_smoltcps_emitter() {
        let cfg = Config::default();
        let (src, dst, mut hdr) = data_segment();
        hdr.sack = [Some((1, 2)), None, None];
        let mut buf = [0u8; 128];
        assert!(emit_common(&mut buf, &cfg, src, dst, &hdr, 0).is_none());
        hdr.sack = [None; 3];
        hdr.control = TcpControl::Syn;
        assert!(emit_common(&mut buf, &cfg, src, dst, &hdr, 0).is_none());
        // Too small a buffer: left to the general path, which refuses it.
        hdr.control = TcpControl::Psh;
        assert!(emit_common(&mut buf[..40], &cfg, src, dst, &hdr, 10).is_none());
        assert!(write_packet(&mut buf[..40], &cfg, src, dst, &hdr, &[0; 10]).is_none());
    }

    // So does a data segment as this engine writes it (smoltcp's option layout).
    #[test]
    fn own_data_segment_takes_the_direct_path() {
        let cfg = Config::default();
        let (src, dst, hdr) = data_segment();
        let mut buf = [0u8; 128];
        let len = write_packet(&mut buf, &cfg, src, dst, &hdr, b"ddp").expect("fits");
        let seg = &buf[crate::ip::IPV4_HEADER_LEN..len];
        let r = parse_common(seg).expect("direct path");
        assert_eq!(r.timestamp, Some(TcpTimestampRepr::new(11, 13)));
        assert_eq!(r.payload, b"ddp");
        assert_eq!(Some(r), smoltcp_parse(seg));
    }
}
