//! Connecting: `rdma_connect` (the MPA Request with the application's private data and
//! IRD/ORD), `rdma_accept` and `rdma_reject` of a request, `rdma_disconnect`; and the
//! calls that only mean something on InfiniBand (`rdma_establish`, `rdma_notify`) or tell
//! the application what the connection manager would set (`rdma_init_qp_attr`).

use std::os::raw::{c_int, c_void};
use std::sync::Arc;

use crate::abi::*;
use crate::cm::id::complete_if_sync;
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

/// A copy of the `len` bytes of private data at `data` (none if NULL).
///
/// # Safety
/// `data` must be NULL or point at `len` readable bytes.
unsafe fn private_data(data: *const c_void, len: u8) -> Vec<u8> {
    if data.is_null() || len == 0 {
        return Vec::new();
    }
    // SAFETY: by the contract.
    unsafe { std::slice::from_raw_parts(data.cast::<u8>(), usize::from(len)) }.to_vec()
}

/// The application's private data and IRD/ORD (`responder_resources`, `initiator_depth`)
/// from a connection parameter block; `fallback` (IRD, ORD) stands in for a NULL block and
/// for each field that asks for the maximum.
///
/// # Safety
/// `p` must be NULL or a readable `rdma_conn_param` whose private data is readable.
unsafe fn params(
    p: *const rdma_conn_param,
    fallback: (u16, u16),
) -> Result<(Vec<u8>, u16, u16), i32> {
    // SAFETY: by the contract.
    let Some(p) = (unsafe { p.as_ref() }) else {
        return Ok((Vec::new(), fallback.0, fallback.1));
    };
    let depth = |v: u8, fallback: u16| -> Result<u16, i32> {
        match v {
            USE_MAX => Ok(fallback),
            v if u32::from(v) > MAX_RD_ATOM => Err(libc::EINVAL),
            v => Ok(u16::from(v)),
        }
    };
    Ok((
        // SAFETY: by the contract.
        unsafe { private_data(p.private_data, p.private_data_len) },
        depth(p.responder_resources, fallback.0)?,
        depth(p.initiator_depth, fallback.1)?,
    ))
}

/// What librdmacm's `rdma_accept` offers for a NULL parameter block or a field asking for
/// the maximum: the CONNECT_REQUEST's values, i.e. the initiator's ORD as our IRD and its
/// IRD as our ORD (RFC 6581 §5), within the device's limit; the device's limit when the
/// request carried none (MPA revision 1).
fn accept_fallback(peer_ird_ord: Option<(u16, u16)>) -> (u16, u16) {
    let max = MAX_RD_ATOM as u16;
    peer_ird_ord.map_or((max, max), |(ird, ord)| (ord.min(max), ird.min(max)))
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
        let max = MAX_RD_ATOM as u16;
        // SAFETY: by the caller's contract.
        let (pdata, ird, ord) = unsafe { params(param, (max, max)) }?;
        let (dev, local, remote) = {
            let st = i.state();
            (
                st.dev.ok_or(libc::EINVAL)?,
                st.local.ok_or(libc::EINVAL)?,
                st.remote.ok_or(libc::EINVAL)?,
            )
        };
        let (qp, lane, shared) = (q.shared.id, q.shared.lane, Arc::clone(&i.shared));
        // The connection is opened on its QP's lane, from a local port that hashes to it.
        let conn = i.with_cm(lane, dev, move |cm, h| {
            cm.connect(dev, h, local.ip(), remote, qp, &pdata, (ird, ord), &shared)
        })?;
        {
            let mut st = i.state();
            st.conn = Some((dev, conn));
            st.lane = lane;
        }
        // SAFETY: the id's live QP, and `id` is live.
        unsafe {
            set_state(q, IBV_QPS_RTR)?;
            complete_if_sync(id, i)
        }
    })
}

/// `rdma_accept`: answers the request of this id with its QP (the MPA Reply, offering
/// `responder_resources` as IRD and `initiator_depth` as ORD, or the request's mirrored
/// values as librdmacm does for NULL or the maximum); the QP takes work requests at once,
/// and ESTABLISHED follows.
#[no_mangle]
pub unsafe extern "C" fn rdma_accept(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
    status_call("rdma_accept", || {
        // SAFETY: by the caller's contract.
        let i = unsafe { id_obj(id) }?;
        // SAFETY: NULL or the id's live QP.
        let q = unsafe { qp_obj(i.id.qp) }?;
        let fallback = accept_fallback(i.state().peer_ird_ord);
        // SAFETY: by the caller's contract.
        let (pdata, ird, ord) = unsafe { params(param, fallback) }?;
        let (dev, conn, lane) = {
            let st = i.state();
            let (dev, conn) = st.conn.ok_or(libc::EINVAL)?;
            (dev, conn, st.lane)
        };
        if q.shared.lane != lane {
            return Err(libc::EINVAL);
        }
        let qp = q.shared.id;
        i.with_cm(lane, dev, move |cm, h| {
            cm.accept(dev, h, conn, qp, &pdata, (ird, ord))
        })?;
        // SAFETY: the id's live QP, and `id` is live.
        unsafe {
            set_state(q, IBV_QPS_RTS)?;
            complete_if_sync(id, i)
        }
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
        // SAFETY: by the caller's contract, `len` readable bytes (or NULL).
        let pdata = unsafe { self::private_data(private_data, len) };
        let (dev, conn, lane) = {
            let mut st = i.state();
            let (dev, conn) = st.conn.take().ok_or(libc::EINVAL)?;
            (dev, conn, st.lane)
        };
        i.with_cm(lane, dev, move |cm, h| cm.reject(dev, h, conn, &pdata))
    })
}

/// `rdma_disconnect`: graceful close (queued work drains first); both sides get
/// DISCONNECTED and their QPs flush. Nothing happens on an id that is not connected.
#[no_mangle]
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    status_call("rdma_disconnect", || {
        // SAFETY: by the caller's contract.
        let i = unsafe { id_obj(id) }?;
        let (conn, lane) = {
            let st = i.state();
            (st.conn, st.lane)
        };
        let Some((dev, conn)) = conn else {
            return Ok(());
        };
        i.with_cm(lane, dev, move |cm, h| {
            cm.disconnect(dev, h, conn);
            Ok(())
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u16 = MAX_RD_ATOM as u16;

    #[test]
    fn accept_mirrors_the_request_within_the_device_limit() {
        // rping's request IRD 1 / ORD 1: Linux siw's rping server (NULL) answers 1/1.
        assert_eq!(accept_fallback(Some((1, 1))), (1, 1));
        // Our IRD is the initiator's ORD, our ORD its IRD.
        assert_eq!(accept_fallback(Some((4, 2))), (2, 4));
        assert_eq!(accept_fallback(Some((500, 0))), (0, MAX));
        // MPA revision 1 carries none: the device's limit.
        assert_eq!(accept_fallback(None), (MAX, MAX));
    }

    #[test]
    fn params_take_the_fallback_for_null_and_the_maximum_only() {
        // SAFETY: NULL is allowed.
        let (pd, ird, ord) = unsafe { params(std::ptr::null(), (1, 2)) }.unwrap();
        assert_eq!((pd.len(), ird, ord), (0, 1, 2));
        let data = *b"abc";
        let mut p = rdma_conn_param {
            private_data: data.as_ptr().cast(),
            private_data_len: 3,
            responder_resources: USE_MAX,
            initiator_depth: 0,
            ..Default::default()
        };
        // SAFETY: a live block whose private data is `data`.
        let (pd, ird, ord) = unsafe { params(&p, (5, 6)) }.unwrap();
        assert_eq!((pd.as_slice(), ird, ord), (&b"abc"[..], 5, 0));
        p.initiator_depth = USE_MAX;
        p.responder_resources = 3;
        // SAFETY: as above.
        let (_, ird, ord) = unsafe { params(&p, (5, 6)) }.unwrap();
        assert_eq!((ird, ord), (3, 6));
        p.responder_resources = (MAX_RD_ATOM + 1) as u8;
        // SAFETY: as above.
        assert_eq!(unsafe { params(&p, (5, 6)) }.unwrap_err(), libc::EINVAL);
    }
}
