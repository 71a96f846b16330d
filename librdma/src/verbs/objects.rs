//! The objects applications hold: each starts with the rdma-core struct it is (so the
//! pointer an application gets is ours), followed by what the library keeps for it. The
//! parts the data-plane thread also uses are shared behind an `Arc`: a CQ's ring of
//! completions and its notification flag, a QP's state and posting window, a channel's
//! event queue and file descriptor.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_queue::{ArrayQueue, SegQueue};
use iwarp::verbs::{CqHandle, PdId, QpId, STag, SrqHandle};

use crate::abi::*;
use crate::core::Core;

/// An eventfd in semaphore mode: one `read` takes one event, `poll(2)` and epoll see it.
#[derive(Debug)]
pub struct EventFd(pub RawFd);

impl EventFd {
    /// A new eventfd (close-on-exec).
    pub fn new() -> Result<EventFd, i32> {
        // SAFETY: plain syscall wrapper; the returned descriptor is owned by the EventFd.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EMFILE));
        }
        Ok(EventFd(fd))
    }

    /// Signals one event.
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own descriptor.
        unsafe { libc::write(self.0, (&one as *const u64).cast(), 8) };
    }

    /// Takes one event, blocking unless the application made the descriptor non-blocking.
    /// No value with a destructor is alive across this call (a thread cancelled in the
    /// blocking `read` unwinds through it).
    pub fn wait(&self) -> Result<(), i32> {
        let mut v: u64 = 0;
        loop {
            // SAFETY: reads 8 bytes into a live u64 from our own descriptor.
            let n = unsafe { libc::read(self.0, (&mut v as *mut u64).cast(), 8) };
            if n == 8 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            if e != libc::EINTR {
                return Err(e);
            }
        }
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: closes the descriptor this EventFd owns, once.
        unsafe { libc::close(self.0) };
    }
}

/// A completion channel's shared part: the CQs whose notifications fired, in order, and the
/// descriptor that counts them.
#[derive(Debug)]
pub struct ChannelShared {
    /// The descriptor (`ibv_comp_channel::fd`).
    pub fd: EventFd,
    /// `ibv_cq` pointers, one per fired notification.
    pub fired: SegQueue<usize>,
}

impl ChannelShared {
    /// A notification of the CQ at `cq` (its `ibv_cq` pointer).
    pub fn notify(&self, cq: usize) {
        self.fired.push(cq);
        self.fd.signal();
    }
}

/// Notification requests of a CQ (`ibv_req_notify_cq`).
pub mod armed {
    /// Not armed.
    pub const NONE: u8 = 0;
    /// The next completion.
    pub const NEXT: u8 = 1;
    /// The next solicited (or failed) completion.
    pub const SOLICITED: u8 = 2;
}

/// A CQ's shared part.
#[derive(Debug)]
pub struct CqShared {
    /// Device index.
    pub dev: usize,
    /// The RNIC's CQ.
    pub handle: CqHandle,
    /// Completions the data plane moved out of the RNIC, ready for `ibv_poll_cq`.
    pub ring: ArrayQueue<ibv_wc_copy::Wc>,
    /// See [`armed`].
    pub armed: AtomicU8,
    /// The completion channel, if any.
    pub channel: Option<Arc<ChannelShared>>,
    /// The `ibv_cq` pointer (set once allocated).
    pub c_cq: AtomicUsize,
    /// Completions the RNIC's CQ could not hand over because the ring was full.
    pub overflow: AtomicU64,
}

/// `ibv_wc` holds a union and raw types; the ring keeps a plain copy.
pub mod ibv_wc_copy {
    use crate::abi::*;

    /// One completion as `ibv_poll_cq` writes it.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct Wc {
        /// `wr_id`.
        pub wr_id: u64,
        /// `status`.
        pub status: ibv_wc_status,
        /// `opcode`.
        pub opcode: ibv_wc_opcode,
        /// `byte_len`.
        pub byte_len: u32,
        /// `invalidated_rkey` / `imm_data`.
        pub ex: u32,
        /// `qp_num`.
        pub qp_num: u32,
        /// `wc_flags`.
        pub wc_flags: u32,
        /// A solicited receive (for armed-solicited notifications).
        pub solicited: bool,
    }

    impl Wc {
        /// Writes the C form.
        pub fn to_c(self) -> ibv_wc {
            let mut w = ibv_wc {
                wr_id: self.wr_id,
                status: self.status,
                opcode: self.opcode,
                byte_len: self.byte_len,
                qp_num: self.qp_num,
                wc_flags: self.wc_flags,
                ..Default::default()
            };
            w.__bindgen_anon_1.invalidated_rkey = self.ex;
            w
        }
    }
}

/// A QP's shared part.
#[derive(Debug)]
pub struct QpShared {
    /// Device index.
    pub dev: usize,
    /// The RNIC's QP.
    pub id: QpId,
    /// Its PD.
    pub pd: PdId,
    /// `ibv_qp_state` as applications see it.
    pub state: AtomicU32,
    /// Capabilities in force.
    pub cap: ibv_qp_cap,
    /// Every send WR completes (`sq_sig_all`).
    pub sig_all: bool,
    /// The send CQ.
    pub send_cq: Arc<CqShared>,
    /// The receive CQ.
    pub recv_cq: Arc<CqShared>,
    /// The S-RQ, if receives come from one.
    pub srq: Option<SrqHandle>,
    /// Send WRs posted by the application (its posting window is `max_send_wr`).
    pub sq_posted: AtomicU64,
    /// Send WRs retired (completed and polled, or done unsignaled, or refused).
    pub sq_retired: AtomicU64,
    /// Receive WRs posted.
    pub rq_posted: AtomicU64,
    /// Receive WRs retired.
    pub rq_retired: AtomicU64,
    /// The `ibv_qp` pointer (set once allocated).
    pub c_qp: AtomicUsize,
}

impl QpShared {
    /// The application's `ibv_qp_state`.
    pub fn state(&self) -> u32 {
        self.state.load(Ordering::Acquire)
    }
}

/// Async events of a context (`ibv_get_async_event`): `(element pointer or port, type)`.
#[derive(Debug)]
pub struct AsyncShared {
    /// The descriptor (`ibv_context::async_fd`).
    pub fd: EventFd,
    /// Pending events.
    pub events: SegQueue<(usize, ibv_event_type)>,
}

/// `struct ibv_context` and the device it is open on.
#[repr(C)]
pub struct Context {
    /// What applications use.
    pub ctx: ibv_context,
    /// Device index.
    pub dev: usize,
    /// The data plane.
    pub core: Arc<Core>,
    /// Async events.
    pub asyncs: Arc<AsyncShared>,
}

/// `struct ibv_pd`.
#[repr(C)]
pub struct Pd {
    /// What applications use.
    pub pd: ibv_pd,
    /// Device index.
    pub dev: usize,
    /// The RNIC's PD.
    pub id: PdId,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct Mr {
    /// What applications use.
    pub mr: ibv_mr,
    /// Device index.
    pub dev: usize,
    /// The STag (lkey and rkey).
    pub stag: STag,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub struct Channel {
    /// What applications use.
    pub ch: ibv_comp_channel,
    /// Shared with the CQs on it.
    pub shared: Arc<ChannelShared>,
    /// CQs attached (destroying the channel is refused while any is).
    pub cqs: AtomicU32,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct Cq {
    /// What applications use.
    pub cq: ibv_cq,
    /// Shared with the data plane.
    pub shared: Arc<CqShared>,
    /// The channel object, if any.
    pub channel: *mut Channel,
}

/// `struct ibv_qp`.
#[repr(C)]
pub struct Qp {
    /// What applications use.
    pub qp: ibv_qp,
    /// Shared with the data plane.
    pub shared: Arc<QpShared>,
}

/// `struct ibv_srq`.
#[repr(C)]
pub struct Srq {
    /// What applications use.
    pub srq: ibv_srq,
    /// Device index.
    pub dev: usize,
    /// The RNIC's S-RQ.
    pub handle: SrqHandle,
    /// Max WRs and SGEs.
    pub max_wr: u32,
    /// Max SGEs per WR.
    pub max_sge: u32,
}

/// The context object behind `ctx`.
///
/// # Safety
/// `ctx` must be a context this library returned and the application has not closed.
pub unsafe fn context<'a>(ctx: *mut ibv_context) -> Option<&'a Context> {
    // SAFETY: by the contract, `ctx` is the first field of a live `Context`.
    unsafe { ctx.cast::<Context>().as_ref() }
}
