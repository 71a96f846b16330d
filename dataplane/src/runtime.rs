//! Bringing a configuration to life: the DPDK EAL (when a port needs it) and every
//! configured port, opened and owned together so that the ports are dropped before the EAL.
//! The `dataplane` tools and anything else that runs the data plane in its own process (the
//! application libraries) start here.

use std::fmt;

#[cfg(feature = "dpdk")]
use crate::config::ControlThreads;
use crate::config::{Config, PortConfig};
#[cfg(feature = "dpdk")]
use crate::dpdk::{Eal, EalError, WorkerJob};
use crate::port::open::{open_lanes, open_ports, OpenOptions};
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
    /// A lane could not be started, or it panicked.
    #[error("lane {lane}: {reason}")]
    Lane {
        /// The lane.
        lane: usize,
        /// What went wrong.
        reason: String,
    },
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
    /// The ports, in configuration order (dropped before the EAL); with several queues per
    /// port, their queue 0 (lane 0).
    pub ports: Vec<AnyPort>,
    /// Lanes 1.. of multi-queue ports ([`OpenedPorts::open_lanes`]): queue `i` of every port
    /// at index `i - 1`, in configuration order.
    pub lanes: Vec<Vec<AnyPort>>,
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
        Self::open_with(cfg, opts, eal_args, false)
    }

    /// Like [`OpenedPorts::open`], opening every queue pair of multi-queue ports: queue 0
    /// of each port in [`OpenedPorts::ports`], the others in [`OpenedPorts::lanes`].
    pub fn open_lanes(
        cfg: &Config,
        opts: &OpenOptions,
        eal_args: &[String],
    ) -> Result<OpenedPorts, RuntimeError> {
        Self::open_with(cfg, opts, eal_args, true)
    }

    fn open_with(
        cfg: &Config,
        opts: &OpenOptions,
        eal_args: &[String],
        lanes: bool,
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
                let eal = Eal::init(&cfg.eal.argv(eal_args))?;
                if cfg.eal.control_threads == ControlThreads::MainLcore {
                    eal.pin_control_threads()?;
                }
                Some(eal)
            } else {
                None
            };
            let mut all = if lanes {
                open_lanes(cfg, opts, eal.as_ref())?
            } else {
                vec![open_ports(cfg, opts, eal.as_ref())?]
            };
            let ports = all.remove(0);
            Ok(OpenedPorts {
                ports,
                lanes: all,
                configs: cfg.ports.clone(),
                eal,
            })
        }
        #[cfg(not(feature = "dpdk"))]
        {
            if !eal_args.is_empty() && !cfg.needs_eal() {
                log::warn!("EAL arguments ignored: no DPDK port");
            }
            let mut all = if lanes {
                open_lanes(cfg, opts)?
            } else {
                vec![open_ports(cfg, opts)?]
            };
            let ports = all.remove(0);
            Ok(OpenedPorts {
                ports,
                lanes: all,
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

/// A lane's work: what one lcore runs.
pub type LaneJob<'a, T> = Box<dyn FnOnce() -> T + Send + 'a>;

impl OpenedPorts {
    /// Runs `jobs[0]` on this thread and each other job on an lcore of its own: EAL's
    /// worker lcores in id order (pinned by EAL) when EAL runs, else (and for jobs beyond
    /// the workers, with a warning) threads of their own. Returns each job's value, in
    /// order, and where each ran.
    pub fn run_lanes<'a, T: Send + 'a>(
        &self,
        mut jobs: Vec<LaneJob<'a, T>>,
    ) -> Result<(Vec<T>, Vec<String>), RuntimeError> {
        if jobs.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let first = jobs.remove(0);
        #[cfg(feature = "dpdk")]
        let workers = self.eal().map(Eal::worker_lcores).unwrap_or_default();
        #[cfg(not(feature = "dpdk"))]
        let workers: Vec<u32> = Vec::new();
        let pinned = jobs.len().min(workers.len());
        let threaded = jobs.split_off(pinned);
        if !threaded.is_empty() && self.needs_pinning() {
            log::warn!(
                "{} lane(s) beyond EAL's {} worker lcore(s) run on threads of their own \
                 (give more lcores with -l)",
                threaded.len(),
                workers.len()
            );
        }
        let mut places: Vec<String> = vec![self.main_place()];
        places.extend(workers[..pinned].iter().map(|l| format!("lcore {l}")));
        places.extend(threaded.iter().map(|_| "thread".to_string()));
        let lane_err = |lane: usize, reason: String| RuntimeError::Lane { lane, reason };
        std::thread::scope(|scope| {
            let handles: Vec<_> = threaded
                .into_iter()
                .enumerate()
                .map(|(k, job)| {
                    std::thread::Builder::new()
                        .name(format!("lane-{}", 1 + pinned + k))
                        .spawn_scoped(scope, job)
                        .map_err(|e| lane_err(1 + pinned + k, e.to_string()))
                })
                .collect();
            let (first_value, pinned_values) = self.run_pinned(&workers[..pinned], jobs, first)?;
            let mut values = vec![first_value];
            for (k, v) in pinned_values.into_iter().enumerate() {
                values.push(v.map_err(|e| lane_err(1 + k, e))?);
            }
            for (k, h) in handles.into_iter().enumerate() {
                let v = h?
                    .join()
                    .map_err(|_| lane_err(1 + pinned + k, "panicked".into()))?;
                values.push(v);
            }
            Ok((values, places))
        })
    }

    /// True when EAL runs (its lanes are meant to be on lcores of their own).
    fn needs_pinning(&self) -> bool {
        #[cfg(feature = "dpdk")]
        return self.eal.is_some();
        #[cfg(not(feature = "dpdk"))]
        false
    }

    /// Where the calling thread's lane runs.
    fn main_place(&self) -> String {
        #[cfg(feature = "dpdk")]
        if let Some(eal) = self.eal() {
            return format!("lcore {}", eal.main_lcore());
        }
        "thread".into()
    }

    /// Runs `jobs` on the EAL workers `lcores` while `first` runs here.
    fn run_pinned<'a, T: Send + 'a>(
        &self,
        lcores: &[u32],
        jobs: Vec<LaneJob<'a, T>>,
        first: LaneJob<'a, T>,
    ) -> Result<(T, Vec<Result<T, String>>), RuntimeError> {
        if jobs.is_empty() {
            return Ok((first(), Vec::new()));
        }
        #[cfg(feature = "dpdk")]
        if let Some(eal) = self.eal() {
            let jobs = lcores
                .iter()
                .zip(jobs)
                .enumerate()
                .map(|(k, (&lcore, job))| WorkerJob {
                    lcore,
                    name: format!("lane-{}", k + 1),
                    job,
                })
                .collect();
            let (v, rest) = eal
                .run_on_workers(jobs, first)
                .map_err(|e| RuntimeError::Lane {
                    lane: 1,
                    reason: e.to_string(),
                })?;
            return Ok((
                v,
                rest.into_iter()
                    .map(|r| r.map_err(|e| e.to_string()))
                    .collect(),
            ));
        }
        let _ = lcores;
        Err(RuntimeError::Lane {
            lane: 1,
            reason: "lanes for EAL workers but no EAL".into(),
        })
    }
}
