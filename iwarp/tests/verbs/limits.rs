//! The RNIC's bounded queues (issue #20): asynchronous events and CQ notifications wait up
//! to a capacity, what does not fit is counted and lost (VERBS-00 §8.3.3), and a CQ
//! overrun is reported as an asynchronous error on the CQ (VERBS-00 §5.3.1, Fig. 37) and
//! counted on it; nothing else is affected.

use crate::common::*;
use iwarp::mem::HeapBackend;
use iwarp::rdmap::{CompletionStatus as EngineStatus, WorkQueue};
use iwarp::verbs::*;

/// An RNIC with the given event-queue capacities, a PD and a 64-entry CQ.
fn small_queues(async_events: u32, cq_events: u32) -> Fx {
    let attrs = RnicAttributes {
        max_async_events: async_events,
        max_cq_events: cq_events,
        ..RnicAttributes::default()
    };
    let device = RnicDevice::new("rnic-small", attrs);
    let mut rnic = device
        .open(AddressingMode::Page, Box::new(HeapBackend::new(ARENA)), 9)
        .unwrap();
    let ulp = UlpId(1);
    let pd = rnic.alloc_pd(ulp).unwrap();
    let (cq, _) = rnic.create_cq(ulp, 64).unwrap();
    let (qp, _) = rnic.create_qp(QpInit::new(pd, cq, cq)).unwrap();
    Fx {
        rnic,
        ulp,
        pd,
        cq,
        qp,
    }
}

#[test]
fn async_event_queue_keeps_its_capacity_and_counts_the_lost() {
    let mut fx = small_queues(4, 16);
    let mut qps = vec![fx.qp];
    for _ in 0..5 {
        qps.push(
            fx.rnic
                .create_qp(QpInit::new(fx.pd, fx.cq, fx.cq))
                .unwrap()
                .0,
        );
    }
    for &qp in &qps {
        to_rts(&mut fx.rnic, qp);
    }
    actions(&mut fx.rnic);
    // Six resets, each an "LLP Connection Reset" event, and nobody polls.
    for &qp in &qps {
        fx.rnic.handle_llp_event(qp, LlpEvent::Reset).unwrap();
    }
    let s = fx.rnic.event_queue_stats().async_events;
    assert_eq!(
        (s.depth, s.capacity, s.high_water, s.offered, s.overflows),
        (4, 4, 4, 6, 2)
    );
    let counts: Vec<_> = fx.rnic.async_event_counts().collect();
    assert_eq!(counts, [(AsyncEventKind::LlpConnectionReset, 6)]);
    // The first four are kept, in order; the QPs all went to Error regardless.
    let kept = events(&mut fx.rnic);
    let want: Vec<_> = qps[..4]
        .iter()
        .map(|&qp| AsyncEvent {
            resource: EventResource::Qp(qp),
            kind: AsyncEventKind::LlpConnectionReset,
        })
        .collect();
    assert_eq!(kept, want);
    for &qp in &qps {
        assert_eq!(fx.rnic.query_qp(qp).unwrap().state, QpState::Error);
    }
    // Drained, the queue takes events again.
    let (qp, _) = fx.rnic.create_qp(QpInit::new(fx.pd, fx.cq, fx.cq)).unwrap();
    to_rts(&mut fx.rnic, qp);
    fx.rnic.handle_llp_event(qp, LlpEvent::Lost).unwrap();
    assert_eq!(
        fx.rnic.poll_async_event().map(|e| e.kind),
        Some(AsyncEventKind::LlpConnectionLost)
    );
    let s = fx.rnic.event_queue_stats().async_events;
    assert_eq!((s.depth, s.overflows), (0, 2));
}

/// Completes one Send WR on `qp` (whose CQ is `cq`) after arming `cq`.
fn armed_completion(fx: &mut Fx, qp: QpId, cq: CqHandle, wr_id: u64) {
    fx.rnic
        .request_notification(cq, NotifyType::NextCompletion)
        .unwrap();
    fx.rnic.post_sq(qp, vec![send(wr_id, vec![])]).unwrap();
    let w = fx.rnic.next_send_wr(qp).unwrap();
    fx.rnic
        .handle_completion(
            qp,
            engine_done(w.wr_id, WorkQueue::Send, EngineStatus::Success, 0),
        )
        .unwrap();
}

#[test]
fn cq_event_queue_holds_each_cq_once_and_counts_the_lost() {
    let mut fx = small_queues(16, 2);
    let mut pairs = Vec::new();
    for _ in 0..3 {
        let (cq, _) = fx.rnic.create_cq(fx.ulp, 8).unwrap();
        let (qp, _) = fx.rnic.create_qp(QpInit::new(fx.pd, cq, cq)).unwrap();
        to_rts(&mut fx.rnic, qp);
        pairs.push((cq, qp));
    }
    // The first CQ fires twice before anyone polls: it waits once.
    armed_completion(&mut fx, pairs[0].1, pairs[0].0, 1);
    armed_completion(&mut fx, pairs[0].1, pairs[0].0, 2);
    armed_completion(&mut fx, pairs[1].1, pairs[1].0, 3);
    // The queue is full: the third CQ's notification is lost, its completion is not.
    armed_completion(&mut fx, pairs[2].1, pairs[2].0, 4);
    let s = fx.rnic.event_queue_stats().cq_events;
    assert_eq!(
        (s.depth, s.capacity, s.high_water, s.overflows),
        (2, 2, 2, 1)
    );
    assert_eq!(fx.rnic.poll_completion_event(), Some(pairs[0].0));
    assert_eq!(fx.rnic.poll_completion_event(), Some(pairs[1].0));
    assert_eq!(fx.rnic.poll_completion_event(), None);
    assert_eq!(drain(&mut fx.rnic, pairs[0].0).len(), 2);
    let wcs = drain(&mut fx.rnic, pairs[2].0);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(4, CompletionStatus::Success)]
    );
    // Room again: the next notification is queued.
    armed_completion(&mut fx, pairs[2].1, pairs[2].0, 5);
    assert_eq!(fx.rnic.poll_completion_event(), Some(pairs[2].0));
}

/// Two WRs of `queue` on a QP whose CQ holds one entry, both completed successfully: the
/// second overruns the CQ (occupancy 1, one overflow). The QP, its CQ and the asynchronous
/// events that followed.
fn overrun_a_one_entry_cq(fx: &mut Fx, queue: WorkQueue) -> (QpId, CqHandle, Vec<AsyncEvent>) {
    let (cq, _) = fx.rnic.create_cq(fx.ulp, 1).unwrap();
    let (qp, _) = fx.rnic.create_qp(QpInit::new(fx.pd, cq, cq)).unwrap();
    to_rts(&mut fx.rnic, qp);
    actions(&mut fx.rnic);
    let works: Vec<_> = match queue {
        WorkQueue::Send => {
            fx.rnic
                .post_sq(qp, vec![send(1, vec![]), send(2, vec![])])
                .unwrap();
            (0..2)
                .map(|_| fx.rnic.next_send_wr(qp).unwrap().wr_id)
                .collect()
        }
        WorkQueue::Recv => {
            fx.rnic
                .post_rq(qp, vec![recv(1, vec![]), recv(2, vec![])])
                .unwrap();
            (0..2)
                .map(|_| fx.rnic.next_recv_wr(qp).unwrap().wr_id)
                .collect()
        }
    };
    for wr_id in works {
        fx.rnic
            .handle_completion(qp, engine_done(wr_id, queue, EngineStatus::Success, 0))
            .unwrap();
    }
    let attrs = fx.rnic.query_cq(cq).unwrap();
    assert_eq!((attrs.occupancy, attrs.overflows), (1, 1));
    (qp, cq, events(&mut fx.rnic))
}

#[test]
fn cq_overrun_is_an_async_error_on_the_cq_and_counted() {
    let mut fx = small_queues(16, 16);
    let (qp, cq, ev) = overrun_a_one_entry_cq(&mut fx, WorkQueue::Send);
    assert!(ev.contains(&AsyncEvent {
        resource: EventResource::Cq(cq),
        kind: AsyncEventKind::CqOverflow
    }));
    assert!(ev.contains(&AsyncEvent {
        resource: EventResource::Qp(qp),
        kind: AsyncEventKind::CqSqError
    }));
    let counts: Vec<_> = fx.rnic.async_event_counts().collect();
    assert!(
        counts.contains(&(AsyncEventKind::CqOverflow, 1)),
        "{counts:?}"
    );
    // The fixture's own CQ never overflowed.
    assert_eq!(fx.rnic.query_cq(fx.cq).unwrap().overflows, 0);
}

// VERBS-00 Fig. 24: a receive's completion that finds its CQ full is a CQ/RQ error of the
// QP (not the CQ/SQ error of a send's).
#[test]
fn cq_overrun_by_a_receive_is_a_cq_rq_error() {
    let mut fx = small_queues(16, 16);
    let (qp, _, ev) = overrun_a_one_entry_cq(&mut fx, WorkQueue::Recv);
    assert!(ev.contains(&AsyncEvent {
        resource: EventResource::Qp(qp),
        kind: AsyncEventKind::CqRqError
    }));
    assert!(!ev.contains(&AsyncEvent {
        resource: EventResource::Qp(qp),
        kind: AsyncEventKind::CqSqError
    }));
}
