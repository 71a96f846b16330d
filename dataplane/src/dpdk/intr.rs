//! Running a control-path call on EAL's interrupt thread.
//!
//! Some PMDs keep state that EAL's interrupt thread (`eal-intr-thread`) changes from their
//! callbacks without a lock. DPDK 22.11's memif is one: when the peer disconnects, its
//! control-channel callback runs `memif_disconnect` there, which unmaps and `rte_free`s the
//! shared regions and queue state; `rte_eth_dev_stop` on another thread runs the same
//! function, and the two free the same memory (`rte_free` of a freed element, then a
//! segfault in `librte_eal` on either thread: the teardown crash of issue #20). Callbacks of
//! the interrupt thread run one at a time, so a stop or close that runs there as an alarm
//! callback can never overlap the PMD's own handlers.
//!
//! The same handler also races the poll thread: a peer that disconnects while this process
//! still polls (the side that finishes first stops its port while the other still closes
//! its connections) makes `memif_disconnect` unmap the rings an `rte_eth_rx_burst` or
//! `rte_eth_tx_burst` is reading (a segfault in `librte_net_memif` on the poll thread, 1
//! teardown in 50). While a memif port is polled, the interrupt thread therefore takes
//! turns with the bursts ([`hold_gate`]): it runs its callbacks only between bursts, in a
//! turn every [`TURN`], and the pollers wait (a few microseconds) while it does. Each queue
//! pair has a gate of its own (its own cache line): a burst touches only its lcore's gate,
//! and only the interrupt thread, once a turn, touches them all.

use std::os::raw::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use super::error::strerror;

/// How long to wait for the interrupt thread before saying so (the wait goes on).
const SLOW: Duration = Duration::from_secs(5);

/// A call handed to the interrupt thread and the flag its caller waits on.
struct Job {
    call: Option<Box<dyn FnOnce() + Send>>,
    done: Arc<(Mutex<bool>, Condvar)>,
}

/// Runs `call` on EAL's interrupt thread and waits for it to finish; runs it on the
/// calling thread when that is the interrupt thread, or when no alarm can be set (EAL not
/// running). A panic in `call` is caught there and logged.
pub(crate) fn on_interrupt_thread(what: &str, call: impl FnOnce() + Send + 'static) {
    // SAFETY: reads a thread-local of EAL; valid on any thread.
    if unsafe { dpdk_sys::rte_thread_is_intr() } != 0 {
        call();
        return;
    }
    let done = Arc::new((Mutex::new(false), Condvar::new()));
    let job = Box::into_raw(Box::new(Job {
        call: Some(Box::new(call)),
        done: Arc::clone(&done),
    }));
    // SAFETY: `run_job` matches the alarm callback type and takes back ownership of `job`
    // (a leaked Box) exactly once, when the alarm fires.
    let ret = unsafe { dpdk_sys::rte_eal_alarm_set(1, Some(run_job), job.cast::<c_void>()) };
    if ret < 0 {
        log::warn!(
            "{what}: cannot run it on the interrupt thread ({}); running it here",
            strerror(-ret)
        );
        // SAFETY: the alarm was not set, so `job` is still ours (from Box::into_raw above).
        let mut job = unsafe { Box::from_raw(job) };
        if let Some(call) = job.call.take() {
            call();
        }
        return;
    }
    wait_done(what, &done);
}

/// Stops EAL's interrupt thread for good before `rte_eal_cleanup` unmaps DPDK's memory.
///
/// DPDK 22.11 does not stop that thread at cleanup, and it keeps reading its interrupt
/// sources, whose handles PMDs such as memif allocate in DPDK's memory (`rte_malloc`): a
/// rebuild of its wait list after the unmap (it rebuilds whenever a callback is
/// unregistered, as a port's close does) segfaulted in `rte_intr_fd_get` at exit. The
/// thread is parked in the callback of an interrupt source of its own (an eventfd whose
/// handle lives on the C heap), which never returns: it touches nothing any more, and the
/// process exit ends it. (Not in an alarm callback: cleanup unregisters the alarm source
/// and waits while its callback runs.) Alarms and interrupt callbacks do not run after this.
pub(crate) fn park_interrupt_thread() {
    // SAFETY: reads a thread-local of EAL; valid on any thread.
    if unsafe { dpdk_sys::rte_thread_is_intr() } != 0 {
        return;
    }
    // SAFETY: plain system call; the descriptor is owned below.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        log::warn!("cannot park EAL's interrupt thread: eventfd failed");
        return;
    }
    // SAFETY: flags 0 is RTE_INTR_INSTANCE_F_PRIVATE: the handle is allocated with malloc,
    // outside the memory cleanup unmaps.
    let handle = unsafe { dpdk_sys::rte_intr_instance_alloc(0) };
    // SAFETY: `handle` is checked for NULL first; fd is a valid eventfd.
    let ok = !handle.is_null()
        && unsafe { dpdk_sys::rte_intr_fd_set(handle, fd) } == 0
        && unsafe { dpdk_sys::rte_intr_type_set(handle, dpdk_sys::RTE_INTR_HANDLE_EXT) } == 0;
    let done = Arc::new((Mutex::new(false), Condvar::new()));
    let arg = Arc::into_raw(Arc::clone(&done)).cast_mut().cast::<c_void>();
    // SAFETY: `handle` is a valid EXT handle on `fd`; `park` matches the callback type and
    // only reads `arg`, an Arc leaked for the rest of the process (the callback never
    // returns, so the handle and the Arc stay in use).
    let registered =
        ok && unsafe { dpdk_sys::rte_intr_callback_register(handle, Some(park), arg) } == 0;
    if !registered {
        log::warn!("cannot park EAL's interrupt thread: no interrupt source");
        // SAFETY: nothing registered: `arg`, `handle` and `fd` are still ours alone.
        unsafe {
            drop(Arc::from_raw(
                arg.cast_const().cast::<(Mutex<bool>, Condvar)>(),
            ));
            dpdk_sys::rte_intr_instance_free(handle);
            libc::close(fd);
        }
        return;
    }
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a valid u64 to our eventfd: the interrupt thread wakes.
    unsafe { libc::write(fd, std::ptr::addr_of!(one).cast::<c_void>(), 8) };
    wait_done("park the interrupt thread", &done);
}

/// The parking callback: says so, then never returns.
extern "C" fn park(arg: *mut c_void) {
    // SAFETY: `arg` is the Arc leaked by `park_interrupt_thread`, never freed.
    let done = unsafe { &*arg.cast_const().cast::<(Mutex<bool>, Condvar)>() };
    *done.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
    done.1.notify_all();
    loop {
        std::thread::park();
    }
}

/// Waits until `done` is set, saying so every [`SLOW`].
fn wait_done(what: &str, done: &(Mutex<bool>, Condvar)) {
    let (lock, cvar) = done;
    let mut finished = lock.lock().unwrap_or_else(|e| e.into_inner());
    while !*finished {
        let (guard, timeout) = cvar
            .wait_timeout(finished, SLOW)
            .unwrap_or_else(|e| e.into_inner());
        finished = guard;
        if timeout.timed_out() && !*finished {
            log::warn!("{what}: still waiting for EAL's interrupt thread");
        }
    }
}

/// The alarm callback: runs the job and wakes its caller.
extern "C" fn run_job(arg: *mut c_void) {
    // SAFETY: `arg` is the `Box<Job>` leaked by `on_interrupt_thread` for this alarm, which
    // fires once.
    let mut job = unsafe { Box::from_raw(arg.cast::<Job>()) };
    if let Some(call) = job.call.take() {
        // No unwinding into C: a panic is reported and the caller released all the same.
        if catch_unwind(AssertUnwindSafe(call)).is_err() {
            log::error!("a call on the interrupt thread panicked");
        }
    }
    let (lock, cvar) = &*job.done;
    *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
    cvar.notify_all();
}

/// How often the interrupt thread takes its turn while memif ports are polled: the delay a
/// peer's connect or disconnect, an alarm or a link event waits at most.
pub(crate) const TURN: Duration = Duration::from_millis(2);

/// How many times the interrupt thread spins on a burst in progress before it yields its
/// core instead (about 10 µs).
const BURST_SPINS: u32 = 1 << 12;

/// The bit of a gate's burst count the interrupt thread holds during its turn.
const INTR_TURN: u32 = 1 << 31;

/// One queue pair's gate: bursts in progress on it, and [`INTR_TURN`]; a cache line of its
/// own, written by its poller only (and by the interrupt thread once a turn).
#[repr(align(64))]
#[derive(Debug, Default)]
struct Gate {
    bursts: AtomicU32,
}

/// The gates alive, and whether the interrupt thread is in its turn (a gate made then
/// starts held).
struct Gates {
    list: Vec<Arc<Gate>>,
    in_turn: bool,
}

static GATES: Mutex<Gates> = Mutex::new(Gates {
    list: Vec::new(),
    in_turn: false,
});

/// The gates, locked (never poisoned in a way that matters: the list stays valid).
fn gates() -> std::sync::MutexGuard<'static, Gates> {
    GATES.lock().unwrap_or_else(|e| e.into_inner())
}

/// The eventfd of the gate's interrupt source (`None`: it could not be registered).
static GATE_FD: OnceLock<Option<i32>> = OnceLock::new();

/// One gated queue pair: while any is alive, the interrupt thread runs its callbacks only
/// between the bursts of [`GateHold::burst`].
#[derive(Debug)]
pub(crate) struct GateHold(Arc<Gate>);

/// A burst in progress (the interrupt thread's callbacks wait until it ends).
pub(crate) struct Burst<'a>(&'a AtomicU32);

/// Starts gating the interrupt thread for one more port (see the module docs); `None`
/// (logged) when EAL has no interrupt source to spare.
pub(crate) fn hold_gate() -> Option<GateHold> {
    let fd = (*GATE_FD.get_or_init(register_gate))?;
    let mut g = gates();
    let gate = Arc::new(Gate::default());
    if g.in_turn {
        gate.bursts.store(INTR_TURN, Ordering::Release);
    }
    g.list.push(Arc::clone(&gate));
    if g.list.len() == 1 {
        signal(fd);
    }
    Some(GateHold(gate))
}

impl GateHold {
    /// Waits for the end of the interrupt thread's turn, if it is in one, and marks a burst
    /// in progress until the returned guard drops.
    /// One atomic add when the interrupt thread is not in its turn: the add and the
    /// thread's setting of [`INTR_TURN`] are ordered on the one word, so either this burst
    /// counts before the thread waits for the count, or it sees the turn and takes its add
    /// back.
    #[inline]
    pub(crate) fn burst(&self) -> Burst<'_> {
        let bursts = &self.0.bursts;
        if bursts.fetch_add(1, Ordering::AcqRel) & INTR_TURN != 0 {
            wait_turn(bursts);
        }
        Burst(bursts)
    }
}

/// Takes back a burst's count added during the interrupt thread's turn, waits for the
/// turn's end and counts the burst again.
#[cold]
#[inline(never)]
fn wait_turn(bursts: &AtomicU32) {
    loop {
        bursts.fetch_sub(1, Ordering::Release);
        while bursts.load(Ordering::Acquire) & INTR_TURN != 0 {
            // The interrupt thread may share this core.
            std::thread::yield_now();
        }
        if bursts.fetch_add(1, Ordering::AcqRel) & INTR_TURN == 0 {
            return;
        }
    }
}

impl Drop for GateHold {
    fn drop(&mut self) {
        gates().list.retain(|g| !Arc::ptr_eq(g, &self.0));
    }
}

impl Drop for Burst<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

/// Registers the gate's interrupt source: an eventfd, level-triggered, that stays readable
/// while ports are gated, so that EAL calls [`gate_turn`] between every two batches of
/// callbacks.
fn register_gate() -> Option<i32> {
    // SAFETY: plain system call; the descriptor stays open for the process's life.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        log::warn!("memif ports are not gated: eventfd failed");
        return None;
    }
    // SAFETY: flags 0 is RTE_INTR_INSTANCE_F_PRIVATE: the handle is allocated with malloc
    // (it outlives rte_eal_cleanup, like the source).
    let handle = unsafe { dpdk_sys::rte_intr_instance_alloc(0) };
    // SAFETY: `handle` is checked for NULL first; fd is a valid eventfd; `gate_turn`
    // matches the callback type and ignores its argument.
    let ok = !handle.is_null()
        && unsafe { dpdk_sys::rte_intr_fd_set(handle, fd) } == 0
        && unsafe { dpdk_sys::rte_intr_type_set(handle, dpdk_sys::RTE_INTR_HANDLE_EXT) } == 0
        && unsafe {
            dpdk_sys::rte_intr_callback_register(handle, Some(gate_turn), std::ptr::null_mut())
        } == 0;
    if !ok {
        log::warn!("memif ports are not gated: no interrupt source");
        // SAFETY: nothing registered: `handle` (or NULL, accepted) and `fd` are ours alone.
        unsafe {
            dpdk_sys::rte_intr_instance_free(handle);
            libc::close(fd);
        }
        return None;
    }
    Some(fd)
}

/// Makes the gate's eventfd readable.
fn signal(fd: i32) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a valid u64 to the gate's eventfd.
    unsafe { libc::write(fd, std::ptr::addr_of!(one).cast::<c_void>(), 8) };
}

/// The gate's callback, on the interrupt thread between two batches of callbacks: ends the
/// interrupt thread's turn, leaves the pollers [`TURN`], then (while ports are gated)
/// starts the next turn once the bursts in progress ended, and returns: the callbacks that
/// run until it is called again run between bursts.
extern "C" fn gate_turn(_arg: *mut c_void) {
    {
        let mut g = gates();
        g.in_turn = false;
        for gate in &g.list {
            gate.bursts.fetch_and(!INTR_TURN, Ordering::Release);
        }
    }
    std::thread::sleep(TURN);
    let held: Vec<Arc<Gate>> = {
        let mut g = gates();
        if g.list.is_empty() {
            if let Some(&Some(fd)) = GATE_FD.get() {
                let mut count: u64 = 0;
                // SAFETY: reads 8 bytes into a valid u64 from the gate's (non-blocking)
                // eventfd; a port gated later signals it again (under this lock).
                unsafe { libc::read(fd, std::ptr::addr_of_mut!(count).cast::<c_void>(), 8) };
            }
            return;
        }
        g.in_turn = true;
        for gate in &g.list {
            gate.bursts.fetch_or(INTR_TURN, Ordering::AcqRel);
        }
        g.list.clone()
    };
    for gate in &held {
        let mut spins = 0u32;
        while gate.bursts.load(Ordering::Acquire) & !INTR_TURN != 0 {
            // A burst takes microseconds; one that takes longer belongs to a poller this
            // thread preempted on a core they share (no core outside the lcores): spinning
            // would hold that core until the scheduler takes it back, so give it up.
            if spins < BURST_SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}
