//! Connecting: `rdma_connect` (the MPA Request with the application's private data and
//! IRD/ORD), `rdma_accept` and `rdma_reject` of a request, `rdma_disconnect`; and the
//! calls that only mean something on InfiniBand (`rdma_establish`, `rdma_notify`) or tell
//! the application what the connection manager would set (`rdma_init_qp_attr`).

use std::os::raw::{c_int, c_void};
use std::sync::Arc;

use crate::abi::*;
use crate::cm::id::complete;
use crate::cm::objects::id_obj;
use crate::device::MAX_RD_ATOM;
use crate::entry::status_call;
use crate::runtime::runtime;
use crate::verbs::qp::{qp_obj, set_state};

crate::symver::symver! {
    "RDMACM_1.0": rdma_connect, rdma_accept, rdma_reject, rdma_disconnect, rdma_notify;
    "RDMACM_1.2": rdma_establish, rdma_init_qp_attr;
}

/// "Use the device's maximum" in `responder_resources` / `initiator_depth`.
const USE_MAX: u8 = 0xff;

/// The application's private data and IRD/ORD from a connection parameter block.
///
/// # Safety
/// `p` must be NULL or a readable `rdma_conn_param` whose private data is readable.
unsafe fn params(p: *const rdma_conn_param) -> Result<(Vec<u8>, u16, u16), i32> {
    // SAFETY: by the contract.
    let Some(p) = (unsafe { p.as_ref() }) else {
        return Ok((Vec::new(), MAX_RD_ATOM as u16, MAX_RD_ATOM as u16));
    };
    let depth = |v: u8| -> Result<u16, i32> {
        match v {
            USE_MAX => Ok(MAX_RD_ATOM as u16),
            v if u32::from(v) > MAX_RD_ATOM => Err(libc::EINVAL),
            v => Ok(u16::from(v)),
        }
    };
    let pdata = if p.private_data.is_null() || p.private_data_len == 0 {
        Vec::new()
    } else {
        // SAFETY: by the contract, `private_data_len` readable bytes.
        unsafe {
            std::slice::from_raw_parts(p.private_data.cast::<u8>(), usize::from(p.private_data_len))
        }
        .to_vec()
    };
    Ok((
        pdata,
        depth(p.responder_resources)?,
        depth(p.initiator_depth)?,
    ))
}

/// `rdma_connect`: sends the MPA Request from the id's QP; ESTABLISHED follows (or
/// REJECTED, UNREACHABLE, CONNECT_ERROR). The QP is in RTR until the connection is up.
#[no_mangle]
pub unsafe extern "C" fn rdma_connect(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    status_call("rdma_connect", || {
        // SAFETY: by the caller's contract.
        let i = unsafe { id_obj(id) }?;
        // SAFETY: NULL or the id's live QP.
        let q = unsafe { qp_obj(i.id.qp) }?;
        // SAFETY: by the caller's contract.
        let (pdata, ird, ord) = unsafe { params(param) }?;
        let (dev, local, remote) = {
            let st = i.state();
            (
                st.dev.ok_or(libc::EINVAL)?,
                st.local.ok_or(libc::EINVAL)?,
                st.remote.ok_or(libc::EINVAL)?,
            )
        };
        let (qp, shared) = (q.shared.id, Arc::clone(&i.shared));
        let conn = i.core.call(move |b| {
            let (cm, h) = b.cm_and_handler(dev)?;
            cm.connect(dev, h, local.ip(), remote, qp, &pdata, (ird, ord), &shared)
        })??;
        i.state().conn = Some((dev, conn));
        // SAFETY: the id's live QP.
        unsafe { set_state(q, IBV_QPS_RTR) }?;
        if i.state().sync {
            // SAFETY: `id` is live.
            unsafe { complete(id) }?;
        }
        Ok(())
    })
}

/// `rdma_accept`: answers the request of this id with its QP (the MPA Reply); the QP takes
/// work requests at once, and ESTABLISHED follows.
#[no_mangle]
pub unsafe extern "C" fn rdma_accept(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    status_call("rdma_accept", || {
        // SAFETY: by the caller's contract.
        let i = unsafe { id_obj(id) }?;
        // SAFETY: NULL or the id's live QP.
        let q = unsafe { qp_obj(i.id.qp) }?;
        // SAFETY: by the caller's contract.
        let (pdata, _, _) = unsafe { params(param) }?;
        let (dev, conn) = i.state().conn.ok_or(libc::EINVAL)?;
        let qp = q.shared.id;
        i.core.call(move |b| {
            let (cm, h) = b.cm_and_handler(dev)?;
            cm.accept(dev, h, conn, qp, &pdata)
        })??;
        // SAFETY: the id's live QP.
        unsafe { set_state(q, IBV_QPS_RTS) }?;
        if i.state().sync {
            // SAFETY: `id` is live.
            unsafe { complete(id) }?;
        }
        Ok(())
    })
}

/// `rdma_reject`: answers the request of this id with an MPA reject carrying
/// `private_data`; the initiator gets REJECTED.
#[no_mangle]
pub unsafe extern "C" fn rdma_reject(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    len: u8,
) -> c_int {
    status_call("rdma_reject", || {
        // SAFETY: by the caller's contract.
        let i = unsafe { id_obj(id) }?;
        let pdata = if private_data.is_null() || len == 0 {
            Vec::new()
        } else {
            // SAFETY: by the caller's contract, `len` readable bytes.
            unsafe { std::slice::from_raw_parts(private_data.cast::<u8>(), usize::from(len)) }
                .to_vec()
        };
        let (dev, conn) = i.state().conn.take().ok_or(libc::EINVAL)?;
        i.core.call(move |b| {
            let (cm, h) = b.cm_and_handler(dev)?;
            cm.reject(dev, h, conn, &pdata)
        })??;
        Ok(())
    })
}

/// `rdma_disconnect`: graceful close (queued work drains first); both sides get
/// DISCONNECTED and their QPs flush. Nothing happens on an id that is not connected.
#[no_mangle]
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    status_call("rdma_disconnect", || {
        // SAFETY: by the caller's contract.
        let i = unsafe { id_obj(id) }?;
        let Some((dev, conn)) = i.state().conn else {
            return Ok(());
        };
        i.core.call(move |b| {
            let (cm, h) = b.cm_and_handler(dev)?;
            cm.disconnect(dev, h, conn);
            Ok::<(), i32>(())
        })??;
        Ok(())
    })
}

/// `rdma_establish`: completes a connection whose CONNECT_RESPONSE the application
/// received without a QP; this connection manager always connects a QP (it reports
/// ESTABLISHED), so there is nothing to complete: EINVAL.
#[no_mangle]
pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    status_call("rdma_establish", || {
        // SAFETY: by the caller's contract.
        unsafe { id_obj(id) }?;
        Err(libc::EINVAL)
    })
}

/// `rdma_notify`: InfiniBand's "communication established" hint; iWARP connections
/// learn that from the stream, so it is accepted and changes nothing (as on Linux iWARP).
#[no_mangle]
pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, _event: ibv_event_type) -> c_int {
    status_call("rdma_notify", || {
        // SAFETY: by the caller's contract.
        unsafe { id_obj(id) }.map(|_| ())
    })
}

/// `rdma_init_qp_attr`: the attributes to move a self-created QP to `attr.qp_state` as the
/// Linux iWARP connection manager reports them (state, access and port for INIT and RTR;
/// the port only for RTS, which the connection manager reaches itself).
#[no_mangle]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    status_call("rdma_init_qp_attr", || {
        // SAFETY: by the caller's contract.
        let i = unsafe { id_obj(id) }?;
        // SAFETY: the caller passes writable structs (NULL refused).
        let (a, m) = unsafe { (attr.as_mut(), mask.as_mut()) };
        let (a, m) = (a.ok_or(libc::EINVAL)?, m.ok_or(libc::EINVAL)?);
        if i.state().dev.is_none() {
            return Err(libc::EINVAL);
        }
        runtime()?;
        a.port_num = 1;
        match a.qp_state {
            IBV_QPS_INIT | IBV_QPS_RTR => {
                a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
                *m = (IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT) as c_int;
            }
            IBV_QPS_RTS => *m = IBV_QP_PORT as c_int,
            _ => return Err(libc::EINVAL),
        }
        Ok(())
    })
}
