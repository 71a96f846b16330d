//! The DPDK ethdev port backend: one queue pair of an EAL device (a device of `queues` pairs
//! gives one [`DpdkPort`] per pair, each for its own lcore), mbufs from the queue's own
//! mempool, bursts passed to DPDK without copying or per-packet allocation.

use std::sync::atomic::{AtomicU32, Ordering};
use tcp::Lent;

use super::api::{
    lane_name, PacketBuf, Port, PortError, PortInfo, PortOffloads, PortStats, VlanOffload,
};
use crate::dpdk::mbuf::ExtSlab;
use crate::dpdk::{offload, DpdkError, Eal, EthDev, EthDevSetup, EthStats, Mbuf, Mempool};
use crate::frame::RxChecksum;
use crate::telemetry::Dict;
use crate::tso::InPlaceTso;

pub use crate::dpdk::available_devices;

/// Distinguishes mempool names when a device is opened more than once per process.
static POOL_SEQ: AtomicU32 = AtomicU32::new(0);

/// Largest burst handed to one `rte_eth_rx_burst` call.
const MAX_BURST: usize = 512;

/// Shared-info records of a port's slab for lent payloads ([`ExtSlab`]): room for a full
/// transmit ring twice over and a backlog of frames the ring refused; beyond that payloads
/// are copied (`external_slab_exhausted` in the port's description).
fn ext_records(cfg: &DpdkPortConfig) -> u32 {
    u32::from(cfg.tx_desc) * 2 + 4 * MAX_BURST as u32
}

/// Mbufs of 64 KiB per queue for received large segments (a burst's worth).
const LARGE_POOL: u32 = 63;

/// Mbufs of 64 KiB per queue for TSO frames built in place: a virtio ring's worth (256
/// descriptors) and the loop's backlog; when none is free, segments go out one mbuf each
/// and are joined at the port.
const TSO_POOL: u32 = 383;

/// Ethernet header plus VLAN tag and FCS, on top of the IP MTU, for sizing mbufs.
const L2_OVERHEAD: usize = 14 + 4 + 4;

/// Settings of one DPDK port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DpdkPortConfig {
    /// Port name (logs, statistics).
    pub name: String,
    /// EAL device name, e.g. `net_memif0` or a PCI address (`rte_eth_dev_get_port_by_name`).
    pub device: String,
    /// Receive descriptors.
    pub rx_desc: u16,
    /// Transmit descriptors.
    pub tx_desc: u16,
    /// IP MTU.
    pub mtu: usize,
    /// MAC address to use, or `None` for the device's own.
    pub mac: Option<[u8; 6]>,
    /// Mbufs in each queue's pool (must cover rx + tx descriptors plus frames held by the
    /// application).
    pub pool_size: u32,
    /// Queue pairs (one [`DpdkPort`] each; RSS spreads flows over them where the device
    /// has it).
    pub queues: u16,
    /// Receive frames for any destination MAC.
    pub promiscuous: bool,
    /// Receive every multicast frame (the port takes IPv6 neighbour discovery).
    pub all_multicast: bool,
    /// Use the device's 802.1Q offloads where it has them (the port is on a VLAN).
    pub vlan_offload: bool,
    /// Use the device's checksum and segment offloads where it has them (`offloads =
    /// "auto"`); `false`: the stacks do that work in software (`"off"`).
    pub offloads: bool,
    /// Frame bytes in each receive mbuf, or `None` for a whole frame's worth. Smaller
    /// buffers hand longer frames in chained mbufs, which the port copies into one.
    pub rx_buf: Option<u16>,
    /// How long to keep retrying a start the device refuses because its peer is not there
    /// yet (a memif client whose server socket does not exist).
    pub start_wait: std::time::Duration,
    /// Send TCP payloads from the engine's buffers where the device allows it
    /// ([`offload::sends_external_payloads`]); `false` (the default): copy them into the
    /// frame.
    pub tx_zero_copy: bool,
}

impl DpdkPortConfig {
    /// A configuration with common defaults (1024 descriptors each way, MTU 1500, 8191
    /// mbufs, promiscuous) for device `device`.
    pub fn new(name: impl Into<String>, device: impl Into<String>) -> DpdkPortConfig {
        DpdkPortConfig {
            name: name.into(),
            device: device.into(),
            rx_desc: 1024,
            tx_desc: 1024,
            mtu: 1500,
            mac: None,
            pool_size: 8191,
            queues: 1,
            promiscuous: true,
            all_multicast: false,
            vlan_offload: false,
            offloads: true,
            rx_buf: None,
            start_wait: std::time::Duration::from_secs(10),
            tx_zero_copy: false,
        }
    }
}

/// One queue pair of a started DPDK ethdev, used as a [`Port`]. Dropping the last queue
/// pair of a device stops and closes it, then frees its mempools (once all their mbufs are
/// back).
pub struct DpdkPort {
    // Field order is drop order: the device first, then the pool its frames came from.
    dev: EthDev,
    /// Whole-frame mbufs when the receive queue's are smaller (see
    /// [`DpdkPortConfig::rx_buf`]): frames to send, received chains copied into one.
    frame_pool: Option<Mempool>,
    info: PortInfo,
    sw: PortStats,
    /// Lengths of the frames of one transmit burst (scratch).
    tx_lens: Vec<u64>,
    /// The frames of a transmit burst while TSO joins them (scratch).
    tx_scratch: Vec<Mbuf>,
    /// Mbufs of 64 KiB for received large segments (a peer's TSO frames, LRO) that came
    /// in chained mbufs; with offloads, on devices that hand such frames over.
    large_pool: Option<Mempool>,
    /// Mbufs of 64 KiB for TSO frames built in place ([`Port::alloc_tso`]); with TSO.
    tso_pool: Option<Mempool>,
    /// Frame octets a whole-frame mbuf holds.
    frame_room: usize,
    /// With `tx_zero_copy` where the device allows it: TCP payloads go out of the engine's
    /// buffers ([`Port::attach_payload`]), their shared info from this slab.
    ext_slab: Option<ExtSlab>,
}

impl DpdkPort {
    /// Looks up `cfg.device`, creates its mempool, configures one rx and one tx queue, sets
    /// MTU (tolerating PMDs that cannot), MAC and promiscuous mode, and starts it.
    /// `cfg.queues` must be 1 (see [`DpdkPort::open_queues`]).
    pub fn open(eal: &Eal, cfg: &DpdkPortConfig) -> Result<DpdkPort, PortError> {
        let mut ports = Self::open_queues(
            eal,
            &DpdkPortConfig {
                queues: 1,
                ..cfg.clone()
            },
        )?;
        ports.pop().ok_or_else(|| PortError::Setup {
            port: cfg.name.clone(),
            reason: "no queue".into(),
        })
    }

    /// Like [`DpdkPort::open`] with `cfg.queues` queue pairs, each with a mempool of its
    /// own: one port per queue pair, in queue order.
    pub fn open_queues(eal: &Eal, cfg: &DpdkPortConfig) -> Result<Vec<DpdkPort>, PortError> {
        let setup_err = |reason: String| PortError::Setup {
            port: cfg.name.clone(),
            reason,
        };
        let mtu = u16::try_from(cfg.mtu)
            .map_err(|_| setup_err(format!("{}: MTU {} too large", cfg.device, cfg.mtu)))?;
        let frame_room = (usize::from(mtu) + L2_OVERHEAD).max(2048);
        let data_room =
            u16::try_from(frame_room + usize::from(Mempool::headroom())).map_err(|_| {
                setup_err(format!(
                    "{}: MTU {} too large for one mbuf",
                    cfg.device, cfg.mtu
                ))
            })?;
        // Receive mbufs smaller than a frame: frames to send, and received frames copied
        // out of their chains, come from a pool of whole-frame mbufs of their own.
        let rx_room = cfg
            .rx_buf
            .filter(|&b| usize::from(b) < frame_room)
            .map(|b| b.saturating_add(Mempool::headroom()));
        let min_pool = u32::from(cfg.rx_desc) + u32::from(cfg.tx_desc) + MAX_BURST as u32;
        if cfg.pool_size < min_pool {
            log::warn!(
                "{}: pool of {} mbufs is smaller than rx+tx descriptors+burst ({min_pool}); receive may stall",
                cfg.name,
                cfg.pool_size
            );
        }

        let (port_id, claim) =
            EthDev::lookup(eal, &cfg.device).map_err(|e| setup_err(e.to_string()))?;
        // Before the mempools: a pool per queue of a count the device refuses is waste.
        let max = EthDev::max_queues(port_id).map_err(|e| setup_err(e.to_string()))?;
        if cfg.queues > max {
            return Err(setup_err(
                DpdkError::TooManyQueues {
                    device: cfg.device.clone(),
                    want: cfg.queues,
                    max,
                }
                .to_string(),
            ));
        }
        let cache = (cfg.pool_size / 8).min(256);
        let pools = (0..cfg.queues.max(1))
            .map(|_| {
                let name = format!("dp{port_id}_{}", POOL_SEQ.fetch_add(1, Ordering::Relaxed));
                Mempool::new(
                    &name,
                    cfg.pool_size,
                    cache,
                    rx_room.unwrap_or(data_room),
                    EthDev::socket_of(port_id),
                )
                .map_err(|e| setup_err(format!("{}: {e}", cfg.device)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut frame_pools = (0..cfg.queues.max(1))
            .map(|_| {
                if rx_room.is_none() {
                    return Ok(None);
                }
                let name = format!("dp{port_id}_{}f", POOL_SEQ.fetch_add(1, Ordering::Relaxed));
                Mempool::new(
                    &name,
                    cfg.pool_size,
                    cache,
                    data_room,
                    EthDev::socket_of(port_id),
                )
                .map(Some)
                .map_err(|e| setup_err(format!("{}: {e}", cfg.device)))
            })
            .collect::<Result<Vec<_>, _>>()?
            .into_iter();
        let setup = EthDevSetup {
            rx_desc: cfg.rx_desc,
            tx_desc: cfg.tx_desc,
            mtu,
            mac: cfg.mac,
            promiscuous: cfg.promiscuous,
            all_multicast: cfg.all_multicast,
            vlan_offload: cfg.vlan_offload,
            offloads: cfg.offloads,
            scatter: rx_room.is_some(),
            start_wait: cfg.start_wait,
        };
        let devs = EthDev::start(eal, claim, &cfg.device, &setup, pools)
            .map_err(|e| setup_err(e.to_string()))?;
        // A pool of 64 KiB mbufs per queue where large segments can come in.
        let large = cfg.offloads
            && devs.first().is_some_and(|d| {
                let desc = d.describe();
                offload::takes_large_frames(&desc.driver, desc.offload_capa.0)
            });
        let external_payloads = cfg.tx_zero_copy
            && devs.first().is_some_and(|d| {
                let desc = d.describe();
                offload::sends_external_payloads(
                    &desc.driver,
                    vdev_of(eal.args(), &cfg.device).unwrap_or(&cfg.device),
                    desc.offload_capa.1,
                    &d.offloads(),
                )
            });
        let tso = devs.first().is_some_and(|d| d.offloads().tso) && !external_payloads;
        devs.into_iter()
            .map(|dev| {
                let tso_pool = if tso {
                    let name = format!("dp{port_id}_{}t", POOL_SEQ.fetch_add(1, Ordering::Relaxed));
                    let pool =
                        Mempool::new(&name, TSO_POOL, 0, u16::MAX, EthDev::socket_of(port_id))
                            .map_err(|e| setup_err(format!("{}: {e}", cfg.device)))?;
                    Some(pool)
                } else {
                    None
                };
                let large_pool = if large {
                    let name = format!("dp{port_id}_{}l", POOL_SEQ.fetch_add(1, Ordering::Relaxed));
                    let pool =
                        Mempool::new(&name, LARGE_POOL, 0, u16::MAX, EthDev::socket_of(port_id))
                            .map_err(|e| setup_err(format!("{}: {e}", cfg.device)))?;
                    Some(pool)
                } else {
                    None
                };
                let info = PortInfo {
                    name: lane_name(&cfg.name, dev.queue(), dev.queues()),
                    mac: dev.mac(),
                    mtu: cfg.mtu,
                };
                log::info!(
                    "port {info} on DPDK device {} (port id {port_id}, queue {} of {})",
                    cfg.device,
                    dev.queue(),
                    dev.queues()
                );
                Ok(DpdkPort {
                    dev,
                    frame_pool: frame_pools.next().flatten(),
                    info,
                    sw: PortStats::default(),
                    tx_lens: Vec::new(),
                    tx_scratch: Vec::new(),
                    large_pool,
                    tso_pool,
                    frame_room,
                    ext_slab: if external_payloads {
                        Some(ExtSlab::new(ext_records(cfg)).ok_or_else(|| {
                            setup_err(format!("{}: no memory for the slab", cfg.device))
                        })?)
                    } else {
                        None
                    },
                })
            })
            .collect()
    }

    /// True when the device spreads received flows over its queues by RSS, and its
    /// redirection table (the queue of each entry; empty without RSS).
    pub fn rss(&self) -> Result<(bool, Vec<u16>), PortError> {
        let reta = self.dev.reta().map_err(|e| PortError::Setup {
            port: self.info.name.clone(),
            reason: e.to_string(),
        })?;
        Ok((self.dev.rss(), reta))
    }

    /// This port's queue pair, and how many the device has.
    pub fn queue(&self) -> (u16, u16) {
        (self.dev.queue(), self.dev.queues())
    }

    /// DPDK port id.
    pub fn port_id(&self) -> u16 {
        self.dev.port_id()
    }

    /// The EAL device name.
    pub fn device(&self) -> &str {
        self.dev.device()
    }

    /// True when the link is up (memif/vhost-user: the peer is connected).
    pub fn link_up(&self) -> bool {
        self.dev.link_up()
    }

    /// Polls the link state until it is up or `timeout` passes; returns whether it is up.
    /// (memif and vhost-user links come up when the peer connects.)
    pub fn wait_link_up(&self, timeout: std::time::Duration) -> bool {
        self.dev.wait_link_up(timeout)
    }

    /// Appends `n` transmit buffers of `len` bytes to `out` with one bulk allocation (all
    /// or nothing); `false` when the pool cannot supply them. Faster than `n` calls of
    /// [`Port::alloc_tx`] for packet generators.
    pub fn alloc_tx_bulk(&mut self, out: &mut Vec<Mbuf>, n: usize, len: usize) -> bool {
        Mbuf::alloc_bulk(self.pool(), out, n, len)
    }

    /// The pool of this port's whole-frame mbufs (frames to send): its queue's receive pool
    /// unless that one's mbufs are smaller than a frame.
    pub fn pool(&self) -> &Mempool {
        self.frame_pool.as_ref().unwrap_or(self.dev.pool())
    }

    /// The PMD's own counters (`rte_eth_stats_get`); PMDs that keep no byte counts
    /// report 0 there.
    pub fn hw_stats(&self) -> Result<PortStats, PortError> {
        self.dev
            .hw_stats()
            .map(port_stats)
            .map_err(|e| PortError::Setup {
                port: self.info.name.clone(),
                reason: e.to_string(),
            })
    }

    /// The PMD's extended counters, by name.
    pub fn xstats(&self) -> Result<Vec<(String, u64)>, PortError> {
        self.dev.xstats().map_err(|e| PortError::Setup {
            port: self.info.name.clone(),
            reason: e.to_string(),
        })
    }
}

impl Port for DpdkPort {
    type Buf = Mbuf;

    fn info(&self) -> &PortInfo {
        &self.info
    }

    /// An empty poll is one device burst and a compare, inline in the caller; frames go
    /// through [`DpdkPort::rx_rest`].
    #[inline]
    fn rx_burst(&mut self, out: &mut Vec<Mbuf>, max: usize) -> usize {
        let base = out.len();
        let want = max.min(MAX_BURST);
        let n = self.dev.rx_burst(out, want as u16);
        if n == 0 {
            return 0;
        }
        self.rx_rest(out, base, n == want, max)
    }

    fn alloc_tx(&mut self, len: usize) -> Option<Mbuf> {
        Mbuf::alloc(self.pool(), len)
    }

    fn tx_burst(&mut self, bufs: &mut Vec<Mbuf>) -> usize {
        self.dev.tx_prepare(bufs);
        self.sw.tx_tso += self.dev.prepare_offloads(bufs, &mut self.tx_scratch);
        if bufs.is_empty() {
            return 0;
        }
        // Lengths are read before sending: a PMD may free an mbuf as soon as it has it, and
        // one that inserts VLAN tags in its burst (vhost) lengthens the frames it keeps.
        self.tx_lens.clear();
        self.tx_lens
            .extend(bufs.iter().map(|m| u64::from(m.pkt_len())));
        let sent = self.dev.tx_burst(bufs);
        self.sw.tx_packets += sent as u64;
        self.sw.tx_bytes += self.tx_lens[..sent].iter().sum::<u64>();
        sent
    }

    /// The PMD, its queues, descriptors, offloads and link, and the mbuf pool.
    fn describe(&self, out: &mut Dict) {
        let d = self.dev.describe();
        out.put("port_id", self.dev.port_id());
        out.put("device", self.dev.device());
        out.put("driver", d.driver);
        out.put("rx_queues", d.queues.0);
        out.put("tx_queues", d.queues.1);
        out.put("queue", self.dev.queue());
        out.put("rss", d.rss);
        out.put("rss_offloads_capa", format!("{:#x}", d.rss_capa.0));
        out.put("reta_size", d.rss_capa.1);
        out.put("rx_desc", d.descriptors.0);
        out.put("tx_desc", d.descriptors.1);
        out.put("rx_offload_capa", format!("{:#x}", d.offload_capa.0));
        out.put("tx_offload_capa", format!("{:#x}", d.offload_capa.1));
        out.put("rx_offloads", format!("{:#x}", d.offloads.0));
        out.put("tx_offloads", format!("{:#x}", d.offloads.1));
        out.put("link_up", d.link.0);
        out.put("link_speed_mbps", d.link.1);
        out.put("pool_size", self.dev.pool().size());
        out.put("pool_free", self.dev.pool().available());
        if let Some(p) = &self.frame_pool {
            out.put("frame_pool_size", p.size());
            out.put("frame_pool_free", p.available());
        }
        if let Some(p) = &self.tso_pool {
            out.put("tso_pool_size", p.size());
            out.put("tso_pool_free", p.available());
        }
        out.put("rx_chained", self.sw.rx_chained);
        out.put("rx_large", self.sw.rx_large);
        out.put("tx_tso", self.sw.tx_tso);
        out.put("tx_external_payloads", self.ext_slab.is_some());
        out.put("tx_external", self.sw.tx_external);
        out.put("tx_external_whole", self.sw.tx_external_whole);
        let c = self
            .ext_slab
            .as_ref()
            .map(ExtSlab::counts)
            .unwrap_or_default();
        out.put("external_payloads_returned", c.returned);
        out.put("external_payloads_held", c.outstanding);
        out.put("external_slab_exhausted", c.exhausted);
    }

    /// Packets and bytes counted by this port object; drops and errors from the PMD.
    fn stats(&self) -> PortStats {
        let hw = self.dev.hw_stats().map(port_stats).unwrap_or_default();
        PortStats {
            rx_dropped: self.sw.rx_dropped + hw.rx_dropped,
            tx_dropped: hw.tx_dropped + self.dev.tx_unprepared(),
            rx_errors: self.sw.rx_errors + hw.rx_errors,
            tx_external_returned: self.ext_slab.as_ref().map_or(0, |s| s.counts().returned),
            ..self.sw
        }
    }

    fn sends_payloads_in_place(&self) -> bool {
        self.ext_slab.is_some()
    }

    fn attach_payload<'p>(
        &mut self,
        buf: &mut Mbuf,
        at: usize,
        payload: Lent<'p>,
    ) -> Result<(), Lent<'p>> {
        let Some(slab) = self.ext_slab.as_mut() else {
            return Err(payload);
        };
        if at > buf.len() || buf.segments() != 1 {
            return Err(payload);
        }
        // `DpdkPort::pool`, field by field: `self.ext_slab` is borrowed mutably.
        let pool = self.frame_pool.as_ref().unwrap_or(self.dev.pool());
        let tail = slab.attach(pool, payload)?;
        buf.truncate(at);
        buf.chain_all([tail]);
        self.sw.tx_external += 1;
        Ok(())
    }

    fn attach_frame<'p>(
        &mut self,
        buf: &mut Mbuf,
        at: usize,
        payload: Lent<'p>,
    ) -> Result<Mbuf, Lent<'p>> {
        let Some(slab) = self.ext_slab.as_mut() else {
            return Err(payload);
        };
        // Headers longer than the payload's room are refused by `attach_with_headers`.
        if buf.segments() != 1 {
            return Err(payload);
        }
        let Some(headers) = buf.as_ref().get(..at) else {
            return Err(payload);
        };
        // `DpdkPort::pool`, field by field: `self.ext_slab` is borrowed mutably.
        let pool = self.frame_pool.as_ref().unwrap_or(self.dev.pool());
        let frame = slab.attach_with_headers(pool, payload, headers)?;
        self.sw.tx_external += 1;
        self.sw.tx_external_whole += 1;
        Ok(core::mem::replace(buf, frame))
    }

    fn take_returned_payloads(&mut self, out: &mut Vec<u64>) {
        if let Some(slab) = self.ext_slab.as_mut() {
            slab.take_returned(out);
        }
    }

    fn tso_room(&self) -> usize {
        self.tso_pool
            .as_ref()
            .map_or(0, |_| usize::from(u16::MAX - Mempool::headroom()))
    }

    fn alloc_tso(&mut self) -> Option<Mbuf> {
        let room = self.tso_room();
        Mbuf::alloc(self.tso_pool.as_ref()?, room)
    }

    fn finish_tso(&mut self, buf: &mut Mbuf, tso: &InPlaceTso) {
        let off = offload::finish_in_place(&self.dev.offloads(), buf.as_mut(), tso);
        buf.set_tx_offload(&off);
        self.sw.tx_tso += u64::from(tso.segments() > 1);
    }

    fn offloads(&self) -> PortOffloads {
        let o = self.dev.offloads();
        PortOffloads {
            tx_checksum: o.tx_tcp_cksum,
            rx_checksum: o.rx_tcp_cksum || o.rx_ipv4_cksum,
            summary: o.to_string(),
        }
    }

    fn vlan_offload(&self) -> VlanOffload {
        let (rx_strip, tx_insert) = self.dev.vlan_offload();
        VlanOffload {
            rx_strip,
            tx_insert,
        }
    }
}

impl DpdkPort {
    /// After a first burst received into `out[base..]`: counts it, then receives more
    /// bursts while the last one was full, up to `max` frames; returns the frames received.
    #[inline(never)]
    fn rx_rest(&mut self, out: &mut Vec<Mbuf>, base: usize, full: bool, max: usize) -> usize {
        self.account_rx(out, base);
        let mut total = out.len() - base;
        let mut full = full;
        while full && total < max {
            let want = (max - total).min(MAX_BURST);
            let at = out.len();
            let n = self.dev.rx_burst(out, want as u16);
            if n == 0 {
                break;
            }
            self.account_rx(out, at);
            total += out.len() - at;
            full = n == want;
        }
        total
    }

    /// Counts frames received into `out[base..]`; a frame in chained (multi-segment) mbufs
    /// is copied into one whole-frame mbuf for the single-slice [`PacketBuf`] view (counted
    /// in [`PortStats::rx_chained`]), or dropped as a receive error when none is free or it
    /// exceeds one.
    fn account_rx(&mut self, out: &mut Vec<Mbuf>, base: usize) {
        // One branch-free pass in locals; the rare chained frames take the slow path.
        let mut bytes = 0u64;
        let mut large = 0u64;
        let mut chained = false;
        for m in &out[base..] {
            bytes += m.len() as u64;
            large += u64::from(m.len() > self.frame_room);
            chained |= m.segments() != 1;
        }
        if !chained {
            self.sw.rx_packets += (out.len() - base) as u64;
            self.sw.rx_bytes += bytes;
            self.sw.rx_large += large;
            return;
        }
        let mut i = base;
        while i < out.len() {
            if out[i].segments() != 1 {
                let pool = match &self.large_pool {
                    Some(large) if out[i].pkt_len() as usize > self.frame_room => large,
                    _ => self.pool(),
                };
                match out[i].linearize(pool) {
                    Some(m) => {
                        out[i] = m;
                        self.sw.rx_chained += 1;
                        continue;
                    }
                    None => {
                        out.remove(i);
                        self.sw.rx_errors += 1;
                    }
                }
            } else {
                self.sw.rx_packets += 1;
                self.sw.rx_bytes += out[i].len() as u64;
                self.sw.rx_large += u64::from(out[i].len() > self.frame_room);
                i += 1;
            }
        }
    }
}

/// The port counters of the device's counters.
/// The `--vdev` argument among EAL's `args` that created `device` (its name and devargs).
fn vdev_of<'a>(args: &'a [String], device: &str) -> Option<&'a str> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = match a.strip_prefix("--vdev=") {
            Some(v) => v,
            None if a == "--vdev" => it.next()?,
            None => continue,
        };
        if v.split(',').next() == Some(device) {
            return Some(v);
        }
    }
    None
}

fn port_stats(s: EthStats) -> PortStats {
    PortStats {
        rx_packets: s.ipackets,
        rx_bytes: s.ibytes,
        tx_packets: s.opackets,
        tx_bytes: s.obytes,
        rx_dropped: s.imissed + s.rx_nombuf,
        tx_dropped: s.oerrors,
        rx_errors: s.ierrors,
        ..PortStats::default()
    }
}

/// An mbuf is the frame buffer of DPDK ports.
impl PacketBuf for Mbuf {
    type Spent = Mbuf;

    fn len(&self) -> usize {
        Mbuf::len(self)
    }

    fn truncate(&mut self, len: usize) {
        Mbuf::truncate(self, len);
    }

    fn offloaded_vlan(&self) -> Option<u16> {
        Mbuf::offloaded_vlan(self)
    }

    fn set_offloaded_vlan(&mut self, tci: u16) {
        self.set_tx_vlan(tci);
    }

    fn rx_checksum(&self) -> RxChecksum {
        offload::rx_verdict(self.ol_flags())
    }

    fn retire(self, spent: &mut Vec<Mbuf>) {
        spent.push(self);
    }

    /// At once, from the list's own storage ([`Mbuf::free_vec`]).
    fn free_all(spent: &mut Vec<Mbuf>) {
        Mbuf::free_vec(spent);
    }
}

impl std::fmt::Debug for DpdkPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpdkPort")
            .field("info", &self.info)
            .field("device", &self.dev.device())
            .field("port_id", &self.dev.port_id())
            .finish()
    }
}
