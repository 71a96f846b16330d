//! The configuration file (TOML): EAL arguments, the poll loop, and the ports.
//!
//! Every error names the file, the line and the key, e.g.
//! `configs/x.toml:7: ports[0].mtu: invalid value 70000 (must be 68..=9000)`. Values are
//! checked while parsing (ranges, MAC and address syntax) and then across entries (unique
//! names, soft links with two ends, gateways inside their subnets, a VLAN priority only
//! with a VLAN).
//!
//! ```toml
//! [eal]
//! args = ["--no-huge", "-m", "512", "--vdev", "net_memif0,role=server"]
//!
//! [[ports]]
//! name = "p0"
//! backend = "dpdk"          # "dpdk" | "tap" | "soft"
//! device = "net_memif0"     # DPDK device, TAP interface name, or soft link name
//! ipv4 = "10.99.0.1/24"
//! ipv6 = "fd00:99::1/64"    # next to or instead of ipv4
//! vlan = 100                # optional 802.1Q VLAN
//! offloads = "auto"         # "auto" (the device's checksum offloads) | "off" (DPDK)
//! mtu = 1500
//!
//! [ports.fault]             # optional fault injection on this port
//! drop = "0.1%"
//! ```

use std::collections::HashMap;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use toml::Spanned;

use crate::frame::Vlan;
use crate::port::capture::CaptureOptions;
use crate::port::fault::FaultConfig;
pub use crate::port::open::BackendKind;
use crate::port::open::{PortPlan, PortSettings};
use crate::settings::de_ranged;

/// A configuration that could not be read or is invalid.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML or holds an invalid value.
    #[error("{}", format_invalid(file, line, key, message))]
    Invalid {
        /// The file, as given.
        file: String,
        /// 1-based line of the offending text, when known.
        line: Option<usize>,
        /// Dotted key path (`ports[0].mtu`), empty for syntax errors.
        key: String,
        /// What is wrong, one line.
        message: String,
    },
}

fn format_invalid(file: &str, line: &Option<usize>, key: &str, message: &str) -> String {
    let mut s = file.to_string();
    if let Some(l) = line {
        s.push_str(&format!(":{l}"));
    }
    if !key.is_empty() {
        s.push_str(&format!(": {key}"));
    }
    s.push_str(&format!(": {message}"));
    s
}

/// The whole configuration.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// DPDK EAL settings (used only when a port has `backend = "dpdk"`).
    #[serde(default)]
    pub eal: EalConfig,
    /// Poll loop settings.
    #[serde(default)]
    pub poll: PollConfig,
    /// Capture file settings.
    #[serde(default)]
    pub capture: CaptureOptions,
    /// The ports, in order.
    #[serde(default)]
    pub ports: Vec<PortConfig>,
    /// iWARP settings of applications run on the data plane (the application libraries).
    #[serde(default)]
    pub rdma: RdmaSection,
}

/// iWARP settings of the application libraries (`dataplane exec`): what rdma-core
/// applications cannot choose themselves.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RdmaSection {
    /// Require MPA CRC32c on every FPDU (a peer asking for it gets it anyway).
    #[serde(default)]
    pub crc: bool,
    /// Ask for MPA markers (and accept them when the peer asks).
    #[serde(default)]
    pub markers: bool,
    /// Milliseconds the first FPDU is held after the MPA Reply, 0..=10000: an initiator's
    /// (Linux siw 6.1 as responder needs about 100), and a responder's until the
    /// initiator's first FPDU arrives (RFC 5044 §7.1.2; siw as initiator needs it).
    #[serde(default, deserialize_with = "de_fpdu_delay")]
    pub first_fpdu_delay_ms: u64,
    /// Minimum TCP retransmission timeout in milliseconds, 1..=60000.
    #[serde(default = "default_rto_min", deserialize_with = "de_rto_min")]
    pub rto_min_ms: u64,
}

impl Default for RdmaSection {
    fn default() -> RdmaSection {
        RdmaSection {
            crc: false,
            markers: false,
            first_fpdu_delay_ms: 0,
            rto_min_ms: default_rto_min(),
        }
    }
}

fn default_rto_min() -> u64 {
    20
}
fn de_fpdu_delay<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    de_ranged(d, 0..=10_000).map(|v| v as u64)
}
fn de_rto_min<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    de_ranged(d, 1..=60_000).map(|v| v as u64)
}

/// EAL settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EalConfig {
    /// Arguments passed to `rte_eal_init` (after the program name).
    #[serde(default)]
    pub args: Vec<String>,
    /// The lcore list (`-l`), e.g. `"0"` or `"0-1"`.
    #[serde(default)]
    pub lcores: Option<String>,
    /// Where EAL's control threads (interrupt, multi-process, telemetry) run.
    #[serde(default)]
    pub control_threads: ControlThreads,
}

/// Where EAL's control threads run (`[eal] control_threads`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ControlThreads {
    /// DPDK's choice: the CPUs of the process's start-up affinity that no lcore uses (the
    /// main lcore's when every CPU is an lcore's). Best when those CPUs are spare.
    #[default]
    Spare,
    /// The main lcore's CPUs: for data planes that share a host with other busy-polling
    /// processes (two processes on two CPUs), so that EAL's interrupt thread preempts its
    /// own poller, not another process's.
    MainLcore,
}

impl EalConfig {
    /// The full EAL argument list: quieter EAL logging (warnings and worse; unless a
    /// `--log-level` is given), `-l` if set, the configured args, then `extra`. DPDK
    /// telemetry stays on (its socket serves `dataplane stats` and `dpdk-telemetry.py`)
    /// unless `--no-telemetry` is given.
    pub fn argv(&self, extra: &[String]) -> Vec<String> {
        let mut v = Vec::new();
        let given = |flag: &str| {
            self.args
                .iter()
                .chain(extra)
                .any(|a| a == flag || a.starts_with(&format!("{flag}=")))
        };
        if !given("--log-level") {
            v.push("--log-level=*:warning".to_string());
        }
        if let Some(l) = &self.lcores {
            v.push("-l".to_string());
            v.push(l.clone());
        }
        v.extend(self.args.iter().cloned());
        v.extend(extra.iter().cloned());
        v
    }
}

/// Poll loop settings.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PollConfig {
    /// Frames per receive burst.
    #[serde(default = "default_burst", deserialize_with = "de_burst")]
    pub burst: usize,
    /// Seconds between stats lines (0 = none).
    #[serde(default = "default_stats_interval", deserialize_with = "de_interval")]
    pub stats_interval: f64,
}

impl Default for PollConfig {
    fn default() -> PollConfig {
        PollConfig {
            burst: default_burst(),
            stats_interval: default_stats_interval(),
        }
    }
}

fn default_burst() -> usize {
    32
}
fn default_stats_interval() -> f64 {
    1.0
}

/// An IPv4 address with its prefix length (`10.0.0.1/24`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Cidr {
    /// The address.
    pub addr: Ipv4Addr,
    /// Prefix length, 0..=32.
    pub prefix: u8,
}

impl Ipv4Cidr {
    /// True when `ip` is in the same subnet.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - self.prefix)
        };
        u32::from(self.addr) & mask == u32::from(ip) & mask
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl std::str::FromStr for Ipv4Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Ipv4Cidr, String> {
        let (a, p) = s.split_once('/').ok_or_else(|| {
            format!("invalid IPv4 address {s:?} (expected ADDR/PREFIX like 10.0.0.1/24)")
        })?;
        let addr: Ipv4Addr = a
            .parse()
            .map_err(|_| format!("invalid IPv4 address {a:?} in {s:?}"))?;
        let prefix: u8 = p
            .parse()
            .ok()
            .filter(|&p| p <= 32)
            .ok_or_else(|| format!("invalid prefix length {p:?} in {s:?} (must be 0..=32)"))?;
        Ok(Ipv4Cidr { addr, prefix })
    }
}

/// An IPv6 address with its prefix length (`fd00:99::1/64`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Cidr {
    /// The address.
    pub addr: Ipv6Addr,
    /// Prefix length, 0..=128.
    pub prefix: u8,
}

impl Ipv6Cidr {
    /// True when `ip` is in the same subnet.
    pub fn contains(&self, ip: Ipv6Addr) -> bool {
        let mask = if self.prefix == 0 {
            0
        } else {
            u128::MAX << (128 - u32::from(self.prefix))
        };
        u128::from(self.addr) & mask == u128::from(ip) & mask
    }
}

impl fmt::Display for Ipv6Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl std::str::FromStr for Ipv6Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Ipv6Cidr, String> {
        let (a, p) = s.split_once('/').ok_or_else(|| {
            format!("invalid IPv6 address {s:?} (expected ADDR/PREFIX like fd00:99::1/64)")
        })?;
        let addr: Ipv6Addr = a
            .parse()
            .map_err(|_| format!("invalid IPv6 address {a:?} in {s:?}"))?;
        if addr.is_multicast() || addr.is_unspecified() || addr.is_loopback() {
            return Err(format!(
                "invalid IPv6 address {a:?} in {s:?} (must be a unicast address)"
            ));
        }
        let prefix: u8 = p
            .parse()
            .ok()
            .filter(|&p| p <= 128)
            .ok_or_else(|| format!("invalid prefix length {p:?} in {s:?} (must be 0..=128)"))?;
        Ok(Ipv6Cidr { addr, prefix })
    }
}

/// Parses `02:00:00:00:00:01` (or `-` separated).
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let err = || format!("invalid MAC address {s:?} (expected 6 hex bytes like 02:00:00:00:00:01)");
    let parts: Vec<&str> = s.split([':', '-']).collect();
    if parts.len() != 6 {
        return Err(err());
    }
    let mut mac = [0u8; 6];
    for (m, p) in mac.iter_mut().zip(parts) {
        if p.len() != 2 {
            return Err(err());
        }
        *m = u8::from_str_radix(p, 16).map_err(|_| err())?;
    }
    if mac[0] & 1 == 1 {
        return Err(format!("invalid MAC address {s:?} (multicast bit set)"));
    }
    Ok(mac)
}

/// One port.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortConfig {
    /// Unique name (used in stats and on the command line).
    #[serde(deserialize_with = "de_name")]
    pub name: Spanned<String>,
    /// The backend.
    pub backend: BackendKind,
    /// DPDK device name or PCI address, TAP interface name, or soft link name.
    pub device: Spanned<String>,
    /// Own Ethernet address; DPDK ports default to the device's, others to a generated
    /// locally administered address.
    #[serde(default, deserialize_with = "de_mac")]
    pub mac: Option<[u8; 6]>,
    /// Own IPv4 address and prefix; ARP and ping are answered for it.
    #[serde(default, deserialize_with = "de_cidr")]
    pub ipv4: Option<Ipv4Cidr>,
    /// Default gateway (must be inside `ipv4`'s subnet).
    #[serde(default)]
    pub gateway: Option<Spanned<Ipv4Addr>>,
    /// Own IPv6 address and prefix; neighbour solicitations and ping are answered for it
    /// and for the port's link-local address.
    #[serde(default, deserialize_with = "de_cidr6")]
    pub ipv6: Option<Ipv6Cidr>,
    /// IPv6 default gateway (inside `ipv6`'s prefix, or link-local).
    #[serde(default)]
    pub gateway6: Option<Spanned<Ipv6Addr>>,
    /// 802.1Q VLAN identifier, 1..=4094: frames go out tagged, and only frames of this VLAN
    /// are taken.
    #[serde(default, deserialize_with = "de_vlan")]
    pub vlan: Option<Spanned<u16>>,
    /// Priority (PCP) of the tag, 0..=7 (needs `vlan`).
    #[serde(default, deserialize_with = "de_vlan_priority")]
    pub vlan_priority: Option<Spanned<u8>>,
    /// IP MTU, 68..=9000.
    #[serde(default = "default_mtu", deserialize_with = "de_mtu")]
    pub mtu: usize,
    /// Receive ring size, 32..=16384 (DPDK; also soft ring size).
    #[serde(default = "default_desc", deserialize_with = "de_desc")]
    pub rx_desc: u16,
    /// Transmit ring size, 32..=16384 (DPDK).
    #[serde(default = "default_desc", deserialize_with = "de_desc")]
    pub tx_desc: u16,
    /// Mbufs in the port's pool, 256..=1048576 (DPDK).
    #[serde(default = "default_pool", deserialize_with = "de_pool")]
    pub pool_size: u32,
    /// Receive frames for any destination MAC.
    #[serde(default)]
    pub promiscuous: bool,
    /// Seconds to keep retrying a DPDK device start that fails because its peer is not
    /// there yet (a memif client started before its server), 0..=600.
    #[serde(default = "default_start_wait", deserialize_with = "de_start_wait")]
    pub start_wait: u64,
    /// The poll loop (lcore) that drives this port in `dataplane run`, 0..=127; ports with
    /// the same value share one loop (thread), the lowest value runs on the main thread.
    #[serde(default, deserialize_with = "de_lcore")]
    pub lcore: u32,
    /// Queue pairs, 1..=64: each is a lane with its own lcore, TCP engine and RNIC in the
    /// RDMA tools (RSS spreads flows where the device has it; a soft port is that many
    /// links). Every port of a configuration has the same number.
    #[serde(default = "default_queues", deserialize_with = "de_queues")]
    pub queues: u16,
    /// Checksum and segment offloads: `auto` (default) uses those the device has, `off`
    /// leaves all that work to the stacks (DPDK).
    #[serde(default)]
    pub offloads: OffloadMode,
    /// Frame bytes in each receive mbuf, 256..=9216 (DPDK; default: a whole frame). Longer
    /// frames arrive in chained mbufs, which the port copies into one.
    #[serde(default, deserialize_with = "de_rx_buf")]
    pub rx_buf: Option<u16>,
    /// Send TCP payloads (FPDUs) from the TCP engine's buffers, attached behind the
    /// headers instead of copied into the frame, where the device allows it (DPDK: memif
    /// without zero-copy, vhost-user, TAP; without checksum offloads). Unset: on for an MTU
    /// of at least [`ZERO_COPY_SEND_MIN_MTU`], off below (see [`PortConfig::tx_zero_copy`]).
    #[serde(default, rename = "tx_zero_copy")]
    pub tx_zero_copy_set: Option<bool>,
    /// Write every frame of this port to this pcap file.
    #[serde(default)]
    pub capture: Option<PathBuf>,
    /// Fault injection on this port.
    #[serde(default)]
    pub fault: Option<FaultConfig>,
}

/// Whether a port uses its device's checksum and segment offloads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OffloadMode {
    /// Those the device has.
    #[default]
    Auto,
    /// None: the stacks checksum in software.
    Off,
}

/// The MTU from which a port sends payloads without the frame copy unless its
/// `tx_zero_copy` says otherwise: on memif, which copies every frame into its ring anyway,
/// the send without the copy measured 6–9 % slower at MTU 1500 (4–13 % before its lending
/// went without atomics) and 7–24 % faster at 9000 (64 KiB CRC Writes, README "Zero-copy
/// send"); sizes between were not measured.
pub const ZERO_COPY_SEND_MIN_MTU: usize = 8000;

fn default_mtu() -> usize {
    1500
}
fn default_desc() -> u16 {
    1024
}
fn default_pool() -> u32 {
    8191
}
fn default_start_wait() -> u64 {
    10
}

fn de_mtu<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    de_ranged(d, 68..=9000).map(|v| v as usize)
}
fn de_desc<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    de_ranged(d, 32..=16384).map(|v| v as u16)
}
fn de_pool<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    de_ranged(d, 256..=1 << 20).map(|v| v as u32)
}
fn de_rx_buf<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u16>, D::Error> {
    de_ranged(d, 256..=9216).map(|v| Some(v as u16))
}
fn de_start_wait<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    de_ranged(d, 0..=600).map(|v| v as u64)
}
fn default_queues() -> u16 {
    1
}
fn de_queues<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    de_ranged(d, 1..=64).map(|v| v as u16)
}
fn de_lcore<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    de_ranged(d, 0..=127).map(|v| v as u32)
}
fn de_burst<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    de_ranged(d, 1..=512).map(|v| v as usize)
}
fn de_interval<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = f64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a number of seconds")
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
            self.visit_f64(v as f64)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
            self.visit_f64(v as f64)
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
            if v.is_finite() && (0.0..=3600.0).contains(&v) {
                Ok(v)
            } else {
                Err(E::custom(format!(
                    "invalid value {v} (must be 0..=3600 seconds)"
                )))
            }
        }
    }
    d.deserialize_any(V)
}

fn de_name<'de, D: Deserializer<'de>>(d: D) -> Result<Spanned<String>, D::Error> {
    let s = Spanned::<String>::deserialize(d)?;
    let ok = !s.get_ref().is_empty()
        && s.get_ref().len() <= 32
        && s.get_ref()
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(s)
    } else {
        Err(de::Error::custom(format!(
            "invalid port name {:?} (1-32 characters of A-Z a-z 0-9 - _)",
            s.get_ref()
        )))
    }
}

fn de_mac<'de, D: Deserializer<'de>>(d: D) -> Result<Option<[u8; 6]>, D::Error> {
    let s = String::deserialize(d)?;
    parse_mac(&s).map(Some).map_err(de::Error::custom)
}

fn de_cidr<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Ipv4Cidr>, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map(Some).map_err(de::Error::custom)
}

fn de_cidr6<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Ipv6Cidr>, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map(Some).map_err(de::Error::custom)
}

/// A ranged integer with its place in the file (for checks across keys).
fn de_spanned_ranged<'de, D: Deserializer<'de>>(
    d: D,
    r: std::ops::RangeInclusive<i64>,
) -> Result<Spanned<i64>, D::Error> {
    let s = Spanned::<i64>::deserialize(d)?;
    crate::settings::check_range(*s.get_ref(), r).map_err(de::Error::custom)?;
    Ok(s)
}

fn de_vlan<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Spanned<u16>>, D::Error> {
    let s = de_spanned_ranged(d, 1..=4094)?;
    Ok(Some(Spanned::new(s.span(), *s.get_ref() as u16)))
}

fn de_vlan_priority<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Spanned<u8>>, D::Error> {
    let s = de_spanned_ranged(d, 0..=7)?;
    Ok(Some(Spanned::new(s.span(), *s.get_ref() as u8)))
}

/// 1-based line number of byte offset `pos` in `text`.
fn line_of(text: &str, pos: usize) -> usize {
    text.as_bytes()[..pos.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

impl Config {
    /// Reads and validates the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text, &path.display().to_string())
    }

    /// Parses and validates `text`; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        let de = toml::Deserializer::new(text);
        let cfg: Config = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            let inner = e.into_inner();
            ConfigError::Invalid {
                file: file.to_string(),
                line: inner.span().map(|s| line_of(text, s.start)),
                message: if key == "." {
                    format!("TOML syntax error: {}", one_line(inner.message()))
                } else {
                    one_line(inner.message())
                },
                key: if key == "." { String::new() } else { key },
            }
        })?;
        cfg.validate(text, file)?;
        Ok(cfg)
    }

    /// The port named `name`.
    pub fn port(&self, name: &str) -> Option<&PortConfig> {
        self.ports.iter().find(|p| p.name.get_ref() == name)
    }

    /// True when any port needs the DPDK EAL.
    pub fn needs_eal(&self) -> bool {
        self.ports.iter().any(|p| p.backend == BackendKind::Dpdk)
    }

    fn validate(&self, text: &str, file: &str) -> Result<(), ConfigError> {
        let err = |span: Range<usize>, key: String, message: String| ConfigError::Invalid {
            file: file.to_string(),
            line: Some(line_of(text, span.start)),
            key,
            message,
        };
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut devices: HashMap<(BackendKind, &str), Vec<usize>> = HashMap::new();
        for (i, p) in self.ports.iter().enumerate() {
            if let Some(first) = names.insert(p.name.get_ref(), i) {
                return Err(err(
                    p.name.span(),
                    format!("ports[{i}].name"),
                    format!(
                        "duplicate port name {:?} (also ports[{first}])",
                        p.name.get_ref()
                    ),
                ));
            }
            let dev = p.device.get_ref().as_str();
            if dev.is_empty() {
                return Err(err(
                    p.device.span(),
                    format!("ports[{i}].device"),
                    "empty device".into(),
                ));
            }
            if p.backend == BackendKind::Tap && dev.len() > 15 {
                return Err(err(
                    p.device.span(),
                    format!("ports[{i}].device"),
                    format!("TAP interface name {dev:?} is longer than 15 characters"),
                ));
            }
            let users = devices.entry((p.backend, dev)).or_default();
            users.push(i);
            let limit = if p.backend == BackendKind::Soft { 2 } else { 1 };
            if users.len() > limit {
                return Err(err(
                    p.device.span(),
                    format!("ports[{i}].device"),
                    format!(
                        "device {dev:?} already used by ports[{}]{}",
                        users[0],
                        if limit == 2 {
                            " and another port (a soft link has two ends)"
                        } else {
                            ""
                        }
                    ),
                ));
            }
            if let Some(gw) = &p.gateway6 {
                let gw_at =
                    |message: String| err(gw.span(), format!("ports[{i}].gateway6"), message);
                match p.ipv6 {
                    None => return Err(gw_at("gateway6 set without ipv6".into())),
                    Some(net)
                        if !net.contains(*gw.get_ref())
                            && !crate::ndp::is_link_local(*gw.get_ref()) =>
                    {
                        return Err(gw_at(format!(
                            "gateway6 {} is outside {net} and not link-local",
                            gw.get_ref()
                        )))
                    }
                    Some(_) => {}
                }
            }
            if let (Some(prio), None) = (&p.vlan_priority, &p.vlan) {
                return Err(err(
                    prio.span(),
                    format!("ports[{i}].vlan_priority"),
                    "vlan_priority set without vlan".into(),
                ));
            }
            if let Some(gw) = &p.gateway {
                match p.ipv4 {
                    None => {
                        return Err(err(
                            gw.span(),
                            format!("ports[{i}].gateway"),
                            "gateway set without ipv4".into(),
                        ))
                    }
                    Some(net) if !net.contains(*gw.get_ref()) => {
                        return Err(err(
                            gw.span(),
                            format!("ports[{i}].gateway"),
                            format!("gateway {} is outside {net}", gw.get_ref()),
                        ))
                    }
                    Some(_) => {}
                }
            }
        }
        for ((kind, dev), users) in &devices {
            if *kind == BackendKind::Soft && users.len() != 2 {
                let p = &self.ports[users[0]];
                return Err(err(
                    p.device.span(),
                    format!("ports[{}].device", users[0]),
                    format!("soft link {dev:?} has one end; a soft link needs two ports"),
                ));
            }
        }
        Ok(())
    }
}

impl PortConfig {
    /// A port with default settings (as if only `name`, `backend` and `device` were given).
    pub fn new(name: &str, backend: BackendKind, device: &str) -> PortConfig {
        PortConfig {
            name: Spanned::new(0..0, name.to_string()),
            backend,
            device: Spanned::new(0..0, device.to_string()),
            mac: None,
            ipv4: None,
            gateway: None,
            ipv6: None,
            gateway6: None,
            vlan: None,
            vlan_priority: None,
            mtu: default_mtu(),
            rx_desc: default_desc(),
            tx_desc: default_desc(),
            pool_size: default_pool(),
            promiscuous: false,
            start_wait: default_start_wait(),
            lcore: 0,
            queues: default_queues(),
            offloads: OffloadMode::Auto,
            rx_buf: None,
            tx_zero_copy_set: None,
            capture: None,
            fault: None,
        }
    }

    /// The port's name.
    pub fn name(&self) -> &str {
        self.name.get_ref()
    }

    /// The device string.
    pub fn device(&self) -> &str {
        self.device.get_ref()
    }

    /// The port's VLAN tag, if it is on a VLAN (priority 0 unless set).
    pub fn vlan_tag(&self) -> Option<Vlan> {
        self.vlan.as_ref().map(|v| Vlan {
            id: *v.get_ref(),
            priority: self.vlan_priority.as_ref().map_or(0, |p| *p.get_ref()),
        })
    }

    /// Whether the port sends payloads without the frame copy: as `tx_zero_copy` says, or,
    /// unset, from an MTU of [`ZERO_COPY_SEND_MIN_MTU`] on (where the device allows it).
    pub fn tx_zero_copy(&self) -> bool {
        self.tx_zero_copy_set
            .unwrap_or(self.mtu >= ZERO_COPY_SEND_MIN_MTU)
    }

    /// The port layer's settings of this port.
    pub fn settings(&self) -> PortSettings {
        PortSettings {
            name: self.name().to_string(),
            backend: self.backend,
            device: self.device().to_string(),
            mac: self.mac,
            mtu: self.mtu,
            rx_desc: self.rx_desc,
            tx_desc: self.tx_desc,
            pool_size: self.pool_size,
            queues: self.queues,
            promiscuous: self.promiscuous,
            vlan: self.vlan.is_some(),
            offloads: self.offloads == OffloadMode::Auto,
            rx_buf: self.rx_buf,
            tx_zero_copy: self.tx_zero_copy(),
            multicast: self.ipv6.is_some(),
            start_wait: Duration::from_secs(self.start_wait),
            capture: self.capture.clone(),
            fault: self.fault.clone(),
        }
    }
}

/// The configured ports, as the port layer opens them.
impl From<&Config> for PortPlan {
    fn from(cfg: &Config) -> PortPlan {
        PortPlan {
            ports: cfg.ports.iter().map(PortConfig::settings).collect(),
            capture: cfg.capture,
        }
    }
}

/// Joins a multi-line parser message into one line.
fn one_line(msg: &str) -> String {
    msg.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::capture::Resolution;
    use crate::port::fault::{CorruptMode, Rate};

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, "t.toml").map_err(|e| e.to_string())
    }

    #[test]
    fn zero_copy_send_follows_the_mtu_unless_set() {
        let port = |mtu: usize, key: &str| {
            let text = format!(
                "[[ports]]\nname = \"p0\"\nbackend = \"tap\"\ndevice = \"t0\"\nmtu = {mtu}\n{key}"
            );
            let c = parse(&text).unwrap();
            (
                c.ports[0].tx_zero_copy(),
                c.ports[0].settings().tx_zero_copy,
            )
        };
        assert_eq!(port(1500, ""), (false, false));
        assert_eq!(port(ZERO_COPY_SEND_MIN_MTU - 1, ""), (false, false));
        assert_eq!(port(ZERO_COPY_SEND_MIN_MTU, ""), (true, true));
        assert_eq!(port(9000, ""), (true, true));
        assert_eq!(port(9000, "tx_zero_copy = false\n"), (false, false));
        assert_eq!(port(1500, "tx_zero_copy = true\n"), (true, true));
    }

    const GOOD: &str = r#"
[eal]
args = ["--no-huge", "-m", "512"]
lcores = "0"

[poll]
burst = 64
stats_interval = 0.5

[capture]
resolution = "us"

[[ports]]
name = "p0"
backend = "soft"
device = "l0"
mac = "02:00:00:00:00:01"
ipv4 = "10.99.0.1/24"
gateway = "10.99.0.254"
mtu = 9000

[ports.fault]
drop = "1%"
reorder = 0.5
corrupt_mode = "tcp-payload"
corrupt = "100ppm"

[[ports]]
name = "p1"
backend = "soft"
device = "l0"
"#;

    #[test]
    fn control_threads_take_the_main_lcore_or_a_precise_error() {
        let with = |v: &str| {
            parse(&GOOD.replace(
                "lcores = \"0\"",
                &format!("lcores = \"0\"\ncontrol_threads = {v}"),
            ))
        };
        assert_eq!(
            with("\"main-lcore\"").unwrap().eal.control_threads,
            ControlThreads::MainLcore
        );
        assert_eq!(
            with("\"spare\"").unwrap().eal.control_threads,
            ControlThreads::Spare
        );
        let e = with("\"lcore-1\"").unwrap_err();
        assert!(
            e.contains("unknown variant `lcore-1`") && e.contains("main-lcore"),
            "{e}"
        );
    }

    #[test]
    fn good_config_parses_with_defaults() {
        let c = parse(GOOD).unwrap();
        assert_eq!(
            c.eal.argv(&["-v".into()]),
            [
                "--log-level=*:warning",
                "-l",
                "0",
                "--no-huge",
                "-m",
                "512",
                "-v"
            ]
        );
        assert_eq!(
            c.eal
                .argv(&["--log-level=8".into(), "--no-telemetry".into()])[..2],
            ["-l", "0"]
        );
        assert_eq!(c.eal.control_threads, ControlThreads::Spare);
        assert_eq!(c.poll.burst, 64);
        assert_eq!(c.capture.resolution, Resolution::Micros);
        assert_eq!(c.capture.snaplen, 65535);
        assert_eq!(c.ports.len(), 2);
        let p0 = &c.ports[0];
        assert_eq!(p0.name(), "p0");
        assert_eq!(p0.mac, Some([2, 0, 0, 0, 0, 1]));
        assert_eq!(p0.ipv4.unwrap().to_string(), "10.99.0.1/24");
        assert_eq!(p0.mtu, 9000);
        let f = p0.fault.as_ref().unwrap();
        assert_eq!(f.drop.ppm(), 10_000);
        assert_eq!(f.reorder.ppm(), 5_000);
        assert_eq!(f.corrupt.ppm(), 100);
        assert_eq!(f.corrupt_mode, CorruptMode::TcpPayload);
        let p1 = &c.ports[1];
        assert_eq!((p1.mtu, p1.rx_desc, p1.pool_size), (1500, 1024, 8191));
        assert_eq!(p1.start_wait, 10);
        assert!(p1.fault.is_none() && p1.mac.is_none());
        assert!(!c.needs_eal());
    }

    #[test]
    fn rdma_section_has_defaults_and_checked_ranges() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.rdma, RdmaSection::default());
        assert_eq!(c.rdma.rto_min_ms, 20);
        let c = parse(
            "[rdma]\ncrc = true\nmarkers = true\nfirst_fpdu_delay_ms = 100\nrto_min_ms = 200\n",
        )
        .unwrap();
        assert_eq!(
            c.rdma,
            RdmaSection {
                crc: true,
                markers: true,
                first_fpdu_delay_ms: 100,
                rto_min_ms: 200,
            }
        );
        let e = parse("[rdma]\nrto_min_ms = 0\n").unwrap_err().to_string();
        assert!(e.contains("rdma.rto_min_ms"), "{e}");
        let e = parse("[rdma]\nfirst_fpdu_delay_ms = 10001\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("rdma.first_fpdu_delay_ms"), "{e}");
        let e = parse("[rdma]\nmpa_crc = true\n").unwrap_err().to_string();
        assert!(e.contains("mpa_crc"), "{e}");
    }

    #[test]
    fn configured_ports_convert_to_the_port_plan() {
        let c = parse(GOOD).unwrap();
        let plan = PortPlan::from(&c);
        assert_eq!(plan.capture, c.capture);
        assert_eq!(plan.ports.len(), 2);
        let p0 = &plan.ports[0];
        assert_eq!(
            (p0.name.as_str(), p0.backend, p0.device.as_str()),
            ("p0", BackendKind::Soft, "l0")
        );
        assert_eq!((p0.mac, p0.mtu), (Some([2, 0, 0, 0, 0, 1]), 9000));
        assert_eq!(p0.start_wait, Duration::from_secs(10));
        assert_eq!(
            p0.fault.as_ref().unwrap().drop,
            Rate::from_ppm(10_000).unwrap()
        );
        assert_eq!(plan.ports[1].fault, None);

        let c = parse(
            "[[ports]]\nname = \"t\"\nbackend = \"tap\"\ndevice = \"t0\"\nstart_wait = 3\n\
             [ports.fault]\nreorder_max_hold_us = 250\ndelay_us = 40\n",
        )
        .unwrap();
        let t = c.ports[0].settings();
        assert_eq!(t.start_wait, Duration::from_secs(3));
        let f = t.fault.unwrap();
        assert_eq!(f.reorder_max_hold, Duration::from_micros(250));
        assert_eq!(f.delay_time, Duration::from_micros(40));
        assert_eq!(f.reorder_depth, 3, "missing keys keep their default");
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let cases: &[(&str, &str)] = &[
            (
                "[[ports]]\nname = \"p0\"\nbackend = \"tap\"\ndevice = \"t0\"\nmtu = 70000\n",
                "t.toml:5: ports[0].mtu: invalid value 70000 (must be 68..=9000)",
            ),
            (
                "[[ports]]\nname = \"p0\"\nbackend = \"dpdk\"\ndevice = \"net_memif0\"\nstart_wait = 601\n",
                "t.toml:5: ports[0].start_wait: invalid value 601 (must be 0..=600)",
            ),
            (
                "[[ports]]\nname = \"p0\"\nbackend = \"tap\"\ndevice = \"t0\"\nmac = \"02:00:00:00:00\"\n",
                "t.toml:5: ports[0].mac: invalid MAC address \"02:00:00:00:00\" (expected 6 hex bytes like 02:00:00:00:00:01)",
            ),
            (
                "[[ports]]\nname = \"p0\"\nbackend = \"tap\"\ndevice = \"t0\"\nipv4 = \"10.0.0.1/33\"\n",
                "t.toml:5: ports[0].ipv4: invalid prefix length \"33\" in \"10.0.0.1/33\" (must be 0..=32)",
            ),
            (
                "[[ports]]\nname = \"a\"\nbackend = \"tap\"\ndevice = \"t0\"\n[[ports]]\nname = \"a\"\nbackend = \"tap\"\ndevice = \"t1\"\n",
                "t.toml:6: ports[1].name: duplicate port name \"a\" (also ports[0])",
            ),
            (
                "[[ports]]\nname = \"a\"\nbackend = \"soft\"\ndevice = \"l0\"\n",
                "t.toml:4: ports[0].device: soft link \"l0\" has one end; a soft link needs two ports",
            ),
            (
                "[[ports]]\nname = \"a\"\nbackend = \"tap\"\ndevice = \"t0\"\nipv4 = \"10.0.0.1/24\"\ngateway = \"10.0.1.1\"\n",
                "t.toml:6: ports[0].gateway: gateway 10.0.1.1 is outside 10.0.0.1/24",
            ),
            (
                "[[ports]]\nname = \"a\"\nbackend = \"tap\"\ndevice = \"t0\"\nipv6 = \"fd00::1/129\"\n",
                "t.toml:5: ports[0].ipv6: invalid prefix length \"129\" in \"fd00::1/129\" (must be 0..=128)",
            ),
            (
                "[[ports]]\nname = \"a\"\nbackend = \"tap\"\ndevice = \"t0\"\nipv6 = \"ff02::1/64\"\n",
                "t.toml:5: ports[0].ipv6: invalid IPv6 address \"ff02::1\" in \"ff02::1/64\" (must be a unicast address)",
            ),
            (
                "[[ports]]\nname = \"a\"\nbackend = \"tap\"\ndevice = \"t0\"\nipv6 = \"fd00:1::1/64\"\ngateway6 = \"fd00:2::1\"\n",
                "t.toml:6: ports[0].gateway6: gateway6 fd00:2::1 is outside fd00:1::1/64 and not link-local",
            ),
            (
                "[[ports]]\nname = \"a\"\nbackend = \"tap\"\ndevice = \"t0\"\ngateway6 = \"fe80::1\"\n",
                "t.toml:5: ports[0].gateway6: gateway6 set without ipv6",
            ),
            (
                "[[ports]]\nname = \"a\"\nbackend = \"tap\"\ndevice = \"t0\"\nvlan = 4095\n",
                "t.toml:5: ports[0].vlan: invalid value 4095 (must be 1..=4094)",
            ),
            (
                "[[ports]]\nname = \"a\"\nbackend = \"tap\"\ndevice = \"t0\"\nvlan = 0\n",
                "t.toml:5: ports[0].vlan: invalid value 0 (must be 1..=4094)",
            ),
            (
                "[[ports]]\nname = \"a\"\nbackend = \"tap\"\ndevice = \"t0\"\nvlan = 10\nvlan_priority = 8\n",
                "t.toml:6: ports[0].vlan_priority: invalid value 8 (must be 0..=7)",
            ),
            (
                "[[ports]]\nname = \"a\"\nbackend = \"tap\"\ndevice = \"t0\"\nvlan_priority = 3\n",
                "t.toml:5: ports[0].vlan_priority: vlan_priority set without vlan",
            ),
            (
                "[[ports]]\nname = \"a\"\nbackend = \"tap\"\ndevice = \"t0\"\n[ports.fault]\ndrop = \"150%\"\n",
                "t.toml:6: ports[0].fault.drop: invalid rate \"150%\" (expected e.g. \"1.5%\" or \"200ppm\", at most 100%)",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text).unwrap_err(), *want, "for:\n{text}");
        }
    }

    #[test]
    fn unknown_key_and_wrong_type_are_located() {
        let e = parse("[[ports]]\nname = \"p0\"\nbackend = \"tap\"\ndevice = \"t0\"\nmtux = 1\n")
            .unwrap_err();
        assert!(e.starts_with("t.toml:5: ports[0]"), "{e}");
        assert!(e.contains("unknown field `mtux`"), "{e}");
        let e = parse("[poll]\nburst = \"many\"\n").unwrap_err();
        assert!(e.starts_with("t.toml:2: poll.burst: invalid type"), "{e}");
        let e =
            parse("[[ports]]\nname = \"p0\"\nbackend = \"vhost\"\ndevice = \"x\"\n").unwrap_err();
        assert!(
            e.starts_with("t.toml:3: ports[0].backend: unknown variant `vhost`"),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }

    #[test]
    fn truncated_file_is_a_syntax_error_with_line() {
        let e = parse("[[ports]]\nname = \"p0\"\nmtu = ").unwrap_err();
        assert!(e.starts_with("t.toml:3: "), "{e}");
        assert!(!e.contains('\n'), "{e}");
        let e = parse("[[ports]\n").unwrap_err();
        assert!(e.starts_with("t.toml:1: "), "{e}");
    }

    #[test]
    fn ipv6_and_vlan_parse() {
        let c = parse(
            "[[ports]]\nname = \"a\"\nbackend = \"tap\"\ndevice = \"t0\"\n\
             ipv6 = \"fd00:99::1/64\"\ngateway6 = \"fe80::1\"\nvlan = 100\nvlan_priority = 5\n",
        )
        .unwrap();
        let p = &c.ports[0];
        assert_eq!(p.ipv6.unwrap().to_string(), "fd00:99::1/64");
        assert_eq!(
            *p.gateway6.as_ref().unwrap().get_ref(),
            "fe80::1".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            p.vlan_tag(),
            Some(Vlan {
                id: 100,
                priority: 5
            })
        );
        assert!(p.settings().vlan);
        assert!(p.ipv4.is_none());
        let c = parse("[[ports]]\nname = \"a\"\nbackend = \"tap\"\ndevice = \"t0\"\nvlan = 7\n")
            .unwrap();
        assert_eq!(c.ports[0].vlan_tag().unwrap().priority, 0);
    }

    #[test]
    fn cidr_contains() {
        let n: Ipv4Cidr = "10.1.2.3/16".parse().unwrap();
        assert!(n.contains(Ipv4Addr::new(10, 1, 200, 1)));
        assert!(!n.contains(Ipv4Addr::new(10, 2, 0, 1)));
        let all: Ipv4Cidr = "1.2.3.4/0".parse().unwrap();
        assert!(all.contains(Ipv4Addr::new(200, 0, 0, 1)));
        let n: Ipv6Cidr = "fd00:99::1/64".parse().unwrap();
        assert!(n.contains("fd00:99::ffff:1".parse().unwrap()));
        assert!(!n.contains("fd00:98::1".parse().unwrap()));
        let n: Ipv6Cidr = "fd00:99::1/128".parse().unwrap();
        assert!(n.contains("fd00:99::1".parse().unwrap()));
        assert!(!n.contains("fd00:99::2".parse().unwrap()));
        let all: Ipv6Cidr = "fd00::1/0".parse().unwrap();
        assert!(all.contains("2001:db8::1".parse().unwrap()));
    }
}
