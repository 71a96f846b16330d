//! Event channels and events: `rdma_get_cm_event` blocks on the channel's eventfd, then
//! turns the next record into an `rdma_cm_event` (creating the new id of a connection
//! request); `rdma_ack_cm_event` releases it. Events of destroyed ids are dropped.

use std::os::raw::c_int;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use crate::abi::*;
use crate::cm::objects::{
    channel_obj, count_event, device_handles, id_obj, new_channel, CmId, EventChannel, IdState,
};
use crate::entry::{guard, ptr_call, set_errno, status_call};
use crate::runtime::runtime;
use crate::shared::cm::{CmIdShared, CmPending, CmRaw};
use crate::verbs::objects::{publish, reclaim};

crate::symver::symver! {
    "RDMACM_1.0": rdma_create_event_channel, rdma_destroy_event_channel, rdma_get_cm_event, rdma_ack_cm_event, rdma_migrate_id;
}

/// An event handed to the application, with the private data it points to.
#[repr(C)]
struct EventBox {
    ev: rdma_cm_event,
    private_data: Vec<u8>,
    /// The id whose unacknowledged events this one counts in.
    counted: Arc<CmIdShared>,
}
// SAFETY: repr(C), `rdma_cm_event` first.
unsafe impl crate::verbs::objects::CObject<rdma_cm_event> for EventBox {}

/// `rdma_create_event_channel`: ENODEV when the configuration has no device.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    ptr_call("rdma_create_event_channel", || {
        runtime()?;
        new_channel()
    })
}

/// `rdma_destroy_event_channel`. A channel a thread is blocked on stays allocated and
/// that thread blocked (rping's CM thread at exit); otherwise it is freed.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_event_channel(ch: *mut rdma_event_channel) {
    guard("rdma_destroy_event_channel", (), || {
        // SAFETY: by the caller's contract.
        let Ok(c) = (unsafe { channel_obj(ch) }) else {
            return;
        };
        if c.waiters.load(Ordering::Acquire) == 0 {
            // SAFETY: published by `new_channel`; nobody waits on it; given up here.
            drop(unsafe { reclaim::<rdma_event_channel, EventChannel>(ch) });
        }
    })
}

/// `rdma_get_cm_event`: the next event, blocking unless the application made the
/// descriptor non-blocking (then -1/EAGAIN).
#[no_mangle]
pub unsafe extern "C" fn rdma_get_cm_event(
    ch: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    // SAFETY: by the caller's contract.
    let c = match unsafe { channel_obj(ch) } {
        Ok(c) if !event.is_null() => c,
        _ => {
            set_errno(libc::EINVAL);
            return -1;
        }
    };
    loop {
        // Blocking outside the unwinding guard, with nothing that has a destructor alive.
        c.waiters.fetch_add(1, Ordering::AcqRel);
        let r = c.shared.fd.wait();
        c.waiters.fetch_sub(1, Ordering::AcqRel);
        if let Err(e) = r {
            set_errno(e);
            return -1;
        }
        let next = guard("rdma_get_cm_event", Err(libc::EIO), || {
            let Some(p) = c.shared.pop() else {
                return Ok(None);
            };
            build(p)
        });
        match next {
            Ok(Some(ev)) => {
                // SAFETY: `build` made `ev`, a live event.
                let (kind, status) = unsafe { ((*ev).event, (*ev).status) };
                log::debug!("rdma_get_cm_event: event {kind} status {status}");
                // SAFETY: the caller passes a writable slot (NULL refused above).
                unsafe { *event = ev };
                return 0;
            }
            Ok(None) => continue,
            Err(e) => {
                set_errno(e);
                return -1;
            }
        }
    }
}

/// `rdma_ack_cm_event`.
#[no_mangle]
pub unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    status_call("rdma_ack_cm_event", || {
        if event.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: events come from `build`; the application gives this one up here.
        let b = unsafe { reclaim::<rdma_cm_event, EventBox>(event) };
        b.counted.unacked.fetch_sub(1, Ordering::AcqRel);
        Ok(())
    })
}

/// The `rdma_cm_event` of a record; `None` when it is about an id that is gone.
fn build(p: CmPending) -> Result<Option<*mut rdma_cm_event>, i32> {
    if p.id.is_destroyed() {
        return Ok(None);
    }
    let mut ev = rdma_cm_event::default();
    let mut conn = rdma_conn_param::default();
    let (kind, status, private_data, counted) = match p.kind {
        CmRaw::ConnectRequest {
            dev,
            lane,
            conn: c,
            local,
            remote,
            private_data,
            ird_ord,
        } => {
            let Some(listener) = p.listener.filter(|l| !l.is_destroyed()) else {
                return Ok(None);
            };
            let lid = listener.c_id.load(Ordering::Acquire) as *mut rdma_cm_id;
            // SAFETY: a listener that is not destroyed has a live C id.
            let l = unsafe { id_obj(lid) }?;
            let child = new_child(l, &p.id, (dev, lane), c, local, remote, ird_ord)?;
            ev.id = child;
            ev.listen_id = lid;
            let (ird, ord) = ird_ord.unwrap_or((
                crate::device::MAX_RD_ATOM as u16,
                crate::device::MAX_RD_ATOM as u16,
            ));
            conn.initiator_depth = ird.min(255) as u8;
            conn.responder_resources = ord.min(255) as u8;
            (RDMA_CM_EVENT_CONNECT_REQUEST, 0, private_data, listener)
        }
        kind => {
            let id = p.id.c_id.load(Ordering::Acquire) as *mut rdma_cm_id;
            if id.is_null() {
                return Ok(None);
            }
            ev.id = id;
            let (k, s, pd) = match kind {
                CmRaw::AddrResolved => (RDMA_CM_EVENT_ADDR_RESOLVED, 0, Vec::new()),
                CmRaw::AddrError(s) => (RDMA_CM_EVENT_ADDR_ERROR, s, Vec::new()),
                CmRaw::RouteResolved => (RDMA_CM_EVENT_ROUTE_RESOLVED, 0, Vec::new()),
                CmRaw::Established {
                    private_data,
                    ird,
                    ord,
                } => {
                    conn.initiator_depth = ird.min(255) as u8;
                    conn.responder_resources = ord.min(255) as u8;
                    (RDMA_CM_EVENT_ESTABLISHED, 0, private_data)
                }
                CmRaw::Rejected {
                    private_data,
                    status,
                } => (RDMA_CM_EVENT_REJECTED, status, private_data),
                CmRaw::Unreachable => (RDMA_CM_EVENT_UNREACHABLE, -libc::ETIMEDOUT, Vec::new()),
                CmRaw::ConnectError(s) => (RDMA_CM_EVENT_CONNECT_ERROR, s, Vec::new()),
                CmRaw::Disconnected => (RDMA_CM_EVENT_DISCONNECTED, 0, Vec::new()),
                CmRaw::ConnectRequest { .. } => unreachable!("handled above"),
            };
            (k, s, pd, p.id)
        }
    };
    ev.event = kind;
    ev.status = status;
    let b = Box::new(EventBox {
        ev,
        private_data,
        counted,
    });
    let mut b = b;
    if !b.private_data.is_empty() {
        conn.private_data = b.private_data.as_ptr().cast();
        conn.private_data_len = b.private_data.len().min(255) as u8;
    }
    b.ev.param.conn = conn;
    count_event(&b.counted);
    Ok(Some(Box::into_raw(b).cast::<rdma_cm_event>()))
}

/// The id of a new connection request, on the listener's device context and channel, with
/// the listener's context pointer and port space.
#[allow(clippy::too_many_arguments)]
fn new_child(
    l: &CmId,
    shared: &Arc<CmIdShared>,
    (dev, lane): (usize, usize),
    conn: tcp::ConnId,
    local: std::net::SocketAddr,
    remote: std::net::SocketAddr,
    ird_ord: Option<(u16, u16)>,
) -> Result<*mut rdma_cm_id, i32> {
    let h = device_handles(dev)?;
    let mut id = rdma_cm_id {
        verbs: h.ctx,
        channel: l.id.channel,
        context: l.id.context,
        ps: l.id.ps,
        port_num: 1,
        pd: h.pd,
        qp_type: IBV_QPT_RC,
        ..Default::default()
    };
    // SAFETY: the route's address slots are sockaddr_storage-sized fields of `id`.
    unsafe {
        super::addr::write(&mut id.route.addr.__bindgen_anon_1, local);
        super::addr::write(&mut id.route.addr.__bindgen_anon_2, remote);
    }
    let state = IdState {
        dev: Some(dev),
        local: Some(local),
        remote: Some(remote),
        conn: Some((dev, conn)),
        lane,
        peer_ird_ord: ird_ord,
        ..IdState::default()
    };
    let child = publish(CmId {
        id,
        shared: Arc::clone(shared),
        state: Mutex::new(state),
        core: Arc::clone(&l.core),
    });
    shared.c_id.store(child as usize, Ordering::Release);
    Ok(child)
}

/// `rdma_migrate_id`: the id's future events go to `ch` (NULL: a private channel, the
/// synchronous mode).
#[no_mangle]
pub unsafe extern "C" fn rdma_migrate_id(
    id: *mut rdma_cm_id,
    ch: *mut rdma_event_channel,
) -> c_int {
    status_call("rdma_migrate_id", || {
        // SAFETY: by the caller's contract.
        let i = unsafe { crate::cm::objects::id_mut(id) }?;
        let (ch, sync) = if ch.is_null() {
            (new_channel()?, true)
        } else {
            (ch, false)
        };
        // SAFETY: a channel of ours (given, or just made).
        let c = unsafe { channel_obj(ch) }?;
        *i.shared.channel.lock().unwrap_or_else(|p| p.into_inner()) = Arc::clone(&c.shared);
        i.id.channel = ch;
        i.state().sync = sync;
        Ok(())
    })
}
