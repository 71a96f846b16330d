//! What every subcommand shares: the error type and exit codes, the port options, the
//! parsers of option values, the stop flag and the deadline.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use dataplane::clock::{self, Instant};

use dataplane::apps::perf::PerfError;
use dataplane::apps::perftest::PerftestError;
use dataplane::apps::rping::RpingError;
use dataplane::apps::soak::SoakError;
use dataplane::apps::AppError;
use dataplane::config::{BackendKind, Config, ConfigError, PortConfig};
#[cfg(feature = "dpdk")]
use dataplane::dpdk::EalError;
use dataplane::port::open::OpenOptions;
use dataplane::port::PortError;
use dataplane::runtime::{OpenedPorts, RuntimeError};

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CmdError {
    /// Wrong or inconsistent command-line arguments.
    #[error("{0}")]
    Usage(String),
    /// The configuration file is unreadable or invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A port could not be opened or started.
    #[error(transparent)]
    Port(#[from] PortError),
    /// The DPDK EAL could not start.
    #[cfg(feature = "dpdk")]
    #[error(transparent)]
    Eal(#[from] EalError),
    /// Opening the configured ports.
    #[error(transparent)]
    Open(#[from] RuntimeError),
    /// An application could not start, or failed the same way any of them can.
    #[error(transparent)]
    App(#[from] AppError),
    /// rping failed.
    #[error(transparent)]
    Rping(#[from] RpingError),
    /// A perf run failed.
    #[error(transparent)]
    Perf(#[from] PerfError),
    /// A perftest (`perf -R`) run failed.
    #[error(transparent)]
    Perftest(#[from] PerftestError),
    /// The soak failed.
    #[error(transparent)]
    Soak(#[from] SoakError),
    /// Something else failed at run time.
    #[error("{0}")]
    Runtime(String),
}

impl CmdError {
    /// Process exit code: 2 for usage and configuration errors, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            CmdError::Usage(_) | CmdError::Config(_) => 2,
            _ => 1,
        }
    }
}

/// The first line of a clap error, without clap's `error: ` prefix.
pub fn usage_error_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    // The message is the first paragraph (clap lists missing arguments on indented lines).
    let para: Vec<&str> = text
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    let msg = para.join(" ");
    let msg = msg.strip_prefix("error: ").unwrap_or(&msg);
    let msg = if msg.is_empty() {
        "invalid arguments"
    } else {
        msg
    };
    format!("{msg} (see 'dataplane --help')")
}

/// A duration argument that is not a number of seconds (0 to 1e9).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a number of seconds")]
pub struct NotSeconds(String);

/// Parses a duration in seconds (`2`, `0.5`).
pub fn parse_secs(s: &str) -> Result<Duration, NotSeconds> {
    let v: f64 = s.parse().map_err(|_| NotSeconds(s.into()))?;
    if !v.is_finite() || !(0.0..=1e9).contains(&v) {
        return Err(NotSeconds(s.into()));
    }
    Ok(Duration::from_secs_f64(v))
}

/// Parses `[PORT:]KEY=VALUE,...` for `--fault` (the spec itself is checked when the port
/// opens).
pub fn parse_fault_arg(s: &str) -> Result<(Option<String>, String), Infallible> {
    match s.split_once(':') {
        Some((port, spec)) if !port.contains('=') => Ok((Some(port.to_string()), spec.to_string())),
        _ => Ok((None, s.to_string())),
    }
}

/// The flag the first SIGINT, SIGTERM or SIGHUP sets (see [`super::signals`]).
pub fn stop_flag() -> Result<Arc<AtomicBool>, CmdError> {
    Ok(super::signals::stop_flag())
}

/// The deadline `duration` from now, if any.
pub fn deadline(duration: Option<Duration>) -> Option<Instant> {
    duration.map(|d| clock::now() + d)
}

/// How a command picks its ports: from a configuration file, or DPDK devices by name.
#[derive(Debug, Clone, clap::Args)]
pub struct PortArgs {
    /// Configuration file (TOML).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// A port to use: a port name from --config, or else a DPDK device name (repeatable).
    #[arg(long = "port", short = 'p', value_name = "NAME")]
    pub ports: Vec<String>,
    /// How the ports are opened.
    #[command(flatten)]
    pub open: OpenArgs,
}

/// How a command's ports are opened: capture, fault injection and EAL arguments (the
/// options of every command that opens ports, after its own).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct OpenArgs {
    /// Write each port's frames to DIR/<port>.pcap.
    #[arg(long, value_name = "DIR")]
    pub capture_dir: Option<PathBuf>,
    /// Inject faults: `[PORT:]KEY=VALUE,...` with the keys of `[ports.fault]` (repeatable).
    #[arg(long = "fault", value_name = "SPEC", value_parser = parse_fault_arg)]
    pub faults: Vec<(Option<String>, String)>,
    /// DPDK EAL arguments (after `--`), added to the configuration's.
    #[arg(last = true, value_name = "EAL ARGS")]
    pub eal: Vec<String>,
}

impl PortArgs {
    /// Loads the configuration, or builds one from `--port` DPDK device names.
    pub fn config(&self) -> Result<Config, CmdError> {
        if let Some(path) = &self.config {
            let mut cfg = Config::load(path)?;
            if !self.ports.is_empty() {
                let mut picked = Vec::new();
                for name in &self.ports {
                    let p = cfg.port(name).ok_or_else(|| {
                        CmdError::Usage(format!(
                            "--port {name}: no such port in {} (ports: {})",
                            path.display(),
                            cfg.ports
                                .iter()
                                .map(|p| p.name())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ))
                    })?;
                    picked.push(p.clone());
                }
                // Soft links need both ends open even if only one is used.
                for p in &cfg.ports {
                    let partner_picked = picked
                        .iter()
                        .any(|q| q.backend == BackendKind::Soft && q.device() == p.device());
                    if p.backend == BackendKind::Soft
                        && partner_picked
                        && !picked.iter().any(|q| q.name() == p.name())
                    {
                        picked.push(p.clone());
                    }
                }
                cfg.ports = picked;
            }
            Ok(cfg)
        } else {
            if self.ports.is_empty() {
                return Err(CmdError::Usage(
                    "no ports: give --config FILE or --port DEVICE".into(),
                ));
            }
            let mut cfg = Config::default();
            for dev in &self.ports {
                let mut p = PortConfig::new(dev, BackendKind::Dpdk, dev);
                p.promiscuous = true;
                cfg.ports.push(p);
            }
            Ok(cfg)
        }
    }

    /// Opens the ports of `cfg` (starting the EAL if needed).
    pub fn open(&self, cfg: &Config) -> Result<OpenedPorts, CmdError> {
        let opts = OpenOptions {
            capture_dir: self.open.capture_dir.clone(),
            faults: self.open.faults.clone(),
        };
        OpenedPorts::open(cfg, &opts, &self.open.eal).map_err(CmdError::from)
    }

    /// Opens the ports of `cfg` with all their queue pairs (see
    /// [`OpenedPorts::open_lanes`]).
    pub fn open_lanes(&self, cfg: &Config) -> Result<OpenedPorts, CmdError> {
        let opts = OpenOptions {
            capture_dir: self.open.capture_dir.clone(),
            faults: self.open.faults.clone(),
        };
        OpenedPorts::open_lanes(cfg, &opts, &self.open.eal).map_err(CmdError::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_args() {
        assert_eq!(
            parse_fault_arg("p0:drop=1%").unwrap(),
            (Some("p0".into()), "drop=1%".into())
        );
        assert_eq!(
            parse_fault_arg("drop=1%").unwrap(),
            (None, "drop=1%".into())
        );
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_secs("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_secs("-1").is_err());
        assert!(parse_secs("inf").is_err());
        assert!(parse_secs("x").is_err());
    }
}
