//! The connection manager's bounds (issue #20), each hit on purpose: CM events an
//! application does not poll, a full QP table, the RNIC's asynchronous events, which the
//! handler drains every iteration, those it keeps for an embedder (librdma) and those it
//! forwards to an application ring. After each, the other connections carry on.

mod rdma_common;

use std::net::SocketAddrV4;
use std::time::Duration;

use dataplane::apps::Resources;
use dataplane::clock;
use dataplane::port::fault::FaultConfig;
use dataplane::rdma::CmEvent;
use iwarp::mpa::MpaConfig;
use iwarp::verbs::{channel, AsyncEventKind, Quota, UlpId};
use rdma_common::*;

const PORT: u16 = 6100;

/// Two loops, a listener on the server, `n` connects from the client; returns the loops
/// and the client's resources.
fn listen_and_connect(n: usize, setup: impl FnOnce(&mut Loop)) -> (Loop, Loop, Resources) {
    let (mut ls, mut lc) = pair(MpaConfig::default(), 1 << 20, FaultConfig::default());
    setup(&mut ls);
    let sres = Resources::new(ls.handler_mut(), 64, 8, 8, 4).unwrap();
    let cres = Resources::new(lc.handler_mut(), 64, 8, 8, 4).unwrap();
    let addr = SocketAddrV4::new(SERVER_IP, PORT);
    ls.handler_mut().listen(addr, sres.init).unwrap();
    for _ in 0..n {
        lc.handler_mut()
            .connect(CLIENT_IP, addr, cres.init, b"")
            .unwrap();
    }
    (ls, lc, cres)
}

/// Polls both loops for `d`, collecting the client's CM events (the server's stay queued).
fn run_for(ls: &mut Loop, lc: &mut Loop, d: Duration, client: &mut Vec<CmEvent>) {
    let end = clock::now() + d;
    while clock::now() < end {
        let now = clock::now();
        ls.poll_once(now);
        lc.poll_once(now);
        while let Some(e) = lc.handler_mut().poll_cm_event() {
            client.push(e);
        }
    }
}

/// Runs both loops until `done` holds for the client's events (10 s at most); the server
/// accepts its requests when `accept`.
fn run_until(
    ls: &mut Loop,
    lc: &mut Loop,
    client: &mut Vec<CmEvent>,
    accept: bool,
    done: impl Fn(&[CmEvent]) -> bool,
) {
    let end = clock::now() + Duration::from_secs(10);
    while !done(client) {
        assert!(clock::now() < end, "{client:?}");
        run_for(ls, lc, Duration::from_millis(10), client);
        if accept {
            accept_all(ls);
        }
    }
}

fn count(v: &[CmEvent], f: impl Fn(&CmEvent) -> bool) -> usize {
    v.iter().filter(|e| f(e)).count()
}

fn is_established(e: &CmEvent) -> bool {
    matches!(e, CmEvent::Established { .. })
}

fn is_error(e: &CmEvent) -> bool {
    matches!(e, CmEvent::ConnectError { .. })
}

/// Accepts every queued request of the server; returns how many.
fn accept_all(ls: &mut Loop) -> usize {
    let mut n = 0;
    while let Some(e) = ls.handler_mut().poll_cm_event() {
        if let CmEvent::ConnectRequest { id, .. } = e {
            ls.handler_mut().accept(id, b"").unwrap();
            n += 1;
        }
    }
    n
}

/// Client connection ids that ended in an error.
fn failed(v: &[CmEvent]) -> std::collections::BTreeSet<tcp::ConnId> {
    v.iter()
        .filter_map(|e| match e {
            CmEvent::ConnectError { id, .. } => Some(*id),
            _ => None,
        })
        .collect()
}

#[test]
fn unpolled_cm_events_are_capped_by_refusing_connections() {
    let (mut ls, mut lc, cres) = listen_and_connect(0, |ls| ls.handler_mut().set_max_cm_events(2));
    let addr = SocketAddrV4::new(SERVER_IP, PORT);
    let mut client = Vec::new();
    // One at a time: each either waits on the server as a ConnectRequest or is refused.
    for _ in 0..4 {
        let waiting = ls.handler().cm_counters().events_waiting;
        let errors = failed(&client).len();
        lc.handler_mut()
            .connect(CLIENT_IP, addr, cres.init, b"")
            .unwrap();
        let end = clock::now() + Duration::from_secs(5);
        while ls.handler().cm_counters().events_waiting == waiting
            && failed(&client).len() == errors
        {
            assert!(clock::now() < end, "{client:?}");
            run_for(&mut ls, &mut lc, Duration::from_millis(5), &mut client);
        }
    }
    let c = ls.handler().cm_counters();
    assert_eq!((c.events_waiting, c.events_high_water), (2, 2), "{c:?}");
    assert_eq!(c.refused_events_full, 2, "{c:?}");
    assert_eq!(failed(&client).len(), 2, "{client:?}");
    // The two waiting requests are still good: accepted, they establish.
    assert_eq!(accept_all(&mut ls), 2);
    run_until(&mut ls, &mut lc, &mut client, false, |c| {
        count(c, is_established) == 2
    });
    // With room again, a new connection is accepted.
    lc.handler_mut()
        .connect(CLIENT_IP, addr, cres.init, b"")
        .unwrap();
    run_until(&mut ls, &mut lc, &mut client, true, |c| {
        count(c, is_established) == 3
    });
    assert_eq!(ls.handler().cm_counters().refused_events_full, 2);
    assert_eq!(ls.handler().live(), 3);
}

#[test]
fn full_qp_table_refuses_connections_and_counts() {
    // The listener's QPs belong to ULP 1; it may hold 3 (the template's own is not a QP).
    let quota = Quota {
        max_qps: 3,
        ..Quota::UNLIMITED
    };
    let (mut ls, mut lc, _cres) = listen_and_connect(5, |ls| {
        ls.handler_mut().rnic_mut().set_quota(UlpId(1), quota)
    });
    let mut client = Vec::new();
    run_until(&mut ls, &mut lc, &mut client, true, |c| {
        count(c, is_established) + count(c, is_error) == 5
    });
    assert_eq!(count(&client, is_established), 3, "{client:?}");
    assert_eq!(count(&client, is_error), 2, "{client:?}");
    let c = ls.handler().cm_counters();
    assert_eq!((c.refused_no_qp, c.refused_events_full), (2, 0), "{c:?}");
    assert_eq!(ls.handler().live(), 3);
}

#[test]
fn rnic_events_are_drained_every_iteration() {
    let (ls, lc) = aborted(2, |_| {});
    for l in [&ls, &lc] {
        let q = l.handler().rnic().event_queue_stats().async_events;
        assert_eq!(q.depth, 0, "nobody polled, the handler drained: {q:?}");
        assert_eq!(q.overflows, 0);
        assert_eq!(l.handler().event_counters().async_events, q.offered);
    }
    let offered = ls.handler().rnic().event_queue_stats().async_events.offered;
    assert!(offered >= 2, "{offered}");
    let resets = ls
        .handler()
        .recent_events()
        .filter(|e| {
            matches!(
                e.kind,
                AsyncEventKind::LlpConnectionReset
                    | AsyncEventKind::LlpConnectionLost
                    | AsyncEventKind::TerminateMessageReceived
            )
        })
        .count();
    assert_eq!(
        resets,
        2,
        "{:?}",
        ls.handler().recent_events().collect::<Vec<_>>()
    );
}

/// `n` connections established, `prepare` called on the server, then the connections
/// aborted by the client: each server QP raises an event (the stream reset or lost, or the
/// Terminate received).
fn aborted(n: usize, prepare: impl FnOnce(&mut Loop)) -> (Loop, Loop) {
    let (mut ls, mut lc, _cres) = listen_and_connect(n, |_| {});
    let mut client = Vec::new();
    run_until(&mut ls, &mut lc, &mut client, true, |c| {
        count(c, is_established) == n
    });
    prepare(&mut ls);
    let ids: Vec<_> = client
        .iter()
        .filter_map(|e| match e {
            CmEvent::Established { id, .. } => Some(*id),
            _ => None,
        })
        .collect();
    for id in ids {
        lc.handler_mut().abort(id).unwrap();
    }
    run_for(&mut ls, &mut lc, Duration::from_millis(200), &mut client);
    (ls, lc)
}

#[test]
fn events_kept_for_an_embedder_are_polled_from_the_handler() {
    let (mut ls, _lc) = aborted(2, |l| l.handler_mut().keep_async_events(64));
    let q = ls.handler().rnic().event_queue_stats().async_events;
    assert_eq!(q.depth, 0, "the handler stays the RNIC's consumer: {q:?}");
    let recent: Vec<_> = ls.handler().recent_events().copied().collect();
    let mut kept = Vec::new();
    while let Some(e) = ls.handler_mut().poll_async_event() {
        kept.push(e);
    }
    assert_eq!(kept.len() as u64, q.offered, "every event, once");
    assert_eq!(kept, recent);
    assert_eq!(ls.handler().event_counters().kept_full, 0);
}

#[test]
fn events_kept_for_an_embedder_are_bounded() {
    let (mut ls, _lc) = aborted(2, |l| l.handler_mut().keep_async_events(1));
    let offered = ls.handler().rnic().event_queue_stats().async_events.offered;
    assert!(offered >= 2, "{offered}");
    assert!(ls.handler_mut().poll_async_event().is_some());
    assert_eq!(ls.handler_mut().poll_async_event(), None);
    assert_eq!(ls.handler().event_counters().kept_full, offered - 1);
    // The RNIC's own queue lost nothing: the handler drained it every iteration.
    assert_eq!(
        ls.handler()
            .rnic()
            .event_queue_stats()
            .async_events
            .overflows,
        0
    );
}

#[test]
fn a_full_application_ring_loses_events_and_counts_them() {
    // An application thread serves the server's QPs through a ring with room for one
    // notice, and reads nothing: the first event is forwarded, the others are lost.
    let mut app = None;
    let (ls, _lc) = aborted(2, |l| {
        let qps = l.handler().rnic().qp_ids();
        assert_eq!(qps.len(), 2);
        let (a, core) = channel::pair(1, Vec::new(), qps);
        l.handler_mut().attach_channel(core);
        app = Some(a);
    });
    let app = app.unwrap();
    let offered = ls.handler().rnic().event_queue_stats().async_events.offered;
    assert!(offered >= 2, "{offered}");
    let h = ls.handler().event_counters();
    assert_eq!((h.forwarded, h.ring_full), (1, offered - 1), "{h:?}");
    assert!(matches!(app.poll(), Some(channel::Notice::Event(_))));
    assert!(app.poll().is_none());
    // The RNIC's own queue was drained all the same.
    assert_eq!(
        ls.handler().rnic().event_queue_stats().async_events.depth,
        0
    );
}
