//! Opening the ports a configuration describes, as [`AnyPort`]s with their middleware.
//!
//! Layering, inside out: the backend, then fault injection (if configured), then capture
//! (if configured), so a capture shows what the poll loop received and what it sent before
//! transmit faults.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::config::{BackendKind, Config, FaultSection, PortConfig};
#[cfg(feature = "dpdk")]
use crate::dpdk::Eal;

use super::capture::CapturePort;
use super::fault::FaultPort;
use super::soft_pair::soft_pair;
use super::tap::TapPort;
use super::{AnyPort, PortError, PortInfo};

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
    p: &PortConfig,
    opts: &OpenOptions,
) -> Result<Option<FaultSection>, PortError> {
    let mut section = p.fault.clone();
    for (target, spec) in &opts.faults {
        if target.as_deref().is_some_and(|t| t != p.name()) {
            continue;
        }
        let s = section.get_or_insert_with(FaultSection::default);
        s.apply_overrides(spec).map_err(|reason| PortError::Setup {
            port: p.name().to_string(),
            reason,
        })?;
    }
    Ok(section.filter(|s| s.to_fault_config().is_active()))
}

/// Opens every port of `cfg`, in order. `eal` must be given when a port uses DPDK.
pub fn open_ports(
    cfg: &Config,
    opts: &OpenOptions,
    #[cfg(feature = "dpdk")] eal: Option<&Eal>,
) -> Result<Vec<AnyPort>, PortError> {
    for (target, _) in &opts.faults {
        if let Some(t) = target {
            if cfg.port(t).is_none() {
                return Err(PortError::Setup {
                    port: t.clone(),
                    reason: "--fault names a port that is not in the configuration".into(),
                });
            }
        }
    }
    let mut opened: Vec<Option<AnyPort>> = (0..cfg.ports.len()).map(|_| None).collect();
    // Soft links: the two ports sharing a device are created together.
    let mut links: HashMap<&str, usize> = HashMap::new();
    for (i, p) in cfg.ports.iter().enumerate() {
        let info = PortInfo {
            name: p.name().to_string(),
            mac: p.mac.unwrap_or_else(|| default_mac(i)),
            mtu: p.mtu,
        };
        match p.backend {
            BackendKind::Soft => {
                if let Some(first) = links.remove(p.device()) {
                    let first_cfg = &cfg.ports[first];
                    let first_info = PortInfo {
                        name: first_cfg.name().to_string(),
                        mac: first_cfg.mac.unwrap_or_else(|| default_mac(first)),
                        mtu: first_cfg.mtu,
                    };
                    let ring = usize::from(first_cfg.rx_desc.max(p.rx_desc));
                    let (a, b) = soft_pair(first_info, info, ring);
                    opened[first] = Some(a.into());
                    opened[i] = Some(b.into());
                } else {
                    links.insert(p.device(), i);
                }
            }
            BackendKind::Tap => opened[i] = Some(TapPort::open(p.device(), info)?.into()),
            BackendKind::Dpdk => {
                opened[i] = Some(open_dpdk(
                    p,
                    #[cfg(feature = "dpdk")]
                    eal,
                )?)
            }
        }
    }
    if let Some((dev, &i)) = links.iter().next() {
        return Err(PortError::Setup {
            port: cfg.ports[i].name().to_string(),
            reason: format!("soft link {dev:?} has only one end"),
        });
    }
    let mut out = Vec::with_capacity(opened.len());
    for (p, port) in cfg.ports.iter().zip(opened) {
        let Some(mut port) = port else {
            return Err(PortError::Setup {
                port: p.name().to_string(),
                reason: "port was not opened".into(),
            });
        };
        if let Some(f) = fault_settings(p, opts)? {
            port = FaultPort::new(port, f.to_fault_config()).into();
        }
        let capture = match &opts.capture_dir {
            Some(dir) => Some(dir.join(format!("{}.pcap", p.name()))),
            None => p.capture.clone(),
        };
        if let Some(path) = capture {
            port = CapturePort::create(port, &path, cfg.capture.resolution, cfg.capture.snaplen)?
                .into();
        }
        out.push(port);
    }
    Ok(out)
}

#[cfg(feature = "dpdk")]
fn open_dpdk(p: &PortConfig, eal: Option<&Eal>) -> Result<AnyPort, PortError> {
    use super::dpdk::{DpdkPort, DpdkPortConfig};
    let Some(eal) = eal else {
        return Err(PortError::Setup {
            port: p.name().to_string(),
            reason: "DPDK port opened without the EAL".into(),
        });
    };
    let dc = DpdkPortConfig {
        name: p.name().to_string(),
        device: p.device().to_string(),
        rx_desc: p.rx_desc,
        tx_desc: p.tx_desc,
        mtu: p.mtu,
        mac: p.mac,
        pool_size: p.pool_size,
        promiscuous: p.promiscuous,
        start_wait: std::time::Duration::from_secs(p.start_wait),
    };
    Ok(DpdkPort::open(eal, &dc)?.into())
}

#[cfg(not(feature = "dpdk"))]
fn open_dpdk(p: &PortConfig) -> Result<AnyPort, PortError> {
    Err(PortError::Setup {
        port: p.name().to_string(),
        reason: "this binary was built without DPDK support (cargo feature `dpdk`)".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::Port;

    #[test]
    fn soft_links_are_paired_and_layered() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            r#"
[[ports]]
name = "a"
backend = "soft"
device = "l0"
[ports.fault]
duplicate = "100%"

[[ports]]
name = "b"
backend = "soft"
device = "l0"
mac = "02:00:00:00:00:bb"
capture = "{}"
"#,
            dir.path().join("b.pcap").display()
        );
        let cfg = Config::parse(&text, "t.toml").unwrap();
        let opts = OpenOptions::default();
        let mut ports = open_ports(
            &cfg,
            &opts,
            #[cfg(feature = "dpdk")]
            None,
        )
        .unwrap();
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
        let text = "[[ports]]\nname = \"a\"\nbackend = \"soft\"\ndevice = \"l\"\n\
                    [[ports]]\nname = \"b\"\nbackend = \"soft\"\ndevice = \"l\"\n";
        let cfg = Config::parse(text, "t.toml").unwrap();
        let opts = OpenOptions {
            faults: vec![(Some("b".into()), "drop=5%".into())],
            ..OpenOptions::default()
        };
        let ports = open_ports(
            &cfg,
            &opts,
            #[cfg(feature = "dpdk")]
            None,
        )
        .unwrap();
        assert_eq!(ports[0].kind(), "soft");
        assert_eq!(ports[1].kind(), "fault+soft");
        let opts = OpenOptions {
            faults: vec![(None, "seed=3,drop=0%".into())],
            ..OpenOptions::default()
        };
        let ports = open_ports(
            &cfg,
            &opts,
            #[cfg(feature = "dpdk")]
            None,
        )
        .unwrap();
        assert_eq!(ports[0].kind(), "soft", "no active fault, no fault layer");
        let opts = OpenOptions {
            faults: vec![(Some("zz".into()), "drop=5%".into())],
            ..OpenOptions::default()
        };
        let e = open_ports(
            &cfg,
            &opts,
            #[cfg(feature = "dpdk")]
            None,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "port zz: --fault names a port that is not in the configuration"
        );
        let opts = OpenOptions {
            faults: vec![(None, "drop=lots".into())],
            ..OpenOptions::default()
        };
        let e = open_ports(
            &cfg,
            &opts,
            #[cfg(feature = "dpdk")]
            None,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("port a: fault setting drop: invalid rate"),
            "{e}"
        );
    }
}
