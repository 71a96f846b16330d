//! The data plane inside the application: one thread, `dataplane`, owns every configured
//! port's iWARP stack (poll loop, TCP engine, connections, RNIC) and runs run-to-completion.
//! Application threads never touch that state: control calls (create a QP, register memory,
//! connect) are jobs the thread runs between two iterations, and the fast path crosses
//! through lock-free rings: work requests in ([`Core::post`]), completions out (each CQ's
//! ring, see [`crate::verbs::cq`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_queue::{ArrayQueue, SegQueue};
use dataplane::clock;
use dataplane::config::{Config, RdmaSection};
use dataplane::lcore::PortAddr;
use dataplane::port::open::OpenOptions;
use dataplane::port::{AnyPort, Port};
use dataplane::rdma::{MemoryKind, RdmaConfig, RdmaStack, StackConfig};
use dataplane::runtime::OpenedPorts;
use iwarp::mpa::MpaConfig;
use iwarp::verbs::{AddressingMode, Rnic, RnicDevice};

use crate::appmem::AppMemory;
use crate::backoff::{Backoff, Wait};
use crate::bridge::{Bridge, Post};
use crate::device::{device_attributes, DeviceInfo};

/// A job for the data-plane thread.
pub type Job = Box<dyn FnOnce(&mut Bridge) + Send>;

/// Work requests that can wait in the post ring at once (the rings of every QP share it;
/// a full ring refuses the post with ENOMEM).
const POST_RING: usize = 1 << 16;

/// The running data plane of the process.
pub struct Core {
    jobs: SegQueue<Job>,
    posts: ArrayQueue<Post>,
    stop: AtomicBool,
    alive: AtomicBool,
    /// What each device is (name, addresses, MTU) as configured.
    devices: Vec<DeviceInfo>,
    /// The MAC each device's port really uses (a port without a configured MAC has its
    /// PMD's), set when the ports are up.
    macs: OnceLock<Vec<[u8; 6]>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The data-plane thread, to wake when it sleeps and work arrives.
    waker: OnceLock<std::thread::Thread>,
    /// The data-plane thread is (about to be) parked in [`idle`].
    parked: AtomicBool,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("devices", &self.devices.len())
            .finish_non_exhaustive()
    }
}

/// A reply slot a job fills and the calling thread waits on.
struct Reply<R> {
    value: Mutex<Option<R>>,
    ready: Condvar,
}

impl Core {
    /// Starts the data plane of `cfg` on its own thread: the EAL (when a port needs it),
    /// every port with an IPv4 address as a device, and the poll loop. Returns once the
    /// ports are up, or why they are not.
    pub fn start(cfg: Config, devices: Vec<DeviceInfo>) -> Result<Arc<Core>, String> {
        let core = Arc::new(Core {
            jobs: SegQueue::new(),
            posts: ArrayQueue::new(POST_RING),
            stop: AtomicBool::new(false),
            alive: AtomicBool::new(true),
            devices,
            macs: OnceLock::new(),
            thread: Mutex::new(None),
            waker: OnceLock::new(),
            parked: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::channel();
        let c = Arc::clone(&core);
        // The thread starts with every signal blocked: the application's handlers (perftest's
        // SIGALRM, Ctrl-C) keep running on its own threads, and EAL's threads, created from
        // this one, inherit the mask.
        let handle = with_signals_blocked(|| {
            std::thread::Builder::new()
                .name("dataplane".into())
                .spawn(move || run(c, cfg, tx))
        })
        .map_err(|e| format!("cannot start the data plane thread: {e}"))?;
        match rx.recv() {
            Ok(Ok(())) => {
                *core.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
                Ok(core)
            }
            Ok(Err(e)) => {
                let _ = handle.join();
                Err(e)
            }
            Err(_) => Err("the data plane thread stopped while starting".into()),
        }
    }

    /// Device `dev` as its port runs (with the port's MAC).
    pub fn device(&self, dev: usize) -> Option<DeviceInfo> {
        let mut d = self.devices.get(dev)?.clone();
        if let Some(mac) = self.macs.get().and_then(|m| m.get(dev)) {
            d.mac = *mac;
        }
        Some(d)
    }

    /// Runs `f` on the data-plane thread and waits for its result.
    pub fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Bridge) -> R + Send + 'static,
    ) -> Result<R, i32> {
        let reply = Arc::new(Reply {
            value: Mutex::new(None),
            ready: Condvar::new(),
        });
        let r = Arc::clone(&reply);
        self.jobs.push(Box::new(move |b: &mut Bridge| {
            let v = f(b);
            *r.value.lock().unwrap_or_else(|p| p.into_inner()) = Some(v);
            r.ready.notify_one();
        }));
        self.wake();
        let mut slot = reply.value.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(v) = slot.take() {
                return Ok(v);
            }
            if !self.alive.load(Ordering::Acquire) {
                return Err(libc::EIO);
            }
            slot = reply
                .ready
                .wait_timeout(slot, Duration::from_millis(100))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Queues a work request; `Err` (ENOMEM) when the ring is full.
    pub fn post(&self, p: Post) -> Result<(), i32> {
        self.posts.push(p).map_err(|_| libc::ENOMEM)?;
        self.wake();
        Ok(())
    }

    /// Wakes the data-plane thread if it sleeps in [`idle`] (work was just queued).
    fn wake(&self) {
        // Pairs with the fence in `idle`: either this load sees the thread parked, or the
        // thread sees the queued work before it parks.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.parked.load(Ordering::Relaxed) {
            if let Some(t) = self.waker.get() {
                t.unpark();
            }
        }
    }

    /// Whether work is queued for the data-plane thread.
    fn has_work(&self) -> bool {
        !self.jobs.is_empty() || !self.posts.is_empty()
    }

    /// Whether the data-plane thread still runs.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Stops the data-plane thread (at process exit) and waits for it: connections are
    /// reset, the ports stopped and the EAL released by that thread.
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        let handle = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

/// Runs `f` with every signal blocked in the calling thread (threads it creates inherit the
/// mask), then restores the mask.
fn with_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    let mut all = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    let mut old = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigfillset initialises `all`; pthread_sigmask reads it and writes the previous
    // mask into `old`, which is restored below from the same initialised value.
    unsafe {
        libc::sigfillset(all.as_mut_ptr());
        libc::pthread_sigmask(libc::SIG_SETMASK, all.as_ptr(), old.as_mut_ptr());
    }
    let r = f();
    // SAFETY: `old` was filled by the pthread_sigmask call above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, old.as_ptr(), std::ptr::null_mut());
    }
    r
}

/// How long a connection request to a port the application does not listen on yet waits
/// for its `rdma_listen` before it is refused, and how long a connect this side makes keeps
/// sending its SYN while the peer refuses it at once (Linux does, siw included). An
/// application's listen is a message to the data-plane thread, and a peer told "ready" just
/// before can connect first: perftest's `-R` tests do exactly that (a handshake, then the
/// listen), and perftest 4.5 crashes in its retry after a refused connect (it reuses the
/// node array it has just freed).
const SYN_HOLD: Duration = Duration::from_millis(500);

/// The iWARP settings of a device's stack from the configuration's `[rdma]` section.
fn stack_config(rdma: &RdmaSection, mtu: usize, burst: usize, ird_ord: u16) -> StackConfig {
    let mpa = MpaConfig {
        require_crc: rdma.crc,
        want_markers: rdma.markers,
        accept_markers: true,
        ird: ird_ord,
        ord: ird_ord,
        ..MpaConfig::default()
    };
    let tcp = tcp::Config {
        mtu,
        verify_checksums: false,
        isn_secret: rand_secret(),
        rto_min: Duration::from_millis(rdma.rto_min_ms),
        syn_hold: SYN_HOLD,
        refused_retry: SYN_HOLD,
        ..tcp::Config::default()
    };
    StackConfig {
        rdma: RdmaConfig {
            mpa,
            tcp,
            rx_window: 4 << 20,
        },
        first_fpdu_delay: Duration::from_millis(rdma.first_fpdu_delay_ms),
        burst,
        ..StackConfig::new(MpaConfig::default(), tcp::Config::default())
    }
}

/// A per-process secret for TCP's initial sequence numbers.
fn rand_secret() -> [u8; 16] {
    let mut s = [0u8; 16];
    let seed = clock::now().as_nanos() ^ u64::from(std::process::id()).rotate_left(32);
    let mut x = seed | 1;
    for b in &mut s {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    s
}

/// Waits as `wait` says: spins once, or parks unless work is queued (an application
/// thread that queues work unparks it at once).
fn idle(core: &Core, wait: Wait) {
    let Wait::Nap(nap) = wait else {
        std::hint::spin_loop();
        return;
    };
    core.parked.store(true, Ordering::Relaxed);
    std::sync::atomic::fence(Ordering::SeqCst);
    if !core.has_work() {
        std::thread::park_timeout(nap);
    }
    core.parked.store(false, Ordering::Relaxed);
}

/// The spin between requests and responses ([`Backoff`]): `DATAPLANE_IDLE_SPIN_US`, else
/// 50 µs with four CPUs or more and none below (where the application's own spinning threads
/// need the cores: measured on two CPUs, ib_write_lat's typical latency is 49 µs without the
/// spin, 94 µs with 50 µs of it).
fn idle_spin() -> Duration {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let us = std::env::var("DATAPLANE_IDLE_SPIN_US")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(if cpus >= 4 { 50 } else { 0 });
    Duration::from_micros(us)
}

/// The data-plane thread.
fn run(core: Arc<Core>, cfg: Config, ready: mpsc::Sender<Result<(), String>>) {
    let mut opened = match OpenedPorts::open(&cfg, &OpenOptions::default(), &[]) {
        Ok(o) => o,
        Err(e) => {
            core.alive.store(false, Ordering::Release);
            let _ = ready.send(Err(format!("cannot open the configured ports: {e}")));
            return;
        }
    };
    let attrs = device_attributes();
    let mut stacks = Vec::new();
    let mut macs = Vec::new();
    let ports: Vec<AnyPort> = std::mem::take(&mut opened.ports);
    for (i, (port, pc)) in ports.into_iter().zip(cfg.ports.iter()).enumerate() {
        if pc.ipv4.is_none() && pc.ipv6.is_none() {
            continue;
        }
        let scfg = stack_config(
            &cfg.rdma,
            pc.mtu,
            cfg.poll.burst,
            attrs.max_ird_per_qp.min(u32::from(u16::MAX)) as u16,
        );
        let device = RnicDevice::new(pc.name(), attrs.clone());
        let rnic: Rnic = match device.open(
            AddressingMode::Page,
            Box::new(AppMemory::new()),
            0x5eed_0000 + i as u64,
        ) {
            Ok(r) => r,
            Err(e) => {
                core.alive.store(false, Ordering::Release);
                let _ = ready.send(Err(format!("RNIC {}: {e}", pc.name())));
                return;
            }
        };
        macs.push(port.info().mac);
        log::info!("port {}: offloads {}", pc.name(), port.offloads().summary);
        match RdmaStack::with_rnic(port, PortAddr::of(pc), scfg, rnic, MemoryKind::Application) {
            Ok(s) => stacks.push(s),
            Err(e) => {
                core.alive.store(false, Ordering::Release);
                let _ = ready.send(Err(format!("port {}: {e}", pc.name())));
                return;
            }
        }
    }
    let _ = core.macs.set(macs);
    let mut bridge = Bridge::new(stacks);
    let _ = ready.send(Ok(()));
    log::info!(
        "data plane up: {} device(s) on {}",
        core.devices.len(),
        std::thread::current().name().unwrap_or("?")
    );
    let mut backoff = Backoff::new(clock::now(), idle_spin());
    let _ = core.waker.set(std::thread::current());
    // Sleeps of microseconds, not the default 50 µs timer slack.
    // SAFETY: prctl on the calling thread with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0) };
    let mut next_sync = clock::now();
    while !core.stop.load(Ordering::Acquire) {
        let now = clock::now();
        let frames = bridge.poll(now);
        let mut busy = frames > 0;
        while let Some(job) = core.jobs.pop() {
            job(&mut bridge);
            busy = true;
        }
        while let Some(p) = core.posts.pop() {
            bridge.apply_post(p);
            busy = true;
        }
        // Timers fire without traffic (retransmissions, connection timeouts): states and
        // events are looked at on activity and at least every millisecond.
        let sync = busy || now >= next_sync;
        if sync {
            next_sync = now + Duration::from_millis(1);
        }
        bridge.distribute(sync);
        backoff.record(now, frames, busy);
        if !busy {
            idle(&core, backoff.wait(now));
        }
    }
    bridge.shutdown();
    core.alive.store(false, Ordering::Release);
    drop(bridge);
    drop(opened);
}
