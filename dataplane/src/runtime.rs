//! Bringing a configuration to life: the DPDK EAL (when a port needs it) and every
//! configured port, opened and owned together so that the ports are dropped before the EAL.
//! The `dataplane` tools and anything else that runs the data plane in its own process (the
//! application libraries) start here.

use std::fmt;

use crate::config::{Config, PortConfig};
#[cfg(feature = "dpdk")]
use crate::dpdk::{Eal, EalError};
use crate::port::open::{open_ports, OpenOptions};
use crate::port::{AnyPort, PortError};

/// Why the ports could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The EAL did not start.
    #[cfg(feature = "dpdk")]
    #[error(transparent)]
    Eal(#[from] EalError),
    /// A port did not open.
    #[error(transparent)]
    Port(#[from] PortError),
    /// The capture directory could not be made.
    #[error("--capture-dir {dir}: {error}")]
    CaptureDir {
        /// The directory.
        dir: String,
        /// What failed.
        error: std::io::Error,
    },
}

/// The configured ports, open, with the EAL they run on.
pub struct OpenedPorts {
    /// The ports, in configuration order (dropped before the EAL).
    pub ports: Vec<AnyPort>,
    /// Each port's configuration.
    pub configs: Vec<PortConfig>,
    /// The EAL, when a DPDK port is open (kept alive until the ports are gone).
    #[cfg(feature = "dpdk")]
    eal: Option<Eal>,
}

impl fmt::Debug for OpenedPorts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenedPorts")
            .field("ports", &self.configs.len())
            .finish_non_exhaustive()
    }
}

impl OpenedPorts {
    /// Opens the ports of `cfg`, starting the EAL (with `eal_args` added to the
    /// configuration's) when one of them is a DPDK port.
    pub fn open(
        cfg: &Config,
        opts: &OpenOptions,
        eal_args: &[String],
    ) -> Result<OpenedPorts, RuntimeError> {
        if let Some(dir) = &opts.capture_dir {
            std::fs::create_dir_all(dir).map_err(|error| RuntimeError::CaptureDir {
                dir: dir.display().to_string(),
                error,
            })?;
        }
        #[cfg(feature = "dpdk")]
        {
            let eal = if cfg.needs_eal() {
                Some(Eal::init(&cfg.eal.argv(eal_args))?)
            } else {
                None
            };
            let ports = open_ports(cfg, opts, eal.as_ref())?;
            Ok(OpenedPorts {
                ports,
                configs: cfg.ports.clone(),
                eal,
            })
        }
        #[cfg(not(feature = "dpdk"))]
        {
            if !eal_args.is_empty() && !cfg.needs_eal() {
                log::warn!("EAL arguments ignored: no DPDK port");
            }
            let ports = open_ports(cfg, opts)?;
            Ok(OpenedPorts {
                ports,
                configs: cfg.ports.clone(),
            })
        }
    }

    /// The EAL the ports run on, when a DPDK port is open.
    #[cfg(feature = "dpdk")]
    pub fn eal(&self) -> Option<&Eal> {
        self.eal.as_ref()
    }
}
