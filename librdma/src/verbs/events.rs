//! Async events (`ibv_get_async_event`): QP, CQ, S-RQ and device events the data plane
//! reports, read from the context's `async_fd`.

use std::os::raw::c_int;

use crate::abi::*;
use crate::entry::{guard, set_errno};
use crate::verbs::objects::context;

crate::symver::symver! {
    "IBVERBS_1.1": ibv_get_async_event, ibv_ack_async_event;
}

/// `ibv_get_async_event`: waits for the next event; 0, or -1 with errno.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(
    ctx: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    // SAFETY: by the caller's contract.
    let c = match unsafe { context(ctx) } {
        Ok(c) => c,
        Err(e) => {
            set_errno(e);
            return -1;
        }
    };
    // Blocking outside the unwinding guard, nothing with a destructor alive (see
    // `ibv_get_cq_event`).
    if let Err(e) = c.asyncs.fd.wait() {
        set_errno(e);
        return -1;
    }
    guard("ibv_get_async_event", -1, || {
        let Some((element, kind)) = c.asyncs.events.pop() else {
            set_errno(libc::EAGAIN);
            return -1;
        };
        // SAFETY: the caller passes a writable event (NULL refused).
        let Some(out) = (unsafe { event.as_mut() }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        let mut ev = ibv_async_event {
            event_type: kind,
            ..Default::default()
        };
        match kind {
            IBV_EVENT_CQ_ERR => ev.element.cq = element as *mut ibv_cq,
            IBV_EVENT_SRQ_ERR | IBV_EVENT_SRQ_LIMIT_REACHED => {
                ev.element.srq = element as *mut ibv_srq
            }
            IBV_EVENT_DEVICE_FATAL | IBV_EVENT_PORT_ACTIVE | IBV_EVENT_PORT_ERR => {
                ev.element.port_num = element as c_int
            }
            _ => ev.element.qp = element as *mut ibv_qp,
        }
        *out = ev;
        0
    })
}

/// `ibv_ack_async_event`: nothing to release.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(_event: *mut ibv_async_event) {}
