//! Per-connection header templates: the IP and TCP headers of a connection's segments of a
//! transfer (no SYN options, no SACK blocks), written once with the fields that never change
//! (version, addresses, hop limit, ports, data offset, option kinds), and the sums of those
//! constant words kept for both checksums. A segment copies the template and patches its
//! own fields (lengths, sequence and acknowledgment numbers, flags, window, timestamps);
//! the checksums are the constant sums plus the patched words (RFC 1624's incremental
//! update, taken from a zero field), so no header octet is read back to be summed.

use std::net::{IpAddr, SocketAddr};

use crate::checksum::{complement, header_sum, PayloadSum, PseudoHeader};
use crate::config::Config;
use crate::wire::{common_shape, control_flags, emit_common, Header, TCP_FLAG_ACK};

/// The longest template: an IPv6 header and a TCP header with the Timestamps option.
const MAX_LEN: usize = 72;
/// Where the TCP header's fields are (RFC 9293 §3.1) and the Timestamps option's values
/// (RFC 7323 §3.2, kind and length first, as [`emit_common`] lays it out).
const SEQ: usize = 4;
const ACK: usize = 8;
const FLAGS: usize = 13;
const WINDOW: usize = 14;
const CHECKSUM: usize = 16;
const TSVAL: usize = 22;
const TSECR: usize = 26;

/// The headers of one connection's segments of a transfer, prebuilt.
#[derive(Clone, Debug)]
pub(crate) struct Template {
    /// The IP header and the TCP header, the variable fields zero.
    bytes: [u8; MAX_LEN],
    /// Length of the IP header (20 or 40).
    ip_len: u8,
    /// Length of the TCP header (20, or 32 with timestamps).
    tcp_len: u8,
    /// Whether checksums are filled.
    fill: bool,
    /// IPv4: the sum of the header's 16-bit words as values, the total length left out.
    ip_sum: u32,
    /// The unfolded native-order sum ([`crate::checksum`]) of the pseudo-header without
    /// its length and of the TCP header's constant words.
    tcp_sum: u64,
}

impl Template {
    /// The template of segments from `src` to `dst` with or without the Timestamps option,
    /// or `None` when the families differ.
    pub(crate) fn new(
        cfg: &Config,
        src: SocketAddr,
        dst: SocketAddr,
        timestamps: bool,
    ) -> Option<Template> {
        let zero = Header {
            control: smoltcp::wire::TcpControl::None,
            seq: 0,
            ack: None,
            window: 0,
            syn: None,
            sack: [None; 3],
            timestamp: timestamps.then_some((0, 0)),
        };
        let mut bytes = [0u8; MAX_LEN];
        let len = emit_common(&mut bytes, cfg, src, dst, &zero, 0)?;
        let ip_len = crate::ip::ip_header_len(src.ip());
        // The lengths and the checksums vary: zero in the template.
        match src.ip() {
            IpAddr::V4(_) => {
                bytes[2..4].fill(0);
                bytes[10..12].fill(0);
            }
            IpAddr::V6(_) => bytes[4..6].fill(0),
        }
        let ip_sum = match src.ip() {
            IpAddr::V4(_) => bytes[..ip_len]
                .chunks_exact(2)
                .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
                .sum(),
            IpAddr::V6(_) => 0,
        };
        let tcp_sum = IpAddr::pseudo_sum(src.ip(), dst.ip(), 0) + header_sum(&bytes[ip_len..len]);
        Some(Template {
            bytes,
            ip_len: ip_len as u8,
            tcp_len: (len - ip_len) as u8,
            fill: cfg.fill_checksums,
            ip_sum,
            tcp_sum,
        })
    }

    /// Whether `hdr` is a segment of this template's shape.
    pub(crate) fn fits(&self, hdr: &Header) -> bool {
        common_shape(hdr) && hdr.timestamp.is_some() == self.has_timestamps()
    }

    /// Whether the template carries the Timestamps option.
    pub(crate) fn has_timestamps(&self) -> bool {
        usize::from(self.tcp_len) > crate::wire::TCP_HEADER_LEN
    }

    /// Writes the headers of `hdr` (which [`Template::fits`]) for a payload of
    /// `payload_len` octets into `buf`. Returns where the payload starts and, with
    /// checksums filled, the unfolded sum of the TCP pseudo-header and header for
    /// [`Template::set_checksum`]; `None` when `buf` or the packet's length field is too
    /// small.
    pub(crate) fn write(
        &self,
        buf: &mut [u8],
        hdr: &Header,
        payload_len: usize,
    ) -> Option<(usize, Option<u64>)> {
        debug_assert!(self.fits(hdr), "a header of another shape");
        let (ip_len, tcp_len) = (usize::from(self.ip_len), usize::from(self.tcp_len));
        let at = ip_len + tcp_len;
        let seg_len = tcp_len + payload_len;
        let total = at + payload_len;
        let v4 = ip_len == crate::ip::IPV4_HEADER_LEN;
        // IPv4's total length, IPv6's payload length.
        let length = if v4 { total } else { seg_len };
        if total > buf.len() || length > usize::from(u16::MAX) {
            return None;
        }
        let head = &mut buf[..at];
        head.copy_from_slice(&self.bytes[..at]);
        let (ip, tcp) = head.split_at_mut(ip_len);
        if v4 {
            ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            if self.fill {
                let mut acc = self.ip_sum + total as u32;
                acc = (acc & 0xffff) + (acc >> 16);
                acc = (acc & 0xffff) + (acc >> 16);
                ip[10..12].copy_from_slice(&(!(acc as u16)).to_be_bytes());
            }
        } else {
            ip[4..6].copy_from_slice(&(seg_len as u16).to_be_bytes());
        }
        let flags = control_flags(hdr.control) | if hdr.ack.is_some() { TCP_FLAG_ACK } else { 0 };
        let seq = hdr.seq.to_be_bytes();
        let ack = hdr.ack.unwrap_or(0).to_be_bytes();
        let window = hdr.window.to_be_bytes();
        let (tsval, tsecr) = hdr.timestamp.unwrap_or((0, 0));
        let (tsval, tsecr) = (tsval.to_be_bytes(), tsecr.to_be_bytes());
        tcp[SEQ..SEQ + 4].copy_from_slice(&seq);
        tcp[ACK..ACK + 4].copy_from_slice(&ack);
        tcp[FLAGS] = flags;
        tcp[WINDOW..WINDOW + 2].copy_from_slice(&window);
        if hdr.timestamp.is_some() {
            tcp[TSVAL..TSVAL + 4].copy_from_slice(&tsval);
            tcp[TSECR..TSECR + 4].copy_from_slice(&tsecr);
        }
        if !self.fill {
            return Some((at, None));
        }
        // The patched words, in native order like the rest of the sum (zero timestamps
        // add nothing).
        let acc = self.tcp_sum
            + u64::from(u32::from_ne_bytes(seq))
            + u64::from(u32::from_ne_bytes(ack))
            + u64::from(u16::from_ne_bytes([0, flags]))
            + u64::from(u16::from_ne_bytes(window))
            + u64::from(u16::from_ne_bytes((seg_len as u16).to_be_bytes()))
            + u64::from(u32::from_ne_bytes(tsval))
            + u64::from(u32::from_ne_bytes(tsecr));
        Some((at, Some(acc)))
    }

    /// Fills the TCP checksum of the headers [`Template::write`] wrote into `buf`, from the
    /// sum it returned (`headers`) and the payload's.
    pub(crate) fn set_checksum(&self, buf: &mut [u8], headers: u64, payload: PayloadSum) {
        let at = usize::from(self.ip_len) + CHECKSUM;
        buf[at..at + 2].copy_from_slice(&complement(headers + payload.wide()).to_be_bytes());
    }
}
