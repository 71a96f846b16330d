//! The C side of every entry point: panics never cross into C (a panic becomes the
//! function's failure value), and failures set `errno` the way libibverbs and librdmacm do.

use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::abi::{ibv_recv_wr, ibv_send_wr};

/// Sets the calling thread's `errno`.
pub fn set_errno(e: i32) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot, valid for writes
    // for the thread's lifetime.
    unsafe { *libc::__errno_location() = e };
}

/// Runs `f`; a panic is logged and turned into `failed`.
pub fn guard<T>(name: &str, failed: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            log::error!("{name}: internal error (panic); failing the call");
            failed
        }
    }
}

/// A call that returns a pointer: `Err(errno)` becomes NULL with `errno` set.
pub fn ptr_call<T>(name: &str, f: impl FnOnce() -> Result<*mut T, i32>) -> *mut T {
    match guard(name, Err(libc::EIO), f) {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

/// A call that returns an errno value (0 on success), as most libibverbs verbs do.
pub fn errno_call(name: &str, f: impl FnOnce() -> Result<(), i32>) -> i32 {
    match guard(name, Err(libc::EIO), f) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// A call that returns 0, or -1 with `errno` set (librdmacm, and a few libibverbs calls).
pub fn status_call(name: &str, f: impl FnOnce() -> Result<(), i32>) -> i32 {
    match guard(name, Err(libc::EIO), f) {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// A work request of a C list linked through `next` (NULL-terminated).
pub trait WrList {
    /// The next WR of the list.
    fn next(&self) -> *mut Self;
}

impl WrList for ibv_send_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
}

impl WrList for ibv_recv_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
}

/// A posting call (`ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`): `start` checks
/// the queue and gives the function that posts one WR, which then runs on each WR of the
/// list from `wr`, in order, until one fails. Returns 0 or the errno value, and on failure
/// sets `*bad_wr` to the WR that failed (the first one if `start` failed); the WRs before
/// it stay posted.
///
/// # Safety
/// The list from `wr` must be readable to its NULL `next`, and `bad_wr` NULL or writable.
pub unsafe fn post_list<W: WrList, P: FnMut(&W) -> Result<(), i32>>(
    name: &str,
    wr: *mut W,
    bad_wr: *mut *mut W,
    start: impl FnOnce() -> Result<P, i32>,
) -> c_int {
    let mut cur = wr;
    let r = errno_call(name, || {
        let mut post = start()?;
        // SAFETY: by the contract, the list is readable to its NULL `next`.
        while let Some(w) = unsafe { cur.as_ref() } {
            post(w)?;
            cur = w.next();
        }
        Ok(())
    });
    if r != 0 && !bad_wr.is_null() {
        // SAFETY: by the contract, a writable slot.
        unsafe { *bad_wr = cur };
    }
    r
}
