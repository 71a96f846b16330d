//! Shared receive queues.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::abi::*;
use crate::bridge::Post;
use crate::convert::{self, errno_of};
use crate::entry::{errno_call, post_list, ptr_call};
use crate::shared::verbs::SrqShared;
use crate::verbs::memory::{pd_core, pd_obj};
use crate::verbs::objects::{context, obj, publish, reclaim, Srq};

crate::symver::symver! {
    "IBVERBS_1.1": ibv_create_srq, ibv_modify_srq, ibv_query_srq, ibv_destroy_srq;
}

/// The S-RQ object behind `srq`.
///
/// # Safety
/// `srq` must be NULL or an S-RQ this library returned and the application has not
/// destroyed.
unsafe fn srq_obj<'a>(srq: *mut ibv_srq) -> Result<&'a Srq, i32> {
    // SAFETY: by the contract.
    unsafe { obj::<ibv_srq, Srq>(srq) }.ok_or(libc::EINVAL)
}

/// `ibv_create_srq`: `attr.max_wr` is updated to what was granted. The S-RQ lives on one
/// lane (the lanes in turn), and so do the QPs that use it.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    ptr_call("ibv_create_srq", || {
        // SAFETY: by the caller's contract.
        let p = unsafe { pd_obj(pd) }?;
        // SAFETY: the caller passes a readable, writable init attr (NULL refused).
        let a = unsafe { attr.as_mut() }.ok_or(libc::EINVAL)?;
        // SAFETY: a live PD's context is a live context of ours.
        let core = unsafe { pd_core(p) }?;
        let lane = core.pick_lane();
        let (dev, pd_id) = (p.dev, p.id(lane));
        let (max_wr, max_sge, limit) = (a.attr.max_wr, a.attr.max_sge, a.attr.srq_limit);
        // SAFETY: as above.
        let asyncs = Arc::clone(&unsafe { context(p.pd.context) }?.asyncs);
        let (shared, granted) = core.call_on(lane, move |b| {
            let (handle, granted) = b
                .rnic(dev)?
                .create_srq(pd_id, max_wr, max_sge.max(1), limit)
                .map_err(errno_of)?;
            let s = Arc::new(SrqShared {
                dev,
                lane,
                handle,
                c_srq: AtomicUsize::new(0),
            });
            b.add_srq(Arc::clone(&s), asyncs);
            Ok::<_, i32>((s, granted))
        })??;
        a.attr.max_wr = granted;
        p.users.fetch_add(1, Ordering::AcqRel);
        let ptr = publish(Srq {
            srq: ibv_srq {
                context: p.pd.context,
                srq_context: a.srq_context,
                pd,
                handle: shared.handle.0,
                ..Default::default()
            },
            shared: Arc::clone(&shared),
            max_wr: granted,
            max_sge: max_sge.max(1),
            limit: AtomicU32::new(limit),
        });
        shared.c_srq.store(ptr as usize, Ordering::Release);
        Ok(ptr)
    })
}

/// The data plane of an S-RQ.
fn core_of(s: &Srq) -> Result<Arc<crate::core::Core>, i32> {
    // SAFETY: a live S-RQ's context is a live context of ours.
    unsafe { context(s.srq.context) }.map(|c| Arc::clone(&c.core))
}

/// `ibv_modify_srq`: the limit (arming the limit event) and the size.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    errno_call("ibv_modify_srq", || {
        // SAFETY: by the caller's contract.
        let s = unsafe { srq_obj(srq) }?;
        // SAFETY: the caller passes a readable attr (NULL refused).
        let a = unsafe { attr.as_ref() }.ok_or(libc::EINVAL)?;
        let mask = mask as u32;
        let max_wr = (mask & IBV_SRQ_MAX_WR != 0).then_some(a.max_wr);
        let limit = (mask & IBV_SRQ_LIMIT != 0).then_some(a.srq_limit);
        let (dev, handle, lane) = (s.shared.dev, s.shared.handle, s.shared.lane);
        core_of(s)?.call_on(lane, move |b| {
            b.rnic(dev)?
                .modify_srq(handle, max_wr, limit, limit.is_some_and(|l| l > 0))
                .map_err(errno_of)
        })??;
        if let Some(l) = limit {
            s.limit.store(l, Ordering::Release);
        }
        Ok(())
    })
}

/// `ibv_query_srq`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    errno_call("ibv_query_srq", || {
        // SAFETY: by the caller's contract.
        let s = unsafe { srq_obj(srq) }?;
        let (dev, handle, lane) = (s.shared.dev, s.shared.handle, s.shared.lane);
        let q = core_of(s)?.call_on(lane, move |b| {
            b.rnic(dev)?.query_srq(handle).map_err(errno_of)
        })??;
        // SAFETY: the caller passes a writable attr (NULL refused).
        let out = unsafe { attr.as_mut() }.ok_or(libc::EINVAL)?;
        *out = ibv_srq_attr {
            max_wr: q.max_wrs,
            max_sge: q.max_sges,
            srq_limit: q.limit,
        };
        Ok(())
    })
}

/// `ibv_destroy_srq`: EBUSY while QPs use it.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    errno_call("ibv_destroy_srq", || {
        // SAFETY: by the caller's contract.
        let s = unsafe { srq_obj(srq) }?;
        let shared = Arc::clone(&s.shared);
        core_of(s)?.call_on(shared.lane, move |b| b.destroy_srq(&shared))??;
        // SAFETY: the S-RQ's PD is live while the S-RQ is.
        if let Ok(p) = unsafe { pd_obj(s.srq.pd) } {
            p.users.fetch_sub(1, Ordering::AcqRel);
        }
        // SAFETY: published by `ibv_create_srq`; given up here.
        drop(unsafe { reclaim::<ibv_srq, Srq>(srq) });
        Ok(())
    })
}

/// The `post_srq_recv` operation.
pub unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    let start = || {
        // SAFETY: by the caller's contract.
        let s = unsafe { srq_obj(srq) }?;
        let core = core_of(s)?;
        Ok(move |w: &ibv_recv_wr| {
            // SAFETY: `w` and its SGEs are readable by the caller's contract.
            let rwr = unsafe { convert::recv_wr(w, s.max_sge) }?;
            core.post(Post::SrqRecv {
                srq: Arc::clone(&s.shared),
                wr: rwr,
            })
        })
    };
    // SAFETY: the caller's list and slot (ibv_post_srq_recv's contract).
    unsafe { post_list("ibv_post_srq_recv", wr, bad_wr, start) }
}
