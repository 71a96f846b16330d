//! DDP segment headers (RFC 5041 §4): control field, tagged (14 octets) and untagged
//! (18 octets) headers.

use super::be::{be32, be64};
use thiserror::Error;

/// Errors from parsing or emitting DDP / RDMAP / Terminate / atomic headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ParseError {
    /// The buffer is shorter than the header it should hold.
    #[error("buffer too short for the header")]
    Truncated,
    /// DV is not 01b (RFC 5041 §4.1).
    #[error("invalid DDP version {0}")]
    DdpVersion(u8),
    /// RV is not the expected RDMAP version (RFC 5040 §4.1).
    #[error("invalid RDMAP version {0}")]
    RdmapVersion(u8),
    /// Opcode is reserved (RFC 5040 Fig. 4, EXT-01 Fig. 2).
    #[error("unknown RDMAP opcode {0:#x}")]
    Opcode(u8),
    /// Atomic opcode is reserved (EXT-01 Fig. 5).
    #[error("unknown atomic opcode {0:#x}")]
    AtomicOpcode(u8),
    /// A header has the wrong length for its message type.
    #[error("header length mismatch")]
    Length,
}

/// DDP version carried in DV (RFC 5041 §4.1).
pub const DDP_VERSION: u8 = 1;
/// Length of the tagged buffer model header.
pub const TAGGED_HEADER_LEN: usize = 14;
/// Length of the untagged buffer model header.
pub const UNTAGGED_HEADER_LEN: usize = 18;

const CTRL_T: u8 = 0x80;
const CTRL_L: u8 = 0x40;
const CTRL_DV: u8 = 0x03;

mod field {
    use core::ops::Range;
    pub const CONTROL: usize = 0;
    pub const RSVD_ULP: usize = 1;
    pub const STAG: Range<usize> = 2..6;
    pub const TO: Range<usize> = 6..14;
    pub const RSVD_ULP_WORD: Range<usize> = 2..6;
    pub const QN: Range<usize> = 6..10;
    pub const MSN: Range<usize> = 10..14;
    pub const MO: Range<usize> = 14..18;
}

/// Zero-copy view over a DDP segment (header + payload).
#[derive(Debug, Clone, Copy)]
pub struct Segment<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Segment<T> {
    /// Wraps a buffer without checking its length.
    pub fn new_unchecked(buffer: T) -> Self {
        Segment { buffer }
    }

    /// Wraps a buffer and checks it holds the whole header its T bit announces.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let s = Self::new_unchecked(buffer);
        s.check_len()?;
        Ok(s)
    }

    /// Checks the buffer holds the full header.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let d = self.buffer.as_ref();
        match d.first() {
            None => Err(ParseError::Truncated),
            Some(&c) => {
                let need = if c & CTRL_T != 0 {
                    TAGGED_HEADER_LEN
                } else {
                    UNTAGGED_HEADER_LEN
                };
                if d.len() < need {
                    Err(ParseError::Truncated)
                } else {
                    Ok(())
                }
            }
        }
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// T: tagged buffer model.
    pub fn tagged(&self) -> bool {
        self.buffer.as_ref()[field::CONTROL] & CTRL_T != 0
    }

    /// L: last segment of the message.
    pub fn last(&self) -> bool {
        self.buffer.as_ref()[field::CONTROL] & CTRL_L != 0
    }

    /// DV: DDP version.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::CONTROL] & CTRL_DV
    }

    /// First RsvdULP octet (the RDMAP control field).
    pub fn rsvd_ulp(&self) -> u8 {
        self.buffer.as_ref()[field::RSVD_ULP]
    }

    /// Header length implied by T.
    pub fn header_len(&self) -> usize {
        if self.tagged() {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        }
    }

    /// STag (tagged only).
    pub fn stag(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::STAG])
    }

    /// Tagged Offset (tagged only).
    pub fn to(&self) -> u64 {
        be64(&self.buffer.as_ref()[field::TO])
    }

    /// RsvdULP octets 1–4 (untagged only; RDMAP's Invalidate STag).
    pub fn rsvd_ulp_word(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::RSVD_ULP_WORD])
    }

    /// Queue Number (untagged only).
    pub fn qn(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::QN])
    }

    /// Message Sequence Number (untagged only).
    pub fn msn(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::MSN])
    }

    /// Message Offset (untagged only).
    pub fn mo(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::MO])
    }

    /// The octets after the DDP header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// Tagged buffer model header fields (RFC 5041 §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaggedRepr {
    /// L bit.
    pub last: bool,
    /// RsvdULP octet (RDMAP control).
    pub rsvd_ulp: u8,
    /// Sink STag.
    pub stag: u32,
    /// Tagged Offset.
    pub to: u64,
}

/// Untagged buffer model header fields (RFC 5041 §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UntaggedRepr {
    /// L bit.
    pub last: bool,
    /// RsvdULP octet 0 (RDMAP control).
    pub rsvd_ulp: u8,
    /// RsvdULP octets 1–4 (Invalidate STag for RDMAP).
    pub rsvd_ulp_word: u32,
    /// Queue Number.
    pub qn: u32,
    /// Message Sequence Number.
    pub msn: u32,
    /// Message Offset.
    pub mo: u32,
}

/// A parsed DDP header of either model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DdpRepr {
    /// T=1.
    Tagged(TaggedRepr),
    /// T=0.
    Untagged(UntaggedRepr),
}

impl DdpRepr {
    /// Parses the header of a checked segment; rejects DV ≠ 01b. Rsvd bits are ignored.
    pub fn parse<T: AsRef<[u8]>>(seg: &Segment<T>) -> Result<Self, ParseError> {
        seg.check_len()?;
        if seg.version() != DDP_VERSION {
            return Err(ParseError::DdpVersion(seg.version()));
        }
        Ok(if seg.tagged() {
            DdpRepr::Tagged(TaggedRepr {
                last: seg.last(),
                rsvd_ulp: seg.rsvd_ulp(),
                stag: seg.stag(),
                to: seg.to(),
            })
        } else {
            DdpRepr::Untagged(UntaggedRepr {
                last: seg.last(),
                rsvd_ulp: seg.rsvd_ulp(),
                rsvd_ulp_word: seg.rsvd_ulp_word(),
                qn: seg.qn(),
                msn: seg.msn(),
                mo: seg.mo(),
            })
        })
    }

    /// Header length: 14 or 18.
    pub fn buffer_len(&self) -> usize {
        match self {
            DdpRepr::Tagged(_) => TAGGED_HEADER_LEN,
            DdpRepr::Untagged(_) => UNTAGGED_HEADER_LEN,
        }
    }

    /// The L bit.
    pub fn last(&self) -> bool {
        match self {
            DdpRepr::Tagged(t) => t.last,
            DdpRepr::Untagged(u) => u.last,
        }
    }

    /// The RsvdULP octet 0 (RDMAP control).
    pub fn rsvd_ulp(&self) -> u8 {
        match self {
            DdpRepr::Tagged(t) => t.rsvd_ulp,
            DdpRepr::Untagged(u) => u.rsvd_ulp,
        }
    }

    /// Writes the header (DV = 01b, Rsvd = 0) into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, ParseError> {
        let n = self.buffer_len();
        let out = buf.get_mut(..n).ok_or(ParseError::Truncated)?;
        match self {
            DdpRepr::Tagged(t) => {
                out[field::CONTROL] = CTRL_T | if t.last { CTRL_L } else { 0 } | DDP_VERSION;
                out[field::RSVD_ULP] = t.rsvd_ulp;
                out[field::STAG].copy_from_slice(&t.stag.to_be_bytes());
                out[field::TO].copy_from_slice(&t.to.to_be_bytes());
            }
            DdpRepr::Untagged(u) => {
                out[field::CONTROL] = if u.last { CTRL_L } else { 0 } | DDP_VERSION;
                out[field::RSVD_ULP] = u.rsvd_ulp;
                out[field::RSVD_ULP_WORD].copy_from_slice(&u.rsvd_ulp_word.to_be_bytes());
                out[field::QN].copy_from_slice(&u.qn.to_be_bytes());
                out[field::MSN].copy_from_slice(&u.msn.to_be_bytes());
                out[field::MO].copy_from_slice(&u.mo.to_be_bytes());
            }
        }
        Ok(n)
    }
}
