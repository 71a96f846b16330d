//! MPA markers (RFC 5044 §5): a 4-octet marker every 512 octets of TCP sequence space,
//! counted from the first octet of the first FPDU of a direction, and MULPDU sizing (§4.1).
//!
//! Positions are computed modulo 2^32 (a multiple of 512), so sequence wrap needs no care.

use crate::wire::crc::{crc32c, to_wire};
use crate::wire::mpa::{Marker, MARKER_LEN};

/// Distance between markers in TCP sequence space.
pub const MARKER_INTERVAL: u32 = 512;

/// MULPDU for an effective send MSS (RFC 5044 §4.1):
/// with markers `EMSS - (6 + 4 * ceil(EMSS / 512) + EMSS mod 4)`, else `EMSS - (6 + EMSS mod 4)`.
/// Returns 0 when EMSS is too small to carry any FPDU.
pub fn mulpdu(emss: usize, markers: bool) -> usize {
    let overhead = if markers {
        6 + 4 * emss.div_ceil(MARKER_INTERVAL as usize) + emss % 4
    } else {
        6 + emss % 4
    };
    emss.saturating_sub(overhead)
}

/// Marker positions of one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkerSpacing {
    start: u32,
}

impl MarkerSpacing {
    /// Markers relative to `start_seq`, the sequence number of the first FPDU octet of the
    /// direction (the octet after the MPA Request or Reply).
    pub fn new(start_seq: u32) -> Self {
        MarkerSpacing { start: start_seq }
    }

    /// The reference sequence number.
    pub fn start(&self) -> u32 {
        self.start
    }

    /// Offset of `seq` within its 512-octet interval.
    pub fn offset(&self, seq: u32) -> u32 {
        seq.wrapping_sub(self.start) % MARKER_INTERVAL
    }

    /// Whether a marker starts at `seq`.
    pub fn is_marker_at(&self, seq: u32) -> bool {
        self.offset(seq) == 0
    }

    /// The first marker position at or after `seq`.
    pub fn next_marker(&self, seq: u32) -> u32 {
        match self.offset(seq) {
            0 => seq,
            o => seq.wrapping_add(MARKER_INTERVAL - o),
        }
    }

    /// Stream octets an FPDU of `fpdu_len` octets occupies when its first octet (its
    /// ULPDU_Length, or the marker in front of it) is at `boundary`, markers included.
    pub fn span(&self, boundary: u32, fpdu_len: usize) -> usize {
        let leading = if self.is_marker_at(boundary) {
            MARKER_LEN
        } else {
            0
        };
        let first = boundary.wrapping_add(leading as u32);
        leading + self.interior_span(first, fpdu_len)
    }

    /// Stream octets from the ULPDU_Length field at `first` to the end of the CRC.
    pub fn interior_span(&self, first: u32, fpdu_len: usize) -> usize {
        let mut span = fpdu_len;
        // Markers that fall before the last FPDU octet push the end further out.
        let mut m = self.next_marker(first.wrapping_add(1));
        let mut dist = m.wrapping_sub(first) as usize;
        while dist < span {
            span += MARKER_LEN;
            m = m.wrapping_add(MARKER_INTERVAL);
            dist = m.wrapping_sub(first) as usize;
        }
        span
    }
}

/// Writes an FPDU into a buffer while inserting the markers that fall into it. The CRC
/// covers every octet it writes before the CRC field: every marker of the FPDU, including
/// the one in front of its ULPDU_Length field (as Wireshark's MPA dissector checks it), so
/// `finish` hashes the FPDU in one pass.
pub(crate) struct MarkedWriter<'a> {
    out: &'a mut Vec<u8>,
    start: usize,
    seq: u32,
    boundary: u32,
    spacing: Option<MarkerSpacing>,
}

impl<'a> MarkedWriter<'a> {
    /// Starts an FPDU at `boundary`; writes the leading marker when one falls there.
    pub(crate) fn new(out: &'a mut Vec<u8>, boundary: u32, spacing: Option<MarkerSpacing>) -> Self {
        let start = out.len();
        let mut w = MarkedWriter {
            out,
            start,
            seq: boundary,
            boundary,
            spacing,
        };
        if spacing.is_some_and(|s| s.is_marker_at(boundary)) {
            let m = Marker::new(0).to_bytes();
            w.out.extend_from_slice(&m);
            w.seq = w.seq.wrapping_add(MARKER_LEN as u32);
        }
        w
    }

    /// Appends FPDU octets (covered by the CRC), inserting markers.
    pub(crate) fn write(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let n = match self.spacing {
                Some(s) => {
                    if s.is_marker_at(self.seq) {
                        let ptr = self.seq.wrapping_sub(self.boundary) as u16;
                        let m = Marker::new(ptr).to_bytes();
                        self.out.extend_from_slice(&m);
                        self.seq = self.seq.wrapping_add(MARKER_LEN as u32);
                    }
                    let to_marker = s.next_marker(self.seq).wrapping_sub(self.seq) as usize;
                    let to_marker = if to_marker == 0 {
                        MARKER_INTERVAL as usize
                    } else {
                        to_marker
                    };
                    data.len().min(to_marker)
                }
                None => data.len(),
            };
            self.out.extend_from_slice(&data[..n]);
            self.seq = self.seq.wrapping_add(n as u32);
            data = &data[n..];
        }
    }

    /// Appends the CRC field, inserting a marker in front of it when one falls there (that
    /// marker is inside the FPDU, so the CRC covers it). The field carries the CRC of all
    /// octets of the FPDU before it when `with_crc`, else zero. Returns the next seq.
    pub(crate) fn finish(mut self, with_crc: bool) -> u32 {
        if let Some(s) = self.spacing {
            if s.is_marker_at(self.seq) {
                let ptr = self.seq.wrapping_sub(self.boundary) as u16;
                let m = Marker::new(ptr).to_bytes();
                self.out.extend_from_slice(&m);
                self.seq = self.seq.wrapping_add(MARKER_LEN as u32);
            }
        }
        let value = if with_crc {
            crc32c(&self.out[self.start..])
        } else {
            0
        };
        self.out.extend_from_slice(&to_wire(value));
        self.seq.wrapping_add(4)
    }
}

/// Copies the non-marker octets of `data` (stream octets starting at `seq`) into `out` and
/// returns the complete markers found as `(seq, marker)`. Octets of markers cut by the
/// edges of `data` are dropped too.
pub fn strip(
    spacing: MarkerSpacing,
    seq: u32,
    data: &[u8],
    out: &mut Vec<u8>,
) -> Vec<(u32, Marker)> {
    let mut markers = Vec::new();
    let mut i = 0usize;
    while i < data.len() {
        let s = seq.wrapping_add(i as u32);
        let off = spacing.offset(s) as usize;
        if off < MARKER_LEN {
            // Inside a marker: skip to its end.
            let skip = MARKER_LEN - off;
            if off == 0 && i + MARKER_LEN <= data.len() {
                if let Ok(m) = Marker::parse(&data[i..i + MARKER_LEN]) {
                    markers.push((s, m));
                }
            }
            i += skip;
            continue;
        }
        let n = (MARKER_INTERVAL as usize - off).min(data.len() - i);
        out.extend_from_slice(&data[i..i + n]);
        i += n;
    }
    markers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mulpdu_formula() {
        // RFC 5044 §4.1
        assert_eq!(mulpdu(1460, false), 1454);
        assert_eq!(mulpdu(1460, true), 1460 - (6 + 12));
        assert_eq!(mulpdu(1448, false), 1442);
        assert_eq!(mulpdu(1448, true), 1448 - (6 + 12));
        assert_eq!(mulpdu(1461, false), 1461 - 7);
        assert_eq!(mulpdu(512, true), 512 - 10);
        assert_eq!(mulpdu(513, true), 513 - (6 + 8 + 1));
        assert_eq!(mulpdu(4, true), 0);
    }

    #[test]
    fn positions_wrap() {
        let s = MarkerSpacing::new(u32::MAX - 99);
        assert!(s.is_marker_at(u32::MAX - 99));
        assert!(s.is_marker_at((u32::MAX - 99).wrapping_add(512)));
        assert_eq!(
            s.next_marker(u32::MAX - 98),
            (u32::MAX - 99).wrapping_add(512)
        );
    }

    #[test]
    fn span_counts_markers() {
        let s = MarkerSpacing::new(0);
        // At 0 the FPDU starts with a marker; 504 octets then fit up to 508 < 512.
        assert_eq!(s.span(0, 504), 508);
        // 508 octets after a leading marker end at 512: the next marker belongs to the
        // next FPDU.
        assert_eq!(s.span(0, 508), 512);
        assert_eq!(s.span(0, 512), 520);
        // Markers at 512 and 1024 both fall inside.
        assert_eq!(s.span(4, 1020), 1028);
        assert_eq!(s.span(508, 8), 12);
    }

    #[test]
    fn writer_then_strip() {
        let s = MarkerSpacing::new(1000);
        let data: Vec<u8> = (0..2000u32).map(|i| i as u8).collect();
        let mut out = Vec::new();
        let mut w = MarkedWriter::new(&mut out, 1000, Some(s));
        w.write(&data);
        let end = w.finish(true);
        assert_eq!(out.len(), s.span(1000, 2004));
        assert_eq!(end, 1000 + out.len() as u32);
        let mut back = Vec::new();
        let found = strip(s, 1000, &out, &mut back);
        assert_eq!(&back[..2000], &data[..]);
        let ptrs: Vec<u16> = found.iter().map(|(_, m)| m.fpduptr).collect();
        assert_eq!(ptrs, vec![0, 512, 1024, 1536]);
    }
}
