//! MPA negotiation of two connections over simulated TCP, both roles (RFC 5044 §7.1,
//! RFC 6581), followed by a Send and an RDMA Write in each direction.

use std::time::Duration;

use crate::common::*;
use iwarp::conn::{ConnEvent, ConnState};
use iwarp::mem::{STag, Sge};
use iwarp::mpa::{MpaConfig, MpaError, Recovery, RtrKind};
use iwarp::rdmap::{CompletionStatus, RecvWr, RemoteBuf, SendOp, SendWr, StreamState, WorkQueue};
use iwarp::wire::mpa::RtrTypes;

const MEM: usize = 1 << 16;

fn rtr(send: bool, write: bool, read: bool) -> RtrTypes {
    RtrTypes { send, write, read }
}

fn sim(a: MpaConfig, b: MpaConfig, decision: Decision, seed: u64) -> (Sim, STag, STag) {
    let (ma, sa) = memory(MEM);
    let (mb, sb) = memory(MEM);
    let s = Sim::new(
        seed,
        clean_link(),
        (conn_config(a), ma),
        (conn_config(b), mb),
        decision,
    );
    (s, sa, sb)
}

/// A Send and a Write from each side to the other; checks bytes and completions.
fn exchange(s: &mut Sim, sa: STag, sb: STag) {
    let data_a = pattern(5000, 1);
    let data_b = pattern(3000, 2);
    s.mem_mut(Side::A).bytes_mut()[..5000].copy_from_slice(&data_a);
    s.mem_mut(Side::B).bytes_mut()[..3000].copy_from_slice(&data_b);
    for (side, stag) in [(Side::A, sa), (Side::B, sb)] {
        let c = s.conn(side).unwrap();
        c.post_recv(RecvWr {
            wr_id: 100,
            sgl: vec![Sge {
                stag,
                to: 10_000,
                len: 8000,
            }],
        })
        .unwrap();
    }
    for (side, stag, peer, len) in [(Side::A, sa, sb, 5000u32), (Side::B, sb, sa, 3000)] {
        s.with_conn(side, |c, m, now| {
            c.post_send(
                now,
                m,
                SendWr::new(
                    1,
                    SendOp::Send {
                        sgl: iwarp::mem::Sgl::one(Sge { stag, to: 0, len }),
                        solicited: false,
                        invalidate: None,
                    },
                ),
            )
            .unwrap();
            c.post_send(
                now,
                m,
                SendWr::new(
                    2,
                    SendOp::Write {
                        sgl: iwarp::mem::Sgl::one(Sge { stag, to: 0, len }),
                        remote: RemoteBuf {
                            stag: peer,
                            to: 30_000,
                        },
                    },
                ),
            )
            .unwrap();
        });
    }
    let mut done: [Vec<iwarp::rdmap::Completion>; 2] = [Vec::new(), Vec::new()];
    let ok = s.run_until(Duration::from_secs(5), |s| {
        for (i, side) in [Side::A, Side::B].into_iter().enumerate() {
            if let Some(c) = s.conn(side) {
                while let Some(wc) = c.poll_completion() {
                    done[i].push(wc);
                }
            }
        }
        done.iter().all(|d| d.len() == 3)
    });
    assert!(ok, "completions: {done:?}");
    for d in &done {
        // RFC 5040 §5.5: Send queue in posting order; the receive completes once.
        let sq: Vec<u64> = d
            .iter()
            .filter(|c| c.queue == WorkQueue::Send)
            .map(|c| c.wr_id)
            .collect();
        assert_eq!(sq, vec![1, 2]);
        assert!(d.iter().all(|c| c.status == CompletionStatus::Success));
    }
    let b = s.mem(Side::B).bytes().to_vec();
    let a = s.mem(Side::A).bytes().to_vec();
    assert_eq!(&b[10_000..15_000], &data_a[..]);
    assert_eq!(&b[30_000..35_000], &data_a[..]);
    assert_eq!(&a[10_000..13_000], &data_b[..]);
    assert_eq!(&a[30_000..33_000], &data_b[..]);
}

fn negotiated(s: &mut Sim, side: Side) -> iwarp::mpa::Negotiated {
    s.conn(side)
        .unwrap()
        .negotiated()
        .cloned()
        .expect("negotiated")
}

fn establish(s: &mut Sim) {
    let ok = s.run_until(Duration::from_secs(2), |s| {
        s.established(Side::A) && s.established(Side::B)
    });
    assert!(ok, "A: {:?}\nB: {:?}", s.events(Side::A), s.events(Side::B));
}

// RFC 6581: revision 2 with IRD/ORD by default; private data goes both ways.
#[test]
fn rev2_default_private_data_both_ways() {
    let a = MpaConfig {
        private_data: b"hello responder".to_vec(),
        ird: 8,
        ord: 4,
        ..MpaConfig::default()
    };
    let b = MpaConfig {
        ird: 2,
        ord: 16,
        ..MpaConfig::default()
    };
    let (mut s, sa, sb) = sim(a, b, Decision::Accept(b"hi initiator".to_vec()), 1);
    establish(&mut s);
    let req = s.events(Side::B).iter().find_map(|e| match e {
        ConnEvent::ConnectRequest(r) => Some(r.clone()),
        _ => None,
    });
    let req = req.expect("request reported");
    assert_eq!(req.revision, 2);
    assert_eq!(req.private_data, b"hello responder");
    let na = negotiated(&mut s, Side::A);
    let nb = negotiated(&mut s, Side::B);
    assert_eq!((na.revision, nb.revision), (2, 2));
    assert!(na.enhanced && nb.enhanced);
    assert!(!na.crc && !nb.crc);
    assert_eq!(na.private_data, b"hi initiator");
    assert_eq!(nb.private_data, b"hello responder");
    // RFC 6581 §5: the responder's ORD never exceeds the initiator's IRD (8); the
    // initiator's ORD never exceeds the responder's IRD (2).
    assert_eq!((na.ird, na.ord), (8, 2));
    assert_eq!((nb.ird, nb.ord), (2, 8));
    assert_eq!(
        s.conn(Side::A).unwrap().state(),
        ConnState::Rdma(StreamState::Active)
    );
    exchange(&mut s, sa, sb);
}

// RFC 5044 §7.1 / RFC 6581 §4: a revision 1 responder answers revision 1.
#[test]
fn rev1_fallback() {
    let b = MpaConfig {
        revision: 1,
        ..MpaConfig::default()
    };
    let (mut s, sa, sb) = sim(MpaConfig::default(), b, Decision::Accept(Vec::new()), 2);
    establish(&mut s);
    let na = negotiated(&mut s, Side::A);
    assert_eq!(na.revision, 1);
    assert!(!na.enhanced);
    assert_eq!(negotiated(&mut s, Side::B).revision, 1);
    exchange(&mut s, sa, sb);
}

// RFC 5044 §7.1: CRC is used in both directions when either side asks for it.
#[test]
fn crc_on_when_either_side_asks() {
    for (ca, cb) in [(true, false), (false, true), (true, true), (false, false)] {
        let a = MpaConfig {
            require_crc: ca,
            ..MpaConfig::default()
        };
        let b = MpaConfig {
            require_crc: cb,
            ..MpaConfig::default()
        };
        let (mut s, sa, sb) = sim(a, b, Decision::Accept(Vec::new()), 3);
        establish(&mut s);
        assert_eq!(negotiated(&mut s, Side::A).crc, ca || cb);
        assert_eq!(negotiated(&mut s, Side::B).crc, ca || cb);
        exchange(&mut s, sa, sb);
    }
}

// RFC 5044 §7.1: markers are negotiated per direction (M asks the peer to send them).
#[test]
fn markers_per_direction() {
    for (wa, wb) in [(true, false), (false, true), (true, true)] {
        let a = MpaConfig {
            want_markers: wa,
            accept_markers: true,
            require_crc: true,
            ..MpaConfig::default()
        };
        let b = MpaConfig {
            want_markers: wb,
            accept_markers: true,
            ..MpaConfig::default()
        };
        let (mut s, sa, sb) = sim(a, b, Decision::Accept(Vec::new()), 4);
        establish(&mut s);
        let na = negotiated(&mut s, Side::A);
        let nb = negotiated(&mut s, Side::B);
        assert_eq!((na.markers_rx, na.markers_tx), (wa, wb));
        assert_eq!((nb.markers_rx, nb.markers_tx), (wb, wa));
        exchange(&mut s, sa, sb);
    }
}

// RFC 5044 §7.1: a reject carries the responder's private data to the initiator, then
// the connection closes.
#[test]
fn reject_with_private_data() {
    let (mut s, sa, _) = sim(
        MpaConfig::default(),
        MpaConfig::default(),
        Decision::Reject(b"go away".to_vec()),
        5,
    );
    // Work posted during the negotiation completes as Flushed (RFC 5040 §5.4).
    let a = s.conn(Side::A).unwrap();
    a.post_recv(RecvWr {
        wr_id: 8,
        sgl: vec![Sge {
            stag: sa,
            to: 0,
            len: 64,
        }],
    })
    .unwrap();
    let wr = SendWr::new(
        9,
        SendOp::Send {
            sgl: iwarp::mem::Sgl::one(Sge {
                stag: sa,
                to: 0,
                len: 64,
            }),
            solicited: false,
            invalidate: None,
        },
    );
    s.with_conn(Side::A, |a, m, now| a.post_send(now, m, wr))
        .unwrap();
    let ok = s.run_until(Duration::from_secs(2), |s| {
        s.events(Side::A)
            .iter()
            .any(|e| matches!(e, ConnEvent::Rejected { .. }))
    });
    assert!(ok, "A: {:?}", s.events(Side::A));
    let pd = s.events(Side::A).iter().find_map(|e| match e {
        ConnEvent::Rejected { private_data } => Some(private_data.clone()),
        _ => None,
    });
    assert_eq!(pd.as_deref(), Some(&b"go away"[..]));
    let mut flushed = Vec::new();
    while let Some(c) = s.conn(Side::A).unwrap().poll_completion() {
        flushed.push((c.wr_id, c.queue, c.status));
    }
    flushed.sort_by_key(|f| f.0);
    assert_eq!(
        flushed,
        vec![
            (8, WorkQueue::Recv, CompletionStatus::Flushed),
            (9, WorkQueue::Send, CompletionStatus::Flushed)
        ]
    );
    assert_eq!(s.conn(Side::A).unwrap().state(), ConnState::Rejected);
    assert_eq!(s.conn(Side::B).unwrap().state(), ConnState::Rejected);
    let wr = SendWr::new(
        1,
        SendOp::Immediate {
            data: [0; 8],
            solicited: false,
        },
    );
    assert!(s
        .with_conn(Side::A, |a, m, now| a.post_send(now, m, wr))
        .is_err());
    let closed = s.run_until(Duration::from_secs(5), |s| {
        s.nodes[0].closed.is_some() && s.nodes[1].closed.is_some()
    });
    assert!(closed, "both TCP connections close after the reject");
}

// Linux siw behaviour kept by default: a Request asking for markers is rejected.
#[test]
fn markers_refused_by_default_responder() {
    let a = MpaConfig {
        want_markers: true,
        accept_markers: true,
        ..MpaConfig::default()
    };
    let (mut s, _, _) = sim(a, MpaConfig::default(), Decision::Accept(Vec::new()), 6);
    let ok = s.run_until(Duration::from_secs(2), |s| {
        s.events(Side::A)
            .iter()
            .any(|e| matches!(e, ConnEvent::Rejected { .. }))
    });
    assert!(ok, "A: {:?}", s.events(Side::A));
    assert!(s.events(Side::B).iter().any(|e| matches!(
        e,
        ConnEvent::NegotiationFailed {
            error: MpaError::MarkersRefused,
            recovery: Recovery::Close
        }
    )));
}

// RFC 6581 §5: in peer-to-peer mode the initiator sends the agreed zero-length RTR first;
// the responder consumes it and only then may send.
#[test]
fn p2p_rtr_each_kind() {
    for (offer, want) in [
        (rtr(false, true, false), RtrKind::Write),
        (rtr(true, false, false), RtrKind::Send),
        (rtr(false, false, true), RtrKind::Read),
    ] {
        let a = MpaConfig {
            p2p: Some(offer),
            ..MpaConfig::default()
        };
        let b = MpaConfig {
            p2p: Some(rtr(true, true, true)),
            ..MpaConfig::default()
        };
        let (mut s, sa, sb) = sim(a, b, Decision::Accept(Vec::new()), 7);
        establish(&mut s);
        assert_eq!(negotiated(&mut s, Side::A).rtr, Some(want));
        assert_eq!(negotiated(&mut s, Side::B).rtr, Some(want));
        // The RTR reached the responder's MPA layer, not its RDMAP engine.
        assert_eq!(s.conn(Side::B).unwrap().stats().fpdus_received, 1);
        assert_eq!(s.conn(Side::A).unwrap().stats().fpdus_sent, 1);
        exchange(&mut s, sa, sb);
    }
}

// RFC 5044 §7.1: a peer that never completes the exchange is timed out and reset.
#[test]
fn negotiation_timeout_resets() {
    let b = MpaConfig {
        timeout: Duration::from_secs(1),
        ..MpaConfig::default()
    };
    let a = MpaConfig {
        reply_timeout: Duration::from_secs(2),
        ..MpaConfig::default()
    };
    let (mut s, _, _) = sim(a, b, Decision::Ignore, 8);
    let ok = s.run_until(Duration::from_secs(5), |s| {
        s.events(Side::A).iter().any(|e| {
            matches!(
                e,
                ConnEvent::NegotiationFailed {
                    error: MpaError::Timeout,
                    recovery: Recovery::Reset
                }
            )
        })
    });
    assert!(ok, "A: {:?}", s.events(Side::A));
    assert_eq!(s.conn(Side::A).unwrap().state(), ConnState::Failed);
}

// siwlab README (siw 6.1 race after the MPA Reply): the initiator can hold its first FPDU;
// work posted during negotiation waits for FPDU mode and then for the hold.
#[test]
fn first_fpdu_delay_holds_initiator_fpdus() {
    let (ma, sa) = memory(MEM);
    let (mb, sb) = memory(MEM);
    let mut ca = conn_config(MpaConfig::default());
    ca.first_fpdu_delay = Duration::from_millis(100);
    let mut s = Sim::new(
        9,
        clean_link(),
        (ca, ma),
        (conn_config(MpaConfig::default()), mb),
        Decision::Accept(Vec::new()),
    );
    let wr = SendWr::new(
        1,
        SendOp::Write {
            sgl: iwarp::mem::Sgl::one(Sge {
                stag: sa,
                to: 0,
                len: 64,
            }),
            remote: RemoteBuf { stag: sb, to: 0 },
        },
    );
    s.with_conn(Side::A, |a, m, now| a.post_send(now, m, wr))
        .unwrap();
    establish(&mut s);
    let t0 = s.now;
    // The hold is visible to the consumer (a measurement waits for its end); the
    // responder holds nothing.
    let until = s.conn(Side::A).unwrap().fpdu_hold_until().expect("held");
    assert!(until > s.now && until - s.now <= Duration::from_millis(100));
    assert_eq!(s.conn(Side::B).unwrap().fpdu_hold_until(), None);
    let mut wc = None;
    let ok = s.run_until(Duration::from_secs(2), |s| {
        wc = wc.or_else(|| s.conn(Side::A).unwrap().poll_completion());
        wc.is_some() && s.conn(Side::B).unwrap().stats().fpdus_received == 1
    });
    assert!(ok);
    assert!(s.now >= until);
    assert_eq!(s.conn(Side::A).unwrap().fpdu_hold_until(), None);
    assert_eq!(wc.unwrap().status, CompletionStatus::Success);
    assert!(
        s.now - t0 >= Duration::from_millis(99),
        "sent after {:?}",
        s.now - t0
    );
    assert_eq!(s.conn(Side::B).unwrap().stats().fpdus_received, 1);
}

/// A 64-octet RDMA Write from `local` (offset 0) to `remote` (offset 0).
fn write_wr(id: u64, local: STag, remote: STag) -> SendWr {
    SendWr::new(
        id,
        SendOp::Write {
            sgl: iwarp::mem::Sgl::one(Sge {
                stag: local,
                to: 0,
                len: 64,
            }),
            remote: RemoteBuf {
                stag: remote,
                to: 0,
            },
        },
    )
}

// RFC 5044 §7.1.2 rule 4: "MPA Responder mode implementations MUST receive and validate at
// least one FPDU before sending any FPDUs or Markers" (Linux siw as initiator fails the
// connection when the responder's first FPDU is already behind the Reply it reads). With a
// first-FPDU delay the responder holds its FPDUs until the initiator's first FPDU arrives;
// when the initiator's application waits for the responder to speak first, the delay ends
// the hold.
#[test]
fn responder_holds_its_first_fpdu_until_the_initiators_or_the_delay() {
    for initiator_speaks in [true, false] {
        let (ma, sa) = memory(MEM);
        let (mb, sb) = memory(MEM);
        let mut cb = conn_config(MpaConfig::default());
        cb.first_fpdu_delay = Duration::from_millis(100);
        let mut s = Sim::new(
            12,
            clean_link(),
            (conn_config(MpaConfig::default()), ma),
            (cb, mb),
            Decision::Accept(Vec::new()),
        );
        establish(&mut s);
        let t0 = s.now;
        let until = s.conn(Side::B).unwrap().fpdu_hold_until().expect("held");
        assert!(until > t0 && until - t0 <= Duration::from_millis(100));
        assert_eq!(s.conn(Side::A).unwrap().fpdu_hold_until(), None);
        s.with_conn(Side::B, |b, m, now| {
            b.post_send(now, m, write_wr(2, sb, sa))
        })
        .unwrap();
        if initiator_speaks {
            s.with_conn(Side::A, |a, m, now| {
                a.post_send(now, m, write_wr(1, sa, sb))
            })
            .unwrap();
        }
        let ok = s.run_until(Duration::from_secs(2), |s| {
            s.conn(Side::A).unwrap().stats().fpdus_received == 1
        });
        assert!(ok, "the responder's Write never arrived");
        let took = s.now - t0;
        if initiator_speaks {
            // The responder saw the initiator's FPDU first, and sent at once.
            assert_eq!(s.conn(Side::B).unwrap().stats().fpdus_received, 1);
            assert!(took < Duration::from_millis(50), "sent after {took:?}");
        } else {
            assert!(took >= Duration::from_millis(99), "sent after {took:?}");
        }
        assert_eq!(s.conn(Side::B).unwrap().fpdu_hold_until(), None);
    }
}

// RFC 5040 §6.2, RFC 5041 §6: a graceful close drains, sends FIN, and the peer's stream
// closes without a Terminate.
#[test]
fn graceful_close_after_traffic() {
    let (mut s, sa, sb) = sim(
        MpaConfig::default(),
        MpaConfig::default(),
        Decision::Accept(Vec::new()),
        10,
    );
    establish(&mut s);
    exchange(&mut s, sa, sb);
    s.with_conn(Side::A, |a, m, now| a.close(now, m));
    let ok = s.run_until(Duration::from_secs(100), |s| {
        s.nodes[0].closed.is_some() && s.nodes[1].closed.is_some()
    });
    assert!(ok, "A {:?}\nB {:?}", s.events(Side::A), s.events(Side::B));
    for side in [Side::A, Side::B] {
        assert!(
            s.events(side)
                .iter()
                .any(|e| matches!(e, ConnEvent::Stream(iwarp::rdmap::Event::Closed))),
            "{side:?}: {:?}",
            s.events(side)
        );
        let st = s.conn(side).unwrap().stats();
        assert_eq!(st.terminates_sent + st.terminates_received, 0);
    }
    assert_eq!(
        s.conn(Side::B).unwrap().state(),
        ConnState::Rdma(StreamState::Closed)
    );
}

// RFC 6581 §7: no RTR type both sides accept: the responder replies, then sends Terminate
// 2/0/07 and closes; the initiator fails the negotiation too.
#[test]
fn p2p_without_matching_rtr_terminates_2_0_07() {
    let a = MpaConfig {
        p2p: Some(rtr(false, true, false)),
        ..MpaConfig::default()
    };
    let b = MpaConfig {
        p2p: Some(rtr(true, false, false)),
        ..MpaConfig::default()
    };
    let (mut s, _, _) = sim(a, b, Decision::Accept(Vec::new()), 11);
    let ok = s.run_until(Duration::from_secs(5), |s| {
        s.nodes[0].closed.is_some() && s.nodes[1].closed.is_some()
    });
    assert!(ok, "A {:?}\nB {:?}", s.events(Side::A), s.events(Side::B));
    for side in [Side::A, Side::B] {
        assert!(
            s.events(side).iter().any(|e| matches!(
                e,
                ConnEvent::NegotiationFailed {
                    error: MpaError::NoMatchingRtr(_),
                    recovery: Recovery::Terminate
                }
            )),
            "{side:?}: {:?}",
            s.events(side)
        );
        let c = s.conn(side).unwrap();
        assert_eq!(c.state(), ConnState::Failed);
        // One FPDU went out: the Terminate with 2/0/07.
        assert_eq!(c.stats().terminates_sent, 1);
        assert_eq!(c.stats().fpdus_sent, 1);
        assert!(s.events(side).iter().any(|e| matches!(
            e,
            ConnEvent::Stream(iwarp::rdmap::Event::TerminateSent(c))
                if *c == iwarp::wire::terminate::TerminateCause::MPA_NO_MATCHING_RTR
        )));
    }
}

// Under load TCP can take seconds to connect (SYNs retransmitted): the initiator's wait for
// the Reply counts from when TCP took its Request, not from the connection's creation.
#[test]
fn initiator_timer_starts_when_the_request_goes_out() {
    use iwarp::conn::Connection;
    use tcp::SegmentSource;
    let (mut mem, _) = memory(MEM);
    let t0 = tcp::Instant::from_millis(1);
    let cfg = conn_config(MpaConfig {
        reply_timeout: Duration::from_secs(5),
        ..MpaConfig::default()
    });
    let mut c = Connection::initiator(cfg, t0).unwrap();
    assert_eq!(c.poll_timeout(), Some(t0 + Duration::from_secs(5)));
    // TCP connects 4 s later and takes the Request.
    let t1 = t0 + Duration::from_secs(4);
    let unit = c.next_unit(&mut mem, t1, 1000, 1460);
    assert!(unit.is_some(), "the Request goes out");
    assert_eq!(c.poll_timeout(), Some(t1 + Duration::from_secs(5)));
    c.handle_timeout(t0 + Duration::from_secs(6), &mem);
    assert_eq!(c.state(), ConnState::Negotiating);
    assert!(
        c.poll_event().is_none(),
        "no failure before the Reply is overdue"
    );
    c.handle_timeout(t1 + Duration::from_secs(5), &mem);
    assert_eq!(c.state(), ConnState::Failed);
}

// RFC 5044 §4.1 (MULPDU follows the EMSS) and the receive side's ULPDU_Length bound, set
// from it as FPDU mode begins: TCP asks a connection for a unit before it asks whether
// data waits. An idle connection asked so learns no MSS from it (the bound stays as it
// was when TCP asked `pending` first); one with its Request waiting learns it.
#[test]
fn only_a_connection_with_data_waiting_learns_the_mss_from_tcp() {
    use iwarp::conn::{ConnConfig, Connection};
    use tcp::SegmentSource;
    let (mut mem, _) = memory(MEM);
    let t0 = tcp::Instant::from_millis(1);
    let mut idle = Connection::responder(ConnConfig::new(MpaConfig::default()), t0).unwrap();
    let before = idle.mulpdu();
    assert!(idle.next_unit(&mut mem, t0, 1, 1448).is_none());
    assert_eq!(idle.mulpdu(), before, "nothing waited: no MSS learned");
    let mut init = Connection::initiator(ConnConfig::new(MpaConfig::default()), t0).unwrap();
    assert!(
        init.next_unit(&mut mem, t0, 1, 1448).is_some(),
        "the Request"
    );
    assert_ne!(init.mulpdu(), before, "the MSS learned with the Request");
}
