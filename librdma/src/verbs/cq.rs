//! Completion channels and completion queues. The lanes' threads move completions into
//! each CQ's ring (one ring per CQ, whichever lanes its QPs are on); `ibv_poll_cq` takes them from there without crossing threads, and an
//! armed CQ signals its channel's eventfd (`ibv_get_cq_event` blocks in `read(2)` on it).

use std::os::raw::{c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::abi::*;
use crate::convert::errno_of;
use crate::device::device_attributes;
use crate::entry::{errno_call, guard, ptr_call, set_errno};
use crate::shared::verbs::{ChannelShared, CqShared};
use crate::verbs::memory::{all_or_undo, ULP};
use crate::verbs::objects::{context, obj, publish, reclaim, Channel, Cq};

crate::symver::symver! {
    "IBVERBS_1.0": ibv_create_comp_channel, ibv_destroy_comp_channel;
    "IBVERBS_1.1": ibv_create_cq, ibv_destroy_cq, ibv_resize_cq, ibv_get_cq_event, ibv_ack_cq_events;
}

/// The CQ object behind `cq`.
///
/// # Safety
/// `cq` must be NULL or a CQ this library returned and the application has not destroyed.
pub unsafe fn cq_obj<'a>(cq: *mut ibv_cq) -> Result<&'a Cq, i32> {
    // SAFETY: by the contract.
    unsafe { obj::<ibv_cq, Cq>(cq) }.ok_or(libc::EINVAL)
}

/// `ibv_create_comp_channel`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel {
    ptr_call("ibv_create_comp_channel", || {
        // SAFETY: by the caller's contract.
        unsafe { context(ctx) }?;
        let shared = Arc::new(ChannelShared::new()?);
        Ok(publish(Channel {
            ch: ibv_comp_channel {
                context: ctx,
                fd: shared.fd.fd(),
                refcnt: 0,
            },
            shared,
            cqs: 0.into(),
        }))
    })
}

/// `ibv_destroy_comp_channel`: EBUSY while CQs use it.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    errno_call("ibv_destroy_comp_channel", || {
        // SAFETY: by the caller's contract, a live channel of ours.
        let c = unsafe { obj::<ibv_comp_channel, Channel>(ch) }.ok_or(libc::EINVAL)?;
        if c.cqs.load(Ordering::Acquire) > 0 {
            return Err(libc::EBUSY);
        }
        // SAFETY: published by `ibv_create_comp_channel`; given up here.
        drop(unsafe { reclaim::<ibv_comp_channel, Channel>(ch) });
        Ok(())
    })
}

/// `ibv_create_cq`: at least `cqe` entries; notifications go to `channel` (or nowhere).
#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    ptr_call("ibv_create_cq", || {
        // SAFETY: by the caller's contract.
        let c = unsafe { context(ctx) }?;
        if cqe <= 0 || cqe as u32 > device_attributes().max_cqes_per_cq || comp_vector != 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: NULL or a live channel of ours.
        let ch = unsafe { obj::<ibv_comp_channel, Channel>(channel) };
        let ch_shared = ch.map(|c| Arc::clone(&c.shared));
        let (dev, asyncs) = (c.dev, Arc::clone(&c.asyncs));
        // The CQ is made on every lane (QPs of any lane may complete on it); its ring is
        // the one every lane delivers into.
        let made = c
            .core
            .call_each(move |b| b.rnic(dev)?.create_cq(ULP, cqe as u32).map_err(errno_of))?;
        let made = all_or_undo(&c.core, made, move |b, (handle, _)| {
            let _ = b.rnic(dev).map(|r| r.destroy_cq(handle));
        })?;
        let entries = made[0].1 as usize;
        let handles = made.into_iter().map(|(h, _)| h).collect();
        let shared = Arc::new(CqShared::new(dev, handles, entries, ch_shared));
        let s = Arc::clone(&shared);
        c.core
            .call_each(move |b| b.add_cq(Arc::clone(&s), Arc::clone(&asyncs)))?;
        let entries = shared.ring.capacity() as c_int;
        let p = publish(Cq {
            cq: ibv_cq {
                context: ctx,
                channel,
                cq_context,
                handle: shared.handle(0).0,
                cqe: entries,
                ..Default::default()
            },
            shared: Arc::clone(&shared),
        });
        shared.c_cq.store(p as usize, Ordering::Release);
        if let Some(c) = ch {
            c.cqs.fetch_add(1, Ordering::AcqRel);
        }
        Ok(p)
    })
}

/// `ibv_destroy_cq`: EBUSY while a QP uses it; completions not polled are dropped.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    errno_call("ibv_destroy_cq", || {
        // SAFETY: by the caller's contract.
        let c = unsafe { cq_obj(cq) }?;
        // SAFETY: a live CQ's context is a live context of ours.
        let core = Arc::clone(&unsafe { context(c.cq.context) }?.core);
        let s = Arc::clone(&c.shared);
        if s.users.load(Ordering::Acquire) > 0 {
            return Err(libc::EBUSY);
        }
        for r in core.call_each(move |b| b.destroy_cq(&s))? {
            r?;
        }
        // SAFETY: NULL or the live channel the CQ was created on.
        if let Some(ch) = unsafe { obj::<ibv_comp_channel, Channel>(c.cq.channel) } {
            ch.cqs.fetch_sub(1, Ordering::AcqRel);
        }
        // SAFETY: published by `ibv_create_cq`; given up here.
        drop(unsafe { reclaim::<ibv_cq, Cq>(cq) });
        Ok(())
    })
}

/// `ibv_resize_cq`: the ring of a CQ is fixed at creation (the device does not offer
/// `IBV_DEVICE_RESIZE_MAX_WR`); a size the CQ already has succeeds, a larger one is
/// EOPNOTSUPP.
#[no_mangle]
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    errno_call("ibv_resize_cq", || {
        // SAFETY: by the caller's contract.
        let c = unsafe { cq_obj(cq) }?;
        if cqe <= 0 {
            return Err(libc::EINVAL);
        }
        if cqe as usize <= c.shared.ring.capacity() {
            Ok(())
        } else {
            Err(libc::EOPNOTSUPP)
        }
    })
}

/// `ibv_get_cq_event`: waits for a notification on `ch`; 0, or -1 with errno (EAGAIN when
/// the application made the descriptor non-blocking).
#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    ch: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    // SAFETY: by the caller's contract, a live channel of ours.
    let Some(c) = (unsafe { obj::<ibv_comp_channel, Channel>(ch) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    // The blocking read runs outside any unwinding guard and holds nothing with a
    // destructor: a thread cancelled here leaves cleanly.
    if let Err(e) = c.shared.fd.wait() {
        set_errno(e);
        return -1;
    }
    guard("ibv_get_cq_event", -1, || {
        let Some(addr) = c.shared.pop() else {
            set_errno(libc::EAGAIN);
            return -1;
        };
        let fired = addr as *mut ibv_cq;
        // SAFETY: the notification names a CQ of this channel; the application destroys a
        // CQ only after acknowledging its events.
        let ctx = unsafe { (*fired).cq_context };
        // SAFETY: the caller passes writable slots (NULL is skipped).
        unsafe {
            if !cq.is_null() {
                *cq = fired;
            }
            if !cq_context.is_null() {
                *cq_context = ctx;
            }
        }
        0
    })
}

/// `ibv_ack_cq_events`: counts acknowledged events in the CQ, as the real library does.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: u32) {
    // SAFETY: by the caller's contract, a live CQ of ours.
    if let Some(c) = unsafe { cq.as_mut() } {
        c.comp_events_completed = c.comp_events_completed.wrapping_add(nevents);
    }
}

/// The `poll_cq` operation: up to `num_entries` completions into `wc`.
pub unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    guard("ibv_poll_cq", -1, || {
        // SAFETY: by the caller's contract.
        let Ok(c) = (unsafe { cq_obj(cq) }) else {
            return -1;
        };
        if num_entries <= 0 || wc.is_null() {
            return 0;
        }
        // SAFETY: the caller passes room for `num_entries` completions.
        let out = unsafe { std::slice::from_raw_parts_mut(wc, num_entries as usize) };
        let n = c.shared.poll(out);
        if n == 0 {
            empty_poll();
        }
        n as c_int
    })
}

/// Whether application threads polling empty CQs give up their CPU now and then: on a
/// machine with fewer than four CPUs, where they share cores with the data-plane thread
/// that fills the CQs (`DATAPLANE_POLL_YIELD=0|1` overrides).
fn yields() -> bool {
    static YIELDS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *YIELDS.get_or_init(|| match std::env::var("DATAPLANE_POLL_YIELD").as_deref() {
        Ok("0") => false,
        Ok(_) => true,
        Err(_) => std::thread::available_parallelism().map_or(1, |n| n.get()) < 4,
    })
}

/// An empty poll yields the CPU (when [`yields`]): measured on two CPUs, ib_write_bw went
/// from 770 to 900-1800 MB/s (yielding every 64th empty poll: 900-1130).
fn empty_poll() {
    if yields() {
        std::thread::yield_now();
    }
}

/// The `req_notify_cq` operation: arms the CQ for its next (solicited) completion.
pub unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    errno_call("ibv_req_notify_cq", || {
        // SAFETY: by the caller's contract.
        let c = unsafe { cq_obj(cq) }?;
        c.shared.arm(solicited_only != 0);
        Ok(())
    })
}
