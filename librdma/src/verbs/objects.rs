//! The objects applications hold: each starts with the rdma-core struct it is, so the
//! pointer an application gets (and hands back) is ours, followed by what the library keeps
//! for it. The parts the data-plane thread also uses are in [`crate::shared::verbs`].

use std::sync::atomic::{AtomicU32, AtomicUsize};
use std::sync::Arc;

use iwarp::verbs::{PdId, STag};

use crate::abi::*;
use crate::core::Core;
use crate::shared::verbs::{AsyncShared, ChannelShared, CqShared, QpShared, SrqShared};

/// A library object whose first field is the C struct `C`.
///
/// # Safety
/// Implementors must be `#[repr(C)]` with the `C` struct as their first field.
pub unsafe trait CObject<C> {}

/// The library object behind the C pointer `p`; `None` for NULL.
///
/// # Safety
/// `p` must be NULL or a pointer this library returned for an object of type `T` that the
/// application has not destroyed.
pub unsafe fn obj<'a, C, T: CObject<C>>(p: *mut C) -> Option<&'a T> {
    // SAFETY: by the contract and `CObject`, `p` points at the first field of a live `T`.
    unsafe { p.cast::<T>().as_ref() }
}

/// Moves `value` to the heap for the application; the C pointer to it.
pub fn publish<C, T: CObject<C>>(value: T) -> *mut C {
    Box::into_raw(Box::new(value)).cast::<C>()
}

/// Takes back an object [`publish`] handed out.
///
/// # Safety
/// `p` must come from [`publish`] for a `T`, and no other reference to it may be used
/// afterwards.
pub unsafe fn reclaim<C, T: CObject<C>>(p: *mut C) -> Box<T> {
    // SAFETY: by the contract, `p` is the pointer `Box::into_raw` produced for a `T`.
    unsafe { Box::from_raw(p.cast::<T>()) }
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
// SAFETY: repr(C), `ibv_context` first.
unsafe impl CObject<ibv_context> for Context {}

/// `struct ibv_pd`: a PD on every lane's RNIC (the QPs of any lane and the regions of
/// every lane are in it).
#[repr(C)]
pub struct Pd {
    /// What applications use.
    pub pd: ibv_pd,
    /// Device index.
    pub dev: usize,
    /// The RNIC's PD on each lane, lane 0 first.
    pub ids: Vec<PdId>,
    /// QPs, S-RQs and regions in the PD (on lanes a PD is deallocated only when none is:
    /// no lane may lose its copy while another refuses).
    pub users: AtomicUsize,
}
// SAFETY: repr(C), `ibv_pd` first.
unsafe impl CObject<ibv_pd> for Pd {}

impl Pd {
    /// The RNIC's PD on lane `lane`.
    pub fn id(&self, lane: usize) -> PdId {
        self.ids[lane]
    }
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
// SAFETY: repr(C), `ibv_mr` first.
unsafe impl CObject<ibv_mr> for Mr {}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub struct Channel {
    /// What applications use.
    pub ch: ibv_comp_channel,
    /// Shared with the CQs on it.
    pub shared: Arc<ChannelShared>,
    /// CQs on it (destroying the channel is refused while any is).
    pub cqs: AtomicU32,
}
// SAFETY: repr(C), `ibv_comp_channel` first.
unsafe impl CObject<ibv_comp_channel> for Channel {}

/// `struct ibv_cq`.
#[repr(C)]
pub struct Cq {
    /// What applications use.
    pub cq: ibv_cq,
    /// Shared with the data plane.
    pub shared: Arc<CqShared>,
}
// SAFETY: repr(C), `ibv_cq` first.
unsafe impl CObject<ibv_cq> for Cq {}

/// `struct ibv_qp`.
#[repr(C)]
pub struct Qp {
    /// What applications use.
    pub qp: ibv_qp,
    /// Shared with the data plane.
    pub shared: Arc<QpShared>,
}
// SAFETY: repr(C), `ibv_qp` first.
unsafe impl CObject<ibv_qp> for Qp {}

/// `struct ibv_srq`.
#[repr(C)]
pub struct Srq {
    /// What applications use.
    pub srq: ibv_srq,
    /// Shared with the data plane.
    pub shared: Arc<SrqShared>,
    /// Max WRs.
    pub max_wr: u32,
    /// Max SGEs per WR.
    pub max_sge: u32,
    /// The limit (`srq_limit`) last set.
    pub limit: AtomicU32,
}
// SAFETY: repr(C), `ibv_srq` first.
unsafe impl CObject<ibv_srq> for Srq {}

/// The context object of any verbs object's `context` field.
///
/// # Safety
/// `ctx` must be NULL or a context this library returned and the application has not closed.
pub unsafe fn context<'a>(ctx: *mut ibv_context) -> Result<&'a Context, i32> {
    // SAFETY: by the contract.
    unsafe { obj::<ibv_context, Context>(ctx) }.ok_or(libc::EINVAL)
}
