//! The process-wide state: the configuration (from `DATAPLANE_CONFIG`), the devices it
//! describes, and the data plane, started on first use (listing devices needs only the
//! configuration; opening one starts the ports).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use dataplane::config::Config;

use crate::core::Core;
use crate::device::DeviceInfo;

/// The environment variable that names the configuration file.
pub const CONFIG_ENV: &str = "DATAPLANE_CONFIG";

/// The process's configuration and devices.
#[derive(Debug)]
pub struct Runtime {
    /// The configuration.
    pub cfg: Config,
    /// The devices it describes.
    pub devices: Vec<DeviceInfo>,
    core: OnceLock<Result<Arc<Core>, String>>,
}

/// The runtime, or the errno explaining why there is none (ENODEV: no configuration or
/// no device in it; the reason is printed once on stderr).
pub fn runtime() -> Result<&'static Runtime, i32> {
    static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
    let r = RUNTIME.get_or_init(|| {
        init_logging();
        let path = std::env::var_os(CONFIG_ENV).map(PathBuf::from).ok_or_else(|| {
            format!("{CONFIG_ENV} is not set (run the program with `dataplane exec --config FILE -- ...`)")
        })?;
        let cfg = Config::load(&path)
            .map_err(|e| format!("{CONFIG_ENV}={}: {e}", path.display()))?;
        let devices = DeviceInfo::from_config(&cfg);
        if devices.is_empty() {
            return Err(format!(
                "{CONFIG_ENV}={}: no port has an ipv4 or ipv6 address, so there is no RDMA device",
                path.display()
            ));
        }
        Ok(Runtime {
            cfg,
            devices,
            core: OnceLock::new(),
        })
    });
    match r {
        Ok(rt) => Ok(rt),
        Err(msg) => {
            report_once(msg);
            Err(libc::ENODEV)
        }
    }
}

impl Runtime {
    /// The running data plane, started now if it is not yet.
    pub fn core(&self) -> Result<Arc<Core>, i32> {
        let r = self.core.get_or_init(|| {
            let core = Core::start(self.cfg.clone(), self.devices.clone())?;
            // SAFETY: `stop_at_exit` is an `extern "C" fn()` with static lifetime, as
            // atexit requires.
            unsafe { libc::atexit(stop_at_exit) };
            Ok(core)
        });
        match r {
            Ok(c) if c.is_alive() => Ok(Arc::clone(c)),
            Ok(_) => Err(libc::EIO),
            Err(msg) => {
                report_once(msg);
                Err(libc::ENODEV)
            }
        }
    }

    /// The data plane if it was started.
    fn started(&self) -> Option<&Arc<Core>> {
        self.core.get().and_then(|r| r.as_ref().ok())
    }
}

/// Stops the data plane before the process's libraries are torn down: connections are
/// reset, ports stopped, the EAL released.
extern "C" fn stop_at_exit() {
    if let Ok(rt) = runtime() {
        if let Some(core) = rt.started() {
            core.shutdown();
        }
    }
}

fn report_once(msg: &str) {
    static REPORTED: OnceLock<()> = OnceLock::new();
    REPORTED.get_or_init(|| eprintln!("dataplane: error: {msg}"));
}

/// Logging to stderr at the level `DATAPLANE_LOG` names (default: warnings), never to
/// stdout, which the tools' users parse.
fn init_logging() {
    let env = env_logger::Env::new().filter_or("DATAPLANE_LOG", "warn");
    let _ = env_logger::Builder::from_env(env)
        .target(env_logger::Target::Stderr)
        .try_init();
}
