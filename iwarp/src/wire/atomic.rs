//! Atomic Request (52 octets) and Atomic Response (12 octets) headers (EXT-01 §5.2,
//! App. A; RFC 7306).

use super::be::{be32, be64};
use super::ddp::ParseError;

/// Length of the Atomic Request header.
pub const ATOMIC_REQUEST_LEN: usize = 52;
/// Length of the Atomic Response header.
pub const ATOMIC_RESPONSE_LEN: usize = 12;

/// Atomic operation codes (EXT-01 Fig. 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// 0000b FetchAdd.
    FetchAdd,
    /// 0001b Swap (draft only; reserved in RFC 7306, SPEC-DIGEST D3).
    Swap,
    /// 0010b CmpSwap.
    CmpSwap,
}

impl AtomicOp {
    /// Decodes the 4-bit AOpCode.
    pub fn from_u4(v: u8) -> Option<Self> {
        match v & 0x0F {
            0 => Some(AtomicOp::FetchAdd),
            1 => Some(AtomicOp::Swap),
            2 => Some(AtomicOp::CmpSwap),
            _ => None,
        }
    }

    /// The 4-bit wire value.
    pub fn to_u4(self) -> u8 {
        match self {
            AtomicOp::FetchAdd => 0,
            AtomicOp::Swap => 1,
            AtomicOp::CmpSwap => 2,
        }
    }
}

/// Zero-copy view over an Atomic Request header.
#[derive(Debug, Clone, Copy)]
pub struct AtomicRequest<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AtomicRequest<T> {
    /// Wraps a buffer without checks.
    pub fn new_unchecked(buffer: T) -> Self {
        AtomicRequest { buffer }
    }

    /// Wraps a buffer of at least 52 octets.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        if buffer.as_ref().len() < ATOMIC_REQUEST_LEN {
            return Err(ParseError::Truncated);
        }
        Ok(AtomicRequest { buffer })
    }

    /// Raw AOpCode nibble (low nibble of octet 3; the upper 28 bits are reserved).
    pub fn raw_opcode(&self) -> u8 {
        self.buffer.as_ref()[3] & 0x0F
    }
    /// Request Identifier.
    pub fn request_id(&self) -> u32 {
        be32(&self.buffer.as_ref()[4..8])
    }
    /// Remote STag.
    pub fn stag(&self) -> u32 {
        be32(&self.buffer.as_ref()[8..12])
    }
    /// Remote Tagged Offset.
    pub fn to(&self) -> u64 {
        be64(&self.buffer.as_ref()[12..20])
    }
    /// Add or Swap Data.
    pub fn add_swap_data(&self) -> u64 {
        be64(&self.buffer.as_ref()[20..28])
    }
    /// Add or Swap Mask.
    pub fn add_swap_mask(&self) -> u64 {
        be64(&self.buffer.as_ref()[28..36])
    }
    /// Compare Data.
    pub fn compare_data(&self) -> u64 {
        be64(&self.buffer.as_ref()[36..44])
    }
    /// Compare Mask.
    pub fn compare_mask(&self) -> u64 {
        be64(&self.buffer.as_ref()[44..52])
    }
}

/// Atomic Request header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicRequestRepr {
    /// Operation.
    pub op: AtomicOp,
    /// Request Identifier.
    pub request_id: u32,
    /// Remote STag.
    pub stag: u32,
    /// Remote Tagged Offset.
    pub to: u64,
    /// Add Data / Swap Data.
    pub add_swap_data: u64,
    /// Add Mask / Swap Mask.
    pub add_swap_mask: u64,
    /// Compare Data.
    pub compare_data: u64,
    /// Compare Mask.
    pub compare_mask: u64,
}

impl AtomicRequestRepr {
    /// FetchAdd with the transmit defaults for unused fields (EXT-01 §5.2.1).
    pub fn fetch_add(request_id: u32, stag: u32, to: u64, add: u64, mask: u64) -> Self {
        AtomicRequestRepr {
            op: AtomicOp::FetchAdd,
            request_id,
            stag,
            to,
            add_swap_data: add,
            add_swap_mask: mask,
            compare_data: 0,
            compare_mask: u64::MAX,
        }
    }

    /// Swap with the transmit defaults (swap mask all ones).
    pub fn swap(request_id: u32, stag: u32, to: u64, swap: u64) -> Self {
        AtomicRequestRepr {
            op: AtomicOp::Swap,
            request_id,
            stag,
            to,
            add_swap_data: swap,
            add_swap_mask: u64::MAX,
            compare_data: 0,
            compare_mask: u64::MAX,
        }
    }

    /// Parses a view; rejects reserved AOpCodes.
    pub fn parse<T: AsRef<[u8]>>(r: &AtomicRequest<T>) -> Result<Self, ParseError> {
        if r.buffer.as_ref().len() < ATOMIC_REQUEST_LEN {
            return Err(ParseError::Truncated);
        }
        let op =
            AtomicOp::from_u4(r.raw_opcode()).ok_or(ParseError::AtomicOpcode(r.raw_opcode()))?;
        Ok(AtomicRequestRepr {
            op,
            request_id: r.request_id(),
            stag: r.stag(),
            to: r.to(),
            add_swap_data: r.add_swap_data(),
            add_swap_mask: r.add_swap_mask(),
            compare_data: r.compare_data(),
            compare_mask: r.compare_mask(),
        })
    }

    /// Always 52.
    pub fn buffer_len(&self) -> usize {
        ATOMIC_REQUEST_LEN
    }

    /// Writes the header (reserved bits zero).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, ParseError> {
        let out = buf
            .get_mut(..ATOMIC_REQUEST_LEN)
            .ok_or(ParseError::Truncated)?;
        out[0..3].fill(0);
        out[3] = self.op.to_u4();
        out[4..8].copy_from_slice(&self.request_id.to_be_bytes());
        out[8..12].copy_from_slice(&self.stag.to_be_bytes());
        out[12..20].copy_from_slice(&self.to.to_be_bytes());
        out[20..28].copy_from_slice(&self.add_swap_data.to_be_bytes());
        out[28..36].copy_from_slice(&self.add_swap_mask.to_be_bytes());
        out[36..44].copy_from_slice(&self.compare_data.to_be_bytes());
        out[44..52].copy_from_slice(&self.compare_mask.to_be_bytes());
        Ok(ATOMIC_REQUEST_LEN)
    }

    /// Computes the value stored at the target given its original value (EXT-01 §5.1).
    pub fn apply(&self, original: u64) -> u64 {
        match self.op {
            AtomicOp::FetchAdd => masked_add(original, self.add_swap_data, self.add_swap_mask),
            AtomicOp::Swap => self.add_swap_data,
            AtomicOp::CmpSwap => {
                if (self.compare_data ^ original) & self.compare_mask == 0 {
                    (original & !self.add_swap_mask) | (self.add_swap_data & self.add_swap_mask)
                } else {
                    original
                }
            }
        }
    }
}

/// FetchAdd with an Add Mask: a set mask bit `i` stops the carry out of bit `i`
/// (EXT-01 §5.1.1).
pub fn masked_add(original: u64, add: u64, mask: u64) -> u64 {
    let mut result = 0u64;
    let mut carry = 0u64;
    for i in 0..64 {
        let sum = carry + ((original >> i) & 1) + ((add >> i) & 1);
        result |= (sum & 1) << i;
        carry = if (mask >> i) & 1 == 1 { 0 } else { sum >> 1 };
    }
    result
}

/// Atomic Response header fields (and its view is trivial: 12 octets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicResponseRepr {
    /// Original Request Identifier.
    pub request_id: u32,
    /// Original Remote Data Value.
    pub original: u64,
}

impl AtomicResponseRepr {
    /// Parses the 12-octet header at the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self, ParseError> {
        let b = buf
            .get(..ATOMIC_RESPONSE_LEN)
            .ok_or(ParseError::Truncated)?;
        Ok(AtomicResponseRepr {
            request_id: be32(&b[0..4]),
            original: be64(&b[4..12]),
        })
    }

    /// Always 12.
    pub fn buffer_len(&self) -> usize {
        ATOMIC_RESPONSE_LEN
    }

    /// Writes the header.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, ParseError> {
        let out = buf
            .get_mut(..ATOMIC_RESPONSE_LEN)
            .ok_or(ParseError::Truncated)?;
        out[0..4].copy_from_slice(&self.request_id.to_be_bytes());
        out[4..12].copy_from_slice(&self.original.to_be_bytes());
        Ok(ATOMIC_RESPONSE_LEN)
    }
}
