//! The port API every backend implements: [`Port`], its frame buffers ([`PacketBuf`]), and
//! the facts, counters and errors of a port.

use std::fmt;

/// A frame buffer owned by a port backend (a DPDK mbuf, or a heap buffer for software ports).
///
/// The buffer's length is the frame length; `as_mut` gives the frame bytes for in-place
/// rewriting (e.g. MAC swap) before the buffer is handed to `tx_burst`.
pub trait PacketBuf: AsRef<[u8]> + AsMut<[u8]> {
    /// Frame length in bytes.
    fn len(&self) -> usize {
        self.as_ref().len()
    }
    /// True when the frame holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Shortens the frame to `len` bytes (no-op if already shorter).
    fn truncate(&mut self, len: usize);
}

/// Static facts about a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// Name from the configuration (or the backend's own name).
    pub name: String,
    /// Ethernet address used as source of transmitted frames.
    pub mac: [u8; 6],
    /// IP MTU (frames carry up to `mtu + 14` bytes).
    pub mtu: usize,
}

/// Counters every port keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received (frame bytes, no FCS).
    pub rx_bytes: u64,
    /// Frames transmitted.
    pub tx_packets: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Frames the backend dropped on receive (ring full, no buffer).
    pub rx_dropped: u64,
    /// Frames the backend could not transmit (ring full) and that the caller freed.
    pub tx_dropped: u64,
    /// Receive errors reported by the backend.
    pub rx_errors: u64,
}

/// A failure of a port backend.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// The backend could not be created or started.
    #[error("port {port}: {reason}")]
    Setup {
        /// Port name.
        port: String,
        /// What went wrong, in one line.
        reason: String,
    },
    /// An OS call failed.
    #[error("port {port}: {op}: {source}")]
    Io {
        /// Port name.
        port: String,
        /// The operation that failed.
        op: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// A network port driven by polling.
pub trait Port {
    /// The frame buffer type of this backend.
    type Buf: PacketBuf;

    /// Static facts about the port.
    fn info(&self) -> &PortInfo;

    /// Receives up to `max` frames, appending them to `out`; returns how many were appended.
    fn rx_burst(&mut self, out: &mut Vec<Self::Buf>, max: usize) -> usize;

    /// Allocates a transmit buffer of exactly `len` bytes (zeroed or not), or `None` when the
    /// backend's buffer pool is exhausted.
    fn alloc_tx(&mut self, len: usize) -> Option<Self::Buf>;

    /// Transmits frames from the front of `bufs`, removing the ones sent; returns how many
    /// were sent. Frames left in `bufs` were not accepted (ring full); the caller may retry
    /// them or drop them (dropping frees the buffer).
    fn tx_burst(&mut self, bufs: &mut Vec<Self::Buf>) -> usize;

    /// Current counters.
    fn stats(&self) -> PortStats;
}

impl fmt::Display for PortInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.mac;
        write!(
            f,
            "{} {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x} mtu {}",
            self.name, m[0], m[1], m[2], m[3], m[4], m[5], self.mtu
        )
    }
}
