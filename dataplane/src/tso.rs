//! TSO frames built in place: the TCP segments a connection sends back to back are written
//! one after another into one large buffer, each segment's IP and TCP headers over the
//! last octets of the payload before it (saved first and put back after), so that the
//! payloads follow each other and the buffer ends up holding one frame: the first
//! segment's headers and all the payload. The device cuts it every `segsz` octets, where
//! the engine did, and replicates the headers (TSO). Compared with joining separate frames
//! at the port (`dpdk::offload::prepare_burst`), nothing per segment is allocated,
//! queued, chained or handed to the device: one buffer and one descriptor per TSO frame.

use crate::frame::{parse_tcp, TcpFrame};

/// Most payload octets in one TSO frame: its IP packet stays within 64000 octets, so that
/// a peer that takes it whole (virtio's large receive) fits it in one 64 KiB buffer.
pub const TSO_MAX_PAYLOAD: usize = 64000 - 60 - 60;

/// Most segments in one TSO frame.
pub const TSO_MAX_SEGS: u16 = 64;

/// Most IP and TCP header octets of one segment (IPv6's 40 and TCP's 60): what a segment
/// written in place overwrites of the payload before it.
pub const MAX_PACKET_HEADERS: usize = 100;

/// Header octets compared at once: [`MAX_PACKET_HEADERS`] in whole words.
const HEADER_WORDS: usize = MAX_PACKET_HEADERS.div_ceil(8);

/// `bytes` (at least `HEADER_WORDS * 8` long) as words.
fn words(bytes: &[u8]) -> [u64; HEADER_WORDS] {
    let mut w = [0u64; HEADER_WORDS];
    for (i, c) in bytes.chunks_exact(8).take(HEADER_WORDS).enumerate() {
        w[i] = u64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
    }
    w
}

/// The TSO frame being built in one buffer: the layout of its first segment and what has
/// joined it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InPlaceTso {
    t: TcpFrame,
    /// The first segment's IP and TCP headers, and which of their bits the next segments'
    /// must equal (all but lengths, IPv4 identification, checksums, sequence number).
    headers: [u64; HEADER_WORDS],
    mask: [u64; HEADER_WORDS],
    /// Payload octets per segment: the first segment's.
    segsz: usize,
    payload: usize,
    segs: u16,
    next_seq: u32,
    /// A shorter segment joined: it must be the last.
    closed: bool,
}

impl InPlaceTso {
    /// Opens a TSO frame with the TCP segment at the start of `frame` (whose 802.1Q tag
    /// the device inserts when `tag_offloaded` holds its TCI), or `None` when it is no
    /// TCP segment with payload over IPv4 or IPv6 without extension headers.
    pub fn open(frame: &[u8], tag_offloaded: Option<u16>) -> Option<InPlaceTso> {
        let t = parse_tcp(frame, tag_offloaded)?;
        let p = t.payload_len();
        let h = t.l3_len + t.l4_len;
        if p == 0 || p > TSO_MAX_PAYLOAD || h > MAX_PACKET_HEADERS {
            return None;
        }
        let mut first = [0u8; HEADER_WORDS * 8];
        first[..h].copy_from_slice(&frame[t.l3..t.l3 + h]);
        let mut mask = [0u8; HEADER_WORDS * 8];
        mask[..h].fill(0xff);
        let l4 = t.l3_len;
        let varying: &[std::ops::Range<usize>] = if t.ipv4 {
            &[2..6, 10..12, l4 + 4..l4 + 8, l4 + 16..l4 + 18]
        } else {
            &[4..6, l4 + 4..l4 + 8, l4 + 16..l4 + 18]
        };
        for r in varying {
            mask[r.clone()].fill(0);
        }
        Some(InPlaceTso {
            t,
            headers: words(&first),
            mask: words(&mask),
            segsz: p,
            payload: p,
            segs: 1,
            next_seq: t.seq(frame).wrapping_add(p as u32),
            closed: false,
        })
    }

    /// The frame's octets so far (headers and payload).
    pub fn len(&self) -> usize {
        self.t.header_len() + self.payload
    }

    /// Always false: a TSO frame holds at least its first segment.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// IP and TCP header octets of a segment.
    pub fn packet_headers(&self) -> usize {
        self.t.l3_len + self.t.l4_len
    }

    /// Where the next segment's IP packet is written: its headers end where the payload so
    /// far ends, so its payload follows.
    pub fn next_packet(&self) -> usize {
        self.len() - self.packet_headers()
    }

    /// Whether another segment may join a frame in a buffer of `room` octets, written at
    /// [`InPlaceTso::next_packet`] with room for an IP packet of `mtu` octets.
    pub fn takes_more(&self, mtu: usize, room: usize) -> bool {
        !self.closed
            && self.segs < TSO_MAX_SEGS
            && self.payload < TSO_MAX_PAYLOAD
            && self.next_packet() + mtu <= room
    }

    /// Whether the IP packet of `len` octets written at [`InPlaceTso::next_packet`] of
    /// `frame` continues this TSO frame: the same headers but for lengths, IPv4
    /// identification, checksums and sequence number, the next sequence number, a payload
    /// no longer than the first (a shorter one is the last) and within the limits. If so
    /// it is counted in (its headers are then the caller's to overwrite with the payload
    /// octets they covered).
    pub fn join(&mut self, frame: &[u8], len: usize) -> bool {
        let (at, h) = (self.next_packet(), self.packet_headers());
        // The header words are read from the buffer, which has room for an MTU's packet
        // there; the mask leaves out what lies beyond the headers.
        let Some(next) = frame.get(at..at + (HEADER_WORDS * 8).max(len)) else {
            return false;
        };
        let w = words(next);
        let differ = (0..HEADER_WORDS).any(|i| (w[i] ^ self.headers[i]) & self.mask[i] != 0);
        if len <= h || differ {
            return false;
        }
        let ip_len = if self.t.ipv4 {
            usize::from(u16::from_be_bytes([next[2], next[3]]))
        } else {
            usize::from(u16::from_be_bytes([next[4], next[5]])) + self.t.l3_len
        };
        let p = len - h;
        let seq_at = self.t.l3_len + 4;
        let seq = u32::from_be_bytes([
            next[seq_at],
            next[seq_at + 1],
            next[seq_at + 2],
            next[seq_at + 3],
        ]);
        if ip_len != len
            || p > self.segsz
            || seq != self.next_seq
            || self.closed
            || self.segs >= TSO_MAX_SEGS
            || self.payload + p > TSO_MAX_PAYLOAD
        {
            return false;
        }
        self.closed = p < self.segsz;
        self.payload += p;
        self.segs += 1;
        self.next_seq = self.next_seq.wrapping_add(p as u32);
        true
    }

    /// The first segment's layout.
    pub fn layout(&self) -> TcpFrame {
        self.t
    }

    /// Payload octets of all the segments.
    pub fn payload(&self) -> usize {
        self.payload
    }

    /// Segments joined (the first included).
    pub fn segments(&self) -> u16 {
        self.segs
    }

    /// The segment size the device cuts at: the first segment's payload, or 0 for a frame
    /// of one segment (no TSO).
    pub fn segsz(&self) -> usize {
        if self.segs > 1 {
            self.segsz
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_frames::{tcp_frame, TO_US};

    /// A data segment of `len` octets at `seq`, its payload numbered from `seq`.
    fn segment(seq: u32, len: usize) -> Vec<u8> {
        let payload: Vec<u8> = (0..len).map(|i| (seq as usize + i) as u8).collect();
        let mut f = tcp_frame(TO_US, &payload);
        f[38..42].copy_from_slice(&seq.to_be_bytes());
        f
    }

    /// Writes `segs` (whole frames) in place into a buffer of `room` octets the way the
    /// poll loop does; returns the buffer truncated to the frame and the builder, or the
    /// index of the first segment that did not join.
    fn build(segs: &[Vec<u8>], room: usize) -> Result<(Vec<u8>, InPlaceTso), usize> {
        let mut buf = vec![0u8; room];
        buf[..segs[0].len()].copy_from_slice(&segs[0]);
        let mut t = InPlaceTso::open(&buf, None).ok_or(0usize)?;
        for (i, s) in segs.iter().enumerate().skip(1) {
            let packet = &s[14..];
            if !t.takes_more(1500, room) {
                return Err(i);
            }
            let (at, h) = (t.next_packet(), t.packet_headers());
            let saved = buf[at..at + h].to_vec();
            buf[at..at + packet.len()].copy_from_slice(packet);
            if !t.join(&buf, packet.len()) {
                return Err(i);
            }
            buf[at..at + h].copy_from_slice(&saved);
        }
        buf.truncate(t.len());
        Ok((buf, t))
    }

    fn segments(n: usize, size: usize, last: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                segment(
                    1000 + (i * size) as u32,
                    if i + 1 == n { last } else { size },
                )
            })
            .collect()
    }

    #[test]
    fn segments_written_in_place_give_the_first_headers_and_all_payload() {
        let segs = segments(5, 1448, 300);
        let (frame, t) = build(&segs, 65535).unwrap();
        assert_eq!(
            (t.segments(), t.segsz(), t.payload()),
            (5, 1448, 4 * 1448 + 300)
        );
        let h = t.layout().header_len();
        assert_eq!(&frame[..h], &segs[0][..h]);
        let payload: Vec<u8> = segs.iter().flat_map(|s| s[h..].to_vec()).collect();
        assert_eq!(&frame[h..], &payload[..]);
        // A shorter segment was the last one.
        assert!(!t.takes_more(1500, 65535));
    }

    #[test]
    fn a_gap_other_headers_or_a_longer_segment_do_not_join() {
        let segs = segments(3, 1000, 1000);
        let mut gap = segs.clone();
        gap[2] = segment(1000 + 2 * 1000 + 1, 1000);
        assert_eq!(build(&gap, 65535).unwrap_err(), 2);
        let mut other = segs.clone();
        other[1][45] ^= 1; // the ACK moved
        assert_eq!(build(&other, 65535).unwrap_err(), 1);
        let mut longer = segs.clone();
        longer[1] = segment(2000, 1001);
        assert_eq!(build(&longer, 65535).unwrap_err(), 1);
        // No room for another packet of an MTU.
        assert_eq!(build(&segs, 14 + 40 + 1000 + 1500).unwrap_err(), 2);
        // One segment alone is no TSO frame.
        let (_, t) = build(&segs[..1], 65535).unwrap();
        assert_eq!((t.segments(), t.segsz()), (1, 0));
    }
}
