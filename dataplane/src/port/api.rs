//! The port API every backend implements: [`Port`], its frame buffers ([`PacketBuf`]), and
//! the facts, counters and errors of a port.

use std::fmt;
use tcp::Lent;

use crate::frame::RxChecksum;
use crate::telemetry::Dict;
use crate::tso::InPlaceTso;

/// A frame buffer owned by a port backend (a DPDK mbuf, or a heap buffer for software ports).
///
/// The buffer's length is the frame length; `as_mut` gives the frame bytes for in-place
/// rewriting (e.g. MAC swap) before the buffer is handed to `tx_burst`.
pub trait PacketBuf: AsRef<[u8]> + AsMut<[u8]> {
    /// What a retired buffer leaves in the spent list until [`PacketBuf::free_all`]: the
    /// mbuf itself for DPDK buffers (of every port kind that carries them), so the list
    /// holds pointers rather than the enum of every buffer kind.
    type Spent: std::fmt::Debug + Send;
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
    /// The 802.1Q TCI kept beside the frame rather than in it: the tag the device stripped
    /// on receive, or the one it is to insert on transmit (only DPDK's VLAN offloads do).
    fn offloaded_vlan(&self) -> Option<u16> {
        None
    }
    /// Asks the device to insert an 802.1Q tag with `tci` on transmit; only for ports whose
    /// [`Port::vlan_offload`] says they insert tags (others ignore it).
    fn set_offloaded_vlan(&mut self, _tci: u16) {}
    /// The device's verdicts on the checksums of a received frame (unknown unless the port
    /// has receive checksum offloads).
    fn rx_checksum(&self) -> RxChecksum {
        RxChecksum::default()
    }
    /// Gives back this received buffer, which nothing reads any more: into `spent` where
    /// the backend frees a burst at once ([`PacketBuf::free_all`], DPDK), freed here
    /// otherwise.
    fn retire(self, spent: &mut Vec<Self::Spent>)
    where
        Self: Sized,
    {
        let _ = spent;
    }
    /// Frees the retired buffers of `spent`, leaving it empty: at once where the backend
    /// frees in bulk (DPDK), one by one otherwise.
    fn free_all(spent: &mut Vec<Self::Spent>) {
        spent.clear();
    }
}

/// The checksum and segment offloads a port has enabled, for the stacks above it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortOffloads {
    /// The port has the device fill the IPv4 and TCP checksums of the TCP frames it sends
    /// (the TCP engine may leave them out).
    pub tx_checksum: bool,
    /// The device verifies received checksums ([`PacketBuf::rx_checksum`]).
    pub rx_checksum: bool,
    /// The offloads by name, for the run's first lines (`none` without any).
    pub summary: String,
}

/// The 802.1Q offloads a port has enabled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VlanOffload {
    /// The device strips the tag of received frames and reports it beside the frame.
    pub rx_strip: bool,
    /// The device inserts the tag given with [`PacketBuf::set_offloaded_vlan`].
    pub tx_insert: bool,
}

/// Static facts about a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// Name from the configuration (or the backend's own name).
    pub name: String,
    /// Ethernet address used as source of transmitted frames.
    pub mac: [u8; 6],
    /// IP MTU (frames carry up to `mtu + 14` bytes, `mtu + 18` with a VLAN tag).
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
    /// Frames received in chained buffers and copied into one.
    pub rx_chained: u64,
    /// Received frames longer than the MTU allows: a peer's TSO frames or the device's
    /// large receive, each one TCP segment.
    pub rx_large: u64,
    /// Frames handed to the device for TCP segmentation (TSO), each made of several
    /// segments of the TCP engine.
    pub tx_tso: u64,
    /// Frames whose payload went out of the TCP engine's own buffer, attached behind the
    /// headers instead of copied ([`Port::attach_payload`]).
    pub tx_external: u64,
    /// Of [`PortStats::tx_external`], the payloads the sent or dropped frames gave back
    /// (equal once every such frame is gone).
    pub tx_external_returned: u64,
    /// Of [`PortStats::tx_external`], the frames sent as one buffer, the headers written
    /// in the room in front of the payload ([`Port::attach_frame`]).
    pub tx_external_whole: u64,
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

    /// Adds what monitoring shows of the backend (driver, queues, offloads, the counters of
    /// its layers) to `out`; the default adds nothing.
    fn describe(&self, _out: &mut Dict) {}

    /// The 802.1Q offloads enabled on the port (none unless the device has them and the
    /// port is on a VLAN).
    fn vlan_offload(&self) -> VlanOffload {
        VlanOffload::default()
    }

    /// Whether the port sends a TCP payload from the engine's buffer behind the headers
    /// ([`Port::attach_payload`]) rather than copied into the frame (by default not).
    fn sends_payloads_in_place(&self) -> bool {
        false
    }

    /// Shortens `buf` to its first `at` octets (the headers) and puts `payload`'s octets
    /// behind them without copying them; once no frame holds them any more (sent or
    /// dropped), the payload's token comes out of [`Port::take_returned_payloads`]. The
    /// payload back (and `buf` untouched) when it cannot: the caller copies it and hands
    /// its token back itself.
    fn attach_payload<'p>(
        &mut self,
        _buf: &mut Self::Buf,
        _at: usize,
        payload: Lent<'p>,
    ) -> Result<(), Lent<'p>> {
        Err(payload)
    }

    /// Like [`Port::attach_payload`], but the frame goes out as one buffer: `buf`'s first
    /// `at` octets (the headers) are written into the room in front of the lent payload
    /// ([`Lent::with_headers`]) and `buf` becomes a buffer of those octets and the
    /// payload, not copied; the buffer `buf` was comes back for reuse (its octets as
    /// they were). The payload back (`buf` untouched) when it cannot: no room free, a
    /// device that does not attach payloads.
    fn attach_frame<'p>(
        &mut self,
        _buf: &mut Self::Buf,
        _at: usize,
        payload: Lent<'p>,
    ) -> Result<Self::Buf, Lent<'p>> {
        Err(payload)
    }

    /// Moves the tokens of the payloads [`Port::attach_payload`] lent to frames that no
    /// longer hold them into `out` (for the engine that lent them); none by default.
    fn take_returned_payloads(&mut self, _out: &mut Vec<u64>) {}

    /// Octets of a buffer from [`Port::alloc_tso`]: the TCP segments of one connection
    /// written one after another into one such buffer ([`InPlaceTso`]) go to the device as
    /// one frame it cuts (TSO); 0 (the default): the port takes no such frames.
    fn tso_room(&self) -> usize {
        0
    }

    /// A buffer of [`Port::tso_room`] octets for a TSO frame built in place, or `None`
    /// (none free, or no TSO).
    fn alloc_tso(&mut self) -> Option<Self::Buf> {
        None
    }

    /// Readies a frame built in place in a buffer of [`Port::alloc_tso`] (truncated to its
    /// length) for the device: one TSO frame of `tso`'s segments.
    fn finish_tso(&mut self, _buf: &mut Self::Buf, _tso: &InPlaceTso) {}

    /// The checksum and segment offloads enabled on the port (none by default).
    fn offloads(&self) -> PortOffloads {
        PortOffloads {
            summary: "none".into(),
            ..PortOffloads::default()
        }
    }
}

/// What became of one frame a port offered to its link, in [`tx_one_by_one`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Offered {
    /// Sent.
    Sent,
    /// Not sent and not kept (too long for the link, refused by the device).
    Dropped,
    /// The link takes no more now: this frame and the ones after it stay with the caller.
    Full,
}

/// The receive burst of a port that takes one frame at a time: appends the frames `next`
/// gives to `out` until there are `max` of them or `next` has none (`None`), counting them
/// in `stats` (lent to `next` for its own error counts). Returns how many were appended.
pub(super) fn rx_one_by_one<B: PacketBuf>(
    out: &mut Vec<B>,
    max: usize,
    stats: &mut PortStats,
    mut next: impl FnMut(&mut PortStats) -> Option<B>,
) -> usize {
    let mut n = 0;
    while n < max {
        let Some(buf) = next(stats) else { break };
        stats.rx_packets += 1;
        stats.rx_bytes += buf.len() as u64;
        out.push(buf);
        n += 1;
    }
    n
}

/// The transmit burst of a port that sends one frame at a time: offers the frames of `bufs`
/// in order to `send` until it reports the link [`Offered::Full`], and removes the frames
/// sent or dropped; the ones left stay in `bufs` for the caller. Every frame not sent is
/// counted in `stats.tx_dropped`. Returns how many were sent.
pub(super) fn tx_one_by_one<B: PacketBuf>(
    bufs: &mut Vec<B>,
    stats: &mut PortStats,
    mut send: impl FnMut(&mut B) -> Offered,
) -> usize {
    let mut sent = 0;
    let mut consumed = 0;
    for buf in bufs.iter_mut() {
        let len = buf.len() as u64;
        match send(buf) {
            Offered::Sent => {
                stats.tx_packets += 1;
                stats.tx_bytes += len;
                sent += 1;
            }
            Offered::Dropped => stats.tx_dropped += 1,
            Offered::Full => break,
        }
        consumed += 1;
    }
    if consumed == bufs.len() {
        // The common case, every frame taken: no drain to set up and close.
        bufs.clear();
    } else {
        bufs.drain(..consumed);
    }
    stats.tx_dropped += bufs.len() as u64;
    sent
}

/// The name of lane `lane` of `lanes` of port `name`: the port's own name when it has one
/// queue, `name.qN` otherwise.
pub fn lane_name(name: &str, lane: u16, lanes: u16) -> String {
    if lanes <= 1 {
        name.to_string()
    } else {
        format!("{name}.q{lane}")
    }
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
