//! Per-connection header templates: the IP and TCP headers of a connection's segments of a
//! transfer (no SYN options, no SACK blocks), written once with the fields that never change
//! (version, addresses, hop limit, ports, data offset, option kinds), and the sums of those
//! constant words kept for both checksums. A segment copies the template and patches its
//! own fields (lengths, sequence and acknowledgment numbers, flags, window, timestamps);
//! the checksums are the constant sums plus the patched words (RFC 1624's incremental
//! update, taken from a zero field), so no header octet is read back to be summed.
//!
//! [`write_segment`] and [`write_segment_headers`] write a connection's segments through
//! its template, and through [`crate::wire`]'s emitters the shapes a template does not fit.

use std::net::{IpAddr, SocketAddr};

use crate::checksum::{complement, header_sum, PayloadSum, PseudoHeader};
use crate::config::Config;
use crate::wire::{
    common_shape, control_flags, emit_common, write_headers, write_packet_summed, Header,
    TCP_FLAG_ACK,
};

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
    #[inline(always)]
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

/// [`write_packet_summed`] through a connection's header template (`template`, from `src`
/// to `dst`): built on first use, and again when the Timestamps option comes or goes; a
/// header the template does not fit (SYN, SACK blocks) takes [`write_packet_summed`]. The
/// same octets either way.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_segment(
    buf: &mut [u8],
    cfg: &Config,
    template: &mut Option<Template>,
    src: &SocketAddr,
    dst: &SocketAddr,
    hdr: &Header,
    payload: &[u8],
    known: Option<crate::checksum::PayloadSum>,
) -> Option<usize> {
    let Some(t) = template_for(template, cfg, src, dst, hdr) else {
        return write_packet_summed(buf, cfg, *src, *dst, hdr, payload, known);
    };
    let (data_at, headers) = t.write(buf, hdr, payload.len())?;
    let total = data_at + payload.len();
    let data = &mut buf[data_at..total];
    match (headers, known) {
        (Some(headers), Some(sum)) => {
            debug_assert_eq!(
                sum.folded(),
                crate::checksum::payload_sum(payload).folded(),
                "a unit's sum is its payload's"
            );
            data.copy_from_slice(payload);
            t.set_checksum(buf, headers, sum);
        }
        (Some(headers), None) => {
            let sum = crate::checksum::copy_payload(data, payload);
            t.set_checksum(buf, headers, sum);
        }
        (None, _) => data.copy_from_slice(payload),
    }
    Some(total)
}

/// [`write_headers`] through a connection's header template, as [`write_segment`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_segment_headers(
    buf: &mut [u8],
    cfg: &Config,
    template: &mut Option<Template>,
    src: &SocketAddr,
    dst: &SocketAddr,
    hdr: &Header,
    payload_len: usize,
    payload_sum: Option<crate::checksum::PayloadSum>,
) -> Option<usize> {
    let Some(t) = template_for(template, cfg, src, dst, hdr) else {
        return write_headers(buf, cfg, *src, *dst, hdr, payload_len, payload_sum);
    };
    let (data_at, headers) = t.write(buf, hdr, payload_len)?;
    if let (Some(headers), Some(sum)) = (headers, payload_sum) {
        t.set_checksum(buf, headers, sum);
    }
    Some(data_at)
}

/// The template for `hdr` in `template` (made or remade for its shape), or `None` when the
/// header is not of a template's shape.
#[inline(always)]
fn template_for<'a>(
    template: &'a mut Option<Template>,
    cfg: &Config,
    src: &SocketAddr,
    dst: &SocketAddr,
    hdr: &Header,
) -> Option<&'a Template> {
    if !common_shape(hdr) {
        return None;
    }
    let timestamps = hdr.timestamp.is_some();
    if template
        .as_ref()
        .is_none_or(|t| t.has_timestamps() != timestamps)
    {
        *template = Template::new(cfg, *src, *dst, timestamps);
    }
    template.as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tests::{common_header, data_segment, endpoints, smoltcp_verifies};
    use crate::wire::write_packet;
    use proptest::prelude::*;

    proptest! {
        // RFC 9293 §3.1, RFC 1071, RFC 1624: a connection's header template writes the
        // octets the field-by-field emitter writes (so smoltcp's, per the test above),
        // both checksums included, for a run of segments through the one template (nothing
        // of one segment stays in it for the next), with the payload's sum taken while
        // copying or known beforehand, and for the headers of a gathered payload.
        #[test]
        fn template_writes_the_emitters_octets(
            hdrs in proptest::collection::vec(common_header(), 1..6),
            (src, dst) in endpoints(),
            payloads in proptest::collection::vec(
                proptest::collection::vec(any::<u8>(), 0..1600), 6),
            fill in any::<bool>(),
            known in any::<bool>(),
        ) {
            let cfg = Config { fill_checksums: fill, ..Config::default() };
            let mut template = None;
            for (hdr, payload) in hdrs.iter().zip(&payloads) {
                let sum = known.then(|| crate::checksum::payload_sum(payload));
                let (mut direct, mut fresh) = ([0u8; 1800], [0u8; 1800]);
                let ours = write_segment(
                    &mut direct, &cfg, &mut template, &src, &dst, hdr, payload, sum,
                );
                let theirs = write_packet_summed(&mut fresh, &cfg, src, dst, hdr, payload, sum);
                prop_assert!(ours.is_some());
                prop_assert_eq!(ours, theirs);
                prop_assert_eq!(&direct[..], &fresh[..]);
                prop_assert_eq!(
                    template.as_ref().map(Template::has_timestamps),
                    Some(hdr.timestamp.is_some()),
                    "a template of the header's shape"
                );
                if fill {
                    prop_assert!(smoltcp_verifies(&direct[..ours.unwrap()], src, dst));
                }
                let (mut head, mut fresh_head) = ([0u8; 80], [0u8; 80]);
                let sum = fill.then(|| crate::checksum::payload_sum(payload));
                let at = write_segment_headers(
                    &mut head, &cfg, &mut template, &src, &dst, hdr, payload.len(), sum,
                );
                let fresh_at =
                    write_headers(&mut fresh_head, &cfg, src, dst, hdr, payload.len(), sum);
                prop_assert_eq!(at, fresh_at);
                prop_assert_eq!(&head[..], &fresh_head[..]);
            }
        }
    }

    // A header a template does not fit (SYN options, SACK blocks) takes the general
    // emitters and leaves the template as it was; a buffer too small is refused.
    #[test]
    fn template_leaves_other_shapes_to_the_emitters() {
        let cfg = Config::default();
        let (src, dst, mut hdr) = data_segment();
        let mut template = None;
        let (mut a, mut b) = ([0u8; 128], [0u8; 128]);
        write_segment(&mut a, &cfg, &mut template, &src, &dst, &hdr, b"ddp", None).unwrap();
        let made = template.clone().expect("made on first use");
        hdr.sack = [Some((1, 2)), None, None];
        let len = write_segment(&mut a, &cfg, &mut template, &src, &dst, &hdr, b"ddp", None);
        assert_eq!(len, write_packet(&mut b, &cfg, src, dst, &hdr, b"ddp"));
        assert_eq!(a, b, "SACK blocks: smoltcp's emitter");
        assert_eq!(
            format!("{template:?}"),
            format!("{:?}", Some(made)),
            "the template stays"
        );
        hdr.sack = [None; 3];
        assert!(write_segment(
            &mut a[..40],
            &cfg,
            &mut template,
            &src,
            &dst,
            &hdr,
            &[0; 10],
            None
        )
        .is_none());
    }
}
