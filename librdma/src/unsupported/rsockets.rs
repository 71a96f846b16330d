//! rsockets, librdmacm's socket API over RDMA (`rdma/rsocket.h`): not provided. Every call
//! fails with `ENOSYS`, as a socket call the system does not implement would.

use std::ffi::{c_int, c_void};

use libc::{fd_set, iovec, msghdr, nfds_t, off_t, pollfd, sockaddr, socklen_t, timeval};

use super::{log_call, unsupported};
use crate::entry::set_errno;

/// An rsockets call: -1 (of the call's return type) with `errno` `ENOSYS`.
fn enosys<T: From<i8>>(name: &str) -> T {
    log_call(name);
    set_errno(libc::ENOSYS);
    T::from(-1)
}

/// `riowrite`, which returns a `size_t`: `(size_t)-1` with `errno` `ENOSYS`.
fn enosys_size(name: &str) -> usize {
    log_call(name);
    set_errno(libc::ENOSYS);
    usize::MAX
}

unsupported! { "RDMACM_1.0", enosys;
    /// Creates an rsocket: rsockets are not provided.
    fn rsocket(domain: c_int, type_: c_int, protocol: c_int) -> c_int;
    /// Binds an rsocket: rsockets are not provided.
    fn rbind(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> c_int;
    /// Listens on an rsocket: rsockets are not provided.
    fn rlisten(socket: c_int, backlog: c_int) -> c_int;
    /// Accepts an rsocket connection: rsockets are not provided.
    fn raccept(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> c_int;
    /// Connects an rsocket: rsockets are not provided.
    fn rconnect(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> c_int;
    /// Shuts an rsocket down: rsockets are not provided.
    fn rshutdown(socket: c_int, how: c_int) -> c_int;
    /// Closes an rsocket: rsockets are not provided.
    fn rclose(socket: c_int) -> c_int;
    /// Receives from an rsocket: rsockets are not provided.
    fn rrecv(socket: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize;
    /// Receives from an rsocket with the sender's address: rsockets are not provided.
    fn rrecvfrom(
        socket: c_int,
        buf: *mut c_void,
        len: usize,
        flags: c_int,
        src_addr: *mut sockaddr,
        addrlen: *mut socklen_t,
    ) -> isize;
    /// Receives a message from an rsocket: rsockets are not provided.
    fn rrecvmsg(socket: c_int, msg: *mut msghdr, flags: c_int) -> isize;
    /// Sends on an rsocket: rsockets are not provided.
    fn rsend(socket: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize;
    /// Sends on an rsocket to an address: rsockets are not provided.
    fn rsendto(
        socket: c_int,
        buf: *const c_void,
        len: usize,
        flags: c_int,
        dest_addr: *const sockaddr,
        addrlen: socklen_t,
    ) -> isize;
    /// Sends a message on an rsocket: rsockets are not provided.
    fn rsendmsg(socket: c_int, msg: *const msghdr, flags: c_int) -> isize;
    /// Reads from an rsocket: rsockets are not provided.
    fn rread(socket: c_int, buf: *mut c_void, count: usize) -> isize;
    /// Reads from an rsocket into several buffers: rsockets are not provided.
    fn rreadv(socket: c_int, iov: *const iovec, iovcnt: c_int) -> isize;
    /// Writes to an rsocket: rsockets are not provided.
    fn rwrite(socket: c_int, buf: *const c_void, count: usize) -> isize;
    /// Writes several buffers to an rsocket: rsockets are not provided.
    fn rwritev(socket: c_int, iov: *const iovec, iovcnt: c_int) -> isize;
    /// Polls rsockets: rsockets are not provided.
    fn rpoll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int;
    /// Selects among rsockets: rsockets are not provided.
    fn rselect(
        nfds: c_int,
        readfds: *mut fd_set,
        writefds: *mut fd_set,
        exceptfds: *mut fd_set,
        timeout: *mut timeval,
    ) -> c_int;
    /// The peer address of an rsocket: rsockets are not provided.
    fn rgetpeername(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> c_int;
    /// The local address of an rsocket: rsockets are not provided.
    fn rgetsockname(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> c_int;
    /// Sets an rsocket option: rsockets are not provided.
    fn rsetsockopt(
        socket: c_int,
        level: c_int,
        optname: c_int,
        optval: *const c_void,
        optlen: socklen_t,
    ) -> c_int;
    /// Reads an rsocket option: rsockets are not provided.
    fn rgetsockopt(
        socket: c_int,
        level: c_int,
        optname: c_int,
        optval: *mut c_void,
        optlen: *mut socklen_t,
    ) -> c_int;
    /// Controls an rsocket (variadic in C; the optional argument is never read): rsockets are
    /// not provided.
    fn rfcntl(socket: c_int, cmd: c_int) -> c_int;
    /// Maps memory for remote writes to an rsocket: rsockets are not provided.
    fn riomap(
        socket: c_int,
        buf: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        offset: off_t,
    ) -> off_t;
    /// Unmaps memory mapped with `riomap`: rsockets are not provided.
    fn riounmap(socket: c_int, buf: *mut c_void, len: usize) -> c_int;
}

unsupported! { "RDMACM_1.0", enosys_size;
    /// Writes into a peer's `riomap`ped memory: rsockets are not provided.
    fn riowrite(
        socket: c_int,
        buf: *const c_void,
        count: usize,
        offset: off_t,
        flags: c_int,
    ) -> usize;
}
