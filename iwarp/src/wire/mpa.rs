//! MPA wire formats (RFC 5044 §7.1, §4, §5; RFC 6581 §5): the MPA Request / Reply frame that
//! opens an iWARP connection, the FPDU that carries every DDP segment afterwards, and the
//! 4-octet marker.
//!
//! Every view checks its length before any field access; `Repr` types parse and emit.

use thiserror::Error;

use super::crc;

/// Key of an MPA Request frame (RFC 5044 §7.1).
pub const REQUEST_KEY: &[u8; 16] = b"MPA ID Req Frame";
/// Key of an MPA Reply frame (RFC 5044 §7.1).
pub const REPLY_KEY: &[u8; 16] = b"MPA ID Rep Frame";
/// Length of the fixed part of a Request/Reply frame (key, bits, revision, PD_Length).
pub const FRAME_HEADER_LEN: usize = 20;
/// Largest private data a Request/Reply may carry (RFC 5044 §7.1).
pub const MAX_PRIVATE_DATA_LEN: usize = 512;
/// Length of the RFC 6581 IRD/ORD words at the start of the private data.
pub const IRD_ORD_LEN: usize = 4;
/// Length of the ULPDU_Length field.
pub const ULPDU_LENGTH_LEN: usize = 2;
/// Length of the CRC field.
pub const CRC_LEN: usize = 4;
/// Length of a marker.
pub const MARKER_LEN: usize = 4;

/// Markers wanted by the sender of the frame (M).
pub const FLAG_MARKERS: u16 = 0x8000;
/// CRC wanted (C).
pub const FLAG_CRC: u16 = 0x4000;
/// Reject (R, Reply only).
pub const FLAG_REJECT: u16 = 0x2000;
/// Enhanced connection establishment (RFC 6581 §5, revision 2 only).
pub const FLAG_ENHANCED: u16 = 0x1000;
/// Reserved bits of the 16-bit bits/revision word (must be zero).
pub const FLAG_RESERVED: u16 = 0x0f00;
/// Revision field of the bits/revision word.
pub const REVISION_MASK: u16 = 0x00ff;

/// IRD word: peer-to-peer mode (RFC 6581 §5).
pub const IRD_PEER_TO_PEER: u16 = 0x8000;
/// IRD word: zero-length Send RTR supported/chosen.
pub const IRD_SEND_RTR: u16 = 0x4000;
/// ORD word: zero-length RDMA Write RTR supported/chosen.
pub const ORD_WRITE_RTR: u16 = 0x8000;
/// ORD word: zero-length RDMA Read RTR supported/chosen.
pub const ORD_READ_RTR: u16 = 0x4000;
/// Mask of the IRD/ORD value in its word.
pub const IRD_ORD_MASK: u16 = 0x3fff;

/// `Truncated` unless the `have` octets of a buffer cover the `need` octets.
fn check_have(have: usize, need: usize) -> Result<(), WireError> {
    if have < need {
        return Err(WireError::Truncated { need, have });
    }
    Ok(())
}

/// Errors found while parsing or emitting MPA wire structures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum WireError {
    /// The buffer is shorter than the structure it must hold.
    #[error("buffer too short: need {need} octets, have {have}")]
    Truncated {
        /// Octets needed.
        need: usize,
        /// Octets available.
        have: usize,
    },
    /// The 16-octet key is neither the Request nor the Reply key.
    #[error("bad MPA frame key")]
    BadKey,
    /// The frame kind differs from the one expected at this point.
    #[error("expected an MPA {expected:?} frame")]
    UnexpectedKind {
        /// Kind that was expected.
        expected: FrameKind,
    },
    /// PD_Length is above 512.
    #[error("PD_Length {0} exceeds 512")]
    PrivateDataTooLong(u16),
    /// Reserved bits are set in the bits/revision word.
    #[error("reserved bits {0:#06x} set")]
    ReservedBits(u16),
    /// Revision 0 or above 2.
    #[error("unsupported MPA revision {0}")]
    UnsupportedRevision(u8),
    /// R set in a Request.
    #[error("reject bit set in an MPA Request")]
    RejectInRequest,
    /// The enhanced bit is set on a revision 1 frame.
    #[error("enhanced connection bit set on a revision 1 frame")]
    EnhancedInRevision1,
    /// The enhanced bit is set but the private data cannot hold IRD/ORD.
    #[error("enhanced frame without IRD/ORD words (PD_Length {0})")]
    MissingIrdOrd(u16),
    /// ULPDU_Length cannot describe a DDP segment.
    #[error("ULPDU_Length {0} is invalid")]
    BadUlpduLength(u16),
}

/// Request or Reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// "MPA ID Req Frame", sent by the initiator.
    Request,
    /// "MPA ID Rep Frame", sent by the responder.
    Reply,
}

impl FrameKind {
    /// The 16-octet key of this kind.
    pub fn key(self) -> &'static [u8; 16] {
        match self {
            FrameKind::Request => REQUEST_KEY,
            FrameKind::Reply => REPLY_KEY,
        }
    }
}

mod field {
    use core::ops::Range;
    pub const KEY: Range<usize> = 0..16;
    pub const BITS: Range<usize> = 16..18;
    pub const PD_LENGTH: Range<usize> = 18..20;
}

/// Zero-copy view of an MPA Request/Reply frame.
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checking its length.
    pub fn new_unchecked(buffer: T) -> Self {
        Frame { buffer }
    }

    /// Wraps a buffer and checks that it holds the header and the announced private data.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let f = Frame { buffer };
        f.check_len()?;
        Ok(f)
    }

    /// Checks the header length and the PD_Length limit and presence.
    pub fn check_len(&self) -> Result<(), WireError> {
        let have = self.buffer.as_ref().len();
        check_have(have, FRAME_HEADER_LEN)?;
        let pd = self.pd_length();
        if pd as usize > MAX_PRIVATE_DATA_LEN {
            return Err(WireError::PrivateDataTooLong(pd));
        }
        let need = FRAME_HEADER_LEN + pd as usize;
        check_have(have, need)?;
        Ok(())
    }

    /// The raw 16-octet key.
    pub fn key(&self) -> &[u8] {
        &self.buffer.as_ref()[field::KEY]
    }

    /// The frame kind from its key, if it is a known key.
    pub fn kind(&self) -> Option<FrameKind> {
        match self.key() {
            k if k == REQUEST_KEY => Some(FrameKind::Request),
            k if k == REPLY_KEY => Some(FrameKind::Reply),
            _ => None,
        }
    }

    /// The 16-bit bits/revision word.
    pub fn bits(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::BITS];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// M: the sender wants to receive markers.
    pub fn markers(&self) -> bool {
        self.bits() & FLAG_MARKERS != 0
    }

    /// C: the sender wants CRCs.
    pub fn crc(&self) -> bool {
        self.bits() & FLAG_CRC != 0
    }

    /// R: the responder rejects the connection.
    pub fn reject(&self) -> bool {
        self.bits() & FLAG_REJECT != 0
    }

    /// H: RFC 6581 enhanced connection establishment.
    pub fn enhanced(&self) -> bool {
        self.bits() & FLAG_ENHANCED != 0
    }

    /// Reserved bits of the bits/revision word.
    pub fn reserved(&self) -> u16 {
        self.bits() & FLAG_RESERVED
    }

    /// Revision field.
    pub fn revision(&self) -> u8 {
        (self.bits() & REVISION_MASK) as u8
    }

    /// PD_Length field.
    pub fn pd_length(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::PD_LENGTH];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Total frame length (header + private data).
    pub fn total_len(&self) -> usize {
        FRAME_HEADER_LEN + self.pd_length() as usize
    }

    /// The private data (including RFC 6581 IRD/ORD words when present).
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[FRAME_HEADER_LEN..self.total_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Writes the key.
    pub fn set_kind(&mut self, kind: FrameKind) {
        self.buffer.as_mut()[field::KEY].copy_from_slice(kind.key());
    }

    /// Writes the bits/revision word.
    pub fn set_bits(&mut self, bits: u16) {
        self.buffer.as_mut()[field::BITS].copy_from_slice(&bits.to_be_bytes());
    }

    /// Writes PD_Length.
    pub fn set_pd_length(&mut self, len: u16) {
        self.buffer.as_mut()[field::PD_LENGTH].copy_from_slice(&len.to_be_bytes());
    }

    /// Mutable private data (length from PD_Length).
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        let end = self.total_len();
        &mut self.buffer.as_mut()[FRAME_HEADER_LEN..end]
    }
}

/// Which zero-length RTR messages (RFC 6581 §5) a side supports or chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RtrTypes {
    /// Zero-length Send.
    pub send: bool,
    /// Zero-length RDMA Write.
    pub write: bool,
    /// Zero-length RDMA Read.
    pub read: bool,
}

impl RtrTypes {
    /// No RTR type.
    pub const NONE: RtrTypes = RtrTypes {
        send: false,
        write: false,
        read: false,
    };

    /// Whether no type is set.
    pub fn is_empty(&self) -> bool {
        !(self.send || self.write || self.read)
    }

    /// Number of types set.
    pub fn count(&self) -> usize {
        self.send as usize + self.write as usize + self.read as usize
    }

    /// Intersection of two sets.
    pub fn intersect(self, other: RtrTypes) -> RtrTypes {
        RtrTypes {
            send: self.send && other.send,
            write: self.write && other.write,
            read: self.read && other.read,
        }
    }
}

/// The RFC 6581 IRD/ORD words at the start of the private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct IrdOrd {
    /// Inbound RDMA Read queue depth (14 bits).
    pub ird: u16,
    /// Outbound RDMA Read queue depth (14 bits).
    pub ord: u16,
    /// Peer-to-peer mode requested / accepted.
    pub p2p: bool,
    /// RTR types offered (Request) or chosen (Reply).
    pub rtr: RtrTypes,
}

impl IrdOrd {
    /// Parses the 4 octets.
    pub fn parse(bytes: &[u8]) -> Result<IrdOrd, WireError> {
        check_have(bytes.len(), IRD_ORD_LEN)?;
        let ird = u16::from_be_bytes([bytes[0], bytes[1]]);
        let ord = u16::from_be_bytes([bytes[2], bytes[3]]);
        Ok(IrdOrd {
            ird: ird & IRD_ORD_MASK,
            ord: ord & IRD_ORD_MASK,
            p2p: ird & IRD_PEER_TO_PEER != 0,
            rtr: RtrTypes {
                send: ird & IRD_SEND_RTR != 0,
                write: ord & ORD_WRITE_RTR != 0,
                read: ord & ORD_READ_RTR != 0,
            },
        })
    }

    /// The 4 octets (IRD/ORD values above 14 bits are clamped to 0x3fff).
    pub fn to_bytes(&self) -> [u8; 4] {
        let mut ird = self.ird.min(IRD_ORD_MASK);
        let mut ord = self.ord.min(IRD_ORD_MASK);
        if self.p2p {
            ird |= IRD_PEER_TO_PEER;
        }
        if self.rtr.send {
            ird |= IRD_SEND_RTR;
        }
        if self.rtr.write {
            ord |= ORD_WRITE_RTR;
        }
        if self.rtr.read {
            ord |= ORD_READ_RTR;
        }
        let i = ird.to_be_bytes();
        let o = ord.to_be_bytes();
        [i[0], i[1], o[0], o[1]]
    }
}

/// How strictly to treat the reserved bits of a received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReservedBits {
    /// Reserved bits set → `WireError::ReservedBits` (default).
    #[default]
    Reject,
    /// Ignore reserved bits (RFC 5044 §7.1 says they are not checked on reception; Linux
    /// siw uses 0x0800 as its private "GSO" flag).
    Ignore,
}

/// High-level representation of an MPA Request/Reply frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameRepr<'a> {
    /// Request or Reply.
    pub kind: FrameKind,
    /// M: sender wants markers.
    pub markers: bool,
    /// C: sender wants CRC.
    pub crc: bool,
    /// R: reject (Reply only).
    pub reject: bool,
    /// Revision (1 or 2).
    pub revision: u8,
    /// RFC 6581 IRD/ORD words: `Some` exactly when H is set (revision 2 only).
    pub ird_ord: Option<IrdOrd>,
    /// The ULP's private data (after the IRD/ORD words when present).
    pub private_data: &'a [u8],
}

impl<'a> FrameRepr<'a> {
    /// Parses and validates a frame.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        frame: &'a Frame<&'a T>,
        reserved: ReservedBits,
    ) -> Result<FrameRepr<'a>, WireError> {
        frame.check_len()?;
        let kind = frame.kind().ok_or(WireError::BadKey)?;
        Self::validate_header(frame, reserved)?;
        let pd: &'a [u8] = &frame.buffer.as_ref()[FRAME_HEADER_LEN..frame.total_len()];
        let (ird_ord, private_data) = if frame.enhanced() {
            (Some(IrdOrd::parse(pd)?), &pd[IRD_ORD_LEN..])
        } else {
            (None, pd)
        };
        Ok(FrameRepr {
            kind,
            markers: frame.markers(),
            crc: frame.crc(),
            reject: frame.reject(),
            revision: frame.revision(),
            ird_ord,
            private_data,
        })
    }

    /// Validates the 20-octet header alone (key, bits, revision, PD_Length) so that a bad
    /// frame is refused before its private data arrives.
    pub fn validate_header<T: AsRef<[u8]>>(
        frame: &Frame<T>,
        reserved: ReservedBits,
    ) -> Result<FrameKind, WireError> {
        let have = frame.buffer.as_ref().len();
        check_have(have, FRAME_HEADER_LEN)?;
        let kind = frame.kind().ok_or(WireError::BadKey)?;
        let pd = frame.pd_length();
        if pd as usize > MAX_PRIVATE_DATA_LEN {
            return Err(WireError::PrivateDataTooLong(pd));
        }
        if reserved == ReservedBits::Reject && frame.reserved() != 0 {
            return Err(WireError::ReservedBits(frame.reserved()));
        }
        let rev = frame.revision();
        if rev == 0 || rev > 2 {
            return Err(WireError::UnsupportedRevision(rev));
        }
        if kind == FrameKind::Request && frame.reject() {
            return Err(WireError::RejectInRequest);
        }
        if frame.enhanced() {
            if rev == 1 {
                return Err(WireError::EnhancedInRevision1);
            }
            if (pd as usize) < IRD_ORD_LEN {
                return Err(WireError::MissingIrdOrd(pd));
            }
        }
        Ok(kind)
    }

    /// Bits/revision word of this frame.
    pub fn bits(&self) -> u16 {
        let mut bits = self.revision as u16;
        if self.markers {
            bits |= FLAG_MARKERS;
        }
        if self.crc {
            bits |= FLAG_CRC;
        }
        if self.reject {
            bits |= FLAG_REJECT;
        }
        if self.ird_ord.is_some() {
            bits |= FLAG_ENHANCED;
        }
        bits
    }

    /// PD_Length this frame will carry.
    pub fn pd_length(&self) -> usize {
        self.private_data.len()
            + if self.ird_ord.is_some() {
                IRD_ORD_LEN
            } else {
                0
            }
    }

    /// Total encoded length.
    pub fn buffer_len(&self) -> usize {
        FRAME_HEADER_LEN + self.pd_length()
    }

    /// Writes the frame into `buf` (at least `buffer_len()` octets); returns the length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let pd_len = self.pd_length();
        if pd_len > MAX_PRIVATE_DATA_LEN {
            return Err(WireError::PrivateDataTooLong(
                pd_len.min(u16::MAX as usize) as u16
            ));
        }
        let need = self.buffer_len();
        check_have(buf.len(), need)?;
        let mut f = Frame::new_unchecked(&mut buf[..need]);
        f.set_kind(self.kind);
        f.set_bits(self.bits());
        f.set_pd_length(pd_len as u16);
        let pd = f.private_data_mut();
        let rest = match self.ird_ord {
            Some(io) => {
                pd[..IRD_ORD_LEN].copy_from_slice(&io.to_bytes());
                &mut pd[IRD_ORD_LEN..]
            }
            None => pd,
        };
        rest.copy_from_slice(self.private_data);
        Ok(need)
    }

    /// Encodes into a new vector.
    pub fn to_vec(&self) -> Result<Vec<u8>, WireError> {
        let mut v = vec![0u8; self.buffer_len()];
        self.emit(&mut v)?;
        Ok(v)
    }
}

/// Length of the pad after a ULPDU of `ulpdu_len` octets (RFC 5044 §4.1).
pub fn pad_len(ulpdu_len: usize) -> usize {
    (4 - (ULPDU_LENGTH_LEN + ulpdu_len) % 4) % 4
}

/// Length of an FPDU (without markers) carrying `ulpdu_len` octets.
pub fn fpdu_len(ulpdu_len: usize) -> usize {
    ULPDU_LENGTH_LEN + ulpdu_len + pad_len(ulpdu_len) + CRC_LEN
}

/// Zero-copy view of a contiguous FPDU (one without markers inside).
#[derive(Debug, Clone)]
pub struct Fpdu<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Fpdu<T> {
    /// Wraps a buffer without checking it.
    pub fn new_unchecked(buffer: T) -> Self {
        Fpdu { buffer }
    }

    /// Wraps a buffer and checks it holds the whole FPDU announced by ULPDU_Length.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let f = Fpdu { buffer };
        f.check_len()?;
        Ok(f)
    }

    /// Checks the buffer holds the header and the whole FPDU.
    pub fn check_len(&self) -> Result<(), WireError> {
        let have = self.buffer.as_ref().len();
        check_have(have, ULPDU_LENGTH_LEN)?;
        let need = self.total_len();
        check_have(have, need)?;
        Ok(())
    }

    /// ULPDU_Length.
    pub fn ulpdu_length(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Pad length.
    pub fn pad_len(&self) -> usize {
        pad_len(self.ulpdu_length() as usize)
    }

    /// FPDU length: header, ULPDU, pad, CRC.
    pub fn total_len(&self) -> usize {
        fpdu_len(self.ulpdu_length() as usize)
    }

    /// The ULPDU (the DDP segment).
    pub fn ulpdu(&self) -> &[u8] {
        let len = self.ulpdu_length() as usize;
        &self.buffer.as_ref()[ULPDU_LENGTH_LEN..ULPDU_LENGTH_LEN + len]
    }

    /// The pad octets.
    pub fn pad(&self) -> &[u8] {
        let start = ULPDU_LENGTH_LEN + self.ulpdu_length() as usize;
        &self.buffer.as_ref()[start..start + self.pad_len()]
    }

    /// The octets the CRC covers: ULPDU_Length, ULPDU and pad.
    pub fn crc_covered(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.total_len() - CRC_LEN]
    }

    /// The CRC value as received (wire octets read in iSCSI order, RFC 3720 §B.4).
    pub fn crc(&self) -> u32 {
        let end = self.total_len();
        let b = &self.buffer.as_ref()[end - CRC_LEN..end];
        crc::from_wire([b[0], b[1], b[2], b[3]])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Fpdu<T> {
    /// Writes ULPDU_Length.
    pub fn set_ulpdu_length(&mut self, len: u16) {
        self.buffer.as_mut()[..ULPDU_LENGTH_LEN].copy_from_slice(&len.to_be_bytes());
    }

    /// Mutable ULPDU.
    pub fn ulpdu_mut(&mut self) -> &mut [u8] {
        let len = self.ulpdu_length() as usize;
        &mut self.buffer.as_mut()[ULPDU_LENGTH_LEN..ULPDU_LENGTH_LEN + len]
    }

    /// Zeroes the pad.
    pub fn clear_pad(&mut self) {
        let start = ULPDU_LENGTH_LEN + self.ulpdu_length() as usize;
        let pad = self.pad_len();
        self.buffer.as_mut()[start..start + pad].fill(0);
    }

    /// Writes the CRC field (value in, iSCSI wire order out).
    pub fn set_crc(&mut self, value: u32) {
        let end = self.total_len();
        self.buffer.as_mut()[end - CRC_LEN..end].copy_from_slice(&crc::to_wire(value));
    }
}

/// High-level FPDU: the ULPDU and the CRC value (computed on emit when asked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FpduRepr<'a> {
    /// The DDP segment.
    pub ulpdu: &'a [u8],
    /// CRC as found on the wire (parse) or `0` for "CRC not negotiated".
    pub crc: u32,
}

impl<'a> FpduRepr<'a> {
    /// Parses a contiguous FPDU (no markers inside).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(fpdu: &'a Fpdu<&'a T>) -> Result<Self, WireError> {
        fpdu.check_len()?;
        let len = fpdu.ulpdu_length() as usize;
        Ok(FpduRepr {
            ulpdu: &fpdu.buffer.as_ref()[ULPDU_LENGTH_LEN..ULPDU_LENGTH_LEN + len],
            crc: fpdu.crc(),
        })
    }

    /// Encoded length.
    pub fn buffer_len(&self) -> usize {
        fpdu_len(self.ulpdu.len())
    }

    /// Writes the FPDU; when `compute_crc` the CRC field gets the CRC32c of the FPDU,
    /// else the `crc` value of this repr. Returns the length.
    pub fn emit(&self, buf: &mut [u8], compute_crc: bool) -> Result<usize, WireError> {
        if self.ulpdu.len() > u16::MAX as usize {
            return Err(WireError::BadUlpduLength(u16::MAX));
        }
        let need = self.buffer_len();
        check_have(buf.len(), need)?;
        let mut f = Fpdu::new_unchecked(&mut buf[..need]);
        f.set_ulpdu_length(self.ulpdu.len() as u16);
        f.ulpdu_mut().copy_from_slice(self.ulpdu);
        f.clear_pad();
        let value = if compute_crc {
            crc::crc32c(f.crc_covered())
        } else {
            self.crc
        };
        f.set_crc(value);
        Ok(need)
    }
}

/// A marker (RFC 5044 §5): 16 reserved bits and the 16-bit FPDUPTR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Marker {
    /// Octets from the start of the current FPDU (or the marker in front of it) to this
    /// marker's first octet.
    pub fpduptr: u16,
    /// The reserved half as received (sent as zero, not checked on reception).
    pub reserved: u16,
}

impl Marker {
    /// A marker with the given pointer and zero reserved bits.
    pub fn new(fpduptr: u16) -> Self {
        Marker {
            fpduptr,
            reserved: 0,
        }
    }

    /// Parses 4 octets.
    pub fn parse(bytes: &[u8]) -> Result<Marker, WireError> {
        check_have(bytes.len(), MARKER_LEN)?;
        Ok(Marker {
            reserved: u16::from_be_bytes([bytes[0], bytes[1]]),
            fpduptr: u16::from_be_bytes([bytes[2], bytes[3]]),
        })
    }

    /// The 4 wire octets.
    pub fn to_bytes(&self) -> [u8; 4] {
        let r = self.reserved.to_be_bytes();
        let p = self.fpduptr.to_be_bytes();
        [r[0], r[1], p[0], p[1]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn siw_request() -> Vec<u8> {
        // Linux siw rev 2 request, IRD 1 / ORD 1, no markers, no CRC (siwlab README).
        let mut v = REQUEST_KEY.to_vec();
        v.extend_from_slice(&[0x10, 0x02, 0x00, 0x04, 0x00, 0x01, 0x00, 0x01]);
        v
    }

    #[test]
    fn parses_siw_request() {
        // RFC 5044 §7.1, RFC 6581 §5
        let buf = siw_request();
        let f = Frame::new_checked(&buf[..]).unwrap();
        let r = FrameRepr::parse(&f, ReservedBits::Reject).unwrap();
        assert_eq!(r.kind, FrameKind::Request);
        assert_eq!(r.revision, 2);
        assert!(!r.markers && !r.crc && !r.reject);
        assert_eq!(
            r.ird_ord,
            Some(IrdOrd {
                ird: 1,
                ord: 1,
                p2p: false,
                rtr: RtrTypes::NONE
            })
        );
        assert!(r.private_data.is_empty());
        assert_eq!(r.to_vec().unwrap(), buf);
    }

    #[test]
    fn truncated_and_oversized() {
        let buf = siw_request();
        assert_eq!(
            Frame::new_checked(&buf[..19]).unwrap_err(),
            WireError::Truncated { need: 20, have: 19 }
        );
        assert_eq!(
            Frame::new_checked(&buf[..22]).unwrap_err(),
            WireError::Truncated { need: 24, have: 22 }
        );
        let mut big = buf.clone();
        big[18..20].copy_from_slice(&513u16.to_be_bytes());
        assert_eq!(
            Frame::new_checked(&big[..]).unwrap_err(),
            WireError::PrivateDataTooLong(513)
        );
    }

    #[test]
    fn fpdu_view_and_marker() {
        // RFC 5044 §4.1: 2 + 5 + pad 1 = 8, + CRC 4
        let ulpdu = [1u8, 2, 3, 4, 5];
        let repr = FpduRepr {
            ulpdu: &ulpdu,
            crc: 0,
        };
        let mut buf = [0xffu8; 12];
        assert_eq!(repr.emit(&mut buf, false).unwrap(), 12);
        assert_eq!(buf, [0, 5, 1, 2, 3, 4, 5, 0, 0, 0, 0, 0]);
        let f = Fpdu::new_checked(&buf[..]).unwrap();
        assert_eq!(f.ulpdu(), &ulpdu);
        assert_eq!(f.pad(), &[0]);
        assert!(Fpdu::new_checked(&buf[..11]).is_err());
        assert!(Fpdu::new_checked(&buf[..1]).is_err());
        let m = Marker::parse(&[0, 0, 0x01, 0x02]).unwrap();
        assert_eq!(m.fpduptr, 0x0102);
        assert_eq!(Marker::new(0x0102).to_bytes(), [0, 0, 1, 2]);
        assert!(Marker::parse(&[0, 0, 1]).is_err());
    }
}
