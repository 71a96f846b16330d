//! The shared parts of verbs objects. The lanes' threads move completions from their RNICs'
//! CQs into each CQ's ring ([`CqShared::deliver`]) and keep QP states and posting windows
//! current; application threads poll the rings and post through the core.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;
use iwarp::verbs::{CqHandle, PdId, QpId, SrqHandle};

use super::FdQueue;
use crate::abi::*;

/// A completion channel's shared part (`ibv_comp_channel`): the `ibv_cq` addresses of
/// the CQs whose armed notification fired, one per notification.
pub type ChannelShared = FdQueue<usize>;

/// Notification requests of a CQ (`ibv_req_notify_cq`).
pub mod armed {
    /// Not armed.
    pub const NONE: u8 = 0;
    /// The next solicited (or failed) completion.
    pub const SOLICITED: u8 = 1;
    /// The next completion.
    pub const NEXT: u8 = 2;
}

/// One completion as `ibv_poll_cq` writes it (`ibv_wc` holds a union; the ring keeps this
/// plain copy).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wc {
    /// `wr_id`.
    pub wr_id: u64,
    /// `status`.
    pub status: ibv_wc_status,
    /// `opcode`.
    pub opcode: ibv_wc_opcode,
    /// `byte_len`.
    pub byte_len: u32,
    /// `invalidated_rkey` or `imm_data`, as `wc_flags` says.
    pub ex: u32,
    /// `qp_num`.
    pub qp_num: u32,
    /// `wc_flags`.
    pub wc_flags: u32,
    /// A solicited receive (for armed-solicited notifications).
    pub solicited: bool,
}

impl Wc {
    /// The C form.
    pub fn to_c(self) -> ibv_wc {
        let mut w = ibv_wc {
            wr_id: self.wr_id,
            status: self.status,
            opcode: self.opcode,
            byte_len: self.byte_len,
            qp_num: self.qp_num,
            wc_flags: self.wc_flags,
            ..Default::default()
        };
        w.__bindgen_anon_1.invalidated_rkey = self.ex;
        w
    }
}

/// A CQ's shared part. The CQ exists on every lane's RNIC (QPs of any lane may use it),
/// and each lane moves its completions into the one ring: a bounded lock-free queue with
/// any number of producers and consumers (`crossbeam`'s `ArrayQueue`), so lanes deliver
/// side by side and `ibv_poll_cq` takes no lock.
#[derive(Debug)]
pub struct CqShared {
    /// Device index.
    pub dev: usize,
    /// The RNIC's CQ on each lane, lane 0 first.
    pub handles: Vec<CqHandle>,
    /// Completions moved out of the RNICs, ready for `ibv_poll_cq`.
    pub ring: ArrayQueue<Wc>,
    /// QP queues (send and receive counted apart) that use the CQ.
    pub users: AtomicUsize,
    /// See [`armed`].
    pub armed: AtomicU8,
    /// The completion channel, if any.
    pub channel: Option<Arc<ChannelShared>>,
    /// The `ibv_cq` address (set once the C object exists).
    pub c_cq: AtomicUsize,
}

impl CqShared {
    /// A CQ whose ring holds `entries` completions, `handles[i]` on lane `i`.
    pub fn new(
        dev: usize,
        handles: Vec<CqHandle>,
        entries: usize,
        channel: Option<Arc<ChannelShared>>,
    ) -> CqShared {
        CqShared {
            dev,
            handles,
            ring: ArrayQueue::new(entries.max(1)),
            users: AtomicUsize::new(0),
            armed: AtomicU8::new(armed::NONE),
            channel,
            c_cq: AtomicUsize::new(0),
        }
    }

    /// The RNIC's CQ on lane `lane`.
    pub fn handle(&self, lane: usize) -> CqHandle {
        self.handles[lane]
    }

    /// Hands `wc` to the application, firing an armed notification it matches; `false`
    /// (and nothing changes) when the ring is full.
    pub fn deliver(&self, wc: Wc) -> bool {
        if self.ring.push(wc).is_err() {
            return false;
        }
        // Pairs with the fence in `arm`: either the application's poll after arming sees
        // this completion, or this load sees the arming.
        fence(Ordering::SeqCst);
        let want = self.armed.load(Ordering::Relaxed);
        let fires = match want {
            armed::NEXT => true,
            armed::SOLICITED => wc.solicited || wc.status != IBV_WC_SUCCESS,
            _ => false,
        };
        if fires && self.armed.swap(armed::NONE, Ordering::AcqRel) != armed::NONE {
            if let Some(ch) = &self.channel {
                ch.push(self.c_cq.load(Ordering::Acquire));
            }
        }
        true
    }

    /// Requests a notification (`ibv_req_notify_cq`): the next completion, or only the next
    /// solicited or failed one. Completions already in the ring do not fire it (the verbs
    /// contract: poll again after arming).
    pub fn arm(&self, solicited_only: bool) {
        let kind = if solicited_only {
            armed::SOLICITED
        } else {
            armed::NEXT
        };
        self.armed.fetch_max(kind, Ordering::AcqRel);
        fence(Ordering::SeqCst);
    }

    /// Takes up to `out.len()` completions.
    pub fn poll(&self, out: &mut [ibv_wc]) -> usize {
        let mut n = 0;
        while n < out.len() {
            let Some(wc) = self.ring.pop() else { break };
            out[n] = wc.to_c();
            n += 1;
        }
        n
    }
}

/// A QP's shared part.
#[derive(Debug)]
pub struct QpShared {
    /// Device index.
    pub dev: usize,
    /// The lane the QP (and its connection) lives on.
    pub lane: usize,
    /// The RNIC's QP.
    pub id: QpId,
    /// Its PD.
    pub pd: PdId,
    /// `ibv_qp_state` as applications see it.
    pub state: AtomicU32,
    /// Its `qp_num` ([`qp_num`]).
    pub num: u32,
    /// Capabilities in force.
    pub cap: ibv_qp_cap,
    /// Every send WR completes (`sq_sig_all`).
    pub sig_all: bool,
    /// The send CQ.
    pub send_cq: Arc<CqShared>,
    /// The receive CQ.
    pub recv_cq: Arc<CqShared>,
    /// The S-RQ, if receives come from one.
    pub srq: Option<SrqHandle>,
    /// Send WRs posted (the posting window is `cap.max_send_wr`).
    pub sq_posted: AtomicU64,
    /// Send WRs retired (completed and handed over, done unsignaled, or refused).
    pub sq_retired: AtomicU64,
    /// Receive WRs posted.
    pub rq_posted: AtomicU64,
    /// Receive WRs retired.
    pub rq_retired: AtomicU64,
    /// The `ibv_qp` address (set once the C object exists).
    pub c_qp: AtomicUsize,
}

/// The `qp_num` applications see for QP `id` of lane `lane` (of `lanes`): unique in the
/// process, as each lane's RNIC numbers its QPs alone (`id` itself with one lane).
pub fn qp_num(id: QpId, lane: usize, lanes: usize) -> u32 {
    id.0.wrapping_mul(lanes as u32).wrapping_add(lane as u32)
}

impl QpShared {
    /// The application's `ibv_qp_state`.
    pub fn state(&self) -> ibv_qp_state {
        self.state.load(Ordering::Acquire)
    }

    /// Claims a slot of the send (or receive) queue's posting window; `false` when the
    /// application already has the queue's depth outstanding.
    pub fn claim(&self, send: bool) -> bool {
        let (posted, retired, depth) = if send {
            (&self.sq_posted, &self.sq_retired, self.cap.max_send_wr)
        } else {
            (&self.rq_posted, &self.rq_retired, self.cap.max_recv_wr)
        };
        let mut p = posted.load(Ordering::Relaxed);
        loop {
            if p.saturating_sub(retired.load(Ordering::Acquire)) >= u64::from(depth) {
                return false;
            }
            match posted.compare_exchange_weak(p, p + 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(now) => p = now,
            }
        }
    }

    /// Gives back a slot [`QpShared::claim`] took for a WR that was not posted after all.
    pub fn unclaim(&self, send: bool) {
        let posted = if send {
            &self.sq_posted
        } else {
            &self.rq_posted
        };
        posted.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Async events of a context (`ibv_get_async_event`): the element (`ibv_cq`/`ibv_qp`/
/// `ibv_srq` address or port number) and the event type of each.
pub type AsyncShared = FdQueue<(usize, ibv_event_type)>;

/// An S-RQ's shared part (what async events name).
#[derive(Debug)]
pub struct SrqShared {
    /// Device index.
    pub dev: usize,
    /// The lane the S-RQ and every QP using it live on.
    pub lane: usize,
    /// The RNIC's S-RQ.
    pub handle: SrqHandle,
    /// The `ibv_srq` address.
    pub c_srq: AtomicUsize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cq(entries: usize, ch: Option<Arc<ChannelShared>>) -> CqShared {
        CqShared::new(0, vec![CqHandle(1)], entries, ch)
    }

    #[test]
    fn an_armed_cq_fires_once_and_a_full_ring_refuses() {
        let ch = Arc::new(ChannelShared::new().unwrap());
        let c = cq(2, Some(Arc::clone(&ch)));
        c.c_cq.store(0x1000, Ordering::Release);
        assert!(c.deliver(Wc::default()));
        assert!(ch.is_empty(), "not armed: no notification");
        c.arm(false);
        assert!(c.deliver(Wc::default()));
        assert!(!c.deliver(Wc::default()), "ring of 2 is full");
        assert_eq!(ch.pop(), Some(0x1000));
        assert!(ch.is_empty(), "one-shot");
        let mut out = [ibv_wc::default(); 4];
        assert_eq!(c.poll(&mut out), 2);
    }

    #[test]
    fn solicited_only_fires_on_solicited_or_failed_completions() {
        let ch = Arc::new(ChannelShared::new().unwrap());
        let c = cq(8, Some(Arc::clone(&ch)));
        c.arm(true);
        assert!(c.deliver(Wc::default()));
        assert!(ch.is_empty());
        assert!(c.deliver(Wc {
            status: IBV_WC_WR_FLUSH_ERR,
            ..Wc::default()
        }));
        assert_eq!(ch.len(), 1);
        c.arm(true);
        c.arm(false);
        assert!(c.deliver(Wc::default()), "NEXT wins over SOLICITED");
        assert_eq!(ch.len(), 2);
    }

    #[test]
    fn the_posting_window_is_the_queue_depth() {
        let send = Arc::new(cq(4, None));
        let q = QpShared {
            dev: 0,
            lane: 0,
            id: QpId(1),
            num: 1,
            pd: PdId(1),
            state: AtomicU32::new(IBV_QPS_RESET),
            cap: ibv_qp_cap {
                max_send_wr: 2,
                max_recv_wr: 1,
                ..Default::default()
            },
            sig_all: false,
            send_cq: Arc::clone(&send),
            recv_cq: send,
            srq: None,
            sq_posted: AtomicU64::new(0),
            sq_retired: AtomicU64::new(0),
            rq_posted: AtomicU64::new(0),
            rq_retired: AtomicU64::new(0),
            c_qp: AtomicUsize::new(0),
        };
        assert!(q.claim(true) && q.claim(true));
        assert!(!q.claim(true));
        q.sq_retired.store(1, Ordering::Release);
        assert!(q.claim(true));
        assert!(q.claim(false) && !q.claim(false));
    }
}
