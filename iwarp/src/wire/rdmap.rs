//! RDMAP control field, opcodes (RFC 5040 Figs. 4/5, EXT-01 Figs. 2/3), RDMA Read Request
//! header (RFC 5040 §4.4) and Immediate Data (EXT-01 §6).

use super::be::{be32, be64};
use super::ddp::ParseError;

/// RDMAP version carried in RV for RFC 5040 (01b).
pub const RDMAP_VERSION: u8 = 1;
/// Length of the RDMA Read Request header.
pub const READ_REQUEST_LEN: usize = 28;
/// Length of the Immediate Data header.
pub const IMMEDIATE_DATA_LEN: usize = 8;

/// RDMAP message opcodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Opcode {
    /// 0000b RDMA Write (tagged).
    Write,
    /// 0001b RDMA Read Request (QN 1).
    ReadRequest,
    /// 0010b RDMA Read Response (tagged).
    ReadResponse,
    /// 0011b Send (QN 0).
    Send,
    /// 0100b Send with Invalidate (QN 0).
    SendInvalidate,
    /// 0101b Send with Solicited Event (QN 0).
    SendSe,
    /// 0110b Send with Solicited Event and Invalidate (QN 0).
    SendSeInvalidate,
    /// 0111b Terminate (QN 2).
    Terminate,
    /// 1000b Immediate Data (EXT-01, QN 0).
    ImmediateData,
    /// 1001b Immediate Data with Solicited Event (EXT-01, QN 0 per §6.3).
    ImmediateDataSe,
    /// 1010b Atomic Request (EXT-01, QN 1).
    AtomicRequest,
    /// 1011b Atomic Response (EXT-01, QN 3 per §5.2.2).
    AtomicResponse,
}

impl Opcode {
    /// Decodes a 4-bit opcode; reserved values give `None`.
    pub fn from_u4(v: u8) -> Option<Self> {
        Some(match v & 0x0F {
            0x0 => Opcode::Write,
            0x1 => Opcode::ReadRequest,
            0x2 => Opcode::ReadResponse,
            0x3 => Opcode::Send,
            0x4 => Opcode::SendInvalidate,
            0x5 => Opcode::SendSe,
            0x6 => Opcode::SendSeInvalidate,
            0x7 => Opcode::Terminate,
            0x8 => Opcode::ImmediateData,
            0x9 => Opcode::ImmediateDataSe,
            0xA => Opcode::AtomicRequest,
            0xB => Opcode::AtomicResponse,
            _ => return None,
        })
    }

    /// The 4-bit wire value.
    pub fn to_u4(self) -> u8 {
        match self {
            Opcode::Write => 0x0,
            Opcode::ReadRequest => 0x1,
            Opcode::ReadResponse => 0x2,
            Opcode::Send => 0x3,
            Opcode::SendInvalidate => 0x4,
            Opcode::SendSe => 0x5,
            Opcode::SendSeInvalidate => 0x6,
            Opcode::Terminate => 0x7,
            Opcode::ImmediateData => 0x8,
            Opcode::ImmediateDataSe => 0x9,
            Opcode::AtomicRequest => 0xA,
            Opcode::AtomicResponse => 0xB,
        }
    }

    /// Whether the opcode is defined only by the RDMAP extensions (EXT-01).
    pub fn is_extension(self) -> bool {
        self.to_u4() >= 0x8
    }

    /// T bit of the DDP message carrying this opcode (RFC 5040 Fig. 4).
    pub fn is_tagged(self) -> bool {
        matches!(self, Opcode::Write | Opcode::ReadResponse)
    }

    /// Untagged queue number (body text of RFC 5040 / EXT-01; SPEC-DIGEST D1).
    pub fn queue(self) -> Option<u32> {
        match self {
            Opcode::Write | Opcode::ReadResponse => None,
            Opcode::Send
            | Opcode::SendInvalidate
            | Opcode::SendSe
            | Opcode::SendSeInvalidate
            | Opcode::ImmediateData
            | Opcode::ImmediateDataSe => Some(0),
            Opcode::ReadRequest | Opcode::AtomicRequest => Some(1),
            Opcode::Terminate => Some(2),
            Opcode::AtomicResponse => Some(3),
        }
    }

    /// Whether the untagged header's RsvdULP word carries an Invalidate STag.
    pub fn carries_invalidate_stag(self) -> bool {
        matches!(self, Opcode::SendInvalidate | Opcode::SendSeInvalidate)
    }

    /// Whether this is a Send / Immediate Data variant with the Solicited Event bit.
    pub fn is_solicited(self) -> bool {
        matches!(
            self,
            Opcode::SendSe | Opcode::SendSeInvalidate | Opcode::ImmediateDataSe
        )
    }
}

/// RDMAP Control field (RFC 5040 §4.1): RV in bits 0xC0, reserved 0x30, opcode 0x0F.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmapControl {
    /// RV.
    pub version: u8,
    /// Opcode.
    pub opcode: Opcode,
}

impl RdmapControl {
    /// A control octet with RV = 01b.
    pub fn new(opcode: Opcode) -> Self {
        RdmapControl {
            version: RDMAP_VERSION,
            opcode,
        }
    }

    /// Raw RV of an octet.
    pub fn raw_version(octet: u8) -> u8 {
        octet >> 6
    }

    /// Parses an octet; reserved bits are ignored; RV must equal `expected_version`
    /// (checked first, SPEC-DIGEST D11).
    pub fn parse(octet: u8, expected_version: u8) -> Result<Self, ParseError> {
        let version = octet >> 6;
        if version != expected_version {
            return Err(ParseError::RdmapVersion(version));
        }
        let opcode = Opcode::from_u4(octet & 0x0F).ok_or(ParseError::Opcode(octet & 0x0F))?;
        Ok(RdmapControl { version, opcode })
    }

    /// The octet (reserved bits zero).
    pub fn to_octet(self) -> u8 {
        ((self.version & 0x03) << 6) | self.opcode.to_u4()
    }
}

/// Zero-copy view over an RDMA Read Request header (28 octets after the DDP header).
#[derive(Debug, Clone, Copy)]
pub struct ReadRequest<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ReadRequest<T> {
    /// Wraps a buffer without checks.
    pub fn new_unchecked(buffer: T) -> Self {
        ReadRequest { buffer }
    }

    /// Wraps a buffer of at least 28 octets.
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        if buffer.as_ref().len() < READ_REQUEST_LEN {
            return Err(ParseError::Truncated);
        }
        Ok(ReadRequest { buffer })
    }

    /// Data Sink STag.
    pub fn sink_stag(&self) -> u32 {
        be32(&self.buffer.as_ref()[0..4])
    }
    /// Data Sink Tagged Offset.
    pub fn sink_to(&self) -> u64 {
        be64(&self.buffer.as_ref()[4..12])
    }
    /// RDMA Read Message Size.
    pub fn size(&self) -> u32 {
        be32(&self.buffer.as_ref()[12..16])
    }
    /// Data Source STag.
    pub fn src_stag(&self) -> u32 {
        be32(&self.buffer.as_ref()[16..20])
    }
    /// Data Source Tagged Offset.
    pub fn src_to(&self) -> u64 {
        be64(&self.buffer.as_ref()[20..28])
    }
}

/// RDMA Read Request header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRequestRepr {
    /// Data Sink STag.
    pub sink_stag: u32,
    /// Data Sink TO.
    pub sink_to: u64,
    /// RDMARDSZ.
    pub size: u32,
    /// Data Source STag.
    pub src_stag: u32,
    /// Data Source TO.
    pub src_to: u64,
}

impl ReadRequestRepr {
    /// Parses a view.
    pub fn parse<T: AsRef<[u8]>>(r: &ReadRequest<T>) -> Result<Self, ParseError> {
        if r.buffer.as_ref().len() < READ_REQUEST_LEN {
            return Err(ParseError::Truncated);
        }
        Ok(ReadRequestRepr {
            sink_stag: r.sink_stag(),
            sink_to: r.sink_to(),
            size: r.size(),
            src_stag: r.src_stag(),
            src_to: r.src_to(),
        })
    }

    /// Always 28.
    pub fn buffer_len(&self) -> usize {
        READ_REQUEST_LEN
    }

    /// Writes the header.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, ParseError> {
        let out = buf
            .get_mut(..READ_REQUEST_LEN)
            .ok_or(ParseError::Truncated)?;
        out[0..4].copy_from_slice(&self.sink_stag.to_be_bytes());
        out[4..12].copy_from_slice(&self.sink_to.to_be_bytes());
        out[12..16].copy_from_slice(&self.size.to_be_bytes());
        out[16..20].copy_from_slice(&self.src_stag.to_be_bytes());
        out[20..28].copy_from_slice(&self.src_to.to_be_bytes());
        Ok(READ_REQUEST_LEN)
    }

    /// The header as an array (for Terminate copies).
    pub fn to_bytes(&self) -> [u8; READ_REQUEST_LEN] {
        let mut a = [0u8; READ_REQUEST_LEN];
        // The array is exactly READ_REQUEST_LEN long, emit cannot fail.
        let _ = self.emit(&mut a);
        a
    }
}

/// Immediate Data header: exactly 8 octets of ULP data (EXT-01 §6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImmediateDataRepr {
    /// The 8 octets.
    pub data: [u8; IMMEDIATE_DATA_LEN],
}

impl ImmediateDataRepr {
    /// Parses the header; the payload must be exactly 8 octets (EXT-01 §6.3).
    pub fn parse(payload: &[u8]) -> Result<Self, ParseError> {
        if payload.len() != IMMEDIATE_DATA_LEN {
            return Err(ParseError::Length);
        }
        let mut data = [0u8; IMMEDIATE_DATA_LEN];
        data.copy_from_slice(payload);
        Ok(ImmediateDataRepr { data })
    }

    /// Always 8.
    pub fn buffer_len(&self) -> usize {
        IMMEDIATE_DATA_LEN
    }

    /// Writes the 8 octets.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, ParseError> {
        let out = buf
            .get_mut(..IMMEDIATE_DATA_LEN)
            .ok_or(ParseError::Truncated)?;
        out.copy_from_slice(&self.data);
        Ok(IMMEDIATE_DATA_LEN)
    }
}
