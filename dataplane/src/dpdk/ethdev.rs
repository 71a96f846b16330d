//! Ethernet devices (`rte_eth_dev_*`): lookup, configuration with one or more queue pairs
//! (RSS with the symmetric key of [`crate::steer`] where the device has it), start/stop,
//! link and statistics. Each queue pair is an [`EthDev`] of its own, for one poller.

use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::eal::{Eal, EalHandle};
use super::error::{strerror, DpdkError};
use super::intr::{hold_gate, on_interrupt_thread, GateHold};
use super::mbuf::Mbuf;
use super::mempool::Mempool;
use super::offload::{self, Offloads};
use crate::steer::{reta_entry, SYMMETRIC_RSS_KEY};

/// Ports opened by an [`EthDev`] in this process (a port is driven by one owner).
static CLAIMED: Mutex<Vec<u16>> = Mutex::new(Vec::new());

const ENOTSUP: i32 = libc::ENOTSUP;
const EPERM: i32 = libc::EPERM;
/// Pause between two start attempts while the peer is not there yet.
const START_RETRY: Duration = Duration::from_millis(100);
/// How long a start that followed refused ones waits for the link before it restarts.
const LINK_SETTLE: Duration = Duration::from_secs(1);

/// How to set up an ethdev (its queue pairs: one per mempool given to [`EthDev::start`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EthDevSetup {
    /// Receive descriptors (adjusted to the device's limits).
    pub rx_desc: u16,
    /// Transmit descriptors (adjusted to the device's limits).
    pub tx_desc: u16,
    /// IP MTU; devices that cannot set it keep their default (logged).
    pub mtu: u16,
    /// MAC address to set, or `None` for the device's own.
    pub mac: Option<[u8; 6]>,
    /// Receive frames for every destination MAC.
    pub promiscuous: bool,
    /// Receive every multicast frame (IPv6 neighbour discovery's groups).
    pub all_multicast: bool,
    /// Enable the device's 802.1Q offloads (strip on receive, insert on transmit) where it
    /// has them.
    pub vlan_offload: bool,
    /// Enable the checksum and segment offloads of [`Offloads`] the device has (else the
    /// stacks do that work in software).
    pub offloads: bool,
    /// The receive mbufs are smaller than a frame: enable receive in chained mbufs
    /// (`RTE_ETH_RX_OFFLOAD_SCATTER`) where the device has it.
    pub scatter: bool,
    /// How long to keep retrying `rte_eth_dev_start` while it fails with `EPERM`, which is
    /// how a memif client reports that its server's socket is not there yet.
    pub start_wait: Duration,
}

/// The device's basic counters (the fields of `struct rte_eth_stats` that are not per
/// queue).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EthStats {
    /// Frames received.
    pub ipackets: u64,
    /// Frames transmitted.
    pub opackets: u64,
    /// Bytes received.
    pub ibytes: u64,
    /// Bytes transmitted.
    pub obytes: u64,
    /// Frames dropped by the hardware because no receive descriptor was free.
    pub imissed: u64,
    /// Receive errors.
    pub ierrors: u64,
    /// Transmit errors.
    pub oerrors: u64,
    /// Receive buffer (mbuf) allocation failures.
    pub rx_nombuf: u64,
}

/// One queue pair of a configured and started ethdev: receive and transmit queue `queue`.
/// Dropping the last queue pair of a device stops and closes it.
pub struct EthDev {
    // Field order is drop order: the gate is released before the device may stop.
    /// For a memif port: its bursts and EAL's interrupt thread take turns (see
    /// [`super::intr`]).
    gate: Option<GateHold>,
    dev: Arc<Device>,
    queue: u16,
    tx_unprepared: u64,
}

/// What the queue pairs of one device share: set once at start, read-only after.
struct Device {
    port_id: u16,
    device: String,
    mac: [u8; 6],
    /// 802.1Q offloads enabled: strip on receive, insert on transmit.
    vlan: (bool, bool),
    /// Checksum and segment offloads enabled.
    offloads: Offloads,
    started: bool,
    rx_desc: u16,
    tx_desc: u16,
    /// Queue pairs.
    queues: u16,
    /// RSS spreads received flows over the queues (the device has it and queues > 1).
    rss: bool,
    /// Each queue's receive mempool (dropped after the device is closed).
    pools: Vec<Mempool>,
    _eal: EalHandle,
}

/// What a device is and how it is set up (for monitoring).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EthDevDescription {
    /// The PMD (`net_memif`, `net_virtio_user`, ...).
    pub driver: String,
    /// Receive and transmit queues in use.
    pub queues: (u16, u16),
    /// RSS spreads flows over the receive queues (symmetric key, redirection table spread).
    pub rss: bool,
    /// Hash types the device can spread by (`flow_type_rss_offloads`) and its redirection
    /// table's size.
    pub rss_capa: (u64, u16),
    /// Receive and transmit descriptors per queue.
    pub descriptors: (u16, u16),
    /// Offloads the device can do (`RTE_ETH_RX_OFFLOAD_*`, `RTE_ETH_TX_OFFLOAD_*` bits).
    pub offload_capa: (u64, u64),
    /// Offloads enabled (`RTE_ETH_RX_OFFLOAD_*`, `RTE_ETH_TX_OFFLOAD_*` bits; none: the
    /// stacks checksum in software).
    pub offloads: (u64, u64),
    /// Link up, and its speed in Mbit/s.
    pub link: (bool, u32),
}

/// Names of the ethdevs EAL probed (`--vdev` devices, bound PCI NICs), in port-id order.
pub fn available_devices(_eal: &Eal) -> Vec<String> {
    let mut names = Vec::new();
    // SAFETY: EAL is running (&Eal); rte_eth_find_next_owned_by returns the next valid port
    // id >= the argument or RTE_MAX_ETHPORTS.
    let mut port = unsafe {
        dpdk_sys::rte_eth_find_next_owned_by(0, u64::from(dpdk_sys::RTE_ETH_DEV_NO_OWNER))
    };
    while port < u64::from(dpdk_sys::RTE_MAX_ETHPORTS) {
        let id = port as u16;
        if let Some(name) = port_name(id) {
            names.push(name);
        }
        // SAFETY: as above.
        port = unsafe {
            dpdk_sys::rte_eth_find_next_owned_by(id + 1, u64::from(dpdk_sys::RTE_ETH_DEV_NO_OWNER))
        };
    }
    names
}

/// The ethdev name of port `port_id`.
fn port_name(port_id: u16) -> Option<String> {
    let mut buf = [0 as c_char; dpdk_sys::RTE_ETH_NAME_MAX_LEN as usize];
    // SAFETY: buf has RTE_ETH_NAME_MAX_LEN bytes as the function requires.
    let ret = unsafe { dpdk_sys::rte_eth_dev_get_name_by_port(port_id, buf.as_mut_ptr()) };
    if ret != 0 {
        return None;
    }
    // SAFETY: on success buf holds a NUL-terminated name.
    Some(
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// The PMD's name in `info` (filled by a successful `rte_eth_dev_info_get`).
fn driver_name(info: &dpdk_sys::rte_eth_dev_info) -> String {
    if info.driver_name.is_null() {
        return String::new();
    }
    // SAFETY: a filled rte_eth_dev_info's driver_name points at the PMD's static
    // NUL-terminated name.
    unsafe { CStr::from_ptr(info.driver_name) }
        .to_string_lossy()
        .into_owned()
}

/// Checks a DPDK return code: negative values are `-errno`.
fn check(op: impl FnOnce() -> String, ret: i32) -> Result<(), DpdkError> {
    if ret < 0 {
        Err(DpdkError::call(op(), ret))
    } else {
        Ok(())
    }
}

impl EthDev {
    /// Finds the ethdev called `device` and claims it for this owner.
    pub fn lookup(eal: &Eal, device: &str) -> Result<(u16, ClaimGuard), DpdkError> {
        let c_name =
            CString::new(device).map_err(|_| DpdkError::InvalidName(device.to_string()))?;
        let mut port_id = 0u16;
        // SAFETY: EAL is running (&Eal); c_name is NUL-terminated; port_id is a valid out
        // pointer.
        let ret = unsafe { dpdk_sys::rte_eth_dev_get_port_by_name(c_name.as_ptr(), &mut port_id) };
        if ret != 0 {
            let probed = available_devices(eal);
            return Err(DpdkError::NoDevice {
                device: device.to_string(),
                probed: if probed.is_empty() {
                    "none".to_string()
                } else {
                    probed.join(", ")
                },
            });
        }
        let mut claimed = CLAIMED.lock().unwrap_or_else(|e| e.into_inner());
        if claimed.contains(&port_id) {
            return Err(DpdkError::InUse(device.to_string()));
        }
        claimed.push(port_id);
        Ok((
            port_id,
            ClaimGuard {
                port_id,
                armed: true,
            },
        ))
    }

    /// The most queue pairs port `port_id` can have (`max_rx_queues`, `max_tx_queues`: the
    /// smaller).
    pub fn max_queues(port_id: u16) -> Result<u16, DpdkError> {
        let mut info = dpdk_sys::rte_eth_dev_info::default();
        // SAFETY: plain query; info is a valid out pointer.
        let ret = unsafe { dpdk_sys::rte_eth_dev_info_get(port_id, &mut info) };
        check(|| format!("port {port_id}: rte_eth_dev_info_get"), ret)?;
        Ok(info.max_rx_queues.min(info.max_tx_queues))
    }

    /// NUMA socket of port `port_id` (`-1` when unknown, as for virtual devices).
    pub fn socket_of(port_id: u16) -> i32 {
        // SAFETY: plain query; returns -1 for an invalid or NUMA-less port.
        unsafe { dpdk_sys::rte_eth_dev_socket_id(port_id) }
    }

    /// Configures port `port_id` (claimed with [`Self::lookup`]) with one queue pair per
    /// pool of `pools` (receive queue `i` filled from `pools[i]`), spreading received flows
    /// over them by RSS where the device has it, then starts it; returns the queue pairs
    /// in order.
    pub fn start(
        eal: &Eal,
        claim: ClaimGuard,
        device: &str,
        setup: &EthDevSetup,
        pools: Vec<Mempool>,
    ) -> Result<Vec<EthDev>, DpdkError> {
        let port_id = claim.port_id();
        let queues = u16::try_from(pools.len().max(1)).unwrap_or(u16::MAX);
        // From here on, Drop of `dev` closes the device and releases the claim on failure.
        let mut dev = Device {
            port_id,
            device: device.to_string(),
            mac: [0; 6],
            vlan: (false, false),
            offloads: Offloads::default(),
            started: false,
            rx_desc: 0,
            tx_desc: 0,
            queues,
            rss: false,
            pools,
            _eal: eal.handle(),
        };
        claim.transfer();
        let op = |what: &str| format!("{device}: {what}");

        let mut info = dpdk_sys::rte_eth_dev_info::default();
        // SAFETY: valid port (looked up and claimed); info is a valid out pointer.
        let ret = unsafe { dpdk_sys::rte_eth_dev_info_get(port_id, &mut info) };
        check(|| op("rte_eth_dev_info_get"), ret)?;
        let max = info.max_rx_queues.min(info.max_tx_queues);
        if queues > max {
            return Err(DpdkError::TooManyQueues {
                device: device.to_string(),
                want: queues,
                max,
            });
        }
        let mut conf = dpdk_sys::rte_eth_conf::default();
        // SAFETY: plain constant of the shim.
        let rss_hf = unsafe { dpdk_sys::dpdk_shim_rss_hf_tcp() } & info.flow_type_rss_offloads;
        // The symmetric key, as long as the device's key (DPDK copies it at configure).
        let key_len = match info.hash_key_size {
            0 => SYMMETRIC_RSS_KEY.len(),
            n => usize::from(n),
        };
        let mut key: Vec<u8> = SYMMETRIC_RSS_KEY
            .iter()
            .copied()
            .cycle()
            .take(key_len)
            .collect();
        if queues > 1 && rss_hf != 0 {
            conf.rxmode.mq_mode = dpdk_sys::RTE_ETH_MQ_RX_RSS;
            conf.rx_adv_conf.rss_conf.rss_key = key.as_mut_ptr();
            conf.rx_adv_conf.rss_conf.rss_key_len = key_len as u8;
            conf.rx_adv_conf.rss_conf.rss_hf = rss_hf;
            dev.rss = true;
        } else if queues > 1 {
            log::info!(
                "{device}: no RSS (flow_type_rss_offloads {:#x}): each of the {queues} queues \
                 gets what the peer sends on it (senders steer by the 4-tuple hash)",
                info.flow_type_rss_offloads
            );
        }
        if setup.vlan_offload {
            dev.vlan = Self::vlan_capabilities(port_id);
            // SAFETY: plain constants of the shim.
            let (strip, insert) = unsafe {
                (
                    dpdk_sys::dpdk_shim_rx_offload_vlan_strip(),
                    dpdk_sys::dpdk_shim_tx_offload_vlan_insert(),
                )
            };
            if dev.vlan.0 {
                conf.rxmode.offloads |= strip;
            }
            if dev.vlan.1 {
                conf.txmode.offloads |= insert;
            }
            let how = |on: bool| if on { "by the device" } else { "in software" };
            log::info!(
                "{device}: 802.1Q tags stripped {}, inserted {}",
                how(dev.vlan.0),
                how(dev.vlan.1)
            );
        }
        dev.offloads = Offloads::choose(
            setup.offloads,
            setup.scatter,
            info.rx_offload_capa,
            info.tx_offload_capa,
            &driver_name(&info),
        );
        conf.rxmode.offloads |= dev.offloads.rx_bits();
        conf.txmode.offloads |= dev.offloads.tx_bits();
        log::info!(
            "{device}: offloads {} (rx capa {:#x}, tx capa {:#x})",
            dev.offloads,
            info.rx_offload_capa,
            info.tx_offload_capa
        );
        // SAFETY: EAL is running; conf is a zero-initialised rte_eth_conf (defaults) with
        // only offloads and RSS hash types the device reports set; its key pointer is `key`,
        // alive across the call.
        let ret = unsafe { dpdk_sys::rte_eth_dev_configure(port_id, queues, queues, &conf) };
        check(
            || {
                op(&format!(
                    "rte_eth_dev_configure({queues} rxq, {queues} txq)"
                ))
            },
            ret,
        )?;
        drop(key);

        let (mut rx_desc, mut tx_desc) = (setup.rx_desc, setup.tx_desc);
        // SAFETY: configured port; valid out pointers.
        let ret = unsafe {
            dpdk_sys::rte_eth_dev_adjust_nb_rx_tx_desc(port_id, &mut rx_desc, &mut tx_desc)
        };
        check(|| op("rte_eth_dev_adjust_nb_rx_tx_desc"), ret)?;
        (dev.rx_desc, dev.tx_desc) = (rx_desc, tx_desc);

        let socket = Self::socket_of(port_id);
        let socket_arg = if socket < 0 {
            dpdk_sys::SOCKET_ID_ANY
        } else {
            socket
        } as u32;
        for q in 0..queues {
            let pool = dev.pools[usize::from(q)].as_ptr();
            // SAFETY: configured port with `queues` queues; a null rxconf selects the device
            // defaults; the pool is a live pktmbuf pool the device owns and drops after
            // closing the port.
            let ret = unsafe {
                dpdk_sys::rte_eth_rx_queue_setup(
                    port_id,
                    q,
                    rx_desc,
                    socket_arg,
                    std::ptr::null(),
                    pool,
                )
            };
            check(
                || {
                    op(&format!(
                        "rte_eth_rx_queue_setup({q}, {rx_desc} descriptors)"
                    ))
                },
                ret,
            )?;
            // SAFETY: configured port with `queues` queues; a null txconf selects the device
            // defaults.
            let ret = unsafe {
                dpdk_sys::rte_eth_tx_queue_setup(port_id, q, tx_desc, socket_arg, std::ptr::null())
            };
            check(
                || {
                    op(&format!(
                        "rte_eth_tx_queue_setup({q}, {tx_desc} descriptors)"
                    ))
                },
                ret,
            )?;
        }

        let mut current_mtu = 0u16;
        // SAFETY: valid port; current_mtu is a valid out pointer.
        let have_mtu = unsafe { dpdk_sys::rte_eth_dev_get_mtu(port_id, &mut current_mtu) } == 0;
        let ret = if have_mtu && current_mtu == setup.mtu {
            0
        } else {
            // SAFETY: configured, not yet started port.
            unsafe { dpdk_sys::rte_eth_dev_set_mtu(port_id, setup.mtu) }
        };
        if ret == -ENOTSUP {
            log::warn!(
                "{device}: the PMD cannot set the MTU to {}; keeping its default",
                setup.mtu
            );
        } else {
            check(|| op(&format!("rte_eth_dev_set_mtu({})", setup.mtu)), ret)?;
        }

        if let Some(mac) = setup.mac {
            let mut addr = dpdk_sys::rte_ether_addr { addr_bytes: mac };
            // SAFETY: configured port; addr is a valid rte_ether_addr.
            let ret = unsafe { dpdk_sys::rte_eth_dev_default_mac_addr_set(port_id, &mut addr) };
            if ret == -ENOTSUP {
                log::warn!("{device}: the PMD cannot set its MAC address; sending from the configured one anyway");
            } else {
                check(|| op("rte_eth_dev_default_mac_addr_set"), ret)?;
            }
            dev.mac = mac;
        } else {
            let mut addr = dpdk_sys::rte_ether_addr::default();
            // SAFETY: valid port; addr is a valid out pointer.
            let ret = unsafe { dpdk_sys::rte_eth_macaddr_get(port_id, &mut addr) };
            check(|| op("rte_eth_macaddr_get"), ret)?;
            dev.mac = addr.addr_bytes;
        }

        // SAFETY: configured port.
        let ret = unsafe {
            if setup.promiscuous {
                dpdk_sys::rte_eth_promiscuous_enable(port_id)
            } else {
                dpdk_sys::rte_eth_promiscuous_disable(port_id)
            }
        };
        if ret == -ENOTSUP {
            log::debug!("{device}: promiscuous mode not supported by the PMD");
        } else {
            check(|| op("rte_eth_promiscuous_enable/disable"), ret)?;
        }
        if setup.all_multicast {
            // SAFETY: configured port.
            let ret = unsafe { dpdk_sys::rte_eth_allmulticast_enable(port_id) };
            if ret < 0 {
                log::debug!(
                    "{device}: all-multicast not enabled ({}); IPv6 neighbour discovery relies on the PMD passing its groups",
                    strerror(ret.abs())
                );
            }
        }

        let deadline = Instant::now() + setup.start_wait;
        let mut attempts = 0u32;
        let ret = loop {
            // SAFETY: configured port with its queues set up (stopped again below if a
            // retried start left it without a link).
            let ret = unsafe { dpdk_sys::rte_eth_dev_start(port_id) };
            if ret == 0 && attempts > 0 && Instant::now() < deadline {
                // The peer appeared while we retried. A memif server that has created its
                // socket but not started its port yet drops the connection, and the client
                // does not reconnect by itself: restart until the link comes up.
                if dev.wait_link_up(LINK_SETTLE) {
                    break 0;
                }
                log::info!("{device}: started but the link stayed down; restarting");
                on_interrupt_thread(&op("restart"), move || {
                    // SAFETY: started port; stopped to be started again.
                    unsafe { dpdk_sys::rte_eth_dev_stop(port_id) };
                });
                attempts += 1;
                continue;
            }
            if ret != -EPERM || Instant::now() >= deadline {
                break ret;
            }
            if attempts == 0 {
                log::info!(
                    "{device}: start refused (is the peer up yet?); retrying for up to {:?}",
                    setup.start_wait
                );
            }
            attempts += 1;
            std::thread::sleep(START_RETRY);
        };
        check(|| op("rte_eth_dev_start"), ret)?;
        dev.started = true;
        if dev.rss {
            dev.spread_reta(info.reta_size);
        }

        // SAFETY: started port.
        let ret = unsafe { dpdk_sys::rte_eth_dev_set_link_up(port_id) };
        if ret < 0 && ret != -ENOTSUP {
            log::warn!("{device}: rte_eth_dev_set_link_up: {}", strerror(ret.abs()));
        }
        log::info!(
            "{device}: port {port_id} started, {queues} queue pair(s){}, {rx_desc} rx / {tx_desc} tx descriptors, socket {socket}",
            if dev.rss { " spread by RSS" } else { "" }
        );
        let memif = device.starts_with("net_memif");
        let dev = Arc::new(dev);
        Ok((0..queues)
            .map(|queue| EthDev {
                gate: if memif { hold_gate() } else { None },
                dev: Arc::clone(&dev),
                queue,
                tx_unprepared: 0,
            })
            .collect())
    }

    /// DPDK port id.
    pub fn port_id(&self) -> u16 {
        self.dev.port_id
    }

    /// This queue pair's index.
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// Queue pairs of the device.
    pub fn queues(&self) -> u16 {
        self.dev.queues
    }

    /// True when RSS spreads received flows over the queues.
    pub fn rss(&self) -> bool {
        self.dev.rss
    }

    /// The device's redirection table (`rte_eth_dev_rss_reta_query`): the queue of each
    /// entry; empty when the device has none.
    pub fn reta(&self) -> Result<Vec<u16>, DpdkError> {
        let d = &self.dev;
        let mut info = dpdk_sys::rte_eth_dev_info::default();
        // SAFETY: valid port; info is a valid out pointer.
        let ret = unsafe { dpdk_sys::rte_eth_dev_info_get(d.port_id, &mut info) };
        check(|| format!("{}: rte_eth_dev_info_get", d.device), ret)?;
        let size = usize::from(info.reta_size);
        if size == 0 || !d.rss {
            return Ok(Vec::new());
        }
        let group = dpdk_sys::RTE_ETH_RETA_GROUP_SIZE as usize;
        let mut conf = vec![dpdk_sys::rte_eth_rss_reta_entry64::default(); size.div_ceil(group)];
        for (g, entry) in conf.iter_mut().enumerate() {
            let n = (size - g * group).min(group);
            entry.mask = if n == 64 { u64::MAX } else { (1 << n) - 1 };
        }
        // SAFETY: valid port; conf holds reta_size entries in groups of 64 with the mask of
        // every entry set, as the call writes them.
        let ret = unsafe {
            dpdk_sys::rte_eth_dev_rss_reta_query(d.port_id, conf.as_mut_ptr(), info.reta_size)
        };
        check(|| format!("{}: rte_eth_dev_rss_reta_query", d.device), ret)?;
        Ok((0..size).map(|i| conf[i / group].reta[i % group]).collect())
    }

    /// The mempool this queue pair's receive queue is filled from (and its frames to send
    /// are taken from).
    pub fn pool(&self) -> &Mempool {
        &self.dev.pools[usize::from(self.queue)]
    }

    /// The 802.1Q offloads port `port_id` reports in `rte_eth_dev_info`: (strip on receive,
    /// insert on transmit); none when the query fails.
    fn vlan_capabilities(port_id: u16) -> (bool, bool) {
        let mut info = dpdk_sys::rte_eth_dev_info::default();
        // SAFETY: valid port (looked up and claimed); info is a valid out pointer.
        let ret = unsafe { dpdk_sys::rte_eth_dev_info_get(port_id, &mut info) };
        if ret != 0 {
            return (false, false);
        }
        // SAFETY: plain constants of the shim.
        let (strip, insert) = unsafe {
            (
                dpdk_sys::dpdk_shim_rx_offload_vlan_strip(),
                dpdk_sys::dpdk_shim_tx_offload_vlan_insert(),
            )
        };
        (
            info.rx_offload_capa & strip != 0,
            info.tx_offload_capa & insert != 0,
        )
    }

    /// The 802.1Q offloads enabled on the device: (strip on receive, insert on transmit).
    pub fn vlan_offload(&self) -> (bool, bool) {
        self.dev.vlan
    }

    /// The checksum and segment offloads enabled on the device.
    pub fn offloads(&self) -> Offloads {
        self.dev.offloads
    }

    /// Readies the frames of `bufs` for the device's checksum and segmentation offloads
    /// (see [`offload::prepare_burst`]; `scratch`: an empty vector kept for reuse); returns
    /// how many TSO frames were made.
    pub fn prepare_offloads(&self, bufs: &mut Vec<Mbuf>, scratch: &mut Vec<Mbuf>) -> u64 {
        offload::prepare_burst(&self.dev.offloads, bufs, scratch)
    }

    /// EAL device name.
    pub fn device(&self) -> &str {
        &self.dev.device
    }

    /// The MAC address in effect (the configured one when the PMD cannot set it).
    pub fn mac(&self) -> [u8; 6] {
        self.dev.mac
    }

    /// The driver, queues, descriptors, offloads and link (`rte_eth_dev_info_get`,
    /// `rte_eth_link_get_nowait`).
    pub fn describe(&self) -> EthDevDescription {
        let d = &self.dev;
        let mut info = dpdk_sys::rte_eth_dev_info::default();
        // SAFETY: valid port; info is a valid out pointer.
        let ret = unsafe { dpdk_sys::rte_eth_dev_info_get(d.port_id, &mut info) };
        let driver = if ret == 0 {
            driver_name(&info)
        } else {
            String::new()
        };
        let mut link = dpdk_sys::rte_eth_link::default();
        // SAFETY: valid port; link is a valid out pointer.
        let up = unsafe { dpdk_sys::rte_eth_link_get_nowait(d.port_id, &mut link) } == 0
            && u32::from(link.link_status()) == dpdk_sys::RTE_ETH_LINK_UP;
        EthDevDescription {
            driver,
            queues: (d.queues, d.queues),
            rss: d.rss,
            rss_capa: (info.flow_type_rss_offloads, info.reta_size),
            descriptors: (d.rx_desc, d.tx_desc),
            offload_capa: (info.rx_offload_capa, info.tx_offload_capa),
            offloads: (d.offloads.rx_bits(), d.offloads.tx_bits()),
            link: (up, link.link_speed),
        }
    }

    /// True when the link is up (memif/vhost: a peer is connected).
    pub fn link_up(&self) -> bool {
        self.dev.link_up()
    }

    /// Polls the link state until it is up or `timeout` passes; returns whether it is up.
    pub fn wait_link_up(&self, timeout: Duration) -> bool {
        self.dev.wait_link_up(timeout)
    }

    /// The device's basic counters (`rte_eth_stats_get`).
    pub fn hw_stats(&self) -> Result<EthStats, DpdkError> {
        let mut s = dpdk_sys::rte_eth_stats::default();
        // SAFETY: valid port; s is a valid out pointer.
        let ret = unsafe { dpdk_sys::rte_eth_stats_get(self.dev.port_id, &mut s) };
        check(|| format!("{}: rte_eth_stats_get", self.dev.device), ret)?;
        Ok(EthStats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        })
    }

    /// Receives up to `max` frames from this queue, appending them to `out`; returns how
    /// many were appended.
    #[inline]
    pub fn rx_burst(&mut self, out: &mut Vec<Mbuf>, max: u16) -> usize {
        out.reserve(usize::from(max));
        let base = out.len();
        let _burst = self.gate.as_ref().map(GateHold::burst);
        // SAFETY: `out` has room for `max` more elements; Mbuf is repr(transparent) over a
        // non-null rte_mbuf pointer, so DPDK writes valid elements into the spare capacity;
        // the device is started and `&mut self` (one EthDev per queue) makes this the
        // queue's only poller.
        let n = unsafe {
            let slots = out.as_mut_ptr().add(base).cast::<*mut dpdk_sys::rte_mbuf>();
            usize::from(dpdk_sys::dpdk_shim_rx_burst(
                self.dev.port_id,
                self.queue,
                slots,
                max,
            ))
        };
        // SAFETY: DPDK initialised the first n slots with mbufs it hands to us.
        unsafe { out.set_len(base + n) };
        n
    }

    /// Transmits frames from the front of `bufs` on this queue (at most `u16::MAX` in one call)
    /// and removes the ones the device accepted, which it now owns; returns how many it
    /// accepted. Frames left in `bufs` were not accepted (ring full).
    pub fn tx_burst(&mut self, bufs: &mut Vec<Mbuf>) -> usize {
        let n = bufs.len().min(usize::from(u16::MAX));
        if n == 0 {
            return 0;
        }
        let _burst = self.gate.as_ref().map(GateHold::burst);
        // SAFETY: the first n elements are owned mbufs laid out as rte_mbuf pointers
        // (repr(transparent)); DPDK takes ownership of the first `sent` of them; the device
        // is started and `&mut self` (one EthDev per queue) makes this the queue's only user.
        let sent = usize::from(unsafe {
            dpdk_sys::dpdk_shim_tx_burst(
                self.dev.port_id,
                self.queue,
                bufs.as_mut_ptr().cast::<*mut dpdk_sys::rte_mbuf>(),
                n as u16,
            )
        });
        // The PMD owns the sent mbufs now: remove them from the Vec without freeing.
        bufs.drain(..sent).for_each(std::mem::forget);
        sent
    }

    /// `rte_eth_tx_prepare` on the frames of `bufs` when the device inserts VLAN tags
    /// (virtio inserts them there, not in its transmit burst; a frame prepared already is
    /// left as it is). A frame the device refuses to prepare is dropped (counted in
    /// [`EthDev::tx_unprepared`]).
    pub fn tx_prepare(&mut self, bufs: &mut Vec<Mbuf>) {
        if !self.dev.vlan.1 {
            return;
        }
        let mut start = 0;
        while start < bufs.len() {
            let n = (bufs.len() - start).min(usize::from(u16::MAX));
            // SAFETY: bufs[start..start + n] are owned mbufs laid out as rte_mbuf pointers
            // (repr(transparent)); prepare may replace a pointer in the array (the Vec then
            // owns the new mbuf) but takes ownership of none.
            let ok = usize::from(unsafe {
                dpdk_sys::dpdk_shim_tx_prepare(
                    self.dev.port_id,
                    self.queue,
                    bufs.as_mut_ptr()
                        .add(start)
                        .cast::<*mut dpdk_sys::rte_mbuf>(),
                    n as u16,
                )
            });
            start += ok;
            if ok < n {
                log::debug!(
                    "{}: rte_eth_tx_prepare refused a frame: {}",
                    self.dev.device,
                    strerror(super::error::rte_errno())
                );
                bufs.remove(start);
                self.tx_unprepared += 1;
            }
        }
    }

    /// Frames dropped because the device refused to prepare them for transmission.
    pub fn tx_unprepared(&self) -> u64 {
        self.tx_unprepared
    }

    /// The device's extended counters, by name (`rte_eth_xstats_get`).
    pub fn xstats(&self) -> Result<Vec<(String, u64)>, DpdkError> {
        let port_id = self.dev.port_id;
        let op = |f: &str| format!("{}: {f}", self.dev.device);
        // SAFETY: valid port; a null array with size 0 asks for the count.
        let n = unsafe { dpdk_sys::rte_eth_xstats_get_names(port_id, std::ptr::null_mut(), 0) };
        check(|| op("rte_eth_xstats_get_names"), n)?;
        let n = n as usize;
        let mut names = vec![dpdk_sys::rte_eth_xstat_name { name: [0; 64] }; n];
        let mut values = vec![dpdk_sys::rte_eth_xstat::default(); n];
        // SAFETY: names has n entries, as passed.
        let got =
            unsafe { dpdk_sys::rte_eth_xstats_get_names(port_id, names.as_mut_ptr(), n as u32) };
        check(|| op("rte_eth_xstats_get_names"), got)?;
        // SAFETY: values has n entries, as passed.
        let got_values =
            unsafe { dpdk_sys::rte_eth_xstats_get(port_id, values.as_mut_ptr(), n as u32) };
        check(|| op("rte_eth_xstats_get"), got_values)?;
        let count = n.min(got as usize).min(got_values as usize);
        Ok(values[..count]
            .iter()
            .filter_map(|v| {
                let entry = names.get(v.id as usize)?;
                // SAFETY: DPDK NUL-terminates each name within its 64-byte array.
                let name = unsafe { CStr::from_ptr(entry.name.as_ptr()) };
                Some((name.to_string_lossy().into_owned(), v.value))
            })
            .collect())
    }
}

impl Device {
    /// True when the link is up (memif/vhost: a peer is connected).
    fn link_up(&self) -> bool {
        let mut link = dpdk_sys::rte_eth_link::default();
        // SAFETY: valid port; link is a valid out pointer.
        let ret = unsafe { dpdk_sys::rte_eth_link_get_nowait(self.port_id, &mut link) };
        ret == 0 && u32::from(link.link_status()) == dpdk_sys::RTE_ETH_LINK_UP
    }

    /// Polls the link state until it is up or `timeout` passes; returns whether it is up.
    fn wait_link_up(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.link_up() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Fills the redirection table (`reta_size` entries) so that entry `i` names queue
    /// [`reta_entry`]`(i)`: the queue of a flow is the lane [`crate::steer::lane_of`] gives.
    fn spread_reta(&self, reta_size: u16) {
        let group = dpdk_sys::RTE_ETH_RETA_GROUP_SIZE as usize;
        let size = usize::from(reta_size);
        if size == 0 {
            return;
        }
        let mut conf = vec![dpdk_sys::rte_eth_rss_reta_entry64::default(); size.div_ceil(group)];
        for i in 0..size {
            let entry = &mut conf[i / group];
            entry.mask |= 1 << (i % group);
            entry.reta[i % group] = reta_entry(i as u32, self.queues);
        }
        // SAFETY: started port; conf holds reta_size entries in groups of 64, as the call
        // reads them.
        let ret = unsafe {
            dpdk_sys::rte_eth_dev_rss_reta_update(self.port_id, conf.as_mut_ptr(), reta_size)
        };
        if ret < 0 {
            log::warn!(
                "{}: rte_eth_dev_rss_reta_update({reta_size} entries): {}; the device's own \
                 spread applies",
                self.device,
                strerror(ret.abs())
            );
        }
    }
}

impl Drop for Device {
    /// Stops and closes the device on EAL's interrupt thread, where the PMD's own callbacks
    /// run (see [`on_interrupt_thread`]: memif's peer-disconnect handler frees the same state
    /// as its stop). Every queue pair's gate is released by then (the queue pairs hold the
    /// device), so the interrupt thread runs freely again, a peer's disconnect first.
    fn drop(&mut self) {
        let (port_id, started, device) = (self.port_id, self.started, self.device.clone());
        on_interrupt_thread(&format!("{device}: stop and close"), move || {
            if started {
                // SAFETY: started port owned by us; the poll loop no longer uses it.
                let ret = unsafe { dpdk_sys::rte_eth_dev_stop(port_id) };
                if ret < 0 {
                    log::warn!("{device}: rte_eth_dev_stop: {}", strerror(ret.abs()));
                }
            }
            // SAFETY: port owned by us and stopped; nothing uses its queues after this.
            let ret = unsafe { dpdk_sys::rte_eth_dev_close(port_id) };
            if ret < 0 {
                log::warn!("{device}: rte_eth_dev_close: {}", strerror(ret.abs()));
            }
        });
        release(self.port_id);
    }
}

fn release(port_id: u16) {
    CLAIMED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|&p| p != port_id);
}

/// A claimed port id not yet handed to an [`EthDev`]; releases the claim when dropped.
pub struct ClaimGuard {
    port_id: u16,
    armed: bool,
}

impl ClaimGuard {
    fn port_id(&self) -> u16 {
        self.port_id
    }

    fn transfer(mut self) {
        self.armed = false;
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        if self.armed {
            release(self.port_id);
        }
    }
}
