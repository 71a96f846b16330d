//! The rest of the rdma-core 44 ABI: calls this library exports, so that every program and
//! provider library linked against rdma-core loads (they are all bound at load time), but
//! does not support. Each fails the way the real call reports failure, without touching its
//! arguments, so a program that tries one gets an error it already handles.
//!
//! - [`verbs`]: public libibverbs calls for features iWARP RNICs do not have (address handles,
//!   multicast, ECE, dmabuf, importing kernel objects);
//! - [`cm`]: the librdmacm calls for multicast and ECE;
//! - [`rsockets`]: librdmacm's socket API over RDMA;
//! - [`private`]: `IBVERBS_PRIVATE_34`, the interface of provider libraries (libmlx5, libefa)
//!   to libibverbs, which the real ones still call when they load (and never after, as this
//!   library gives them no device).

use std::ffi::c_int;

use crate::entry::set_errno;

pub mod cm;
pub mod private;
pub mod rsockets;
pub mod verbs;

/// Defines C entry points that only fail: for each `fn name(arg: type, ...) -> type;` (with
/// its doc comment), a `#[no_mangle] extern "C" fn` with that C signature whose body is
/// `$fail(name)`, the arguments left untouched; and puts them all under the version `$node`.
macro_rules! unsupported {
    ($node:literal, $fail:path;
     $($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)?;)+) => {
        $(
            $(#[$doc])*
            #[no_mangle]
            #[allow(clippy::too_many_arguments)]
            pub extern "C" fn $name($(_: $ty),*) $(-> $ret)? {
                $fail(::std::stringify!($name))
            }
        )+
        $crate::symver::symver! { $node: $($name),+; }
    };
}

pub(crate) use unsupported;

/// Logs that the application called `name`, which this library does not support.
fn log_call(name: &str) {
    log::debug!("{name}: not supported by this library");
}

/// A call returning a pointer: NULL with `errno` `EOPNOTSUPP`.
fn null<T>(name: &str) -> *mut T {
    log_call(name);
    set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// A call returning an errno value: `EOPNOTSUPP` (also left in `errno`, as libibverbs does).
fn eopnotsupp(name: &str) -> c_int {
    log_call(name);
    set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

/// A call returning -1 with `errno` set: -1 with `EOPNOTSUPP`.
fn minus_one(name: &str) -> c_int {
    log_call(name);
    set_errno(libc::EOPNOTSUPP);
    -1
}

/// A call without a result: nothing to do.
fn nothing(name: &str) {
    log_call(name);
}

#[cfg(test)]
mod tests {
    use std::ptr::{null, null_mut};

    use super::cm::*;
    use super::private::*;
    use super::rsockets::*;
    use super::verbs::*;
    use crate::abi::ibv_send_wr;

    fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    fn clear_errno() {
        crate::entry::set_errno(0);
    }

    #[test]
    fn pointer_calls_return_null_with_eopnotsupp() {
        clear_errno();
        assert!(ibv_create_ah(null_mut(), null_mut()).is_null());
        assert_eq!(errno(), libc::EOPNOTSUPP);
        clear_errno();
        assert!(ibv_reg_dmabuf_mr(null_mut(), 0, 4096, 0, 3, 0).is_null());
        assert_eq!(errno(), libc::EOPNOTSUPP);
        clear_errno();
        assert!(verbs_open_device(null_mut(), null_mut()).is_null());
        assert_eq!(errno(), libc::EOPNOTSUPP);
    }

    #[test]
    fn errno_value_calls_return_eopnotsupp() {
        assert_eq!(ibv_attach_mcast(null_mut(), null(), 0), libc::EOPNOTSUPP);
        assert_eq!(ibv_query_ece(null_mut(), null_mut()), libc::EOPNOTSUPP);
        assert_eq!(ibv_cmd_destroy_qp(null_mut()), libc::EOPNOTSUPP);
        assert_eq!(execute_ioctl(null_mut(), null_mut()), libc::EOPNOTSUPP);
    }

    #[test]
    fn status_calls_return_minus_one_with_errno() {
        clear_errno();
        assert_eq!(
            ibv_init_ah_from_wc(null_mut(), 1, null_mut(), null_mut(), null_mut()),
            -1
        );
        assert_eq!(errno(), libc::EOPNOTSUPP);
        clear_errno();
        assert_eq!(ibv_cmd_poll_cq(null_mut(), 16, null_mut()), -1);
        assert_eq!(errno(), libc::EOPNOTSUPP);
        clear_errno();
        assert_eq!(rdma_join_multicast(null_mut(), null_mut(), null_mut()), -1);
        assert_eq!(errno(), libc::EOPNOTSUPP);
        clear_errno();
        assert_eq!(rdma_reject_ece(null_mut(), null(), 0), -1);
        assert_eq!(errno(), libc::EOPNOTSUPP);
    }

    #[test]
    fn rsockets_fail_with_enosys() {
        clear_errno();
        assert_eq!(rsocket(libc::AF_INET, libc::SOCK_STREAM, 0), -1);
        assert_eq!(errno(), libc::ENOSYS);
        clear_errno();
        assert_eq!(rsend(3, null(), 0, 0), -1);
        assert_eq!(errno(), libc::ENOSYS);
        clear_errno();
        assert_eq!(rpoll(null_mut(), 0, 0), -1);
        assert_eq!(errno(), libc::ENOSYS);
        clear_errno();
        assert_eq!(riomap(3, null_mut(), 0, 0, 0, 0), -1);
        assert_eq!(errno(), libc::ENOSYS);
        clear_errno();
        assert_eq!(riowrite(3, null(), 0, 0, 0), usize::MAX);
        assert_eq!(errno(), libc::ENOSYS);
    }

    #[test]
    fn posting_through_a_kernel_command_fails_at_the_first_work_request() {
        let mut wr = ibv_send_wr::default();
        let mut bad: *mut ibv_send_wr = null_mut();
        // SAFETY: a live WR and a live `bad_wr` slot.
        let ret = unsafe { ibv_cmd_post_send(null_mut(), &mut wr, &mut bad) };
        assert_eq!(ret, libc::EOPNOTSUPP);
        assert_eq!(bad, &mut wr as *mut ibv_send_wr);
    }

    #[test]
    fn driver_registration_and_logging_do_nothing() {
        verbs_register_driver_34(null());
        verbs_set_ops(null_mut(), null());
        verbs_uninit_context(null_mut());
        verbs_init_cq(null_mut(), null_mut(), null_mut(), null_mut());
        __verbs_log(null_mut(), 0, c"%s".as_ptr());
        ibv_unimport_pd(null_mut());
        assert!(!verbs_allow_disassociate_destroy.load(std::sync::atomic::Ordering::Relaxed));
        assert_eq!(std::mem::size_of_val(&verbs_allow_disassociate_destroy), 1);
    }
}
