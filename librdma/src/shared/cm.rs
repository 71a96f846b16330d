//! The shared parts of the connection manager: event channels and the ids events are about.
//! The data-plane thread turns the connection manager's events into [`CmPending`] records
//! on the id's channel; `rdma_get_cm_event` turns them into `rdma_cm_event`s (and creates
//! the C id of a new connection request) on the application's thread.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tcp::ConnId;

use super::FdQueue;

/// An event channel's shared part (`rdma_event_channel`): the events not yet taken.
pub type CmChannel = FdQueue<CmPending>;

/// An event waiting on a channel.
#[derive(Debug)]
pub struct CmPending {
    /// The id it is about (for a connection request: the new id).
    pub id: Arc<CmIdShared>,
    /// The listener, for a connection request.
    pub listener: Option<Arc<CmIdShared>>,
    /// What happened.
    pub kind: CmRaw,
}

/// What happened, before it becomes an `rdma_cm_event`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmRaw {
    /// `RDMA_CM_EVENT_ADDR_RESOLVED`.
    AddrResolved,
    /// `RDMA_CM_EVENT_ADDR_ERROR` with a negative errno.
    AddrError(i32),
    /// `RDMA_CM_EVENT_ROUTE_RESOLVED`.
    RouteResolved,
    /// `RDMA_CM_EVENT_CONNECT_REQUEST`.
    ConnectRequest {
        /// Device it arrived on.
        dev: usize,
        /// Lane it arrived on (its connection lives there).
        lane: usize,
        /// The connection.
        conn: ConnId,
        /// Our address.
        local: SocketAddr,
        /// The initiator's.
        remote: SocketAddr,
        /// Its private data.
        private_data: Vec<u8>,
        /// Its IRD and ORD (RFC 6581), if it sent them.
        ird_ord: Option<(u16, u16)>,
    },
    /// `RDMA_CM_EVENT_ESTABLISHED`.
    Established {
        /// The peer's private data.
        private_data: Vec<u8>,
        /// Our IRD as negotiated.
        ird: u16,
        /// Our ORD as negotiated.
        ord: u16,
    },
    /// `RDMA_CM_EVENT_REJECTED` with a negative errno (ECONNREFUSED: an MPA reject or a
    /// refused TCP connection; ECONNRESET: reset during the exchange).
    Rejected {
        /// The responder's private data (MPA reject).
        private_data: Vec<u8>,
        /// Negative errno.
        status: i32,
    },
    /// `RDMA_CM_EVENT_UNREACHABLE` (-ETIMEDOUT).
    Unreachable,
    /// `RDMA_CM_EVENT_CONNECT_ERROR` with a negative errno.
    ConnectError(i32),
    /// `RDMA_CM_EVENT_DISCONNECTED`.
    Disconnected,
}

/// An id's shared part.
#[derive(Debug)]
pub struct CmIdShared {
    /// Where its events go (`rdma_migrate_id` changes it).
    pub channel: Mutex<Arc<CmChannel>>,
    /// The `rdma_cm_id` address (set once the C object exists).
    pub c_id: AtomicUsize,
    /// Destroyed: events still queued for it are dropped.
    pub destroyed: AtomicBool,
    /// Events handed to the application and not yet acknowledged.
    pub unacked: AtomicU32,
}

impl CmIdShared {
    /// An id whose events go to `channel`.
    pub fn new(channel: Arc<CmChannel>) -> Arc<CmIdShared> {
        Arc::new(CmIdShared {
            channel: Mutex::new(channel),
            c_id: AtomicUsize::new(0),
            destroyed: AtomicBool::new(false),
            unacked: AtomicU32::new(0),
        })
    }

    /// The id's channel.
    pub fn channel(&self) -> Arc<CmChannel> {
        Arc::clone(&self.channel.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Queues `kind` about this id (on its channel).
    pub fn post(self: &Arc<Self>, kind: CmRaw) {
        self.channel().push(CmPending {
            id: Arc::clone(self),
            listener: None,
            kind,
        });
    }

    /// Whether the id is destroyed.
    pub fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }
}
