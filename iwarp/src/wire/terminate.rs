//! Terminate message header (RFC 5040 §4.8, Figs. 8–10) and the shared error vocabulary
//! (`TerminateCause`) every layer uses to describe a protocol error.

use core::fmt;

use super::ddp::{ParseError, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use super::rdmap::READ_REQUEST_LEN;

/// Terminate Control layer value: RDMAP (RFC 5040 Fig. 9).
pub const LAYER_RDMAP: u8 = 0x0;
/// Terminate Control layer value: DDP.
pub const LAYER_DDP: u8 = 0x1;
/// Terminate Control layer value: LLP (MPA/TCP).
pub const LAYER_LLP: u8 = 0x2;

/// Length of the fixed Terminate header (Terminate Control + Reserved).
pub const TERMINATE_FIXED_LEN: usize = 4;
/// Length of the DDP Segment Length field.
pub const SEGMENT_LEN_FIELD_LEN: usize = 2;
/// Largest Terminate header: fixed part, segment length, untagged DDP header, RDMA header.
pub const TERMINATE_MAX_LEN: usize =
    TERMINATE_FIXED_LEN + SEGMENT_LEN_FIELD_LEN + UNTAGGED_HEADER_LEN + READ_REQUEST_LEN;

const FLAG_M: u8 = 0x80;
const FLAG_D: u8 = 0x40;
const FLAG_R: u8 = 0x20;

/// Layer / Error Type / Error Code triple of a Terminate message (RFC 5040 §4.8, Fig. 9).
///
/// `layer` and `etype` are 4-bit values, `code` is 8 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TerminateCause {
    /// Layer that detected the error (`LAYER_RDMAP`, `LAYER_DDP`, `LAYER_LLP`).
    pub layer: u8,
    /// Error type within the layer.
    pub etype: u8,
    /// Error code within the type.
    pub code: u8,
}

impl TerminateCause {
    /// Builds a cause from its three fields (layer and etype are masked to 4 bits).
    pub const fn new(layer: u8, etype: u8, code: u8) -> Self {
        TerminateCause {
            layer: layer & 0x0F,
            etype: etype & 0x0F,
            code,
        }
    }

    // RDMAP layer (RFC 5040 Fig. 9).
    /// 0/0/00 RDMAP Local Catastrophic Error (any code accepted on receive).
    pub const RDMAP_LOCAL_CATASTROPHIC: Self = Self::new(LAYER_RDMAP, 0x0, 0x00);
    /// 0/1/00 Remote Protection Error: Invalid STag.
    pub const RDMAP_INVALID_STAG: Self = Self::new(LAYER_RDMAP, 0x1, 0x00);
    /// 0/1/01 Remote Protection Error: Base or bounds violation.
    pub const RDMAP_BASE_BOUNDS: Self = Self::new(LAYER_RDMAP, 0x1, 0x01);
    /// 0/1/02 Remote Protection Error: Access rights violation.
    pub const RDMAP_ACCESS_RIGHTS: Self = Self::new(LAYER_RDMAP, 0x1, 0x02);
    /// 0/1/03 Remote Protection Error: STag not associated with RDMAP Stream.
    pub const RDMAP_STAG_NOT_ASSOCIATED: Self = Self::new(LAYER_RDMAP, 0x1, 0x03);
    /// 0/1/04 Remote Protection Error: TO wrap.
    pub const RDMAP_TO_WRAP: Self = Self::new(LAYER_RDMAP, 0x1, 0x04);
    /// 0/1/09 Remote Protection Error: STag cannot be Invalidated.
    pub const RDMAP_PROT_CANNOT_INVALIDATE: Self = Self::new(LAYER_RDMAP, 0x1, 0x09);
    /// 0/1/FF Remote Protection Error: Unspecified.
    pub const RDMAP_PROT_UNSPECIFIED: Self = Self::new(LAYER_RDMAP, 0x1, 0xFF);
    /// 0/2/05 Remote Operation Error: Invalid RDMAP version.
    pub const RDMAP_INVALID_VERSION: Self = Self::new(LAYER_RDMAP, 0x2, 0x05);
    /// 0/2/06 Remote Operation Error: Unexpected OpCode.
    pub const RDMAP_UNEXPECTED_OPCODE: Self = Self::new(LAYER_RDMAP, 0x2, 0x06);
    /// 0/2/07 Remote Operation Error: Catastrophic error, localized to RDMAP Stream.
    pub const RDMAP_CATASTROPHIC_STREAM: Self = Self::new(LAYER_RDMAP, 0x2, 0x07);
    /// 0/2/08 Remote Operation Error: Catastrophic error, global.
    pub const RDMAP_CATASTROPHIC_GLOBAL: Self = Self::new(LAYER_RDMAP, 0x2, 0x08);
    /// 0/2/09 Remote Operation Error: STag cannot be Invalidated.
    pub const RDMAP_OP_CANNOT_INVALIDATE: Self = Self::new(LAYER_RDMAP, 0x2, 0x09);
    /// 0/2/FF Remote Operation Error: Unspecified.
    pub const RDMAP_OP_UNSPECIFIED: Self = Self::new(LAYER_RDMAP, 0x2, 0xFF);

    // DDP layer (RFC 5041 §7.2).
    /// 1/0/00 DDP Local Catastrophic.
    pub const DDP_LOCAL_CATASTROPHIC: Self = Self::new(LAYER_DDP, 0x0, 0x00);
    /// 1/1/00 Tagged Buffer Error: Invalid STag.
    pub const DDP_INVALID_STAG: Self = Self::new(LAYER_DDP, 0x1, 0x00);
    /// 1/1/01 Tagged Buffer Error: Base or bounds violation.
    pub const DDP_BASE_BOUNDS: Self = Self::new(LAYER_DDP, 0x1, 0x01);
    /// 1/1/02 Tagged Buffer Error: STag not associated with DDP Stream.
    pub const DDP_STAG_NOT_ASSOCIATED: Self = Self::new(LAYER_DDP, 0x1, 0x02);
    /// 1/1/03 Tagged Buffer Error: TO wrap.
    pub const DDP_TO_WRAP: Self = Self::new(LAYER_DDP, 0x1, 0x03);
    /// 1/1/04 Tagged Buffer Error: Invalid DDP version.
    pub const DDP_TAGGED_INVALID_VERSION: Self = Self::new(LAYER_DDP, 0x1, 0x04);
    /// 1/2/01 Untagged Buffer Error: Invalid QN.
    pub const DDP_INVALID_QN: Self = Self::new(LAYER_DDP, 0x2, 0x01);
    /// 1/2/02 Untagged Buffer Error: Invalid MSN - no buffer available.
    pub const DDP_NO_BUFFER: Self = Self::new(LAYER_DDP, 0x2, 0x02);
    /// 1/2/03 Untagged Buffer Error: Invalid MSN - MSN range is not valid.
    pub const DDP_MSN_RANGE: Self = Self::new(LAYER_DDP, 0x2, 0x03);
    /// 1/2/04 Untagged Buffer Error: Invalid MO.
    pub const DDP_INVALID_MO: Self = Self::new(LAYER_DDP, 0x2, 0x04);
    /// 1/2/05 Untagged Buffer Error: DDP Message too long for available buffer.
    pub const DDP_MESSAGE_TOO_LONG: Self = Self::new(LAYER_DDP, 0x2, 0x05);
    /// 1/2/06 Untagged Buffer Error: Invalid DDP version.
    pub const DDP_UNTAGGED_INVALID_VERSION: Self = Self::new(LAYER_DDP, 0x2, 0x06);

    // LLP layer: MPA (RFC 5044 §8, RFC 6581), error type 0.
    /// 2/0/01 TCP connection closed, terminated or lost.
    pub const MPA_TCP_CLOSED: Self = Self::new(LAYER_LLP, 0x0, 0x01);
    /// 2/0/02 MPA CRC error.
    pub const MPA_CRC_ERROR: Self = Self::new(LAYER_LLP, 0x0, 0x02);
    /// 2/0/03 MPA marker and ULPDU_Length disagree.
    pub const MPA_MARKER_MISMATCH: Self = Self::new(LAYER_LLP, 0x0, 0x03);
    /// 2/0/04 Invalid MPA Request or Reply frame.
    pub const MPA_INVALID_REQ_REP: Self = Self::new(LAYER_LLP, 0x0, 0x04);
    /// 2/0/05 MPA local catastrophic error.
    pub const MPA_LOCAL_CATASTROPHIC: Self = Self::new(LAYER_LLP, 0x0, 0x05);
    /// 2/0/06 Insufficient IRD resources (RFC 6581).
    pub const MPA_INSUFFICIENT_IRD: Self = Self::new(LAYER_LLP, 0x0, 0x06);
    /// 2/0/07 No matching RTR option (RFC 6581).
    pub const MPA_NO_MATCHING_RTR: Self = Self::new(LAYER_LLP, 0x0, 0x07);

    /// A cause RFC 5040 Fig. 9 / RFC 5041 §7.2 / RFC 5044 §8 define a layer and error
    /// type for: RDMAP and DDP with error types 0–2, LLP (MPA) with error type 0.
    pub fn is_defined(&self) -> bool {
        match self.layer {
            LAYER_RDMAP | LAYER_DDP => self.etype <= 0x2,
            LAYER_LLP => self.etype == 0x0,
            _ => false,
        }
    }

    /// Which optional headers a Terminate for this cause should carry
    /// (RFC 5040 Fig. 10; SPEC-DIGEST D5: the RDMA header only for Read Request errors).
    pub fn carries_ddp_header(&self) -> bool {
        match self.layer {
            LAYER_DDP => self.etype != 0x0,
            LAYER_RDMAP => self.etype != 0x0,
            _ => false,
        }
    }
}

impl fmt::Display for TerminateCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}/{:x}/{:02x}", self.layer, self.etype, self.code)
    }
}

/// A copy of the DDP header of the segment that caused the error (14 or 18 octets).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct CopiedDdpHeader {
    bytes: [u8; UNTAGGED_HEADER_LEN],
    len: u8,
}

impl CopiedDdpHeader {
    /// Copies the DDP header at the start of `segment`; its T bit decides 14 or 18 octets.
    pub fn from_segment(segment: &[u8]) -> Result<Self, ParseError> {
        let first = *segment.first().ok_or(ParseError::Truncated)?;
        let len = if first & 0x80 != 0 {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        };
        let src = segment.get(..len).ok_or(ParseError::Truncated)?;
        let mut bytes = [0u8; UNTAGGED_HEADER_LEN];
        bytes[..len].copy_from_slice(src);
        Ok(CopiedDdpHeader {
            bytes,
            len: len as u8,
        })
    }

    /// The copied header octets.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// Whether the copied header is a tagged one.
    pub fn is_tagged(&self) -> bool {
        self.bytes[0] & 0x80 != 0
    }
}

impl fmt::Debug for CopiedDdpHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CopiedDdpHeader({:02x?})", self.as_bytes())
    }
}

/// Zero-copy view over a Terminate header (the octets after the 18-octet DDP header).
#[derive(Debug, Clone, Copy)]
pub struct Terminate<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Terminate<T> {
    /// Wraps a buffer without checking its length.
    pub fn new_unchecked(buffer: T) -> Self {
        Terminate { buffer }
    }

    /// Wraps a buffer and checks that every field announced by M/D/R is present.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let t = Self::new_unchecked(buffer);
        t.check_len()?;
        Ok(t)
    }

    /// Checks that the buffer holds the fixed part and every optional field its flags announce.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let data = self.buffer.as_ref();
        if data.len() < TERMINATE_FIXED_LEN {
            return Err(ParseError::Truncated);
        }
        let mut need = TERMINATE_FIXED_LEN;
        if self.m() || self.d() {
            need += SEGMENT_LEN_FIELD_LEN;
        }
        if self.d() {
            let first = *data.get(need).ok_or(ParseError::Truncated)?;
            need += if first & 0x80 != 0 {
                TAGGED_HEADER_LEN
            } else {
                UNTAGGED_HEADER_LEN
            };
        }
        if self.r() {
            need += READ_REQUEST_LEN;
        }
        if data.len() < need {
            return Err(ParseError::Truncated);
        }
        Ok(())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Terminate Control: layer, error type and code, in RFC 5040 §4.8 order (Layer in the
    /// high nibble of the first octet).
    pub fn cause(&self) -> TerminateCause {
        let d = self.buffer.as_ref();
        TerminateCause::new(d[0] >> 4, d[0] & 0x0F, d[1])
    }

    /// Terminate Control read with the nibbles of the first octet swapped (Layer in the low
    /// nibble), as Linux siw on little-endian hosts sends it.
    pub fn cause_swapped(&self) -> TerminateCause {
        let d = self.buffer.as_ref();
        TerminateCause::new(d[0] & 0x0F, d[0] >> 4, d[1])
    }

    /// The cause a peer meant, and the nibble order it used: the RFC order unless that
    /// reading names no defined layer/type, or disagrees with the D flag (RFC 5040 Fig. 10:
    /// DDP and RDMAP errors other than local catastrophic carry the DDP header, LLP errors
    /// none) while the swapped reading is defined and agrees. E.g. siw's "LLP, MPA, no
    /// matching RTR" arrives as `0x02 0x07` without headers, which in RFC order would be
    /// RDMAP 0/2/07 and carry a DDP header.
    pub fn decoded_cause(&self) -> (TerminateCause, ControlOrder) {
        let rfc = self.cause();
        let swapped = self.cause_swapped();
        let fits = |c: &TerminateCause| c.is_defined() && c.carries_ddp_header() == self.d();
        if !fits(&rfc) && fits(&swapped) {
            return (swapped, ControlOrder::NibbleSwapped);
        }
        if !rfc.is_defined() && swapped.is_defined() {
            return (swapped, ControlOrder::NibbleSwapped);
        }
        (rfc, ControlOrder::Rfc)
    }

    /// M: the DDP Segment Length field is valid.
    pub fn m(&self) -> bool {
        self.buffer.as_ref()[2] & FLAG_M != 0
    }

    /// D: a copy of the terminated DDP header is included.
    pub fn d(&self) -> bool {
        self.buffer.as_ref()[2] & FLAG_D != 0
    }

    /// R: a copy of the terminated RDMA header is included.
    pub fn r(&self) -> bool {
        self.buffer.as_ref()[2] & FLAG_R != 0
    }

    /// DDP Segment Length (present when M or D is set).
    pub fn segment_len(&self) -> Option<u16> {
        if self.m() || self.d() {
            let d = self.buffer.as_ref();
            Some(u16::from_be_bytes([d[4], d[5]]))
        } else {
            None
        }
    }

    /// The copied DDP header (present when D is set).
    pub fn ddp_header(&self) -> Option<&[u8]> {
        if !self.d() {
            return None;
        }
        let d = self.buffer.as_ref();
        let start = TERMINATE_FIXED_LEN + SEGMENT_LEN_FIELD_LEN;
        let len = if d[start] & 0x80 != 0 {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        };
        Some(&d[start..start + len])
    }

    /// The copied RDMA (Read Request) header (present when R is set).
    pub fn rdma_header(&self) -> Option<&[u8]> {
        if !self.r() {
            return None;
        }
        let mut start = TERMINATE_FIXED_LEN;
        if self.m() || self.d() {
            start += SEGMENT_LEN_FIELD_LEN;
        }
        if let Some(h) = self.ddp_header() {
            start += h.len();
        }
        Some(&self.buffer.as_ref()[start..start + READ_REQUEST_LEN])
    }
}

/// Nibble order of a received Terminate Control's first octet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlOrder {
    /// Layer in the high nibble (RFC 5040 §4.8).
    Rfc,
    /// Layer in the low nibble (Linux siw's bit-field layout on little-endian hosts).
    NibbleSwapped,
}

/// High-level representation of a Terminate header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminateRepr {
    /// Layer / type / code.
    pub cause: TerminateCause,
    /// DDP Segment Length of the failing segment; `Some` sets M=1.
    pub segment_len: Option<u16>,
    /// Copy of the failing segment's DDP header; `Some` sets D=1.
    pub ddp_header: Option<CopiedDdpHeader>,
    /// Copy (possibly updated) of the Read Request header; `Some` sets R=1.
    pub rdma_header: Option<[u8; READ_REQUEST_LEN]>,
}

impl TerminateRepr {
    /// A Terminate with no optional fields.
    pub fn bare(cause: TerminateCause) -> Self {
        TerminateRepr {
            cause,
            segment_len: None,
            ddp_header: None,
            rdma_header: None,
        }
    }

    /// Parses a checked view, the cause in RFC order (a peer's swapped Terminate Control is
    /// read with [`Terminate::decoded_cause`]). Extra trailing octets are tolerated
    /// (SPEC-DIGEST D4).
    pub fn parse<T: AsRef<[u8]>>(t: &Terminate<T>) -> Result<Self, ParseError> {
        t.check_len()?;
        let ddp_header = match t.ddp_header() {
            Some(h) => Some(CopiedDdpHeader::from_segment(h)?),
            None => None,
        };
        let rdma_header = match t.rdma_header() {
            Some(h) => {
                let mut a = [0u8; READ_REQUEST_LEN];
                a.copy_from_slice(h);
                Some(a)
            }
            None => None,
        };
        Ok(TerminateRepr {
            cause: t.cause(),
            segment_len: if t.m() { t.segment_len() } else { None },
            ddp_header,
            rdma_header,
        })
    }

    /// Octets `emit` writes.
    pub fn buffer_len(&self) -> usize {
        let mut n = TERMINATE_FIXED_LEN;
        if self.segment_len.is_some() || self.ddp_header.is_some() {
            n += SEGMENT_LEN_FIELD_LEN;
        }
        if let Some(h) = &self.ddp_header {
            n += h.as_bytes().len();
        }
        if self.rdma_header.is_some() {
            n += READ_REQUEST_LEN;
        }
        n
    }

    /// Writes the header into `buf` (at least `buffer_len()` octets); reserved bits are zero.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, ParseError> {
        let n = self.buffer_len();
        let out = buf.get_mut(..n).ok_or(ParseError::Truncated)?;
        out[0] = (self.cause.layer << 4) | (self.cause.etype & 0x0F);
        out[1] = self.cause.code;
        let mut flags = 0u8;
        if self.segment_len.is_some() {
            flags |= FLAG_M;
        }
        if self.ddp_header.is_some() {
            flags |= FLAG_D;
        }
        if self.rdma_header.is_some() {
            flags |= FLAG_R;
        }
        out[2] = flags;
        out[3] = 0;
        let mut at = TERMINATE_FIXED_LEN;
        if self.segment_len.is_some() || self.ddp_header.is_some() {
            out[at..at + 2].copy_from_slice(&self.segment_len.unwrap_or(0).to_be_bytes());
            at += SEGMENT_LEN_FIELD_LEN;
        }
        if let Some(h) = &self.ddp_header {
            let b = h.as_bytes();
            out[at..at + b.len()].copy_from_slice(b);
            at += b.len();
        }
        if let Some(r) = &self.rdma_header {
            out[at..at + READ_REQUEST_LEN].copy_from_slice(r);
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 5040 §4.8: Layer in the high nibble. Linux siw sends it in the low nibble
    // (siwlab README, "siw's Terminate Control byte order", checked with a capture).
    #[test]
    fn siw_ddp_invalid_qn_is_recognised() {
        // DDP, untagged buffer error, invalid QN (1/2/01) with the DDP header (D=1) as siw
        // sends it: 0x21 0x01. In RFC order that reads LLP with error type 1 (undefined).
        let mut b = [0u8; TERMINATE_FIXED_LEN + SEGMENT_LEN_FIELD_LEN + UNTAGGED_HEADER_LEN];
        b[..4].copy_from_slice(&[0x21, 0x01, FLAG_M | FLAG_D, 0]);
        b[6] = 0x41;
        let t = Terminate::new_checked(&b[..]).unwrap();
        assert_eq!(t.cause(), TerminateCause::new(LAYER_LLP, 1, 0x01));
        assert_eq!(
            t.decoded_cause(),
            (TerminateCause::DDP_INVALID_QN, ControlOrder::NibbleSwapped)
        );
    }

    #[test]
    fn siw_mpa_no_matching_rtr_is_recognised() {
        // LLP, MPA, no matching RTR (2/0/07, RFC 6581 §9) without headers: siw sends
        // 0x02 0x07, which in RFC order would be RDMAP 0/2/07 (which carries a DDP header).
        let b = [0x02, 0x07, 0, 0];
        let t = Terminate::new_checked(&b[..]).unwrap();
        assert_eq!(t.cause().to_string(), "0/2/07");
        assert_eq!(
            t.decoded_cause(),
            (
                TerminateCause::MPA_NO_MATCHING_RTR,
                ControlOrder::NibbleSwapped
            )
        );
    }

    #[test]
    fn rfc_order_terminates_decode_unchanged() {
        for (cause, ddp) in [
            (TerminateCause::MPA_CRC_ERROR, false),
            (TerminateCause::MPA_NO_MATCHING_RTR, false),
            (TerminateCause::RDMAP_LOCAL_CATASTROPHIC, false),
            (TerminateCause::DDP_LOCAL_CATASTROPHIC, false),
            (TerminateCause::DDP_INVALID_QN, true),
            (TerminateCause::RDMAP_CATASTROPHIC_STREAM, true),
            (TerminateCause::RDMAP_INVALID_STAG, true),
        ] {
            let mut repr = TerminateRepr::bare(cause);
            if ddp {
                let mut seg = [0u8; UNTAGGED_HEADER_LEN];
                seg[0] = 0x41;
                repr.segment_len = Some(18);
                repr.ddp_header = Some(CopiedDdpHeader::from_segment(&seg).unwrap());
            }
            let mut buf = [0u8; TERMINATE_MAX_LEN];
            let n = repr.emit(&mut buf).unwrap();
            let t = Terminate::new_checked(&buf[..n]).unwrap();
            assert_eq!(t.decoded_cause(), (cause, ControlOrder::Rfc), "{cause}");
            assert_eq!(TerminateRepr::parse(&t).unwrap(), repr);
        }
    }

    #[test]
    fn undefined_either_way_stays_rfc_order() {
        let t = Terminate::new_checked(&[0xF3, 0x00, 0, 0][..]).unwrap();
        assert_eq!(t.decoded_cause().1, ControlOrder::Rfc);
        assert!(!t.cause().is_defined());
    }
}
