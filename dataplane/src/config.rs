//! The configuration file (TOML): EAL arguments, the poll loop, and the ports.
//!
//! Every error names the file, the line and the key, e.g.
//! `configs/x.toml:7: ports[0].mtu: invalid value 70000 (must be 68..=9000)`. Values are
//! checked while parsing (ranges, MAC and address syntax) and then across entries (unique
//! names, soft links with two ends, gateway inside the subnet).
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
//! mtu = 1500
//!
//! [ports.fault]             # optional fault injection on this port
//! drop = "0.1%"
//! ```

use std::collections::HashMap;
use std::fmt;
use std::net::Ipv4Addr;
use std::ops::{Range, RangeInclusive};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use toml::Spanned;

use crate::port::capture::Resolution;
use crate::port::fault::{CorruptMode, Direction, FaultConfig, Rate};

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
}

impl EalConfig {
    /// The full EAL argument list: quieter EAL logging (warnings and worse; unless a
    /// `--log-level` is given) and no telemetry socket (unless `--telemetry` is given), `-l`
    /// if set, the configured args, then `extra`.
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
        if !given("--telemetry") && !given("--no-telemetry") {
            v.push("--no-telemetry".to_string());
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
    /// Write every frame of this port to this pcap file.
    #[serde(default)]
    pub capture: Option<PathBuf>,
    /// Fault injection on this port.
    #[serde(default)]
    pub fault: Option<FaultSection>,
}

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

/// `[ports.fault]`: the fault injection of one port (see [`FaultConfig`]).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSection {
    /// Seed of the fault decisions.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// `"rx"`, `"tx"` or `"both"`.
    #[serde(default, deserialize_with = "de_direction")]
    pub direction: Direction,
    /// Drop rate (`"1%"`, `"200ppm"` or a number of percent).
    #[serde(default, deserialize_with = "de_rate")]
    pub drop: Rate,
    /// Reorder rate.
    #[serde(default, deserialize_with = "de_rate")]
    pub reorder: Rate,
    /// Frames that overtake a held-back frame, 1..=1024.
    #[serde(default = "default_depth", deserialize_with = "de_depth")]
    pub reorder_depth: usize,
    /// Longest hold of a reordered frame, microseconds.
    #[serde(default = "default_max_hold_us")]
    pub reorder_max_hold_us: u64,
    /// Duplicate rate.
    #[serde(default, deserialize_with = "de_rate")]
    pub duplicate: Rate,
    /// Corruption rate.
    #[serde(default, deserialize_with = "de_rate")]
    pub corrupt: Rate,
    /// `"bitflip"` or `"tcp-payload"` (payload bit flip with valid TCP checksum).
    #[serde(default, deserialize_with = "de_corrupt_mode")]
    pub corrupt_mode: CorruptMode,
    /// Truncation rate.
    #[serde(default, deserialize_with = "de_rate")]
    pub truncate: Rate,
    /// Delay rate.
    #[serde(default, deserialize_with = "de_rate")]
    pub delay: Rate,
    /// Delay of a delayed frame, microseconds.
    #[serde(default = "default_delay_us")]
    pub delay_us: u64,
}

fn default_seed() -> u64 {
    1
}
fn default_depth() -> usize {
    3
}
fn default_max_hold_us() -> u64 {
    10_000
}
fn default_delay_us() -> u64 {
    1_000
}

impl Default for FaultSection {
    fn default() -> FaultSection {
        FaultSection::from(&FaultConfig::default())
    }
}

impl From<&FaultConfig> for FaultSection {
    fn from(c: &FaultConfig) -> FaultSection {
        FaultSection {
            seed: c.seed,
            direction: c.direction,
            drop: c.drop,
            reorder: c.reorder,
            reorder_depth: c.reorder_depth,
            reorder_max_hold_us: c.reorder_max_hold.as_micros() as u64,
            duplicate: c.duplicate,
            corrupt: c.corrupt,
            corrupt_mode: c.corrupt_mode,
            truncate: c.truncate,
            delay: c.delay,
            delay_us: c.delay_time.as_micros() as u64,
        }
    }
}

impl FaultSection {
    /// The fault port configuration.
    pub fn to_fault_config(&self) -> FaultConfig {
        FaultConfig {
            seed: self.seed,
            direction: self.direction,
            drop: self.drop,
            reorder: self.reorder,
            reorder_depth: self.reorder_depth,
            reorder_max_hold: Duration::from_micros(self.reorder_max_hold_us),
            duplicate: self.duplicate,
            corrupt: self.corrupt,
            corrupt_mode: self.corrupt_mode,
            truncate: self.truncate,
            delay: self.delay,
            delay_time: Duration::from_micros(self.delay_us),
        }
    }

    /// Applies `key=value,key=value` overrides (the command line's `--fault` syntax, same
    /// keys as the file). Errors name the offending item.
    pub fn apply_overrides(&mut self, spec: &str) -> Result<(), String> {
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| format!("fault setting {item:?} is not KEY=VALUE"))?;
            let (k, v) = (k.trim(), v.trim());
            let bad = |why: String| format!("fault setting {k}: {why}");
            let rate = |v: &str| v.parse::<Rate>().map_err(|e| bad(e.to_string()));
            let num = |v: &str| {
                v.parse::<u64>()
                    .map_err(|_| bad(format!("invalid number {v:?}")))
            };
            match k {
                "seed" => self.seed = num(v)?,
                "direction" => self.direction = parse_direction(v).map_err(bad)?,
                "drop" => self.drop = rate(v)?,
                "reorder" => self.reorder = rate(v)?,
                "reorder_depth" => {
                    let d = num(v)? as usize;
                    check_range(d, 1..=1024).map_err(bad)?;
                    self.reorder_depth = d;
                }
                "reorder_max_hold_us" => self.reorder_max_hold_us = num(v)?,
                "duplicate" => self.duplicate = rate(v)?,
                "corrupt" => self.corrupt = rate(v)?,
                "corrupt_mode" => self.corrupt_mode = parse_corrupt_mode(v).map_err(bad)?,
                "truncate" => self.truncate = rate(v)?,
                "delay" => self.delay = rate(v)?,
                "delay_us" => self.delay_us = num(v)?,
                _ => return Err(format!("unknown fault setting {k:?}")),
            }
        }
        Ok(())
    }
}

fn parse_direction(s: &str) -> Result<Direction, String> {
    match s {
        "rx" => Ok(Direction::Rx),
        "tx" => Ok(Direction::Tx),
        "both" => Ok(Direction::Both),
        _ => Err(format!(
            "invalid direction {s:?} (expected \"rx\", \"tx\" or \"both\")"
        )),
    }
}

fn parse_corrupt_mode(s: &str) -> Result<CorruptMode, String> {
    match s {
        "bitflip" => Ok(CorruptMode::BitFlip),
        "tcp-payload" => Ok(CorruptMode::TcpPayload),
        _ => Err(format!(
            "invalid corrupt mode {s:?} (expected \"bitflip\" or \"tcp-payload\")"
        )),
    }
}

fn check_range<T: PartialOrd + fmt::Display + Copy>(
    v: T,
    r: RangeInclusive<T>,
) -> Result<T, String> {
    if r.contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "invalid value {v} (must be {}..={})",
            r.start(),
            r.end()
        ))
    }
}

fn de_ranged<'de, D: Deserializer<'de>>(d: D, r: RangeInclusive<i64>) -> Result<i64, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = i64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an integer")
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<i64, E> {
            Ok(v)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<i64, E> {
            i64::try_from(v).map_err(|_| E::custom(format!("invalid value {v} (too large)")))
        }
    }
    let v = d.deserialize_i64(V)?;
    check_range(v, r).map_err(de::Error::custom)
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
fn de_start_wait<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    de_ranged(d, 0..=600).map(|v| v as u64)
}
fn de_lcore<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    de_ranged(d, 0..=127).map(|v| v as u32)
}
fn de_burst<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    de_ranged(d, 1..=512).map(|v| v as usize)
}
fn de_depth<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    de_ranged(d, 1..=1024).map(|v| v as usize)
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

fn de_direction<'de, D: Deserializer<'de>>(d: D) -> Result<Direction, D::Error> {
    let s = String::deserialize(d)?;
    parse_direction(&s).map_err(de::Error::custom)
}

fn de_corrupt_mode<'de, D: Deserializer<'de>>(d: D) -> Result<CorruptMode, D::Error> {
    let s = String::deserialize(d)?;
    parse_corrupt_mode(&s).map_err(de::Error::custom)
}

fn de_rate<'de, D: Deserializer<'de>>(d: D) -> Result<Rate, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = Rate;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a rate like \"1%\", \"200ppm\" or a number of percent")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Rate, E> {
            v.parse().map_err(E::custom)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Rate, E> {
            self.visit_f64(v as f64)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Rate, E> {
            self.visit_f64(v as f64)
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Rate, E> {
            Rate::from_percent(v)
                .ok_or_else(|| E::custom(format!("invalid rate {v} (must be 0..=100 percent)")))
        }
    }
    d.deserialize_any(V)
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
            mtu: default_mtu(),
            rx_desc: default_desc(),
            tx_desc: default_desc(),
            pool_size: default_pool(),
            promiscuous: false,
            start_wait: default_start_wait(),
            lcore: 0,
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
}

/// Joins a multi-line parser message into one line.
fn one_line(msg: &str) -> String {
    msg.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// `[capture]`: settings of every capture file (ports choose to capture with `capture`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureOptions {
    /// Timestamp resolution: `"ns"` (default) or `"us"`.
    #[serde(default = "default_resolution", deserialize_with = "de_resolution")]
    pub resolution: Resolution,
    /// Longest record, 64..=262144 bytes.
    #[serde(default = "default_snaplen", deserialize_with = "de_snaplen")]
    pub snaplen: u32,
}

impl Default for CaptureOptions {
    fn default() -> CaptureOptions {
        CaptureOptions {
            resolution: default_resolution(),
            snaplen: default_snaplen(),
        }
    }
}

fn default_resolution() -> Resolution {
    Resolution::Nanos
}
fn default_snaplen() -> u32 {
    65535
}

fn de_snaplen<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    de_ranged(d, 64..=262_144).map(|v| v as u32)
}

fn de_resolution<'de, D: Deserializer<'de>>(d: D) -> Result<Resolution, D::Error> {
    match String::deserialize(d)?.as_str() {
        "ns" => Ok(Resolution::Nanos),
        "us" => Ok(Resolution::Micros),
        other => Err(de::Error::custom(format!(
            "invalid resolution {other:?} (expected \"ns\" or \"us\")"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, "t.toml").map_err(|e| e.to_string())
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
    fn good_config_parses_with_defaults() {
        let c = parse(GOOD).unwrap();
        assert_eq!(
            c.eal.argv(&["-v".into()]),
            [
                "--log-level=*:warning",
                "--no-telemetry",
                "-l",
                "0",
                "--no-huge",
                "-m",
                "512",
                "-v"
            ]
        );
        assert_eq!(
            c.eal.argv(&["--log-level=8".into(), "--telemetry".into()])[..2],
            ["-l", "0"]
        );
        assert_eq!(c.poll.burst, 64);
        assert_eq!(c.capture.resolution, Resolution::Micros);
        assert_eq!(c.capture.snaplen, 65535);
        assert_eq!(c.ports.len(), 2);
        let p0 = &c.ports[0];
        assert_eq!(p0.name(), "p0");
        assert_eq!(p0.mac, Some([2, 0, 0, 0, 0, 1]));
        assert_eq!(p0.ipv4.unwrap().to_string(), "10.99.0.1/24");
        assert_eq!(p0.mtu, 9000);
        let f = p0.fault.as_ref().unwrap().to_fault_config();
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
    fn fault_overrides() {
        let mut f = FaultSection::default();
        f.apply_overrides("drop=2%, reorder=100ppm,seed=9,corrupt_mode=tcp-payload")
            .unwrap();
        assert_eq!(f.drop.ppm(), 20_000);
        assert_eq!(f.reorder.ppm(), 100);
        assert_eq!(f.seed, 9);
        assert_eq!(f.corrupt_mode, CorruptMode::TcpPayload);
        assert_eq!(
            f.apply_overrides("dorp=1%").unwrap_err(),
            "unknown fault setting \"dorp\""
        );
        assert!(f.apply_overrides("drop").is_err());
        assert!(f.apply_overrides("reorder_depth=0").is_err());
    }

    #[test]
    fn cidr_contains() {
        let n: Ipv4Cidr = "10.1.2.3/16".parse().unwrap();
        assert!(n.contains(Ipv4Addr::new(10, 1, 200, 1)));
        assert!(!n.contains(Ipv4Addr::new(10, 2, 0, 1)));
        let all: Ipv4Cidr = "1.2.3.4/0".parse().unwrap();
        assert!(all.contains(Ipv4Addr::new(200, 0, 0, 1)));
    }
}
