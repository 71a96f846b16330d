//! Input formats shared by the fuzz targets and the seed builder.
//!
//! Each target reads its input with [`Input`], a cursor that never fails: past the end it
//! yields zeros and empty slices, so every byte string is a valid input. The seed builder
//! (`examples/make_seeds.rs`) writes the same formats with [`Output`], so that frames,
//! FPDUs and segments from real captures become seeds of the structured targets (the
//! `arbitrary` crate has no encoder, which is why the formats are explicit).

/// Reading side of a target's input.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// A cursor at the start of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Bytes left.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Next byte (0 past the end).
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// Next bit flag (lowest bit of a byte).
    pub fn bool(&mut self) -> bool {
        self.u8() & 1 != 0
    }

    /// Next big-endian `u16`.
    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    /// Next big-endian `u32`.
    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// Next big-endian `u64`.
    pub fn u64(&mut self) -> u64 {
        (u64::from(self.u32()) << 32) | u64::from(self.u32())
    }

    /// The next `n` bytes (fewer at the end).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head
    }

    /// A `u16` length prefix, then that many bytes (at most `max`).
    pub fn chunk(&mut self, max: usize) -> &'a [u8] {
        let n = self.u16() as usize;
        self.bytes(n.min(max))
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        self.bytes(self.data.len())
    }
}

/// Writing side: builds inputs in the format [`Input`] reads.
#[derive(Default)]
pub struct Output {
    /// The encoded input.
    pub buf: Vec<u8>,
}

impl Output {
    /// An empty input.
    pub fn new() -> Self {
        Output::default()
    }

    /// Appends a byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }

    /// Appends a big-endian `u16`.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// Appends a big-endian `u32`.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// Appends a big-endian `u64`.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// Appends raw bytes.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(b);
        self
    }

    /// Appends a `u16` length prefix and the bytes (cut to 65535).
    pub fn chunk(&mut self, b: &[u8]) -> &mut Self {
        let b = &b[..b.len().min(u16::MAX as usize)];
        self.u16(b.len() as u16).bytes(b)
    }
}

/// Formats of the individual targets (documented where the target reads them).
pub mod format {
    /// `mpa_receiver` record kinds.
    pub mod receiver {
        /// `handle_segment(seq, payload, in_order = true)`.
        pub const SEGMENT_IN_ORDER: u8 = 0;
        /// `handle_segment(seq, payload, in_order = false)`.
        pub const SEGMENT_AHEAD: u8 = 1;
        /// `handle_in_order(seq, payload)`.
        pub const IN_ORDER: u8 = 2;
        /// `handle_rcv_nxt(seq)`.
        pub const RCV_NXT: u8 = 3;
        /// Mode byte bit: check the receiver against a model instead of raw records.
        pub const MODE_MODEL: u8 = 0x80;
    }

    /// `rdmap_engine` operation codes.
    pub mod engine {
        /// A DDP segment built from header fields.
        pub const SEGMENT: u8 = 0;
        /// A DDP segment given as raw bytes.
        pub const RAW_SEGMENT: u8 = 1;
        /// Post a receive buffer.
        pub const POST_RECV: u8 = 2;
        /// Post a send-queue work request.
        pub const POST_SEND: u8 = 3;
        /// Drain the engine's transmit side.
        pub const TRANSMIT: u8 = 4;
        /// Stream lifecycle: close, LLP closed, abort.
        pub const LIFECYCLE: u8 = 5;
        /// Number of operation codes.
        pub const COUNT: u8 = 6;
    }

    /// `tcp_segment` operation codes.
    pub mod tcp {
        /// A segment built from header fields (valid checksums).
        pub const SEGMENT: u8 = 0;
        /// A raw IPv4 packet.
        pub const RAW: u8 = 1;
        /// Time passes.
        pub const ADVANCE: u8 = 2;
        /// Application calls.
        pub const APP: u8 = 3;
        /// Number of operation codes.
        pub const COUNT: u8 = 4;
    }
}
