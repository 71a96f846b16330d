//! MPA sender (RFC 5044 §4, §5, §6): wraps DDP segments into FPDUs (ULPDU_Length, pad,
//! CRC or zero CRC, markers at their TCP sequence positions) and builds FPDU-aligned units:
//! every unit holds whole FPDUs only, so every TCP segment starts with an FPDU or with the
//! marker in front of one ("MPA-aware TCP", RFC 5044 §6.1).

use crate::mpa::error::MpaError;
use crate::mpa::markers::{MarkedWriter, MarkerSpacing};
use crate::mpa::negotiate::Negotiated;
use crate::wire::crc::{crc32c, to_wire};
use crate::wire::crcsum::{crc32c_and_sum, CrcSum};
use crate::wire::mpa::{fpdu_len, pad_len, ULPDU_LENGTH_LEN};
use tcp::checksum::{payload_sum, PayloadSum};

/// What `Framer::build_unit` put into a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnitInfo {
    /// Number of DDP segments (= FPDUs) taken from the front of the list.
    pub fpdus: usize,
    /// Octets appended to the unit buffer, markers included.
    pub len: usize,
    /// Sequence number after the unit.
    pub end_seq: u32,
}

/// FPDU builder for one direction of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framer {
    crc: bool,
    markers: Option<MarkerSpacing>,
}

impl Framer {
    /// A framer computing CRCs when `crc`, inserting markers when `markers` is set.
    pub fn new(crc: bool, markers: Option<MarkerSpacing>) -> Self {
        Framer { crc, markers }
    }

    /// The framer for our sending direction; `tx_start_seq` is the sequence number of the
    /// octet after our MPA Request or Reply.
    pub fn from_negotiated(n: &Negotiated, tx_start_seq: u32) -> Self {
        Framer::new(
            n.crc,
            n.markers_tx.then(|| MarkerSpacing::new(tx_start_seq)),
        )
    }

    /// Whether CRCs are computed.
    pub fn crc(&self) -> bool {
        self.crc
    }

    /// Marker spacing, when markers are sent.
    pub fn markers(&self) -> Option<MarkerSpacing> {
        self.markers
    }

    /// Stream octets of an FPDU carrying `ulpdu_len` octets that starts at `seq`.
    pub fn wire_len(&self, seq: u32, ulpdu_len: usize) -> usize {
        let len = fpdu_len(ulpdu_len);
        match self.markers {
            Some(s) => s.span(seq, len),
            None => len,
        }
    }

    /// Appends one FPDU carrying the gathered `segment` at stream position `seq`; returns
    /// the octets appended.
    pub fn emit_fpdu(
        &self,
        seq: u32,
        segment: &[&[u8]],
        out: &mut Vec<u8>,
    ) -> Result<usize, MpaError> {
        let ulpdu_len: usize = segment.iter().map(|p| p.len()).sum();
        if ulpdu_len > u16::MAX as usize {
            return Err(MpaError::Framing("DDP segment longer than 65535 octets"));
        }
        let span = self.wire_len(seq, ulpdu_len);
        if self.markers.is_some() && span > u16::MAX as usize + 1 {
            return Err(MpaError::Framing("FPDU too long for a marker pointer"));
        }
        let start = out.len();
        out.reserve(span);
        let mut w = MarkedWriter::new(out, seq, self.markers);
        w.write(&(ulpdu_len as u16).to_be_bytes());
        for part in segment {
            w.write(part);
        }
        w.write(&[0u8; 3][..pad_len(ulpdu_len)]);
        w.finish(self.crc);
        debug_assert_eq!(out.len() - start, span);
        Ok(out.len() - start)
    }

    /// Finishes an FPDU in the buffer that holds its ULPDU: from `at` on, `buf` is
    /// `ULPDU_LENGTH_LEN` octets of room followed by the ULPDU (as
    /// `DdpSegmentOut::into_ulpdu_buffer` gives it); the ULPDU_Length field, the pad and
    /// the CRC are written around it, so the ULPDU is not copied. The octets before `at`
    /// are left alone. Only without markers (their positions would move the ULPDU);
    /// returns the FPDU's length and, with CRCs on, the TCP checksum sum of the whole FPDU,
    /// taken in the CRC's pass ([`crate::wire::crcsum`]), for a unit of this FPDU alone.
    #[inline]
    pub fn frame_in_place(
        &self,
        buf: &mut Vec<u8>,
        at: usize,
    ) -> Result<(usize, Option<PayloadSum>), MpaError> {
        self.frame_in_place_with(buf, at, None)
    }

    /// [`Framer::frame_in_place`] of a segment whose CRC32c and TCP sum were taken as it
    /// was built: `digest` covers the ULPDU, its CRC continuing from [`Framer::crc_seed`] of
    /// the ULPDU's length (`rdmap::Engine::poll_segment_digested`), so that only the pad
    /// and the length field are summed here. Without CRCs the digest is not needed.
    #[inline]
    pub fn frame_in_place_digested(
        &self,
        buf: &mut Vec<u8>,
        at: usize,
        digest: CrcSum,
    ) -> Result<(usize, Option<PayloadSum>), MpaError> {
        self.frame_in_place_with(buf, at, Some(digest))
    }

    /// The CRC32c of an FPDU's ULPDU_Length field for a ULPDU of `ulpdu_len` octets: where
    /// the FPDU's CRC stands when its ULPDU starts ([`Framer::frame_in_place_digested`]).
    /// A length beyond the field's range gives a value of no use (framing refuses it).
    pub fn crc_seed(ulpdu_len: usize) -> u32 {
        crc32c(&u16::try_from(ulpdu_len).unwrap_or(0).to_be_bytes())
    }

    #[inline]
    fn frame_in_place_with(
        &self,
        buf: &mut Vec<u8>,
        at: usize,
        digest: Option<CrcSum>,
    ) -> Result<(usize, Option<PayloadSum>), MpaError> {
        if self.markers.is_some() {
            return Err(MpaError::Framing("in-place framing with markers"));
        }
        let ulpdu_len = buf
            .len()
            .checked_sub(at + ULPDU_LENGTH_LEN)
            .ok_or(MpaError::Framing("no room for ULPDU_Length"))?;
        let len = u16::try_from(ulpdu_len)
            .map_err(|_| MpaError::Framing("DDP segment longer than 65535 octets"))?;
        buf[at..at + ULPDU_LENGTH_LEN].copy_from_slice(&len.to_be_bytes());
        let pad = pad_len(ulpdu_len);
        buf.resize(buf.len() + pad, 0);
        let (crc, sum) = if self.crc {
            let one = match digest {
                Some(mut d) => {
                    d.extend(&buf[buf.len() - pad..]);
                    CrcSum {
                        crc: d.crc,
                        sum: payload_sum(&buf[at..at + ULPDU_LENGTH_LEN]).then(d.sum),
                    }
                }
                None => crc32c_and_sum(&buf[at..]),
            };
            debug_assert!(
                digest.is_none() || {
                    let whole = crc32c_and_sum(&buf[at..]);
                    whole.crc == one.crc && whole.sum.folded() == one.sum.folded()
                },
                "the digest does not cover this ULPDU"
            );
            (one.crc, Some(one.sum))
        } else {
            (0, None)
        };
        let crc = to_wire(crc);
        buf.extend_from_slice(&crc);
        debug_assert_eq!(buf.len() - at, fpdu_len(ulpdu_len));
        Ok((buf.len() - at, sum.map(|s| s.then(payload_sum(&crc)))))
    }

    /// Appends a unit starting at `seq` made of as many whole FPDUs from the front of
    /// `segments` as fit into `max_len` octets (markers included). Fails when not even the
    /// first FPDU fits; an empty list gives an empty unit.
    pub fn build_unit<'s, G: AsRef<[&'s [u8]]>>(
        &self,
        seq: u32,
        max_len: usize,
        segments: &[G],
        out: &mut Vec<u8>,
    ) -> Result<UnitInfo, MpaError> {
        let mut info = UnitInfo {
            fpdus: 0,
            len: 0,
            end_seq: seq,
        };
        for seg in segments {
            let parts = seg.as_ref();
            let ulpdu_len: usize = parts.iter().map(|p| p.len()).sum();
            let need = self.wire_len(info.end_seq, ulpdu_len);
            if info.len + need > max_len {
                if info.fpdus == 0 {
                    return Err(MpaError::Framing("unit too small for the next FPDU"));
                }
                break;
            }
            let n = self.emit_fpdu(info.end_seq, parts, out)?;
            info.fpdus += 1;
            info.len += n;
            info.end_seq = info.end_seq.wrapping_add(n as u32);
        }
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::mpa::Fpdu;

    #[test]
    fn plain_fpdu_with_crc() {
        // RFC 5044 §4.1: ULPDU_Length | ULPDU | pad | CRC over the first three.
        let f = Framer::new(true, None);
        let mut out = Vec::new();
        let n = f
            .emit_fpdu(7, &[&[0xc1, 0x40], &[1, 2, 3]], &mut out)
            .unwrap();
        assert_eq!(n, 12);
        let v = Fpdu::new_checked(&out[..]).unwrap();
        assert_eq!(v.ulpdu(), &[0xc1, 0x40, 1, 2, 3]);
        assert_eq!(v.crc(), crate::wire::crc::crc32c(v.crc_covered()));
        let f = Framer::new(false, None);
        out.clear();
        f.emit_fpdu(7, &[&[1, 2, 3, 4, 5, 6]], &mut out).unwrap();
        assert_eq!(&out[8..12], &[0, 0, 0, 0]);
    }

    // The in-place FPDU is the one emit_fpdu builds by copying, octet for octet, wherever
    // it starts in the buffer; what comes before it is left alone.
    #[test]
    fn in_place_fpdu_equals_copied_fpdu() {
        for (crc, at) in [(true, 0), (false, 0), (true, 128), (false, 3)] {
            let f = Framer::new(crc, None);
            for n in [0usize, 1, 5, 6, 1442] {
                let payload: Vec<u8> = (0..n).map(|i| (i * 7) as u8).collect();
                let header = [0x41, 0x43, 0, 0, 0, 1];
                let mut copied = Vec::new();
                f.emit_fpdu(9, &[&header, &payload], &mut copied).unwrap();
                let mut buf = vec![0xee; at + ULPDU_LENGTH_LEN];
                buf.extend_from_slice(&header);
                buf.extend_from_slice(&payload);
                let (len, sum) = f.frame_in_place(&mut buf, at).unwrap();
                assert_eq!(len, copied.len());
                assert_eq!(&buf[at..], copied, "crc {crc}, {n} octets at {at}");
                assert!(buf[..at].iter().all(|&b| b == 0xee), "room kept");
                // With the CRC comes the FPDU's TCP checksum sum.
                let want = crc.then(|| payload_sum(&copied).folded());
                assert_eq!(sum.map(|s| s.folded()), want);
                assert!(sum.is_none_or(|s| s.octets() == copied.len()));
            }
        }
        let marked = Framer::new(true, Some(MarkerSpacing::new(0)));
        assert!(marked.frame_in_place(&mut vec![0; 10], 0).is_err());
        // A buffer too short for the ULPDU_Length field after `at` is refused.
        assert!(Framer::new(true, None)
            .frame_in_place(&mut vec![0; 10], 9)
            .is_err());
    }

    // RFC 5044 §4.1: the FPDU finished from a digest taken while the ULPDU was built
    // (CRC seeded with the ULPDU_Length field's, the ULPDU summed) is the copied one octet
    // for octet, with the same TCP sum, whatever pad the length needs (0 to 3 octets).
    #[test]
    fn digested_fpdu_equals_copied_fpdu() {
        let f = Framer::new(true, None);
        let header = [0x41, 0x43, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0];
        for n in [0usize, 1, 2, 3, 4, 5, 6, 1434, 1448, 8946] {
            let payload: Vec<u8> = (0..n).map(|i| (i * 13 + 1) as u8).collect();
            let mut copied = Vec::new();
            f.emit_fpdu(9, &[&header, &payload], &mut copied).unwrap();
            let mut buf = vec![0xee; 128 + ULPDU_LENGTH_LEN];
            let mut digest = CrcSum::after(Framer::crc_seed(header.len() + n));
            buf.extend_from_slice(&header);
            digest.extend(&header);
            let start = buf.len();
            buf.resize(start + n, 0);
            digest.extend_copy(&payload, &mut buf[start..]);
            let (len, sum) = f.frame_in_place_digested(&mut buf, 128, digest).unwrap();
            assert_eq!(len, copied.len());
            assert_eq!(&buf[128..], copied, "{n} octets");
            let sum = sum.expect("with CRCs the sum comes along");
            assert_eq!(sum.folded(), payload_sum(&copied).folded(), "{n} octets");
            assert_eq!(sum.octets(), copied.len());
        }
    }

    #[test]
    fn units_hold_whole_fpdus() {
        let f = Framer::new(true, Some(MarkerSpacing::new(100)));
        let a = [0u8; 100];
        let segs: Vec<Vec<&[u8]>> = vec![vec![&a[..]], vec![&a[..]], vec![&a[..]]];
        let mut out = Vec::new();
        // First FPDU: marker + 108 octets = 112; the second fits in 240, the third not.
        let info = f.build_unit(100, 240, &segs, &mut out).unwrap();
        assert_eq!(info.fpdus, 2);
        assert_eq!(info.len, 112 + 108);
        assert_eq!(out.len(), info.len);
        assert!(f.build_unit(100, 50, &segs, &mut out).is_err());
    }
}
