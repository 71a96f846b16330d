//! SIGINT, SIGTERM and SIGHUP. The first asks the running command to stop cleanly (its
//! stop flag: the RDMA tools then flush outstanding work requests and close their
//! connections, the ports stop, EAL cleans up); a second exits at once, after removing
//! the DPDK runtime directory (hugepage files are unlinked as soon as mapped, see
//! `dataplane::dpdk::eal`).
//!
//! The signals are blocked in every thread (the mask is set before any thread starts, and
//! EAL's threads inherit it) and read from a signalfd by one thread of their own, so no
//! code runs in signal-handler context.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, OnceLock};

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::SignalFd;

/// Set by the first signal.
static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// The first signal received (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

const SIGNALS: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// Blocks the stop signals in this thread and every thread started after, and starts the
/// thread that handles them. Call first thing in `main`.
pub fn install() -> Result<(), String> {
    let mut set = SigSet::empty();
    for s in SIGNALS {
        set.add(s);
    }
    set.thread_block()
        .map_err(|e| format!("cannot block signals: {e}"))?;
    let fd = SignalFd::new(&set).map_err(|e| format!("signalfd: {e}"))?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || loop {
            match fd.read_signal() {
                Ok(Some(info)) => received(info.ssi_signo as i32),
                Ok(None) => {}
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    log::error!("reading signals: {e}");
                    return;
                }
            }
        })
        .map_err(|e| format!("cannot start the signal thread: {e}"))?;
    Ok(())
}

fn name(signo: i32) -> String {
    Signal::try_from(signo).map_or_else(|_| format!("signal {signo}"), |s| s.to_string())
}

fn received(signo: i32) {
    if RECEIVED
        .compare_exchange(0, signo, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
    {
        eprintln!(
            "dataplane: {}: stopping (send it again to exit at once)",
            name(signo)
        );
        stop_flag().store(true, Ordering::SeqCst);
        return;
    }
    eprintln!(
        "dataplane: {}: second stop signal, exiting at once",
        name(signo)
    );
    #[cfg(feature = "dpdk")]
    dataplane::dpdk::eal::remove_runtime_dir();
    std::process::exit(128 + signo);
}

/// The process's stop flag, set by the first stop signal.
pub fn stop_flag() -> Arc<AtomicBool> {
    Arc::clone(STOP.get_or_init(|| Arc::new(AtomicBool::new(false))))
}

/// The stop signal received, if any.
pub fn signal() -> Option<i32> {
    Some(RECEIVED.load(Ordering::SeqCst)).filter(|s| *s != 0)
}

/// The name of the stop signal received, if any (`SIGTERM`).
pub fn signal_name() -> Option<String> {
    signal().map(name)
}
