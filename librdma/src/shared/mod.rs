//! What application threads and the data-plane thread share: for verbs objects a CQ's ring
//! of completions and its notification request, a QP's state and posting window, the queues
//! behind completion channels and async events ([`verbs`]); for the connection manager the
//! event channels and the ids events are about ([`cm`]). Descriptors applications may
//! `poll(2)` are eventfds ([`EventFd`]).

pub mod cm;
pub mod verbs;

use std::os::fd::RawFd;

/// An eventfd in semaphore mode: one `read` takes one event; `poll(2)` and epoll see it.
#[derive(Debug)]
pub struct EventFd(RawFd);

impl EventFd {
    /// A new eventfd (close-on-exec).
    pub fn new() -> Result<EventFd, i32> {
        // SAFETY: plain syscall; the returned descriptor is owned by the EventFd.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
        if fd < 0 {
            return Err(last_errno());
        }
        Ok(EventFd(fd))
    }

    /// The descriptor.
    pub fn fd(&self) -> RawFd {
        self.0
    }

    /// Signals one event.
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own descriptor.
        unsafe { libc::write(self.0, (&one as *const u64).cast(), 8) };
    }

    /// Takes one event, blocking unless the application made the descriptor non-blocking
    /// (then EAGAIN). No value with a destructor is alive across the blocking `read`: a thread
    /// cancelled there (rping cancels its CQ thread) unwinds through no Rust drop.
    pub fn wait(&self) -> Result<(), i32> {
        let mut v: u64 = 0;
        loop {
            // SAFETY: reads 8 bytes into a live u64 from our own descriptor.
            let n = unsafe { libc::read(self.0, (&mut v as *mut u64).cast(), 8) };
            if n == 8 {
                return Ok(());
            }
            let e = last_errno();
            if e != libc::EINTR {
                return Err(e);
            }
        }
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: closes the descriptor this EventFd owns, once.
        unsafe { libc::close(self.0) };
    }
}

/// The calling thread's `errno`.
pub fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eventfd_counts_events_and_honours_nonblocking() {
        let e = EventFd::new().unwrap();
        e.signal();
        e.signal();
        assert_eq!(e.wait(), Ok(()));
        assert_eq!(e.wait(), Ok(()));
        // SAFETY: fcntl on our own descriptor.
        unsafe { libc::fcntl(e.fd(), libc::F_SETFL, libc::O_NONBLOCK) };
        assert_eq!(e.wait(), Err(libc::EAGAIN));
    }
}
