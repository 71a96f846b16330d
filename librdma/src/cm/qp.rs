//! QPs and S-RQs on ids: `rdma_create_qp` creates the QP on the id's device (with CQs and
//! completion channels of its own when the application gives none, `cq_context` = the id),
//! in INIT as librdmacm leaves it; the connection manager takes it to RTS.

use std::os::raw::c_int;

use crate::abi::*;
use crate::cm::objects::id_mut;
use crate::entry::status_call;
use crate::shared::last_errno;
use crate::verbs::cq::{
    ibv_create_comp_channel, ibv_create_cq, ibv_destroy_comp_channel, ibv_destroy_cq,
};
use crate::verbs::objects::obj;
use crate::verbs::objects::Pd;
use crate::verbs::qp::{create_qp_on, ibv_destroy_qp, qp_obj, set_state};
use crate::verbs::srq::{ibv_create_srq, ibv_destroy_srq};

crate::symver::symver! {
    "RDMACM_1.0": rdma_create_qp, rdma_create_qp_ex, rdma_destroy_qp, rdma_create_srq, rdma_create_srq_ex, rdma_destroy_srq;
}

/// A channel and a CQ of `cqe` entries on `ctx` for `id`.
///
/// # Safety
/// `ctx` must be a live context of ours.
unsafe fn own_cq(
    ctx: *mut ibv_context,
    cqe: u32,
    id: *mut rdma_cm_id,
) -> Result<(*mut ibv_comp_channel, *mut ibv_cq), i32> {
    // SAFETY: by the contract.
    let ch = unsafe { ibv_create_comp_channel(ctx) };
    if ch.is_null() {
        return Err(last_errno());
    }
    // SAFETY: as above; `ch` was just made.
    let cq = unsafe { ibv_create_cq(ctx, cqe.max(1) as c_int, id.cast(), ch, 0) };
    if cq.is_null() {
        let e = last_errno();
        // SAFETY: `ch` was just made and has no CQ.
        unsafe { ibv_destroy_comp_channel(ch) };
        return Err(e);
    }
    Ok((ch, cq))
}

/// Destroys the CQs and channels `rdma_create_qp` made for `id`.
fn drop_own_cqs(id: &mut rdma_cm_id) {
    for (cq, ch) in [
        (&mut id.send_cq, &mut id.send_cq_channel),
        (&mut id.recv_cq, &mut id.recv_cq_channel),
    ] {
        if !cq.is_null() {
            // SAFETY: a CQ this library made for the id.
            unsafe { ibv_destroy_cq(*cq) };
            *cq = std::ptr::null_mut();
        }
        if !ch.is_null() {
            // SAFETY: its channel.
            unsafe { ibv_destroy_comp_channel(*ch) };
            *ch = std::ptr::null_mut();
        }
    }
}

/// `rdma_create_qp`: `pd` NULL means the id's (its device's default PD). The granted
/// capabilities are written back to `attr`.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    status_call("rdma_create_qp", || {
        // SAFETY: the caller passes a readable, writable attr (NULL refused).
        let a = unsafe { attr.as_mut() }.ok_or(libc::EINVAL)?;
        // SAFETY: by the caller's contract.
        unsafe { create_qp(id, pd, a) }
    })
}

/// What `rdma_create_qp` and `rdma_create_qp_ex` do.
///
/// # Safety
/// `id` must be NULL or a live id of ours, `pd` NULL or a live PD of ours, and the CQs
/// and S-RQ of `a` NULL or live ones of ours.
unsafe fn create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    a: &mut ibv_qp_init_attr,
) -> Result<(), i32> {
    // SAFETY: by the contract.
    let i = unsafe { id_mut(id) }?;
    // The id's port space decides the QP type (rdma_server leaves it 0).
    if a.qp_type == 0 {
        a.qp_type = i.id.qp_type;
    }
    let pd = if pd.is_null() { i.id.pd } else { pd };
    // SAFETY: NULL or a live PD of ours.
    let p = unsafe { obj::<ibv_pd, Pd>(pd) }.ok_or(libc::EINVAL)?;
    if !i.id.qp.is_null() || i.id.verbs.is_null() || p.pd.context != i.id.verbs {
        return Err(libc::EINVAL);
    }
    let mut made = false;
    if a.send_cq.is_null() {
        // SAFETY: the id's context is a live context of ours.
        let (ch, cq) = unsafe { own_cq(i.id.verbs, a.cap.max_send_wr, id) }?;
        i.id.send_cq_channel = ch;
        i.id.send_cq = cq;
        a.send_cq = cq;
        made = true;
    }
    if a.recv_cq.is_null() {
        // SAFETY: as above.
        match unsafe { own_cq(i.id.verbs, a.cap.max_recv_wr, id) } {
            Ok((ch, cq)) => {
                i.id.recv_cq_channel = ch;
                i.id.recv_cq = cq;
                a.recv_cq = cq;
                made = true;
            }
            Err(e) => {
                drop_own_cqs(&mut i.id);
                return Err(e);
            }
        }
    }
    // A request's id has its connection on the lane the request came in on: its QP goes
    // there. An active id's QP goes to the next lane, and its connection follows it.
    let lane = {
        let st = i.state();
        st.conn.map(|_| st.lane)
    };
    // SAFETY: a live PD and a filled init attr.
    let qp = unsafe { create_qp_on(pd, a, lane) };
    if qp.is_null() {
        let e = last_errno();
        drop_own_cqs(&mut i.id);
        return Err(e);
    }
    // SAFETY: the QP just made.
    unsafe {
        set_state(qp_obj(qp)?, IBV_QPS_INIT)?;
        (*qp).state = IBV_QPS_INIT;
    }
    i.id.qp = qp;
    i.id.pd = pd;
    i.state().own_cqs = made;
    Ok(())
}

/// `rdma_create_qp_ex`: the extended attributes this device can honour are those of
/// `ibv_qp_init_attr` with a PD (`comp_mask` = `IBV_QP_INIT_ATTR_PD`); others are
/// EOPNOTSUPP.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    status_call("rdma_create_qp_ex", || {
        // SAFETY: by the caller's contract, a readable, writable attr (NULL refused).
        let a = unsafe { attr.as_mut() }.ok_or(libc::EINVAL)?;
        if a.comp_mask & !IBV_QP_INIT_ATTR_PD != 0 || a.create_flags != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let mut basic = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        // SAFETY: as the caller's contract.
        unsafe { create_qp(id, a.pd, &mut basic) }?;
        a.cap = basic.cap;
        a.send_cq = basic.send_cq;
        a.recv_cq = basic.recv_cq;
        Ok(())
    })
}

/// `rdma_destroy_qp`: destroys the id's QP and the CQs made for it.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    let _ = status_call("rdma_destroy_qp", || {
        // SAFETY: by the caller's contract.
        let i = unsafe { id_mut(id) }?;
        if !i.id.qp.is_null() {
            // SAFETY: the id's QP, live until here.
            unsafe { ibv_destroy_qp(i.id.qp) };
            i.id.qp = std::ptr::null_mut();
        }
        let own = std::mem::take(&mut i.state().own_cqs);
        if own {
            drop_own_cqs(&mut i.id);
        }
        Ok(())
    });
}

/// `rdma_create_srq`: an S-RQ on the id's device (`pd` NULL: the id's).
#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    // SAFETY: by the caller's contract.
    status_call("rdma_create_srq", || unsafe { create_srq(id, pd, attr) })
}

/// What `rdma_create_srq` and `rdma_create_srq_ex` do.
///
/// # Safety
/// `id` must be NULL or a live id of ours, `pd` NULL or a live PD of ours, and `attr`
/// NULL or readable and writable.
unsafe fn create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> Result<(), i32> {
    // SAFETY: by the contract.
    let i = unsafe { id_mut(id) }?;
    let pd = if pd.is_null() { i.id.pd } else { pd };
    // SAFETY: a PD of ours (or NULL, refused by ibv_create_srq) and the caller's attr.
    let srq = unsafe { ibv_create_srq(pd, attr) };
    if srq.is_null() {
        return Err(last_errno());
    }
    i.id.srq = srq;
    Ok(())
}

/// `rdma_create_srq_ex`: basic S-RQs (`IBV_SRQ_INIT_ATTR_PD`, type basic) only.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_srq_init_attr_ex,
) -> c_int {
    status_call("rdma_create_srq_ex", || {
        // SAFETY: by the caller's contract, a readable, writable attr (NULL refused).
        let a = unsafe { attr.as_mut() }.ok_or(libc::EINVAL)?;
        let allowed = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE;
        if a.comp_mask & !allowed != 0
            || (a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 && a.srq_type != IBV_SRQT_BASIC)
        {
            return Err(libc::EOPNOTSUPP);
        }
        let mut basic = ibv_srq_init_attr {
            srq_context: a.srq_context,
            attr: a.attr,
        };
        let pd = if a.comp_mask & IBV_SRQ_INIT_ATTR_PD != 0 {
            a.pd
        } else {
            std::ptr::null_mut()
        };
        // SAFETY: as the caller's contract; `basic` is a live local.
        unsafe { create_srq(id, pd, &mut basic) }?;
        a.attr = basic.attr;
        Ok(())
    })
}

/// `rdma_destroy_srq`.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
    let _ = status_call("rdma_destroy_srq", || {
        // SAFETY: by the caller's contract.
        let i = unsafe { id_mut(id) }?;
        if !i.id.srq.is_null() {
            // SAFETY: the id's S-RQ.
            unsafe { ibv_destroy_srq(i.id.srq) };
            i.id.srq = std::ptr::null_mut();
        }
        Ok(())
    });
}
