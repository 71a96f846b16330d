//! [`AnyPort`]: one type for every backend and middleware stack, built from configuration.
//!
//! Code that handles a mix of backends (the `run` command, tests) uses `AnyPort` and pays one
//! well-predicted branch per burst and per buffer access. Hot loops that know their backend
//! (`fwd` between two DPDK ports) match on [`AnyPort::backend`] and run monomorphised on the
//! concrete port type instead.

use tcp::Lent;

use super::api::{PacketBuf, Port, PortInfo, PortOffloads, PortStats, VlanOffload};
use super::capture::CapturePort;
use super::fault::{FaultConfig, FaultCounters, FaultPort};
use super::heap::HeapBuf;
use super::soft_pair::SoftPort;
use super::tap::TapPort;
use crate::frame::RxChecksum;
use crate::telemetry::Dict;
use crate::tso::InPlaceTso;

#[cfg(feature = "dpdk")]
use super::dpdk::DpdkPort;
#[cfg(feature = "dpdk")]
use crate::dpdk::Mbuf;

/// A frame buffer of any backend.
#[derive(Debug)]
pub enum AnyBuf {
    /// Heap memory (software and TAP ports).
    Heap(HeapBuf),
    /// A DPDK mbuf.
    #[cfg(feature = "dpdk")]
    Mbuf(Mbuf),
}

impl AsRef<[u8]> for AnyBuf {
    fn as_ref(&self) -> &[u8] {
        match self {
            AnyBuf::Heap(b) => b.as_ref(),
            #[cfg(feature = "dpdk")]
            AnyBuf::Mbuf(b) => b.as_ref(),
        }
    }
}

impl AsMut<[u8]> for AnyBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        match self {
            AnyBuf::Heap(b) => b.as_mut(),
            #[cfg(feature = "dpdk")]
            AnyBuf::Mbuf(b) => b.as_mut(),
        }
    }
}

impl PacketBuf for AnyBuf {
    #[cfg(feature = "dpdk")]
    type Spent = Mbuf;
    #[cfg(not(feature = "dpdk"))]
    type Spent = HeapBuf;

    fn truncate(&mut self, len: usize) {
        match self {
            AnyBuf::Heap(b) => b.truncate(len),
            #[cfg(feature = "dpdk")]
            AnyBuf::Mbuf(b) => b.truncate(len),
        }
    }

    fn offloaded_vlan(&self) -> Option<u16> {
        match self {
            AnyBuf::Heap(b) => b.offloaded_vlan(),
            #[cfg(feature = "dpdk")]
            AnyBuf::Mbuf(b) => PacketBuf::offloaded_vlan(b),
        }
    }

    fn set_offloaded_vlan(&mut self, tci: u16) {
        match self {
            AnyBuf::Heap(b) => b.set_offloaded_vlan(tci),
            #[cfg(feature = "dpdk")]
            AnyBuf::Mbuf(b) => b.set_offloaded_vlan(tci),
        }
    }

    fn rx_checksum(&self) -> RxChecksum {
        match self {
            AnyBuf::Heap(b) => b.rx_checksum(),
            #[cfg(feature = "dpdk")]
            AnyBuf::Mbuf(b) => PacketBuf::rx_checksum(b),
        }
    }

    /// An mbuf (without its enum) into `spent`, a heap buffer back to its pool now.
    #[cfg(feature = "dpdk")]
    #[inline]
    fn retire(self, spent: &mut Vec<Mbuf>) {
        if let AnyBuf::Mbuf(m) = self {
            spent.push(m);
        }
    }

    /// The spent mbufs at once ([`Mbuf::free_vec`]).
    #[cfg(feature = "dpdk")]
    fn free_all(spent: &mut Vec<Mbuf>) {
        Mbuf::free_vec(spent);
    }
}

/// An owned [`AnyBuf`] back as the buffer of its own kind, or itself when of another kind.
impl TryFrom<AnyBuf> for HeapBuf {
    type Error = AnyBuf;

    fn try_from(b: AnyBuf) -> Result<HeapBuf, AnyBuf> {
        match b {
            AnyBuf::Heap(h) => Ok(h),
            #[cfg(feature = "dpdk")]
            other => Err(other),
        }
    }
}

#[cfg(feature = "dpdk")]
impl TryFrom<AnyBuf> for Mbuf {
    type Error = AnyBuf;

    fn try_from(b: AnyBuf) -> Result<Mbuf, AnyBuf> {
        match b {
            AnyBuf::Mbuf(m) => Ok(m),
            other => Err(other),
        }
    }
}

impl From<HeapBuf> for AnyBuf {
    fn from(b: HeapBuf) -> AnyBuf {
        AnyBuf::Heap(b)
    }
}

#[cfg(feature = "dpdk")]
impl From<Mbuf> for AnyBuf {
    fn from(b: Mbuf) -> AnyBuf {
        AnyBuf::Mbuf(b)
    }
}

/// The concrete port (or middleware stack) inside an [`AnyPort`].
#[derive(Debug)]
pub enum Backend {
    /// One end of an in-process link.
    Soft(SoftPort),
    /// A Linux TAP device.
    Tap(TapPort),
    /// A DPDK ethdev port.
    #[cfg(feature = "dpdk")]
    Dpdk(DpdkPort),
    /// Fault injection around another port.
    Fault(Box<FaultPort<AnyPort>>),
    /// pcap capture around another port.
    Capture(Box<CapturePort<AnyPort>>),
}

/// A port of any backend; see the module documentation.
#[derive(Debug)]
pub struct AnyPort {
    backend: Backend,
    heap_scratch: Vec<HeapBuf>,
    #[cfg(feature = "dpdk")]
    mbuf_scratch: Vec<Mbuf>,
    /// Frames dropped while converting between buffer kinds (no buffer to copy into).
    convert_drops: u64,
}

impl From<Backend> for AnyPort {
    fn from(backend: Backend) -> AnyPort {
        AnyPort {
            backend,
            heap_scratch: Vec::new(),
            #[cfg(feature = "dpdk")]
            mbuf_scratch: Vec::new(),
            convert_drops: 0,
        }
    }
}

impl From<SoftPort> for AnyPort {
    fn from(p: SoftPort) -> AnyPort {
        Backend::Soft(p).into()
    }
}

impl From<TapPort> for AnyPort {
    fn from(p: TapPort) -> AnyPort {
        Backend::Tap(p).into()
    }
}

#[cfg(feature = "dpdk")]
impl From<DpdkPort> for AnyPort {
    fn from(p: DpdkPort) -> AnyPort {
        Backend::Dpdk(p).into()
    }
}

impl From<FaultPort<AnyPort>> for AnyPort {
    fn from(p: FaultPort<AnyPort>) -> AnyPort {
        Backend::Fault(Box::new(p)).into()
    }
}

impl From<CapturePort<AnyPort>> for AnyPort {
    fn from(p: CapturePort<AnyPort>) -> AnyPort {
        Backend::Capture(Box::new(p)).into()
    }
}

impl AnyPort {
    /// The concrete port.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// Takes the concrete port out (for a monomorphised loop).
    pub fn into_backend(self) -> Backend {
        self.backend
    }

    /// Short name of the backend stack, outermost first (e.g. `capture+fault+tap`).
    pub fn kind(&self) -> String {
        match &self.backend {
            Backend::Soft(_) => "soft".into(),
            Backend::Tap(_) => "tap".into(),
            #[cfg(feature = "dpdk")]
            Backend::Dpdk(_) => "dpdk".into(),
            Backend::Fault(p) => format!("fault+{}", p.inner().kind()),
            Backend::Capture(p) => format!("capture+{}", p.inner().kind()),
        }
    }

    /// True when the link is up (software and TAP ports always are).
    pub fn link_up(&self) -> bool {
        match &self.backend {
            #[cfg(feature = "dpdk")]
            Backend::Dpdk(p) => p.link_up(),
            Backend::Fault(p) => p.inner().link_up(),
            Backend::Capture(p) => p.inner().link_up(),
            _ => true,
        }
    }

    /// The fault layer's configuration in this stack, if any.
    pub fn fault_config(&self) -> Option<&FaultConfig> {
        match &self.backend {
            Backend::Fault(p) => Some(p.config()),
            Backend::Capture(p) => p.inner().fault_config(),
            _ => None,
        }
    }

    /// Fault counters (receive, transmit) of the fault layer in this stack, if any.
    pub fn fault_counters(&self) -> Option<(FaultCounters, FaultCounters)> {
        match &self.backend {
            Backend::Fault(p) => Some(p.counters()),
            Backend::Capture(p) => p.inner().fault_counters(),
            _ => None,
        }
    }

    /// Frames recorded by the capture layer in this stack, if any.
    pub fn captured(&self) -> Option<u64> {
        match &self.backend {
            Backend::Capture(p) => Some(p.records()),
            Backend::Fault(p) => p.inner().captured(),
            _ => None,
        }
    }

    /// Frames dropped converting buffers between backends (including wrapped layers).
    pub fn convert_drops(&self) -> u64 {
        self.convert_drops
            + match &self.backend {
                Backend::Fault(p) => p.inner().convert_drops(),
                Backend::Capture(p) => p.inner().convert_drops(),
                _ => 0,
            }
    }
}

/// Receives from a concrete port through `scratch`.
fn rx_via<P: Port>(
    port: &mut P,
    scratch: &mut Vec<P::Buf>,
    out: &mut Vec<AnyBuf>,
    max: usize,
) -> usize
where
    P::Buf: Into<AnyBuf>,
{
    scratch.clear();
    let n = port.rx_burst(scratch, max);
    if !scratch.is_empty() {
        out.extend(scratch.drain(..).map(Into::into));
    }
    n
}

/// Moves the frames of a DPDK burst from `scratch` to `out`.
#[cfg(feature = "dpdk")]
#[inline(never)]
fn take_mbufs(scratch: &mut Vec<Mbuf>, out: &mut Vec<AnyBuf>) {
    out.extend(scratch.drain(..).map(AnyBuf::Mbuf));
}

/// Transmits on a concrete port through `scratch`, copying frames of other buffer kinds
/// into its own (counted in `drops` when it has no buffer); refused frames are put back in
/// `bufs` in order.
fn tx_via<P: Port>(
    port: &mut P,
    scratch: &mut Vec<P::Buf>,
    bufs: &mut Vec<AnyBuf>,
    drops: &mut u64,
) -> usize
where
    P::Buf: Into<AnyBuf> + TryFrom<AnyBuf, Error = AnyBuf>,
{
    scratch.clear();
    for b in bufs.drain(..) {
        match P::Buf::try_from(b) {
            Ok(own) => scratch.push(own),
            Err(other) => match port.alloc_tx(other.len()) {
                Some(mut own) => {
                    own.as_mut().copy_from_slice(other.as_ref());
                    scratch.push(own);
                }
                None => *drops += 1,
            },
        }
    }
    let n = port.tx_burst(scratch);
    bufs.extend(scratch.drain(..).map(Into::into));
    n
}

impl AnyPort {
    /// [`Port::rx_burst`] of the backends other than DPDK.
    #[inline(never)]
    fn rx_other(&mut self, out: &mut Vec<AnyBuf>, max: usize) -> usize {
        match &mut self.backend {
            Backend::Soft(p) => rx_via(p, &mut self.heap_scratch, out, max),
            Backend::Tap(p) => rx_via(p, &mut self.heap_scratch, out, max),
            #[cfg(feature = "dpdk")]
            Backend::Dpdk(p) => rx_via(p, &mut self.mbuf_scratch, out, max),
            Backend::Fault(p) => p.rx_burst(out, max),
            Backend::Capture(p) => p.rx_burst(out, max),
        }
    }
}

impl Port for AnyPort {
    type Buf = AnyBuf;

    fn info(&self) -> &PortInfo {
        match &self.backend {
            Backend::Soft(p) => p.info(),
            Backend::Tap(p) => p.info(),
            #[cfg(feature = "dpdk")]
            Backend::Dpdk(p) => p.info(),
            Backend::Fault(p) => p.info(),
            Backend::Capture(p) => p.info(),
        }
    }

    /// A DPDK port's burst inline in the caller (an empty poll: the device's burst and a
    /// compare, without a frame of its own); the other backends out of line.
    #[inline(always)]
    fn rx_burst(&mut self, out: &mut Vec<AnyBuf>, max: usize) -> usize {
        #[cfg(feature = "dpdk")]
        if let Backend::Dpdk(p) = &mut self.backend {
            let n = p.rx_burst(&mut self.mbuf_scratch, max);
            if n != 0 {
                take_mbufs(&mut self.mbuf_scratch, out);
            }
            return n;
        }
        self.rx_other(out, max)
    }

    fn alloc_tx(&mut self, len: usize) -> Option<AnyBuf> {
        match &mut self.backend {
            Backend::Soft(p) => p.alloc_tx(len).map(AnyBuf::from),
            Backend::Tap(p) => p.alloc_tx(len).map(AnyBuf::from),
            #[cfg(feature = "dpdk")]
            Backend::Dpdk(p) => p.alloc_tx(len).map(AnyBuf::from),
            Backend::Fault(p) => p.alloc_tx(len),
            Backend::Capture(p) => p.alloc_tx(len),
        }
    }

    fn tx_burst(&mut self, bufs: &mut Vec<AnyBuf>) -> usize {
        let drops = &mut self.convert_drops;
        match &mut self.backend {
            Backend::Soft(p) => tx_via(p, &mut self.heap_scratch, bufs, drops),
            Backend::Tap(p) => tx_via(p, &mut self.heap_scratch, bufs, drops),
            #[cfg(feature = "dpdk")]
            Backend::Dpdk(p) => tx_via(p, &mut self.mbuf_scratch, bufs, drops),
            Backend::Fault(p) => p.tx_burst(bufs),
            Backend::Capture(p) => p.tx_burst(bufs),
        }
    }

    fn tso_room(&self) -> usize {
        match &self.backend {
            #[cfg(feature = "dpdk")]
            Backend::Dpdk(p) => p.tso_room(),
            _ => 0,
        }
    }

    fn alloc_tso(&mut self) -> Option<AnyBuf> {
        match &mut self.backend {
            #[cfg(feature = "dpdk")]
            Backend::Dpdk(p) => p.alloc_tso().map(AnyBuf::Mbuf),
            _ => None,
        }
    }

    #[cfg_attr(not(feature = "dpdk"), allow(unused_variables))]
    fn finish_tso(&mut self, buf: &mut AnyBuf, tso: &InPlaceTso) {
        match (&mut self.backend, buf) {
            #[cfg(feature = "dpdk")]
            (Backend::Dpdk(p), AnyBuf::Mbuf(m)) => p.finish_tso(m, tso),
            _ => {}
        }
    }

    fn stats(&self) -> PortStats {
        let mut s = match &self.backend {
            Backend::Soft(p) => p.stats(),
            Backend::Tap(p) => p.stats(),
            #[cfg(feature = "dpdk")]
            Backend::Dpdk(p) => p.stats(),
            Backend::Fault(p) => p.stats(),
            Backend::Capture(p) => p.stats(),
        };
        s.tx_dropped += self.convert_drops;
        s
    }

    /// The layers (`kind`), then each layer's own facts.
    fn describe(&self, out: &mut Dict) {
        out.put("kind", self.kind());
        match &self.backend {
            Backend::Soft(p) => p.describe(out),
            Backend::Tap(p) => p.describe(out),
            #[cfg(feature = "dpdk")]
            Backend::Dpdk(p) => p.describe(out),
            Backend::Fault(p) => p.describe(out),
            Backend::Capture(p) => p.describe(out),
        }
    }

    fn vlan_offload(&self) -> VlanOffload {
        match &self.backend {
            Backend::Soft(p) => p.vlan_offload(),
            Backend::Tap(p) => p.vlan_offload(),
            #[cfg(feature = "dpdk")]
            Backend::Dpdk(p) => p.vlan_offload(),
            Backend::Fault(p) => p.vlan_offload(),
            Backend::Capture(p) => p.vlan_offload(),
        }
    }

    fn sends_payloads_in_place(&self) -> bool {
        match &self.backend {
            #[cfg(feature = "dpdk")]
            Backend::Dpdk(p) => p.sends_payloads_in_place(),
            Backend::Fault(p) => p.sends_payloads_in_place(),
            _ => false,
        }
    }

    fn attach_payload<'p>(
        &mut self,
        buf: &mut AnyBuf,
        at: usize,
        payload: Lent<'p>,
    ) -> Result<(), Lent<'p>> {
        match (&mut self.backend, buf) {
            #[cfg(feature = "dpdk")]
            (Backend::Dpdk(p), AnyBuf::Mbuf(m)) => p.attach_payload(m, at, payload),
            (Backend::Fault(p), b) => p.attach_payload(b, at, payload),
            _ => Err(payload),
        }
    }

    fn attach_frame<'p>(
        &mut self,
        buf: &mut AnyBuf,
        at: usize,
        payload: Lent<'p>,
    ) -> Result<AnyBuf, Lent<'p>> {
        match (&mut self.backend, buf) {
            #[cfg(feature = "dpdk")]
            (Backend::Dpdk(p), AnyBuf::Mbuf(m)) => p.attach_frame(m, at, payload).map(AnyBuf::Mbuf),
            (Backend::Fault(p), b) => p.attach_frame(b, at, payload),
            _ => Err(payload),
        }
    }

    fn take_returned_payloads(&mut self, out: &mut Vec<u64>) {
        match &mut self.backend {
            #[cfg(feature = "dpdk")]
            Backend::Dpdk(p) => p.take_returned_payloads(out),
            Backend::Fault(p) => p.take_returned_payloads(out),
            _ => {}
        }
    }

    fn offloads(&self) -> PortOffloads {
        match &self.backend {
            Backend::Soft(p) => p.offloads(),
            Backend::Tap(p) => p.offloads(),
            #[cfg(feature = "dpdk")]
            Backend::Dpdk(p) => p.offloads(),
            Backend::Fault(p) => p.offloads(),
            Backend::Capture(p) => p.offloads(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::capture::Resolution;
    use crate::port::fault::{FaultConfig, Rate};
    use crate::port::soft_pair::test_pair;

    fn assert_send<T: Send>() {}

    #[test]
    fn ports_can_move_to_lcore_threads() {
        assert_send::<AnyPort>();
        assert_send::<AnyBuf>();
    }

    // A software port's heap buffer retired by the loop goes back to its pool there and
    // then and leaves nothing in the spent list (which holds only mbufs), so `free_all`
    // of the list has nothing of it to free.
    #[test]
    fn a_retired_heap_buffer_goes_back_to_its_pool_at_once() {
        use super::super::heap::BufPool;
        let pool = BufPool::new(4, 2048);
        let frame = AnyBuf::from(pool.take(60));
        let mut spent = Vec::new();
        assert_eq!(pool.idle(), 0);
        frame.retire(&mut spent);
        assert!(spent.is_empty());
        assert_eq!(pool.idle(), 1, "back in the pool before any free_all");
        AnyBuf::free_all(&mut spent);
        assert_eq!(pool.idle(), 1);
    }

    #[test]
    fn layered_stack_passes_frames_and_reports_layers() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = test_pair(16);
        let faulty = FaultPort::new(
            AnyPort::from(a),
            FaultConfig {
                duplicate: Rate::ALWAYS,
                ..FaultConfig::default()
            },
        );
        let cap = CapturePort::create(
            AnyPort::from(faulty),
            &dir.path().join("a.pcap"),
            Resolution::Micros,
            65535,
        )
        .unwrap();
        let mut a = AnyPort::from(cap);
        let mut b = AnyPort::from(b);
        assert_eq!(a.kind(), "capture+fault+soft");
        assert_eq!(a.info().name, "a");

        let mut f = b.alloc_tx(64).unwrap();
        f.as_mut().fill(0x5a);
        let mut out = vec![f];
        assert_eq!(b.tx_burst(&mut out), 1);
        let mut got = Vec::new();
        assert_eq!(a.rx_burst(&mut got, 8), 2, "duplicated by the fault layer");
        assert!(got.iter().all(|f| f.as_ref() == [0x5a; 64]));
        assert_eq!(a.captured(), Some(2));
        let (rx, _) = a.fault_counters().unwrap();
        assert_eq!(rx.duplicated, 1);
        assert_eq!(
            a.stats().rx_packets,
            1,
            "wire counters come from the backend"
        );
    }
}
