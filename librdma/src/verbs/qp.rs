//! Queue pairs: creation on the RNIC, the state applications see (`ibv_qp_state`, kept by
//! the library while the RNIC's QP is Idle, and following the RNIC's once a connection
//! drives it), and the posting calls, which convert a work request on the calling thread and
//! queue it to the data plane.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use iwarp::verbs::{ModifyQp, QpInit, QpState};

use crate::abi::*;
use crate::bridge::Post;
use crate::convert::{self, errno_of};
use crate::device::{device_attributes, MAX_INLINE, MAX_RD_ATOM};
use crate::entry::{errno_call, post_list, ptr_call};
use crate::runtime::runtime;
use crate::shared::verbs::{qp_num, QpShared};
use crate::verbs::cq::cq_obj;
use crate::verbs::memory::{pd_core, pd_obj};
use crate::verbs::objects::{context, obj, publish, reclaim, Qp, Srq};

crate::symver::symver! {
    "IBVERBS_1.1": ibv_create_qp, ibv_modify_qp, ibv_query_qp, ibv_destroy_qp;
    "IBVERBS_1.6": ibv_qp_to_qp_ex;
}

/// The QP object behind `qp`.
///
/// # Safety
/// `qp` must be NULL or a QP this library returned and the application has not destroyed.
pub unsafe fn qp_obj<'a>(qp: *mut ibv_qp) -> Result<&'a Qp, i32> {
    // SAFETY: by the contract.
    unsafe { obj::<ibv_qp, Qp>(qp) }.ok_or(libc::EINVAL)
}

/// Checks requested capabilities against the device's.
fn check_cap(cap: &ibv_qp_cap, srq: bool) -> Result<(), i32> {
    let a = device_attributes();
    let too_deep =
        cap.max_send_wr > a.max_wrs_per_wq || (!srq && cap.max_recv_wr > a.max_wrs_per_wq);
    let too_wide =
        cap.max_send_sge > a.max_send_recv_sges || cap.max_recv_sge > a.max_send_recv_sges;
    if too_deep || too_wide || cap.max_inline_data > MAX_INLINE {
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// `ibv_create_qp`: an RC QP (iWARP has no other type) in RESET, on the lanes in turn (on
/// its S-RQ's lane if it has one). The capabilities granted are written back to `attr.cap`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    // SAFETY: the caller's contract is `create_qp_on`'s.
    unsafe { create_qp_on(pd, attr, None) }
}

/// What `ibv_create_qp` does, the QP on lane `lane` (`None`: its S-RQ's, else the next in
/// turn). A QP whose S-RQ is on another lane than `lane` is EINVAL: an S-RQ and the QPs
/// using it live on one lane.
///
/// # Safety
/// As `ibv_create_qp`'s contract.
pub unsafe fn create_qp_on(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
    lane: Option<usize>,
) -> *mut ibv_qp {
    ptr_call("ibv_create_qp", || {
        // SAFETY: by the caller's contract.
        let p = unsafe { pd_obj(pd) }?;
        // SAFETY: the caller passes a readable and writable init attr (NULL refused).
        let a = unsafe { attr.as_mut() }.ok_or(libc::EINVAL)?;
        if a.qp_type != IBV_QPT_RC {
            return Err(libc::EOPNOTSUPP);
        }
        // SAFETY: the CQs are live CQs of ours (NULL refused).
        let (scq, rcq) = unsafe { (cq_obj(a.send_cq)?, cq_obj(a.recv_cq)?) };
        // SAFETY: NULL or a live S-RQ of ours.
        let srq = unsafe { obj::<ibv_srq, Srq>(a.srq) };
        check_cap(&a.cap, srq.is_some())?;
        if scq.shared.dev != p.dev
            || rcq.shared.dev != p.dev
            || srq.is_some_and(|s| s.shared.dev != p.dev)
        {
            return Err(libc::EINVAL);
        }
        // SAFETY: a live PD's context is a live context of ours.
        let core = unsafe { pd_core(p) }?;
        let lane = match (lane, srq.map(|s| s.shared.lane)) {
            (Some(l), Some(s)) if l != s => {
                log::warn!(
                    "ibv_create_qp: the connection is on lane {l}, its S-RQ on lane {s}: \
                     an S-RQ serves the QPs of its own lane only"
                );
                return Err(libc::EINVAL);
            }
            (Some(l), _) | (None, Some(l)) => l,
            (None, None) => core.pick_lane(),
        };
        let lanes = core.lanes();
        // Inline data up to the device's limit whatever was asked, as Linux siw grants (its
        // provider checks an inline WR against that limit alone, and `ibv_query_qp` reports
        // it): librdmacm's `rdma_xclient` posts an inline Send on a QP created with
        // `max_inline_data` 0. The grant goes back in `attr.cap` once the QP exists (the
        // verbs allow at least what was asked).
        let cap = ibv_qp_cap {
            max_inline_data: MAX_INLINE,
            ..a.cap
        };
        let init = QpInit {
            srq: srq.map(|s| s.shared.handle),
            sq_depth: cap.max_send_wr.max(1),
            rq_depth: cap.max_recv_wr.max(1),
            send_sges: cap.max_send_sge.max(1),
            write_sges: cap.max_send_sge.max(1),
            recv_sges: cap.max_recv_sge.max(1),
            ird: MAX_RD_ATOM,
            ord: MAX_RD_ATOM,
            inbound_read: true,
            inbound_write: true,
            inbound_atomic: true,
            bind_enabled: false,
            ..QpInit::new(p.id(lane), scq.shared.handle(lane), rcq.shared.handle(lane))
        };
        // SAFETY: a live PD's context is a live context of ours.
        let asyncs = Arc::clone(&unsafe { context(p.pd.context) }?.asyncs);
        let (dev, pd_id) = (p.dev, p.id(lane));
        let (send_cq, recv_cq) = (Arc::clone(&scq.shared), Arc::clone(&rcq.shared));
        let srq_handle = init.srq;
        let sig_all = a.sq_sig_all != 0;
        let shared = core.call_on(lane, move |b| {
            let (id, _) = b.rnic(dev)?.create_qp(init).map_err(errno_of)?;
            let s = Arc::new(QpShared {
                dev,
                lane,
                id,
                num: qp_num(id, lane, lanes),
                pd: pd_id,
                state: AtomicU32::new(IBV_QPS_RESET),
                cap,
                sig_all,
                send_cq,
                recv_cq,
                srq: srq_handle,
                sq_posted: AtomicU64::new(0),
                sq_retired: AtomicU64::new(0),
                rq_posted: AtomicU64::new(0),
                rq_retired: AtomicU64::new(0),
                c_qp: AtomicUsize::new(0),
            });
            b.add_qp(Arc::clone(&s), asyncs);
            Ok::<_, i32>(s)
        })??;
        a.cap = cap;
        p.users.fetch_add(1, Ordering::AcqRel);
        shared.send_cq.users.fetch_add(1, Ordering::AcqRel);
        shared.recv_cq.users.fetch_add(1, Ordering::AcqRel);
        let p_qp = publish(Qp {
            qp: ibv_qp {
                context: p.pd.context,
                qp_context: a.qp_context,
                pd,
                send_cq: a.send_cq,
                recv_cq: a.recv_cq,
                srq: a.srq,
                handle: shared.num,
                qp_num: shared.num,
                state: IBV_QPS_RESET,
                qp_type: IBV_QPT_RC,
                ..Default::default()
            },
            shared: Arc::clone(&shared),
        });
        shared.c_qp.store(p_qp as usize, Ordering::Release);
        Ok(p_qp)
    })
}

/// Moves `qp` to `state` as the application asks. While no connection drives the RNIC's
/// QP, the IB states RESET, INIT, RTR and RTS are the library's record (the connection
/// manager takes the QP to RTS); ERR moves the RNIC's QP to Error, flushing what is posted
/// and resetting its connection, and RESET after ERR returns it to Idle. SQD and SQE are
/// recorded (rdma_cm's iWARP disconnect asks for SQD before it disconnects).
///
/// # Safety
/// `q` must be a live QP of ours.
pub unsafe fn set_state(q: &Qp, state: ibv_qp_state) -> Result<(), i32> {
    let s = &q.shared;
    let cur = s.state();
    if state > IBV_QPS_ERR {
        return Err(libc::EINVAL);
    }
    let (dev, id, lane) = (s.dev, s.id, s.lane);
    // SAFETY: a live QP's context is a live context of ours.
    let core = Arc::clone(&unsafe { context(q.qp.context) }?.core);
    match state {
        IBV_QPS_ERR => core.call_on(lane, move |b| {
            if let Some(conn) = b.cm.conn_of(dev, id) {
                let _ = b.handler(dev)?.abort(conn);
            }
            let _ = b.rnic(dev)?.modify_qp(id, ModifyQp::to(QpState::Error));
            Ok::<(), i32>(())
        })??,
        IBV_QPS_RESET if cur != IBV_QPS_RESET => core.call_on(lane, move |b| {
            let rnic = b.rnic(dev)?;
            match rnic.query_qp(id).map_err(errno_of)?.state {
                QpState::Idle => Ok(()),
                QpState::Error => rnic
                    .modify_qp(id, ModifyQp::to(QpState::Idle))
                    .map(|_| ())
                    .map_err(errno_of),
                _ => Err(libc::EINVAL),
            }
        })??,
        _ => {}
    }
    s.state.store(state, Ordering::Release);
    Ok(())
}

/// `ibv_modify_qp`. Of the attributes only the state means something to an iWARP QP whose
/// connection the connection manager sets up; the others (paths, PSNs, timers, P_Keys) are
/// InfiniBand's and accepted without effect.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
) -> c_int {
    errno_call("ibv_modify_qp", || {
        // SAFETY: by the caller's contract.
        let q = unsafe { qp_obj(qp) }?;
        // SAFETY: the caller passes a readable attr (NULL refused).
        let a = unsafe { attr.as_ref() }.ok_or(libc::EINVAL)?;
        if attr_mask as u32 & IBV_QP_STATE != 0 {
            // SAFETY: `q` is live.
            unsafe { set_state(q, a.qp_state) }?;
            // SAFETY: our own object; applications read `qp->state`.
            unsafe { (*qp).state = a.qp_state };
        }
        Ok(())
    })
}

/// `ibv_query_qp`: the state, the capabilities and the creation attributes.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    errno_call("ibv_query_qp", || {
        // SAFETY: by the caller's contract.
        let q = unsafe { qp_obj(qp) }?;
        let s = &q.shared;
        let mtu = runtime()?
            .devices
            .get(s.dev)
            .map_or(IBV_MTU_1024, |d| d.ib_mtu());
        let state = s.state();
        // SAFETY: our own object.
        unsafe { (*qp).state = state };
        // SAFETY: the caller passes writable structs (NULL skipped).
        unsafe {
            if let Some(a) = attr.as_mut() {
                *a = ibv_qp_attr {
                    qp_state: state,
                    cur_qp_state: state,
                    path_mtu: mtu,
                    qp_access_flags: IBV_ACCESS_LOCAL_WRITE
                        | IBV_ACCESS_REMOTE_READ
                        | IBV_ACCESS_REMOTE_WRITE,
                    cap: s.cap,
                    max_rd_atomic: MAX_RD_ATOM as u8,
                    max_dest_rd_atomic: MAX_RD_ATOM as u8,
                    port_num: 1,
                    ..Default::default()
                };
            }
            if let Some(i) = init_attr.as_mut() {
                *i = ibv_qp_init_attr {
                    qp_context: q.qp.qp_context,
                    send_cq: q.qp.send_cq,
                    recv_cq: q.qp.recv_cq,
                    srq: q.qp.srq,
                    cap: s.cap,
                    qp_type: IBV_QPT_RC,
                    sq_sig_all: c_int::from(s.sig_all),
                };
            }
        }
        Ok(())
    })
}

/// `ibv_destroy_qp`: in any state. A connection it carries is released as Linux siw
/// releases the socket: what was already sent still arrives, then TCP closes gracefully.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    errno_call("ibv_destroy_qp", || {
        // SAFETY: by the caller's contract.
        let q = unsafe { qp_obj(qp) }?;
        // SAFETY: a live QP's context is a live context of ours.
        let core = Arc::clone(&unsafe { context(q.qp.context) }?.core);
        let s = Arc::clone(&q.shared);
        core.call_on(s.lane, move |b| b.destroy_qp(&s))??;
        q.shared.send_cq.users.fetch_sub(1, Ordering::AcqRel);
        q.shared.recv_cq.users.fetch_sub(1, Ordering::AcqRel);
        // SAFETY: the QP's PD is live while the QP is.
        if let Ok(p) = unsafe { pd_obj(q.qp.pd) } {
            p.users.fetch_sub(1, Ordering::AcqRel);
        }
        // SAFETY: published by `ibv_create_qp`; given up here.
        drop(unsafe { reclaim::<ibv_qp, Qp>(qp) });
        Ok(())
    })
}

/// `ibv_qp_to_qp_ex`: NULL, these QPs are not extended (the device's vendor id keeps
/// perftest on `ibv_post_send`).
#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(_qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    std::ptr::null_mut()
}

/// The `post_send` operation: each WR of the list is checked, converted (inline data copied
/// now) and queued to the data plane; the first one refused is `*bad_wr`.
pub unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    let start = || {
        // SAFETY: by the caller's contract.
        let q = unsafe { qp_obj(qp) }?;
        let s = &q.shared;
        if matches!(s.state(), IBV_QPS_RESET | IBV_QPS_INIT) {
            return Err(libc::EINVAL);
        }
        Ok(move |w: &ibv_send_wr| {
            // SAFETY: `w` and its SGEs (and inline payloads) are readable by the
            // caller's contract.
            let swr = unsafe {
                convert::send_wr(w, s.sig_all, s.cap.max_send_sge, s.cap.max_inline_data)
            }?;
            queue(
                q,
                true,
                Post::Send {
                    qp: Arc::clone(s),
                    wr: swr,
                },
            )
        })
    };
    // SAFETY: the caller's list and slot (ibv_post_send's contract).
    unsafe { post_list("ibv_post_send", wr, bad_wr, start) }
}

/// The `post_recv` operation: as `post_send`, for the receive queue.
pub unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    let start = || {
        // SAFETY: by the caller's contract.
        let q = unsafe { qp_obj(qp) }?;
        let s = &q.shared;
        if s.state() == IBV_QPS_RESET || s.srq.is_some() {
            return Err(libc::EINVAL);
        }
        Ok(move |w: &ibv_recv_wr| {
            // SAFETY: `w` and its SGEs are readable by the caller's contract.
            let rwr = unsafe { convert::recv_wr(w, s.cap.max_recv_sge) }?;
            queue(
                q,
                false,
                Post::Recv {
                    qp: Arc::clone(s),
                    wr: rwr,
                },
            )
        })
    };
    // SAFETY: the caller's list and slot (ibv_post_recv's contract).
    unsafe { post_list("ibv_post_recv", wr, bad_wr, start) }
}

/// Queues a converted WR of `q`'s send (`send`) or receive queue to the data plane, in a
/// slot of the queue's posting window (ENOMEM when the window is full).
fn queue(q: &Qp, send: bool, p: Post) -> Result<(), i32> {
    let s = &q.shared;
    if !s.claim(send) {
        return Err(libc::ENOMEM);
    }
    core_of(q)?.post(p).inspect_err(|_| s.unclaim(send))
}

/// The data plane a QP runs on.
fn core_of(q: &Qp) -> Result<&crate::core::Core, i32> {
    // SAFETY: a live QP's context is a live context of ours.
    unsafe { context(q.qp.context) }.map(|c| &*c.core)
}
