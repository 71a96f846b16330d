//! Emitting IPv4 + TCP packets with smoltcp's wire layer.

use std::net::SocketAddrV4;

use smoltcp::phy::{Checksum, ChecksumCapabilities};
use smoltcp::wire::{
    IpAddress, IpProtocol, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
    TcpTimestampRepr,
};

use crate::config::Config;

/// IPv4 header length the engine emits (no options).
pub const IPV4_HEADER_LEN: usize = 20;

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

/// Write an IPv4 packet carrying `hdr` + `payload` from `src` to `dst` into `buf`.
/// SACK blocks are dropped (last first) until the packet fits the MTU. Returns the packet
/// length, or `None` when `buf` is too small.
pub(crate) fn write_packet(
    buf: &mut [u8],
    cfg: &Config,
    src: SocketAddrV4,
    dst: SocketAddrV4,
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
    let limit = cfg.mtu.min(buf.len());
    let mut blocks = repr.sack_ranges.iter().filter(|b| b.is_some()).count();
    while IPV4_HEADER_LEN + repr.buffer_len() > limit && blocks > 0 {
        blocks -= 1;
        repr.sack_ranges[blocks] = None;
    }
    let total = IPV4_HEADER_LEN + repr.buffer_len();
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
    let ip = Ipv4Repr {
        src_addr: *src.ip(),
        dst_addr: *dst.ip(),
        next_header: IpProtocol::Tcp,
        payload_len: repr.buffer_len(),
        hop_limit: 64,
    };
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..total]), &caps);
    repr.emit(
        &mut TcpPacket::new_unchecked(&mut buf[IPV4_HEADER_LEN..total]),
        &IpAddress::Ipv4(*src.ip()),
        &IpAddress::Ipv4(*dst.ip()),
        &caps,
    );
    if cfg.fill_checksums {
        let segment = &mut buf[IPV4_HEADER_LEN..total];
        let sum = crate::checksum::tcp_checksum(*src.ip(), *dst.ip(), segment);
        TcpPacket::new_unchecked(segment).set_checksum(sum);
    }
    Some(total)
}
