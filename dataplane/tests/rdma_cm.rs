//! Connection management the way rdma_cm users see it: private data both ways, reject
//! with private data, graceful disconnect and abort, each reported to both sides.

mod rdma_common;

use std::net::SocketAddrV4;
use std::time::Duration;

use dataplane::clock::{self};

use dataplane::apps::{all_rights, Resources};
use dataplane::port::fault::FaultConfig;
use dataplane::rdma::CmEvent;
use iwarp::mpa::MpaConfig;
use iwarp::verbs::{CompletionStatus, QpState};
use rdma_common::*;

struct Cm {
    ls: Loop,
    lc: Loop,
    server: Vec<CmEvent>,
    client: Vec<CmEvent>,
}

impl Cm {
    fn new() -> Cm {
        let (ls, lc) = pair(MpaConfig::default(), 1 << 20, FaultConfig::default());
        Cm {
            ls,
            lc,
            server: Vec::new(),
            client: Vec::new(),
        }
    }

    /// Runs both loops until `done`; `on_server` answers the server's events.
    fn run(
        &mut self,
        mut on_server: impl FnMut(&mut Loop, &CmEvent),
        mut done: impl FnMut(&Cm) -> bool,
    ) {
        let end = clock::now() + Duration::from_secs(10);
        while !done(self) {
            assert!(
                clock::now() < end,
                "server {:?}\nclient {:?}",
                self.server,
                self.client
            );
            let now = clock::now();
            self.ls.poll_once(now);
            self.lc.poll_once(now);
            while let Some(e) = self.ls.handler_mut().poll_cm_event() {
                on_server(&mut self.ls, &e);
                self.server.push(e);
            }
            while let Some(e) = self.lc.handler_mut().poll_cm_event() {
                self.client.push(e);
            }
        }
    }

    /// Runs both loops until both sides report a disconnect.
    fn run_until_disconnected(&mut self) {
        self.run(
            |_, _| {},
            |cm| disconnected(&cm.server).is_some() && disconnected(&cm.client).is_some(),
        );
    }
}

fn established(v: &[CmEvent]) -> bool {
    v.iter().any(|e| matches!(e, CmEvent::Established { .. }))
}

fn disconnected(v: &[CmEvent]) -> Option<bool> {
    v.iter().find_map(|e| match e {
        CmEvent::Disconnected { graceful, .. } => Some(*graceful),
        _ => None,
    })
}

fn connect(cm: &mut Cm) -> (tcp::ConnId, iwarp::verbs::QpId, Resources) {
    let sres = Resources::new(cm.ls.handler_mut(), 16, 8, 8, 4).unwrap();
    let cres = Resources::new(cm.lc.handler_mut(), 16, 8, 8, 4).unwrap();
    let addr = SocketAddrV4::new(SERVER_IP, 6000);
    cm.ls.handler_mut().listen(addr, sres.init).unwrap();
    let (id, qp) = cm
        .lc
        .handler_mut()
        .connect(CLIENT_IP, addr, cres.init, b"client-pd")
        .unwrap();
    (id, qp, cres)
}

// RFC 5044 §7.1: Request and Reply carry private data to the other ULP.
#[test]
fn private_data_both_ways_then_graceful_disconnect() {
    let mut cm = Cm::new();
    let (id, qp, _res) = connect(&mut cm);
    cm.run(
        |l, e| {
            if let CmEvent::ConnectRequest {
                id, private_data, ..
            } = e
            {
                assert_eq!(private_data, b"client-pd");
                l.handler_mut().accept(*id, b"server-pd").unwrap();
            }
        },
        |cm| established(&cm.server) && established(&cm.client),
    );
    match &cm.client[0] {
        CmEvent::Established { negotiated, .. } => {
            assert_eq!(negotiated.private_data, b"server-pd")
        }
        e => panic!("{e:?}"),
    }
    // RFC 5040 §6.2: graceful close by the client; both sides see a graceful disconnect.
    cm.lc.handler_mut().disconnect(id).unwrap();
    cm.run_until_disconnected();
    assert_eq!(disconnected(&cm.server), Some(true), "{:?}", cm.server);
    assert_eq!(disconnected(&cm.client), Some(true), "{:?}", cm.client);
    let state = cm.lc.handler().rnic().query_qp(qp).unwrap().state;
    assert_ne!(state, QpState::Rts);
    assert_eq!(cm.lc.handler().live(), 0);
    assert_eq!(cm.ls.handler().live(), 0);
}

// RFC 5044 §7.1: the responder rejects with private data; the initiator gets it.
#[test]
fn reject_with_private_data() {
    let mut cm = Cm::new();
    connect(&mut cm);
    cm.run(
        |l, e| {
            if let CmEvent::ConnectRequest { id, .. } = e {
                l.handler_mut().reject(*id, b"no room").unwrap();
            }
        },
        |cm| {
            cm.client
                .iter()
                .any(|e| matches!(e, CmEvent::Rejected { .. }))
        },
    );
    match &cm.client[0] {
        CmEvent::Rejected { private_data, .. } => assert_eq!(private_data, b"no room"),
        e => panic!("{e:?}"),
    }
    assert!(!established(&cm.client));
}

/// An established connection whose client QP has one receive posted (`wr_id` 5), ended
/// by `end` on the client; returns once both sides reported the abnormal disconnect, with
/// that receive's completion checked as flushed.
fn ended_with_a_receive_posted(end: impl FnOnce(&mut Loop, tcp::ConnId)) -> Cm {
    let mut cm = Cm::new();
    let (id, qp, mut res) = connect(&mut cm);
    let buf = res.buffer(cm.lc.handler_mut(), 4096, all_rights()).unwrap();
    cm.lc
        .handler_mut()
        .rnic_mut()
        .post_rq(qp, vec![buf.recv_wr(5, 0, 64)])
        .unwrap();
    cm.run(
        |l, e| {
            if let CmEvent::ConnectRequest { id, .. } = e {
                l.handler_mut().accept(*id, &[]).unwrap();
            }
        },
        |cm| established(&cm.server) && established(&cm.client),
    );
    end(&mut cm.lc, id);
    cm.run_until_disconnected();
    assert_eq!(disconnected(&cm.server), Some(false), "{:?}", cm.server);
    assert_eq!(disconnected(&cm.client), Some(false), "{:?}", cm.client);
    let wc = res.poll_cq(cm.lc.handler_mut()).expect("flushed receive");
    assert_eq!((wc.wr_id, wc.status), (5, CompletionStatus::Flushed));
    cm
}

// RFC 5040 §6.2.1: abortive close; posted receives are flushed, both sides report an
// abnormal disconnect.
#[test]
fn abort_flushes_and_reports() {
    ended_with_a_receive_posted(|l, id| l.handler_mut().abort(id).unwrap());
}

// RFC 5040 §6.2.1 and VERBS-00 §6.2.2.2 (Modify RTS → Terminate): the posted receive is
// flushed, the Terminate reaches the peer (TCP closes gracefully behind it instead of
// resetting it away) and both sides report an abnormal disconnect; both ends close.
#[test]
fn terminate_reaches_the_peer_then_both_close() {
    let mut cm = ended_with_a_receive_posted(|l, id| l.handler_mut().terminate(id).unwrap());
    let sent = cm.lc.handler().counters().terminates_sent;
    let received = cm.ls.handler().counters().terminates_received;
    assert_eq!((sent, received), (1, 1));
    cm.run(
        |_, _| {},
        |cm| cm.ls.handler().live() + cm.lc.handler().live() == 0,
    );
}

/// Listens without a QP template, as librdmacm does: each Request arrives without a QP.
fn listen_pending(cm: &mut Cm, port: u16) -> (SocketAddrV4, Resources) {
    let sres = Resources::new(cm.ls.handler_mut(), 16, 8, 8, 4).unwrap();
    let addr = SocketAddrV4::new(SERVER_IP, port);
    cm.ls.handler_mut().listen_pending(addr, 8).unwrap();
    (addr, sres)
}

// rdma_cm's order (RFC 5044 §7.1 exchange, VERBS-00 §6.2.1): the Request reaches the
// listener before any QP exists; the application creates its QP on the new connection,
// posts a receive, and accepts with it; the client connects a QP it created first. A Send
// then travels on the accepted QP.
#[test]
fn request_without_a_qp_then_accept_with_the_applications_qp() {
    let mut cm = Cm::new();
    let (addr, sres) = listen_pending(&mut cm, 6100);
    let cres = Resources::new(cm.lc.handler_mut(), 16, 8, 8, 4).unwrap();
    let (cqp, _) = cm.lc.handler_mut().rnic_mut().create_qp(cres.init).unwrap();
    let id = cm
        .lc
        .handler_mut()
        .connect_qp(CLIENT_IP, addr, cqp, b"hello", None)
        .unwrap();
    let mut sres = sres;
    let sbuf = sres
        .buffer(cm.ls.handler_mut(), 4096, all_rights())
        .unwrap();
    let mut sqp = None;
    cm.run(
        |l, e| {
            if let CmEvent::Request {
                id,
                local,
                private_data,
                ird_ord,
                ..
            } = e
            {
                assert_eq!(*local, addr.into());
                assert_eq!(private_data, b"hello");
                assert!(ird_ord.is_some(), "MPA revision 2 carries IRD/ORD");
                let h = l.handler_mut();
                let (qp, _) = h.rnic_mut().create_qp(sres.init).unwrap();
                h.rnic_mut()
                    .post_rq(qp, vec![sbuf.recv_wr(7, 0, 64)])
                    .unwrap();
                h.accept_with_qp(*id, qp, b"welcome", None).unwrap();
                sqp = Some(qp);
            }
        },
        |cm| established(&cm.server) && established(&cm.client),
    );
    let sqp = sqp.expect("the server saw the Request");
    assert!(
        !cm.server
            .iter()
            .any(|e| matches!(e, CmEvent::ConnectRequest { .. })),
        "a pending listener reports Request, not ConnectRequest: {:?}",
        cm.server
    );
    match &cm.client[0] {
        CmEvent::Established {
            id: got,
            qp,
            negotiated,
        } => {
            assert_eq!((*got, *qp), (id, cqp));
            assert_eq!(negotiated.private_data, b"welcome");
        }
        e => panic!("{e:?}"),
    }
    // The accepted QP carries the traffic.
    let mut cres = cres;
    let cbuf = cres
        .buffer(cm.lc.handler_mut(), 4096, all_rights())
        .unwrap();
    cbuf.bytes_mut(cm.lc.handler_mut().rnic_mut())[..5].copy_from_slice(b"ping!");
    cm.lc
        .handler_mut()
        .rnic_mut()
        .post_sq(
            cqp,
            vec![iwarp::verbs::SendWr::new(
                1,
                iwarp::verbs::SqOp::Message(cbuf.send(0, 5)),
            )],
        )
        .unwrap();
    let end = clock::now() + Duration::from_secs(5);
    let wc = loop {
        assert!(clock::now() < end, "no receive completion");
        let now = clock::now();
        cm.ls.poll_once(now);
        cm.lc.poll_once(now);
        if let Some(wc) = sres.poll_cq(cm.ls.handler_mut()) {
            break wc;
        }
    };
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (7, CompletionStatus::Success, 5)
    );
    assert_eq!(wc.qp, sqp);
    assert_eq!(&sbuf.bytes(cm.ls.handler().rnic())[..5], b"ping!");
}

// rdma_accept's responder_resources / initiator_depth (IRD 1, ORD 0 here) replace the
// handler's IRD/ORD (16/16) in the Reply of that connection only (RFC 6581 §5): both sides
// agree on them, and the initiator's ORD stays within the responder's IRD.
#[test]
fn accept_with_the_applications_ird_ord() {
    let mut cm = Cm::new();
    let (addr, mut sres) = listen_pending(&mut cm, 6150);
    let cres = Resources::new(cm.lc.handler_mut(), 16, 8, 8, 4).unwrap();
    let (cqp, _) = cm.lc.handler_mut().rnic_mut().create_qp(cres.init).unwrap();
    cm.lc
        .handler_mut()
        .connect_qp(CLIENT_IP, addr, cqp, b"", Some((4, 4)))
        .unwrap();
    let sbuf = sres
        .buffer(cm.ls.handler_mut(), 4096, all_rights())
        .unwrap();
    cm.run(
        |l, e| {
            if let CmEvent::Request { id, ird_ord, .. } = e {
                assert_eq!(*ird_ord, Some((4, 4)));
                let h = l.handler_mut();
                let (qp, _) = h.rnic_mut().create_qp(sres.init).unwrap();
                h.rnic_mut()
                    .post_rq(qp, vec![sbuf.recv_wr(7, 0, 64)])
                    .unwrap();
                h.accept_with_qp(*id, qp, b"", Some((1, 0))).unwrap();
            }
        },
        |cm| established(&cm.server) && established(&cm.client),
    );
    let depths = |v: &[CmEvent]| {
        v.iter().find_map(|e| match e {
            CmEvent::Established { negotiated, .. } => Some((negotiated.ird, negotiated.ord)),
            _ => None,
        })
    };
    assert_eq!(depths(&cm.server), Some((1, 0)), "the server's IRD/ORD");
    assert_eq!(
        depths(&cm.client),
        Some((4, 1)),
        "the client's ORD within IRD 1"
    );
}

// A Request the application never answers disappears when the initiator gives up; the
// listener's port can be listened on again as soon as it is released (perftest binds 18515
// twice in a row).
#[test]
fn withdrawn_request_and_port_reuse() {
    let mut cm = Cm::new();
    let (addr, _sres) = listen_pending(&mut cm, 6200);
    let cres = Resources::new(cm.lc.handler_mut(), 16, 8, 8, 4).unwrap();
    let (cqp, _) = cm.lc.handler_mut().rnic_mut().create_qp(cres.init).unwrap();
    let id = cm
        .lc
        .handler_mut()
        .connect_qp(CLIENT_IP, addr, cqp, b"", Some((2, 3)))
        .unwrap();
    cm.run(
        |_, _| {},
        |cm| {
            cm.server
                .iter()
                .any(|e| matches!(e, CmEvent::Request { .. }))
        },
    );
    // RFC 6581 §3: the Request carries this connection's IRD and ORD, not the handler's.
    assert!(cm.server.iter().any(|e| matches!(
        e,
        CmEvent::Request {
            ird_ord: Some((2, 3)),
            ..
        }
    )));
    cm.lc.handler_mut().abort(id).unwrap();
    cm.run(
        |_, _| {},
        |cm| {
            cm.server
                .iter()
                .any(|e| matches!(e, CmEvent::RequestWithdrawn { .. }))
        },
    );
    assert!(cm.ls.handler_mut().unlisten(addr.port()));
    assert!(
        !cm.ls.handler_mut().unlisten(addr.port()),
        "already released"
    );
    cm.ls.handler_mut().listen_pending(addr, 8).unwrap();
}

// A connect to a port nobody listens on is refused by a TCP reset (RFC 9293 §3.10.7.1);
// the error says so, which rdma_cm reports as REJECTED rather than a generic failure.
#[test]
fn refused_connect_says_the_stream_was_refused() {
    let mut cm = Cm::new();
    let cres = Resources::new(cm.lc.handler_mut(), 16, 8, 8, 4).unwrap();
    let addr = SocketAddrV4::new(SERVER_IP, 6300);
    cm.lc
        .handler_mut()
        .connect(CLIENT_IP, addr, cres.init, b"")
        .unwrap();
    cm.run(
        |_, _| {},
        |cm| {
            cm.client
                .iter()
                .any(|e| matches!(e, CmEvent::ConnectError { .. }))
        },
    );
    assert!(
        cm.client.iter().any(|e| matches!(
            e,
            CmEvent::ConnectError {
                llp: Some(tcp::CloseReason::Refused),
                ..
            }
        )),
        "{:?}",
        cm.client
    );
}

// Flow steering (issue #17): a handler that is lane 1 of 2 opens connections from local
// ports whose 4-tuple hashes to lane 1 (so the peer's lane 1 gets them, RSS or not); the
// peer's lane 1 counts none of them foreign, its lane 0 would count every one.
#[test]
fn a_lane_opens_from_ports_of_its_own_lane_and_counts_foreign_accepts() {
    use dataplane::steer::{flow_hash, lane_of, Lane};
    for server_lane in [1u16, 0] {
        let mut cm = Cm::new();
        cm.lc.handler_mut().set_lane(Lane { lane: 1, lanes: 2 });
        cm.ls.handler_mut().set_lane(Lane {
            lane: server_lane,
            lanes: 2,
        });
        let sres = Resources::new(cm.ls.handler_mut(), 64, 8, 8, 4).unwrap();
        let cres = Resources::new(cm.lc.handler_mut(), 64, 8, 8, 4).unwrap();
        let addr = SocketAddrV4::new(SERVER_IP, 6000);
        cm.ls.handler_mut().listen(addr, sres.init).unwrap();
        let ids: Vec<_> = (0..6)
            .map(|_| {
                cm.lc
                    .handler_mut()
                    .connect(CLIENT_IP, addr, cres.init, b"")
                    .unwrap()
                    .0
            })
            .collect();
        cm.run(
            |l, e| {
                if let CmEvent::ConnectRequest { id, .. } = e {
                    l.handler_mut().accept(*id, b"").unwrap();
                }
            },
            |cm| {
                let n = |v: &[CmEvent]| {
                    v.iter()
                        .filter(|e| matches!(e, CmEvent::Established { .. }))
                        .count()
                };
                n(&cm.server) == 6 && n(&cm.client) == 6
            },
        );
        let mut ports = Vec::new();
        for id in ids {
            let t = cm.lc.handler().tcp().tuple(id).unwrap();
            assert_eq!(lane_of(flow_hash(t.local, t.remote), 2), 1, "{t:?}");
            ports.push(t.local.port());
        }
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 6, "distinct local ports");
        let foreign = if server_lane == 1 { 0 } else { 6 };
        assert_eq!(cm.ls.handler().foreign_connections(), foreign);
        assert_eq!(cm.lc.handler().foreign_connections(), 0);
    }
}
