//! A Linux TAP port: frames go to and come from the kernel through `/dev/net/tun`.
//!
//! The device is created (or attached) by name in TAP mode without packet info and set
//! non-blocking; the kernel side appears as a normal interface that can be configured, or
//! moved into a network namespace, with `ip`. The device disappears when the port is
//! dropped (it is not made persistent).

use std::io;
use std::sync::Arc;

use tun_tap::{Iface, Mode};

use super::api::{rx_one_by_one, tx_one_by_one, Offered, Port, PortError, PortInfo, PortStats};
use super::heap::{BufPool, HeapBuf};

/// Ethernet header plus one VLAN tag of slack beyond the IP MTU for received frames.
const RX_SLACK: usize = 18;

/// A TAP device driven by non-blocking reads and writes.
#[derive(Debug)]
pub struct TapPort {
    info: PortInfo,
    iface: Iface,
    pool: Arc<BufPool>,
    stats: PortStats,
    tx_errors: u64,
    rx_failing: bool,
}

impl TapPort {
    /// Creates or attaches the TAP interface `ifname`. `info.mac` is this port's own address
    /// (the kernel side has its own, distinct one).
    pub fn open(ifname: &str, info: PortInfo) -> Result<TapPort, PortError> {
        let io_err = |op: &'static str| {
            let port = info.name.clone();
            move |source: io::Error| PortError::Io { port, op, source }
        };
        let iface =
            Iface::without_packet_info(ifname, Mode::Tap).map_err(io_err("open /dev/net/tun"))?;
        iface
            .set_non_blocking()
            .map_err(io_err("set TAP non-blocking"))?;
        if iface.name() != ifname {
            return Err(PortError::Setup {
                port: info.name,
                reason: format!(
                    "TAP name {ifname:?} was changed by the kernel to {:?} (too long?)",
                    iface.name()
                ),
            });
        }
        log::info!("port {}: TAP interface {} open", info.name, iface.name());
        let pool = BufPool::new(256, info.mtu + RX_SLACK);
        Ok(TapPort {
            info,
            iface,
            pool,
            stats: PortStats::default(),
            tx_errors: 0,
            rx_failing: false,
        })
    }

    /// The kernel's name of the interface.
    pub fn ifname(&self) -> &str {
        self.iface.name()
    }

    /// Transmit attempts the kernel refused with an error other than "would block" (for
    /// example while the kernel side is down).
    pub fn tx_errors(&self) -> u64 {
        self.tx_errors
    }
}

impl Port for TapPort {
    type Buf = HeapBuf;

    fn info(&self) -> &PortInfo {
        &self.info
    }

    fn rx_burst(&mut self, out: &mut Vec<HeapBuf>, max: usize) -> usize {
        let frame_len = self.info.mtu + RX_SLACK;
        rx_one_by_one(out, max, &mut self.stats, |stats| loop {
            let mut buf = self.pool.take(frame_len);
            match self.iface.recv(buf.as_mut()) {
                Ok(len) => {
                    self.rx_failing = false;
                    buf.resize(len);
                    return Some(buf);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.rx_failing = false;
                    return None;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // A failing device (e.g. the interface was deleted) fails every read:
                    // count and report the first failure of a run of them.
                    if !self.rx_failing {
                        log::warn!("port {}: TAP read: {e}", self.info.name);
                        stats.rx_errors += 1;
                        self.rx_failing = true;
                    }
                    return None;
                }
            }
        })
    }

    fn alloc_tx(&mut self, len: usize) -> Option<HeapBuf> {
        Some(self.pool.take(len))
    }

    fn tx_burst(&mut self, bufs: &mut Vec<HeapBuf>) -> usize {
        tx_one_by_one(bufs, &mut self.stats, |buf| {
            match self.iface.send(buf.as_ref()) {
                Ok(_) => Offered::Sent,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Offered::Full,
                Err(e) => {
                    // The kernel side is down or refused the frame: drop it, like a wire.
                    log::debug!("port {}: TAP write: {e}", self.info.name);
                    self.tx_errors += 1;
                    Offered::Dropped
                }
            }
        })
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}
