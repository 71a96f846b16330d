//! Opening ports, as [`AnyPort`]s with their middleware, from the port layer's own
//! settings ([`PortPlan`]; the configuration file converts into it).
//!
//! Layering, inside out: the backend, then fault injection (if configured), then capture
//! (if configured), so a capture shows what the poll loop received and what it sent before
//! transmit faults.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

#[cfg(feature = "dpdk")]
use crate::dpdk::Eal;

use super::any::AnyPort;
use super::api::{lane_name, PortError, PortInfo};
use super::capture::{CaptureOptions, CapturePort};
use super::fault::{FaultConfig, FaultPort};
use super::soft_pair::soft_pair;
use super::tap::TapPort;

/// Which backend drives a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// A DPDK ethdev (PCI device or vdev).
    Dpdk,
    /// A Linux TAP interface.
    Tap,
    /// One end of an in-process link; two soft ports with the same `device` are joined.
    Soft,
}

/// One port to open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortSettings {
    /// Unique name (logs, statistics, `--fault` targets).
    pub name: String,
    /// The backend.
    pub backend: BackendKind,
    /// DPDK device name or PCI address, TAP interface name, or soft link name.
    pub device: String,
    /// Own Ethernet address; `None`: the device's own for DPDK, [`default_mac`] otherwise.
    pub mac: Option<[u8; 6]>,
    /// IP MTU.
    pub mtu: usize,
    /// Receive ring size (DPDK; also soft ring size).
    pub rx_desc: u16,
    /// Transmit ring size (DPDK).
    pub tx_desc: u16,
    /// Mbufs in the port's pool, per queue (DPDK).
    pub pool_size: u32,
    /// Queue pairs: lanes ([`open_lanes`]); DPDK devices and soft links.
    pub queues: u16,
    /// Receive frames for any destination MAC (DPDK).
    pub promiscuous: bool,
    /// The port is on a VLAN: use the device's 802.1Q offloads where it has them (DPDK).
    pub vlan: bool,
    /// Use the device's checksum and segment offloads where it has them (DPDK; not under
    /// fault injection).
    pub offloads: bool,
    /// Frame bytes in each receive mbuf, `None`: a whole frame's worth (DPDK).
    pub rx_buf: Option<u16>,
    /// Send TCP payloads from the engine's buffers, not copied into the frame, where the
    /// device allows it (DPDK: memif without zero-copy, vhost-user, TAP; off by default).
    pub tx_zero_copy: bool,
    /// The port has IPv6: receive every multicast frame (DPDK; neighbour discovery).
    pub multicast: bool,
    /// How long to keep retrying a DPDK device start that fails because its peer is not
    /// there yet.
    pub start_wait: Duration,
    /// Write every frame of this port to this pcap file.
    pub capture: Option<PathBuf>,
    /// Fault injection on this port.
    pub fault: Option<FaultConfig>,
}

/// The ports to open, in order, and the settings of their capture files.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortPlan {
    /// The ports.
    pub ports: Vec<PortSettings>,
    /// Settings of every capture file.
    pub capture: CaptureOptions,
}

/// Command-line additions to the configured ports.
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// Capture every port into `DIR/<port>.pcap`.
    pub capture_dir: Option<PathBuf>,
    /// Fault overrides: (port name or `None` for all ports, `key=value,...`).
    pub faults: Vec<(Option<String>, String)>,
}

/// The default MAC of a software port without one configured: locally administered,
/// derived from the port's index in the configuration.
pub fn default_mac(index: usize) -> [u8; 6] {
    [0x02, 0x64, 0x70, 0x00, (index >> 8) as u8, index as u8 + 1]
}

/// The effective fault settings of port `p` after command-line overrides, or `None` when no
/// fault is active.
pub fn fault_settings(
    p: &PortSettings,
    opts: &OpenOptions,
) -> Result<Option<FaultConfig>, PortError> {
    let mut fault = p.fault.clone();
    for (target, spec) in &opts.faults {
        if target.as_deref().is_some_and(|t| t != p.name) {
            continue;
        }
        let f = fault.get_or_insert_with(FaultConfig::default);
        f.apply_overrides(spec).map_err(|reason| PortError::Setup {
            port: p.name.clone(),
            reason,
        })?;
    }
    Ok(fault.filter(FaultConfig::is_active))
}

/// Opens every port of `plan` (a [`PortPlan`], or what converts into one, such as a
/// configuration), in order. `eal` must be given when a port uses DPDK. Every port has one
/// queue pair (see [`open_lanes`]).
pub fn open_ports(
    plan: impl Into<PortPlan>,
    opts: &OpenOptions,
    #[cfg(feature = "dpdk")] eal: Option<&Eal>,
) -> Result<Vec<AnyPort>, PortError> {
    let plan = plan.into();
    if let Some(p) = plan.ports.iter().find(|p| p.queues > 1) {
        return Err(PortError::Setup {
            port: p.name.clone(),
            reason: format!(
                "{} queues: one queue per port here (`perf -R --loopback`); the tools run a lane per queue",
                p.queues
            ),
        });
    }
    let mut lanes = open_lanes(
        plan,
        opts,
        #[cfg(feature = "dpdk")]
        eal,
    )?;
    Ok(lanes.pop().unwrap_or_default())
}

/// Opens every port of `plan` with its queue pairs: one list of ports per lane (queue
/// index), each holding queue `lane` of every port in order. Every port has the same number
/// of queues. A DPDK device's queue `i` is a [`super::dpdk::DpdkPort`] of its own; a soft
/// link of `n` queues is `n` links, lane `i` of one end joined to lane `i` of the other
/// (as memif's ring pairs are).
pub fn open_lanes(
    plan: impl Into<PortPlan>,
    opts: &OpenOptions,
    #[cfg(feature = "dpdk")] eal: Option<&Eal>,
) -> Result<Vec<Vec<AnyPort>>, PortError> {
    let plan = plan.into();
    let lanes = plan.ports.first().map_or(1, |p| p.queues.max(1));
    if let Some(p) = plan.ports.iter().find(|p| p.queues.max(1) != lanes) {
        return Err(PortError::Setup {
            port: p.name.clone(),
            reason: format!(
                "{} queues, but {} has {lanes}: every port has the same number",
                p.queues, plan.ports[0].name
            ),
        });
    }
    for (target, _) in &opts.faults {
        if let Some(t) = target {
            if !plan.ports.iter().any(|p| p.name == *t) {
                return Err(PortError::Setup {
                    port: t.clone(),
                    reason: "--fault names a port that is not in the configuration".into(),
                });
            }
        }
    }
    let mut opened: Vec<Option<Vec<AnyPort>>> = (0..plan.ports.len()).map(|_| None).collect();
    // Soft links: the two ports sharing a device are created together.
    let mut links: HashMap<&str, usize> = HashMap::new();
    for (i, p) in plan.ports.iter().enumerate() {
        let info = PortInfo {
            name: p.name.clone(),
            mac: p.mac.unwrap_or_else(|| default_mac(i)),
            mtu: p.mtu,
        };
        match p.backend {
            BackendKind::Soft => {
                if let Some(first) = links.remove(p.device.as_str()) {
                    let first_cfg = &plan.ports[first];
                    let first_info = PortInfo {
                        name: first_cfg.name.clone(),
                        mac: first_cfg.mac.unwrap_or_else(|| default_mac(first)),
                        mtu: first_cfg.mtu,
                    };
                    let ring = usize::from(first_cfg.rx_desc.max(p.rx_desc));
                    let (mut a, mut b) = (Vec::new(), Vec::new());
                    for lane in 0..lanes {
                        let named = |i: &PortInfo| PortInfo {
                            name: lane_name(&i.name, lane, lanes),
                            ..i.clone()
                        };
                        let (x, y) = soft_pair(named(&first_info), named(&info), ring);
                        a.push(x.into());
                        b.push(y.into());
                    }
                    opened[first] = Some(a);
                    opened[i] = Some(b);
                } else {
                    links.insert(&p.device, i);
                }
            }
            BackendKind::Tap if lanes > 1 => {
                return Err(PortError::Setup {
                    port: p.name.clone(),
                    reason: "a TAP port has one queue".into(),
                })
            }
            BackendKind::Tap => opened[i] = Some(vec![TapPort::open(&p.device, info)?.into()]),
            BackendKind::Dpdk => {
                // Fault injection stands for the wire: frames it corrupts must not get the
                // device's checksums over the corrupted bytes (or its verdicts from before).
                let offloads = p.offloads && fault_settings(p, opts)?.is_none();
                opened[i] = Some(open_dpdk(
                    &PortSettings {
                        offloads,
                        ..p.clone()
                    },
                    #[cfg(feature = "dpdk")]
                    eal,
                )?)
            }
        }
    }
    if let Some((dev, &i)) = links.iter().next() {
        return Err(PortError::Setup {
            port: plan.ports[i].name.clone(),
            reason: format!("soft link {dev:?} has only one end"),
        });
    }
    let mut out: Vec<Vec<AnyPort>> = (0..lanes).map(|_| Vec::new()).collect();
    for (p, queues) in plan.ports.iter().zip(opened) {
        let Some(queues) = queues else {
            return Err(PortError::Setup {
                port: p.name.clone(),
                reason: "port was not opened".into(),
            });
        };
        for (lane, mut port) in queues.into_iter().enumerate() {
            if let Some(f) = fault_settings(p, opts)? {
                port = FaultPort::new(port, f).into();
            }
            // One capture file per queue when there are several.
            let file = |path: &std::path::Path| match lanes {
                1 => path.to_path_buf(),
                _ => path.with_extension(format!("q{lane}.pcap")),
            };
            let capture = match &opts.capture_dir {
                Some(dir) => Some(file(&dir.join(format!("{}.pcap", p.name)))),
                None => p.capture.as_deref().map(file),
            };
            if let Some(path) = capture {
                port = CapturePort::create(
                    port,
                    &path,
                    plan.capture.resolution,
                    plan.capture.snaplen,
                )?
                .into();
            }
            out[lane].push(port);
        }
    }
    Ok(out)
}

#[cfg(feature = "dpdk")]
fn open_dpdk(p: &PortSettings, eal: Option<&Eal>) -> Result<Vec<AnyPort>, PortError> {
    use super::dpdk::{DpdkPort, DpdkPortConfig};
    let Some(eal) = eal else {
        return Err(PortError::Setup {
            port: p.name.clone(),
            reason: "DPDK port opened without the EAL".into(),
        });
    };
    let dc = DpdkPortConfig {
        name: p.name.clone(),
        device: p.device.clone(),
        rx_desc: p.rx_desc,
        tx_desc: p.tx_desc,
        mtu: p.mtu,
        mac: p.mac,
        pool_size: p.pool_size,
        queues: p.queues.max(1),
        promiscuous: p.promiscuous,
        all_multicast: p.multicast,
        vlan_offload: p.vlan,
        offloads: p.offloads,
        rx_buf: p.rx_buf,
        start_wait: p.start_wait,
        tx_zero_copy: p.tx_zero_copy,
    };
    Ok(DpdkPort::open_queues(eal, &dc)?
        .into_iter()
        .map(AnyPort::from)
        .collect())
}

#[cfg(not(feature = "dpdk"))]
fn open_dpdk(p: &PortSettings) -> Result<Vec<AnyPort>, PortError> {
    Err(PortError::Setup {
        port: p.name.clone(),
        reason: "this binary was built without DPDK support (cargo feature `dpdk`)".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::api::Port;
    use crate::port::fault::Rate;

    /// A soft port with the settings a configuration gives when only these three are set.
    fn soft(name: &str, device: &str) -> PortSettings {
        PortSettings {
            name: name.into(),
            backend: BackendKind::Soft,
            device: device.into(),
            mac: None,
            mtu: 1500,
            rx_desc: 1024,
            tx_desc: 1024,
            pool_size: 8191,
            queues: 1,
            promiscuous: false,
            vlan: false,
            offloads: true,
            rx_buf: None,
            tx_zero_copy: false,
            multicast: false,
            start_wait: Duration::from_secs(10),
            capture: None,
            fault: None,
        }
    }

    /// Opens the soft ports of `plan` with these `--fault` arguments.
    fn open_soft(
        plan: &PortPlan,
        faults: &[(Option<&str>, &str)],
    ) -> Result<Vec<AnyPort>, PortError> {
        let opts = OpenOptions {
            faults: faults
                .iter()
                .map(|&(port, spec)| (port.map(String::from), spec.to_string()))
                .collect(),
            ..OpenOptions::default()
        };
        open_ports(
            plan.clone(),
            &opts,
            #[cfg(feature = "dpdk")]
            None,
        )
    }

    #[test]
    fn soft_links_are_paired_and_layered() {
        let dir = tempfile::tempdir().unwrap();
        let plan = PortPlan {
            ports: vec![
                PortSettings {
                    fault: Some(FaultConfig {
                        duplicate: Rate::ALWAYS,
                        ..FaultConfig::default()
                    }),
                    ..soft("a", "l0")
                },
                PortSettings {
                    mac: Some([2, 0, 0, 0, 0, 0xbb]),
                    capture: Some(dir.path().join("b.pcap")),
                    ..soft("b", "l0")
                },
            ],
            capture: CaptureOptions::default(),
        };
        let mut ports = open_soft(&plan, &[]).unwrap();
        assert_eq!(ports[0].kind(), "fault+soft");
        assert_eq!(ports[1].kind(), "capture+soft");
        assert_eq!(ports[0].info().mac, default_mac(0));
        assert_eq!(ports[1].info().mac, [2, 0, 0, 0, 0, 0xbb]);
        let mut f = ports[0].alloc_tx(64).unwrap();
        f.as_mut().fill(1);
        let mut v = vec![f];
        ports[0].tx_burst(&mut v);
        let mut got = Vec::new();
        assert_eq!(
            ports[1].rx_burst(&mut got, 8),
            2,
            "duplicated on a's transmit"
        );
        assert_eq!(ports[1].captured(), Some(2));
    }

    #[test]
    fn command_line_faults_apply_to_named_or_all_ports() {
        let plan = PortPlan {
            ports: vec![soft("a", "l"), soft("b", "l")],
            capture: CaptureOptions::default(),
        };
        let ports = open_soft(&plan, &[(Some("b"), "drop=5%")]).unwrap();
        assert_eq!(ports[0].kind(), "soft");
        assert_eq!(ports[1].kind(), "fault+soft");
        let ports = open_soft(&plan, &[(None, "seed=3,drop=0%")]).unwrap();
        assert_eq!(ports[0].kind(), "soft", "no active fault, no fault layer");
        let e = open_soft(&plan, &[(Some("zz"), "drop=5%")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "port zz: --fault names a port that is not in the configuration"
        );
        let e = open_soft(&plan, &[(None, "drop=lots")]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("port a: fault setting drop: invalid rate"),
            "{e}"
        );
    }
}
