//! `dataplane exec`: runs an unmodified rdma-core program (rping, perftest, ibv_devinfo,
//! your own) on the data plane. The program loads this project's `libibverbs.so.1` and
//! `librdmacm.so.1` instead of rdma-core's (links to `librdma_dataplane.so` in a directory
//! put first on `LD_LIBRARY_PATH`); the configuration's ports with an IPv4 address become its
//! RDMA devices, run by a data-plane thread inside the program.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use dataplane::config::Config;

use super::common::CmdError;

/// The shared object holding both libraries.
const LIBRARY: &str = "librdma_dataplane.so";

/// The sonames applications load.
const SONAMES: [&str; 2] = ["libibverbs.so.1", "librdmacm.so.1"];

/// Arguments of `dataplane exec`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file: its ports with an `ipv4` address are the program's RDMA devices.
    #[arg(long, short)]
    config: PathBuf,
    /// Directory holding librdma_dataplane.so (default: the one this binary is in).
    #[arg(long, value_name = "DIR")]
    lib_dir: Option<PathBuf>,
    /// The program and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM"
    )]
    program: Vec<OsString>,
}

/// The directory with the two sonames linked to `lib`, made (or repaired) if needed.
fn link_dir(lib_dir: &Path) -> Result<PathBuf, CmdError> {
    let dir = lib_dir.join("rdma-core-libs");
    std::fs::create_dir_all(&dir)
        .map_err(|e| CmdError::Runtime(format!("cannot create {}: {e}", dir.display())))?;
    let target = PathBuf::from("..").join(LIBRARY);
    for name in SONAMES {
        let link = dir.join(name);
        if std::fs::read_link(&link).is_ok_and(|t| t == target) {
            continue;
        }
        // Another exec may be doing the same: build the link aside, then rename over.
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&target, &tmp)
            .and_then(|()| std::fs::rename(&tmp, &link))
            .map_err(|e| CmdError::Runtime(format!("cannot link {}: {e}", link.display())))?;
    }
    Ok(dir)
}

/// Runs `dataplane exec`; returns only if the program could not be started.
pub fn run(args: Args) -> Result<(), CmdError> {
    let cfg = Config::load(&args.config)?;
    if !cfg
        .ports
        .iter()
        .any(|p| p.ipv4.is_some() || p.ipv6.is_some())
    {
        return Err(CmdError::Usage(format!(
            "{}: no port has an ipv4 or ipv6 address, so the program would see no RDMA device",
            args.config.display()
        )));
    }
    let config = std::fs::canonicalize(&args.config)
        .map_err(|e| CmdError::Runtime(format!("{}: {e}", args.config.display())))?;
    let lib_dir = match args.lib_dir {
        Some(d) => d,
        None => std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf))
            .ok_or_else(|| {
                CmdError::Runtime("cannot tell where this binary is; pass --lib-dir".into())
            })?,
    };
    let lib_dir = std::fs::canonicalize(&lib_dir)
        .map_err(|e| CmdError::Runtime(format!("{}: {e}", lib_dir.display())))?;
    if !lib_dir.join(LIBRARY).is_file() {
        return Err(CmdError::Runtime(format!(
            "{} not found in {} (build it: cargo build --release -p librdma)",
            LIBRARY,
            lib_dir.display()
        )));
    }
    let links = link_dir(&lib_dir)?;
    let mut path = OsString::from(links.as_os_str());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let (program, rest) = args
        .program
        .split_first()
        .ok_or_else(|| CmdError::Usage("no program given".into()))?;
    let err = std::process::Command::new(program)
        .args(rest)
        .env("DATAPLANE_CONFIG", &config)
        .env("LD_LIBRARY_PATH", path)
        .exec();
    Err(CmdError::Runtime(format!(
        "cannot run {}: {err}",
        Path::new(program).display()
    )))
}
