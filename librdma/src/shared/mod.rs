//! What application threads and the data-plane thread share: for verbs objects a CQ's ring
//! of completions and its notification request, a QP's state and posting window, the queues
//! behind completion channels and async events ([`verbs`]); for the connection manager the
//! event channels and the ids events are about ([`cm`]). Descriptors applications may
//! `poll(2)` are eventfds ([`EventFd`]).

pub mod cm;
pub mod verbs;

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_queue::SegQueue;

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

/// Entries an [`FdQueue`] holds for an application that does not take them: later ones are
/// lost and counted ([`FdQueue::lost`]).
pub const MAX_PENDING_EVENTS: usize = 4096;

/// A queue whose entries an [`EventFd`] counts: an event channel, a completion channel,
/// a context's async events. At most [`MAX_PENDING_EVENTS`] wait.
#[derive(Debug)]
pub struct FdQueue<T> {
    /// The descriptor applications poll (`fd` of the channel, `async_fd` of a context).
    pub fd: EventFd,
    items: SegQueue<T>,
    len: AtomicUsize,
    /// Entries lost because [`MAX_PENDING_EVENTS`] were waiting.
    pub lost: AtomicU64,
}

impl<T> FdQueue<T> {
    /// An empty queue with a new descriptor.
    pub fn new() -> Result<FdQueue<T>, i32> {
        Ok(FdQueue {
            fd: EventFd::new()?,
            items: SegQueue::new(),
            len: AtomicUsize::new(0),
            lost: AtomicU64::new(0),
        })
    }

    /// Queues `item` and signals it on the descriptor; when [`MAX_PENDING_EVENTS`] wait
    /// unread, the item is lost and counted instead.
    pub fn push(&self, item: T) {
        if self.len.fetch_add(1, Ordering::AcqRel) >= MAX_PENDING_EVENTS {
            self.len.fetch_sub(1, Ordering::AcqRel);
            if self.lost.fetch_add(1, Ordering::Relaxed) == 0 {
                log::warn!(
                    "{MAX_PENDING_EVENTS} events wait unread on descriptor {}: later ones are \
                     lost (counted only)",
                    self.fd.fd()
                );
            }
            return;
        }
        self.items.push(item);
        self.fd.signal();
    }

    /// The oldest entry.
    pub fn pop(&self) -> Option<T> {
        let item = self.items.pop()?;
        self.len.fetch_sub(1, Ordering::AcqRel);
        Some(item)
    }

    /// Entries waiting.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
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
    fn entries_an_application_leaves_are_bounded_and_counted() {
        let q = FdQueue::new().unwrap();
        for i in 0..MAX_PENDING_EVENTS + 3 {
            q.push(i);
        }
        assert_eq!(q.len(), MAX_PENDING_EVENTS);
        assert_eq!(q.lost.load(Ordering::Relaxed), 3);
        // The oldest are kept; once one is taken, there is room again.
        assert_eq!(q.pop(), Some(0));
        q.push(7);
        assert_eq!(q.len(), MAX_PENDING_EVENTS);
        assert_eq!(q.lost.load(Ordering::Relaxed), 3);
    }

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
