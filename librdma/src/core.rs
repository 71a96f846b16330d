//! The data plane inside the application: one thread per lane owns every configured port's
//! iWARP stack of that lane (poll loop, TCP engine, connections, RNIC) and runs
//! run-to-completion. With one queue per port (`queues = 1`) there is one lane, the thread
//! `dataplane`; with `queues = N`, lane `i` serves queue `i` of every port, lane 0 on the
//! `dataplane` thread (the EAL main lcore) and the others on EAL's worker lcores, pinned as
//! `dataplane run`'s lanes are ([`OpenedPorts::run_lanes`]).
//! Application threads never touch that state: control calls (create a QP, register memory,
//! connect) are jobs the lane owning the object runs between two iterations, and the fast
//! path crosses through lock-free rings: work requests in ([`Core::post`], the ring of the
//! QP's lane), completions out (each CQ's ring, see [`crate::verbs::cq`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_queue::{ArrayQueue, SegQueue};
use dataplane::clock;
use dataplane::config::{Config, RdmaSection};
use dataplane::lcore::PortAddr;
use dataplane::neighbour::neighbour_shares;
use dataplane::port::open::OpenOptions;
use dataplane::port::{AnyPort, Port};
use dataplane::rdma::{LaneStagIndices, MemoryKind, RdmaConfig, RdmaStack, StackConfig};
use dataplane::runtime::{LaneJob, OpenedPorts};
use dataplane::steer::Lane;
use iwarp::mpa::MpaConfig;
use iwarp::verbs::{AddressingMode, Rnic, RnicDevice};

use crate::appmem::AppMemory;
use crate::backoff::{Backoff, Wait};
use crate::bridge::{Bridge, LaneCounters, Post};
use crate::device::{device_attributes, DeviceInfo};

/// A job for the data-plane thread.
pub type Job = Box<dyn FnOnce(&mut Bridge) + Send>;

/// Work requests that can wait in the post ring at once (the rings of every QP share it;
/// a full ring refuses the post with ENOMEM).
const POST_RING: usize = 1 << 16;

/// What application threads hand to one lane: control jobs and work requests, and how to
/// wake its thread.
struct LaneQueue {
    jobs: SegQueue<Job>,
    posts: ArrayQueue<Post>,
    /// The lane's thread, to wake when it sleeps and work arrives.
    waker: OnceLock<std::thread::Thread>,
    /// The lane's thread is (about to be) parked in [`idle`].
    parked: AtomicBool,
}

impl LaneQueue {
    fn new() -> LaneQueue {
        LaneQueue {
            jobs: SegQueue::new(),
            posts: ArrayQueue::new(POST_RING),
            waker: OnceLock::new(),
            parked: AtomicBool::new(false),
        }
    }

    /// Wakes the lane's thread if it sleeps in [`idle`] (work was just queued).
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

    /// Whether work is queued for the lane.
    fn has_work(&self) -> bool {
        !self.jobs.is_empty() || !self.posts.is_empty()
    }
}

/// The running data plane of the process.
pub struct Core {
    /// One per lane (queue pair of every port), lane 0 first.
    lanes: Vec<LaneQueue>,
    /// The lane the next active QP goes to (round-robin).
    next_lane: AtomicUsize,
    /// STag indices of the regions registered on every lane (with several lanes).
    stags: LaneStagIndices,
    stop: AtomicBool,
    alive: AtomicBool,
    /// What each device is (name, addresses, MTU) as configured.
    devices: Vec<DeviceInfo>,
    /// The MAC each device's port really uses (a port without a configured MAC has its
    /// PMD's), set when the ports are up.
    macs: OnceLock<Vec<[u8; 6]>>,
    /// Each lane's counters, summed over the devices, taken when the stop came.
    final_counters: Mutex<Vec<LaneCounters>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("devices", &self.devices.len())
            .field("lanes", &self.lanes.len())
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
        let lanes = lanes_of(&cfg);
        let core = Arc::new(Core {
            lanes: (0..lanes).map(|_| LaneQueue::new()).collect(),
            next_lane: AtomicUsize::new(0),
            stags: LaneStagIndices::new(rand_seed()),
            stop: AtomicBool::new(false),
            alive: AtomicBool::new(true),
            devices,
            macs: OnceLock::new(),
            final_counters: Mutex::new(Vec::new()),
            thread: Mutex::new(None),
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

    /// How many lanes run (the ports' queue count).
    pub fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// The lane for a new active QP: the lanes in turn.
    pub fn pick_lane(&self) -> usize {
        self.next_lane.fetch_add(1, Ordering::Relaxed) % self.lanes.len()
    }

    /// The STag indices of regions registered on every lane.
    pub fn lane_stags(&self) -> &LaneStagIndices {
        &self.stags
    }

    /// Runs `f` on lane 0's thread (device-wide work) and waits for its result.
    pub fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Bridge) -> R + Send + 'static,
    ) -> Result<R, i32> {
        self.call_on(0, f)
    }

    /// Runs `f` on every lane's thread in turn, lane 0 first; each lane's result.
    pub fn call_each<R: Send + 'static>(
        &self,
        f: impl Fn(&mut Bridge) -> R + Send + Sync + 'static,
    ) -> Result<Vec<R>, i32> {
        let f = Arc::new(f);
        (0..self.lanes.len())
            .map(|lane| {
                let f = Arc::clone(&f);
                self.call_on(lane, move |b| f(b))
            })
            .collect()
    }

    /// Runs `f` on the thread of lane `lane` (the lane owning the object `f` works on) and
    /// waits for its result; EINVAL for a lane that does not exist.
    pub fn call_on<R: Send + 'static>(
        &self,
        lane: usize,
        f: impl FnOnce(&mut Bridge) -> R + Send + 'static,
    ) -> Result<R, i32> {
        let q = self.lanes.get(lane).ok_or(libc::EINVAL)?;
        let reply = Arc::new(Reply {
            value: Mutex::new(None),
            ready: Condvar::new(),
        });
        let r = Arc::clone(&reply);
        q.jobs.push(Box::new(move |b: &mut Bridge| {
            let v = f(b);
            *r.value.lock().unwrap_or_else(|p| p.into_inner()) = Some(v);
            r.ready.notify_one();
        }));
        q.wake();
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

    /// Queues a work request on the ring of its QP's (or S-RQ's) lane and wakes that lane;
    /// `Err` (ENOMEM) when the ring is full.
    pub fn post(&self, p: Post) -> Result<(), i32> {
        let q = self.lanes.get(p.lane()).ok_or(libc::EINVAL)?;
        q.posts.push(p).map_err(|_| libc::ENOMEM)?;
        q.wake();
        Ok(())
    }

    /// Each lane's counters summed over the devices (connections established, accepted
    /// on a lane they do not hash to, resets sent, frames and FPDUs): live while the lanes
    /// run, else as they were when the stop came.
    pub fn lane_counters(&self) -> Vec<LaneCounters> {
        if self.is_alive() {
            if let Ok(c) = self.call_each(|b| b.counters()) {
                return c;
            }
        }
        self.final_counters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether the data-plane thread still runs.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Stops the lanes (at process exit) and waits for them: connections are reset, the
    /// ports stopped and the EAL released by lane 0's thread.
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

/// Waits as `wait` says: spins once, or parks unless work is queued for lane `q` (an
/// application thread that queues work unparks it at once).
fn idle(q: &LaneQueue, wait: Wait) {
    let Wait::Nap(nap) = wait else {
        std::hint::spin_loop();
        return;
    };
    q.parked.store(true, Ordering::Relaxed);
    std::sync::atomic::fence(Ordering::SeqCst);
    if !q.has_work() {
        std::thread::park_timeout(nap);
    }
    q.parked.store(false, Ordering::Relaxed);
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

/// The lanes of `cfg`: the ports' queue count (every port has the same, which opening
/// them checks).
fn lanes_of(cfg: &Config) -> usize {
    cfg.ports
        .iter()
        .map(|p| usize::from(p.queues.max(1)))
        .max()
        .unwrap_or(1)
}

/// A seed for the STag indices of regions on every lane.
fn rand_seed() -> u64 {
    let s = rand_secret();
    u64::from_le_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]])
}

/// Lane 0's thread: opens the ports (every queue pair when there are several lanes),
/// builds each lane's stacks, then runs lane 0 here and the others on EAL's worker lcores
/// (threads without EAL) until the process stops.
fn run(core: Arc<Core>, cfg: Config, ready: mpsc::Sender<Result<(), String>>) {
    let lanes = core.lanes.len();
    let opened = if lanes > 1 {
        OpenedPorts::open_lanes(&cfg, &OpenOptions::default(), &[])
    } else {
        OpenedPorts::open(&cfg, &OpenOptions::default(), &[])
    };
    let mut opened = match opened {
        Ok(o) => o,
        Err(e) => {
            core.alive.store(false, Ordering::Release);
            let _ = ready.send(Err(format!("cannot open the configured ports: {e}")));
            return;
        }
    };
    let mut lane_ports = vec![std::mem::take(&mut opened.ports)];
    lane_ports.append(&mut opened.lanes);
    let mut bridges = Vec::new();
    let mut macs = Vec::new();
    // Each port's lanes share what they learn about neighbours (an RSS NIC delivers every
    // ARP reply and neighbour advertisement to queue 0).
    let mut shares: Vec<_> = cfg
        .ports
        .iter()
        .map(|_| neighbour_shares(lanes).into_iter())
        .collect();
    for (lane, ports) in lane_ports.into_iter().enumerate() {
        match lane_stacks(&cfg, lane, lanes, ports, &mut shares) {
            Ok((stacks, m)) => {
                if lane == 0 {
                    macs = m;
                }
                bridges.push(Bridge::new(stacks, lane, lanes));
            }
            Err(e) => {
                core.alive.store(false, Ordering::Release);
                let _ = ready.send(Err(e));
                return;
            }
        }
    }
    let _ = core.macs.set(macs);
    let _ = ready.send(Ok(()));
    log::info!(
        "data plane up: {} device(s), {lanes} lane(s), lane 0 on {}",
        core.devices.len(),
        std::thread::current().name().unwrap_or("?")
    );
    let counters = if lanes == 1 {
        let bridge = bridges.pop().map(|b| serve(&core, 0, b));
        bridge.into_iter().collect()
    } else {
        let jobs: Vec<LaneJob<'_, LaneCounters>> = bridges
            .into_iter()
            .enumerate()
            .map(|(lane, b)| {
                let core = Arc::clone(&core);
                Box::new(move || serve(&core, lane, b)) as LaneJob<'_, LaneCounters>
            })
            .collect();
        match opened.run_lanes(jobs) {
            Ok((counters, places)) => {
                for (lane, (c, place)) in counters.iter().zip(&places).enumerate() {
                    log::info!("lane-{lane} ({place}): {}", c.line());
                }
                counters
            }
            Err(e) => {
                log::error!("the lanes stopped: {e}");
                Vec::new()
            }
        }
    };
    *core
        .final_counters
        .lock()
        .unwrap_or_else(|p| p.into_inner()) = counters;
    core.alive.store(false, Ordering::Release);
    drop(opened);
}

/// One lane's stacks (one per device) and the MACs of their ports.
type LaneStacks = (Vec<RdmaStack<AnyPort>>, Vec<[u8; 6]>);

/// The stacks of lane `lane` (of `lanes`) over its queue of each port (`ports`, in
/// configuration order), and the ports' MACs.
fn lane_stacks(
    cfg: &Config,
    lane: usize,
    lanes: usize,
    ports: Vec<AnyPort>,
    shares: &mut [impl Iterator<Item = dataplane::neighbour::NeighbourShare>],
) -> Result<LaneStacks, String> {
    let attrs = device_attributes();
    let mut stacks = Vec::new();
    let mut macs = Vec::new();
    for (i, ((port, pc), share)) in ports
        .into_iter()
        .zip(cfg.ports.iter())
        .zip(shares.iter_mut())
        .enumerate()
    {
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
        let seed = 0x5eed_0000 + i as u64 + ((lane as u64) << 16);
        let mut rnic: Rnic = device
            .open(AddressingMode::Page, Box::new(AppMemory::new()), seed)
            .map_err(|e| format!("RNIC {}: {e}", pc.name()))?;
        if lanes > 1 {
            // Regions are registered on every lane under one STag index of the shared
            // range ([`Core::lane_stags`]).
            rnic.reserve_lane_stags();
        }
        macs.push(port.info().mac);
        if lane == 0 {
            log::info!("port {}: offloads {}", pc.name(), port.offloads().summary);
        }
        let mut s =
            RdmaStack::with_rnic(port, PortAddr::of(pc), scfg, rnic, MemoryKind::Application)
                .map_err(|e| format!("port {}: {e}", pc.name()))?;
        if lanes > 1 {
            s.poll.handler_mut().set_lane(Lane {
                lane: lane as u16,
                lanes: lanes as u16,
            });
            if let Some(share) = share.next() {
                s.poll.share_neighbours(0, share);
            }
        }
        stacks.push(s);
    }
    Ok((stacks, macs))
}

/// Runs lane `lane` over `bridge` until the process stops: poll, run the lane's jobs and
/// posts, hand completions and events over, sleep when idle. Returns the lane's counters
/// when the stop came, before its connections are closed (segments of connections the
/// peer already closed are answered with resets then, which is not about steering).
fn serve(core: &Core, lane: usize, mut bridge: Bridge) -> LaneCounters {
    let q = &core.lanes[lane];
    let mut backoff = Backoff::new(clock::now(), idle_spin());
    let _ = q.waker.set(std::thread::current());
    // Sleeps of microseconds, not the default 50 µs timer slack.
    // SAFETY: prctl on the calling thread with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0) };
    let mut next_sync = clock::now();
    while !core.stop.load(Ordering::Acquire) {
        let now = clock::now();
        let frames = bridge.poll(now);
        let mut busy = frames > 0;
        while let Some(job) = q.jobs.pop() {
            job(&mut bridge);
            busy = true;
        }
        while let Some(p) = q.posts.pop() {
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
        bridge.publish_if_asked();
        backoff.record(now, frames, busy);
        if !busy {
            idle(q, backoff.wait(now));
        }
    }
    let counters = bridge.counters();
    bridge.shutdown();
    counters
}
