//! The DPDK Environment Abstraction Layer: once-per-process initialisation and cleanup.
//!
//! Defaults added to the caller's arguments (each only when the caller did not choose):
//! - the program name `dataplane` in front when the first argument is an option;
//! - `--file-prefix=dataplane-<pid>` and `--no-shconf`, so concurrent processes never share
//!   runtime files and none are written (no secondary processes can attach; pass your own
//!   `--file-prefix` to allow them);
//! - `--huge-unlink` when hugepages are used without `--in-memory`: hugepage files are
//!   unlinked right after mapping, so a crashed or failed run leaves none behind; with
//!   `--single-file-segments` (which EAL refuses to combine with `--huge-unlink`, and which
//!   vhost-user needs) `--in-memory` instead, whose memory has no files at all.
//!
//! Before calling `rte_eal_init` without `--no-huge`, [`Eal::init`] checks that hugepages are
//! reserved and hugetlbfs is mounted, and fails with [`EalError::NoHugepages`] otherwise.
//!
//! The runtime directory EAL creates (`/var/run/dpdk/<file-prefix>`: its configuration,
//! the telemetry socket) is removed after cleanup when this process is EAL's primary, and
//! by [`remove_runtime_dir`] when the process must exit at once.

use std::ffi::{CStr, CString};
use std::fs;
use std::os::raw::c_char;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use nix::sched::{sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

use super::error::{rte_errno, strerror};
use super::intr::park_interrupt_thread;

/// Why EAL could not be started.
#[derive(Debug, thiserror::Error)]
pub enum EalError {
    /// `rte_eal_init` was already called in this process (DPDK allows it once).
    #[error("DPDK EAL was already initialised in this process; it can be initialised only once")]
    AlreadyInitialised,
    /// Hugepage memory is not available and `--no-huge` was not given.
    #[error("no hugepages available ({detail}): run testbed/setup to reserve them, or pass EAL args `--no-huge -m 512`")]
    NoHugepages {
        /// What is missing.
        detail: String,
    },
    /// An argument contains a NUL byte.
    #[error("EAL argument {0:?} contains a NUL byte")]
    InvalidArg(String),
    /// `rte_eal_init` failed.
    #[error("rte_eal_init({args}) failed: {reason} (rte_errno {code})")]
    Init {
        /// The arguments passed, space-separated.
        args: String,
        /// `rte_strerror(rte_errno)`.
        reason: String,
        /// `rte_errno`.
        code: i32,
    },
    /// EAL's control threads could not be moved onto the main lcore's CPUs.
    #[error("cannot move EAL's control threads onto the main lcore's CPUs: {0}")]
    ControlThreads(String),
}

/// Set by the first `Eal::init` that reaches `rte_eal_init`, never cleared.
static EAL_ATTEMPTED: AtomicBool = AtomicBool::new(false);

/// The live EAL, for objects created without an `&Eal` (mempools).
static EAL_CURRENT: Mutex<Weak<EalInner>> = Mutex::new(Weak::new());

/// The runtime directory of this primary process, once EAL is up.
static RUNTIME_DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

/// The running DPDK environment. Dropping the last handle (this value and every mempool
/// and port made under it) calls `rte_eal_cleanup`.
pub struct Eal {
    handle: EalHandle,
}

/// A reference that keeps EAL alive; held by mempools and ports.
#[derive(Clone)]
pub(crate) struct EalHandle(Arc<EalInner>);

struct EalInner {
    args: Vec<String>,
    /// Runtime directory to delete after cleanup (primary processes only).
    owned_runtime_dir: Option<PathBuf>,
}

impl Eal {
    /// Initialises EAL with `args` (as for `rte_eal_init`; see the module docs for the
    /// defaults added). The calling thread becomes EAL's main lcore.
    pub fn init(args: &[String]) -> Result<Eal, EalError> {
        let args = with_defaults(args, std::process::id());
        if !has_flag(&args, "--no-huge") {
            check_hugepages(
                Path::new("/sys/kernel/mm/hugepages"),
                Path::new("/proc/mounts"),
            )?;
        }
        let c_args = args
            .iter()
            .map(|a| CString::new(a.as_str()).map_err(|_| EalError::InvalidArg(a.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        if EAL_ATTEMPTED.swap(true, Ordering::SeqCst) {
            return Err(EalError::AlreadyInitialised);
        }
        // EAL may keep pointers into argv (it permutes it and some options are kept by
        // reference), so the strings live for the rest of the process.
        let c_args: &'static [CString] = Box::leak(c_args.into_boxed_slice());
        let mut argv: Vec<*mut c_char> = c_args.iter().map(|a| a.as_ptr().cast_mut()).collect();
        argv.push(std::ptr::null_mut());
        let argv: &'static mut [*mut c_char] = Box::leak(argv.into_boxed_slice());
        let argc = (argv.len() - 1) as i32;
        // SAFETY: argv holds argc valid NUL-terminated strings followed by NULL, all leaked
        // so they outlive EAL; EAL_ATTEMPTED guarantees this runs once per process.
        let ret = unsafe { dpdk_sys::rte_eal_init(argc, argv.as_mut_ptr()) };
        if ret < 0 {
            let code = rte_errno();
            return Err(EalError::Init {
                args: args.join(" "),
                reason: strerror(code),
                code,
            });
        }
        // SAFETY: EAL is initialised; a plain query.
        let primary = unsafe { dpdk_sys::rte_eal_process_type() } == dpdk_sys::RTE_PROC_PRIMARY;
        let owned_runtime_dir = if primary { runtime_dir() } else { None };
        *RUNTIME_DIR.lock().unwrap_or_else(|e| e.into_inner()) = owned_runtime_dir.clone();
        log::info!("DPDK EAL up: {}", args.join(" "));
        super::telemetry::register_commands();
        let inner = Arc::new(EalInner {
            args,
            owned_runtime_dir,
        });
        *EAL_CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = Arc::downgrade(&inner);
        Ok(Eal {
            handle: EalHandle(inner),
        })
    }

    /// Moves EAL's control threads (its interrupt thread, multi-process and telemetry
    /// threads: every thread of the process but the calling one and EAL's idle workers
    /// `rte-worker-N`) onto the calling thread's CPUs, i.e. the main lcore's when called
    /// right after [`Eal::init`] on the thread that initialised EAL. DPDK puts them on the
    /// CPUs of the process's start-up affinity that no lcore uses; where those CPUs busy-poll
    /// for another process (two data planes on one host), the interrupt thread's turns
    /// ([`super::intr`]) preempt that process's poller while this one waits for them.
    pub fn pin_control_threads(&self) -> Result<(), EalError> {
        let fail = EalError::ControlThreads;
        let me = nix::unistd::gettid();
        let cpus = sched_getaffinity(me).map_err(|e| fail(format!("own affinity: {e}")))?;
        let tasks = std::fs::read_dir("/proc/self/task")
            .map_err(|e| fail(format!("/proc/self/task: {e}")))?;
        let mut moved = Vec::new();
        for task in tasks.flatten() {
            let Some(tid) = task
                .file_name()
                .to_str()
                .and_then(|t| t.parse::<i32>().ok())
            else {
                continue;
            };
            let tid = Pid::from_raw(tid);
            let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            let name = name.trim();
            if tid == me || name.starts_with("rte-worker-") {
                continue;
            }
            sched_setaffinity(tid, &cpus).map_err(|e| fail(format!("thread {name}: {e}")))?;
            moved.push(name.to_string());
        }
        log::info!(
            "EAL control threads on the main lcore's CPUs: {}",
            moved.join(", ")
        );
        Ok(())
    }

    /// The arguments EAL was started with (defaults included).
    pub fn args(&self) -> &[String] {
        &self.handle.0.args
    }

    /// EAL's runtime directory (`/var/run/dpdk/<file-prefix>` for root), where it keeps its
    /// multi-process socket and configuration (created even with `--no-shconf`).
    pub fn runtime_dir(&self) -> Option<PathBuf> {
        runtime_dir().filter(|d| d.exists())
    }

    /// A handle that keeps EAL alive.
    pub(crate) fn handle(&self) -> EalHandle {
        self.handle.clone()
    }
}

impl std::fmt::Debug for Eal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Eal").field("args", &self.args()).finish()
    }
}

impl EalHandle {
    /// A handle on the running EAL, if any.
    pub(crate) fn current() -> Option<EalHandle> {
        EAL_CURRENT
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .upgrade()
            .map(EalHandle)
    }
}

impl Drop for EalInner {
    fn drop(&mut self) {
        // The interrupt thread outlives rte_eal_cleanup in DPDK 22.11; it must not touch
        // the memory cleanup unmaps.
        park_interrupt_thread();
        // SAFETY: the last handle is gone, so no mempool or port made under EAL is left;
        // EAL was initialised successfully (EalInner exists only then).
        let ret = unsafe { dpdk_sys::rte_eal_cleanup() };
        if ret < 0 {
            log::warn!("rte_eal_cleanup: {}", strerror(ret));
        }
        if let Some(dir) = &self.owned_runtime_dir {
            if let Err(e) = fs::remove_dir_all(dir) {
                log::debug!("removing DPDK runtime dir {}: {e}", dir.display());
            }
        }
        *RUNTIME_DIR.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// Removes this primary process's EAL runtime directory now, for a process that exits
/// without cleanup (a second stop signal). Does nothing before EAL is up or after cleanup.
pub fn remove_runtime_dir() {
    let dir = RUNTIME_DIR.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(dir) = dir {
        let _ = fs::remove_dir_all(dir);
    }
}

/// EAL's runtime directory (`/var/run/dpdk/<prefix>`), after init.
fn runtime_dir() -> Option<PathBuf> {
    // SAFETY: returns a pointer to a static NUL-terminated buffer filled by EAL init.
    let p = unsafe { dpdk_sys::rte_eal_get_runtime_dir() };
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null pointer to EAL's static NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    (!s.is_empty()).then(|| PathBuf::from(s))
}

fn default_prefix_arg(pid: u32) -> String {
    format!("--file-prefix=dataplane-{pid}")
}

/// True when `flag` appears as `flag` or `flag=value`.
fn has_flag(args: &[String], flag: &str) -> bool {
    args.iter().any(|a| {
        a == flag
            || a.strip_prefix(flag)
                .is_some_and(|rest| rest.starts_with('='))
    })
}

/// `args` with the program name and the default options of the module docs added.
fn with_defaults(args: &[String], pid: u32) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len() + 3);
    if args.first().is_none_or(|a| a.starts_with('-')) {
        out.push("dataplane".to_string());
    }
    out.extend_from_slice(args);
    // How hugepage files are kept from outliving the process.
    let memory_flag = if has_flag(&out, "--no-huge")
        || has_flag(&out, "--in-memory")
        || has_flag(&out, "--huge-unlink")
    {
        None
    } else if has_flag(&out, "--single-file-segments") {
        // EAL rejects --huge-unlink together with --single-file-segments.
        Some("--in-memory")
    } else {
        Some("--huge-unlink")
    };
    let in_memory = has_flag(&out, "--in-memory") || memory_flag == Some("--in-memory");
    if !has_flag(&out, "--file-prefix") {
        out.push(default_prefix_arg(pid));
        if !in_memory && !has_flag(&out, "--no-shconf") {
            out.push("--no-shconf".to_string());
        }
    }
    out.extend(memory_flag.map(String::from));
    out
}

/// Checks that some hugepages are free under `sysfs_dir` (`hugepages-*/free_hugepages`) and
/// that a hugetlbfs is listed in `mounts` (a `/proc/mounts`-format file).
fn check_hugepages(sysfs_dir: &Path, mounts: &Path) -> Result<(), EalError> {
    let mut reserved = 0u64;
    let mut free = 0u64;
    if let Ok(entries) = fs::read_dir(sysfs_dir) {
        for entry in entries.flatten() {
            let read = |file: &str| {
                fs::read_to_string(entry.path().join(file))
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .unwrap_or(0)
            };
            reserved += read("nr_hugepages");
            free += read("free_hugepages");
        }
    }
    if reserved == 0 {
        return Err(EalError::NoHugepages {
            detail: format!("0 hugepages reserved in {}", sysfs_dir.display()),
        });
    }
    if free == 0 {
        return Err(EalError::NoHugepages {
            detail: format!("all {reserved} reserved hugepages are in use"),
        });
    }
    let mounted = fs::read_to_string(mounts)
        .map(|text| hugetlbfs_mounted(&text))
        .unwrap_or(false);
    if !mounted {
        return Err(EalError::NoHugepages {
            detail: format!("no hugetlbfs mount in {}", mounts.display()),
        });
    }
    Ok(())
}

/// True when a `/proc/mounts` text lists a hugetlbfs file system.
fn hugetlbfs_mounted(mounts: &str) -> bool {
    mounts
        .lines()
        .any(|line| line.split_whitespace().nth(2) == Some("hugetlbfs"))
}

/// True when this machine has free hugepages and a hugetlbfs mount, i.e. EAL can start
/// without `--no-huge`.
pub fn hugepages_available() -> bool {
    check_hugepages(
        Path::new("/sys/kernel/mm/hugepages"),
        Path::new("/proc/mounts"),
    )
    .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn defaults_add_program_name_prefix_and_unlink() {
        let args = with_defaults(&strings(&["-l", "0", "--vdev", "net_null0"]), 42);
        assert_eq!(
            args,
            strings(&[
                "dataplane",
                "-l",
                "0",
                "--vdev",
                "net_null0",
                "--file-prefix=dataplane-42",
                "--no-shconf",
                "--huge-unlink"
            ])
        );
    }

    /// Asserts that `with_defaults` keeps `given` (of process `pid`) and adds `added`.
    fn assert_adds(given: &[&str], pid: u32, added: &[&str]) {
        let want: Vec<String> = strings(given).into_iter().chain(strings(added)).collect();
        assert_eq!(with_defaults(&strings(given), pid), want);
    }

    #[test]
    fn defaults_respect_caller_choices() {
        let given = ["prog", "--no-huge", "-m", "512", "--file-prefix", "x"];
        assert_adds(&given, 1, &[]);
        assert_adds(&["prog", "--file-prefix=y", "--in-memory"], 1, &[]);
        let added = ["--file-prefix=dataplane-7", "--no-shconf"];
        assert_adds(&["prog", "--huge-unlink=never"], 7, &added);
        assert_eq!(with_defaults(&[], 3)[0], "dataplane");
        let added = ["--file-prefix=dataplane-9", "--in-memory"];
        assert_adds(&["prog", "--single-file-segments"], 9, &added);
    }

    #[test]
    fn flag_matching_is_exact() {
        let args = strings(&["--no-hugepages", "--file-prefixes=a"]);
        assert!(!has_flag(&args, "--no-huge"));
        assert!(!has_flag(&args, "--file-prefix"));
        assert!(has_flag(&strings(&["--file-prefix=a"]), "--file-prefix"));
    }

    #[test]
    fn hugetlbfs_mount_detection() {
        let with = "sysfs /sys sysfs rw 0 0\nnodev /dev/hugepages hugetlbfs rw,pagesize=2M 0 0\n";
        let without = "sysfs /sys sysfs rw 0 0\nproc /proc proc rw 0 0\n";
        assert!(hugetlbfs_mounted(with));
        assert!(!hugetlbfs_mounted(without));
    }

    #[test]
    fn hugepage_check_reports_what_is_missing() {
        let dir = std::env::temp_dir().join(format!("dp-hugecheck-{}", std::process::id()));
        let size_dir = dir.join("hugepages-2048kB");
        fs::create_dir_all(&size_dir).unwrap();
        let mounts = dir.join("mounts");
        fs::write(&mounts, "proc /proc proc rw 0 0\n").unwrap();

        fs::write(size_dir.join("nr_hugepages"), "0\n").unwrap();
        fs::write(size_dir.join("free_hugepages"), "0\n").unwrap();
        let err = check_hugepages(&dir, &mounts).unwrap_err();
        assert!(err.to_string().contains("0 hugepages reserved"), "{err}");
        assert!(err.to_string().contains("--no-huge -m 512"), "{err}");

        fs::write(size_dir.join("nr_hugepages"), "512\n").unwrap();
        let err = check_hugepages(&dir, &mounts).unwrap_err();
        assert!(
            err.to_string()
                .contains("all 512 reserved hugepages are in use"),
            "{err}"
        );

        fs::write(size_dir.join("free_hugepages"), "100\n").unwrap();
        let err = check_hugepages(&dir, &mounts).unwrap_err();
        assert!(err.to_string().contains("no hugetlbfs mount"), "{err}");

        fs::write(&mounts, "nodev /mnt/huge hugetlbfs rw 0 0\n").unwrap();
        check_hugepages(&dir, &mounts).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }
}
