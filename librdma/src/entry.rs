//! The C side of every entry point: panics never cross into C (a panic becomes the
//! function's failure value), and failures set `errno` the way libibverbs and librdmacm do.

use std::panic::{catch_unwind, AssertUnwindSafe};

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
