//! Verbs end to end over two RDMAP engines: each side is an RNIC with a QP whose engine
//! places data through the verbs memory model (the engine's `MemoryTable`). Segments move
//! between the engines in order. These tests cover the security requirements and
//! checklist items that need the wire (digest §4 items 1, 3, 11, 30; B13, E07, E12, E14,
//! F03, F04).

mod verbs_common;

use std::time::Instant;

use iwarp::ddp::SegmentPos;
use iwarp::rdmap::{Engine, EngineConfig, Event};
use iwarp::verbs::*;
use iwarp::wire::terminate::TerminateCause as T;
use verbs_common::*;

const MULPDU: usize = 512;
const VA: u64 = 0x2000_0000;
const GUARD: u8 = 0xEE;

/// One side: RNIC, PD, CQ, QP and the QP's engine.
struct Node {
    fx: Fx,
    engine: Engine,
    rx_pos: u64,
    terminates_sent: Vec<T>,
    terminates_received: Vec<T>,
}

impl Node {
    fn new(f: impl FnOnce(&mut QpInit)) -> Node {
        let mut fx = fixture_with(f);
        to_rts(&mut fx.rnic, fx.qp);
        let q = fx.rnic.query_qp(fx.qp).unwrap().init;
        let mut cfg = EngineConfig::new(fx.pd, fx.qp.stream(), q.ird, q.ord);
        cfg.extensions = true;
        Node {
            engine: Engine::new(cfg),
            fx,
            rx_pos: 0,
            terminates_sent: Vec::new(),
            terminates_received: Vec::new(),
        }
    }

    /// Hands posted WRs to the engine and engine results back to the verbs layer.
    fn service(&mut self) {
        let qp = self.fx.qp;
        while let Some(wr) = self.fx.rnic.next_send_wr(qp) {
            self.engine.post_send(wr).expect("engine accepts the WR");
        }
        while let Some(wr) = self.fx.rnic.next_recv_wr(qp) {
            self.engine
                .post_recv(wr)
                .expect("engine accepts the receive");
        }
        while let Some(c) = self.engine.poll_completion() {
            self.fx.rnic.handle_completion(qp, c).unwrap();
        }
        while let Some(e) = self.engine.poll_event() {
            match &e {
                Event::TerminateSent(c) => self.terminates_sent.push(*c),
                Event::TerminateReceived(t) => self.terminates_received.push(t.cause),
                _ => {}
            }
            self.fx.rnic.handle_engine_event(qp, e).unwrap();
        }
    }

    fn tx(&mut self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(s) = self
            .engine
            .poll_segment(Instant::now(), MULPDU, self.fx.rnic.memory())
        {
            out.push(s.parts().concat());
        }
        out
    }

    fn rx(&mut self, seg: &[u8]) {
        let pos = SegmentPos::index(self.rx_pos);
        self.rx_pos += 1;
        self.engine
            .handle_ddp_segment(Instant::now(), pos, seg, self.fx.rnic.memory_mut());
    }

    fn reg(&mut self, offset: u64, len: u64, access: Access) -> STag {
        self.fx
            .rnic
            .register_mr(&mr_spec(self.fx.pd, offset, len, VA + offset, access))
            .unwrap()
    }

    fn wcs(&mut self) -> Vec<WorkCompletion> {
        drain(&mut self.fx.rnic, self.fx.cq)
    }

    fn state(&self) -> QpState {
        self.fx.rnic.query_qp(self.fx.qp).unwrap().state
    }
}

/// Runs both sides until nothing moves.
fn pump(a: &mut Node, b: &mut Node) {
    loop {
        a.service();
        b.service();
        let ab = a.tx();
        let ba = b.tx();
        if ab.is_empty() && ba.is_empty() {
            a.service();
            b.service();
            return;
        }
        for s in &ab {
            b.rx(s);
        }
        for s in &ba {
            a.rx(s);
        }
    }
}

fn pair() -> (Node, Node) {
    (Node::new(|_| {}), Node::new(|_| {}))
}

#[test]
fn send_and_receive_through_registered_memory() {
    // RFC 5040 §5.3; VERBS-00 §8.1.2.1: a 1000-octet Send gathered from and scattered
    // into verbs-registered regions; both sides complete.
    let (mut a, mut b) = pair();
    let src = a.reg(0, 4096, all_rights());
    let dst = b.reg(8192, 4096, all_rights());
    let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    a.fx.rnic.memory_mut().bytes_mut()[..1000].copy_from_slice(&payload);
    b.fx.rnic
        .post_rq(
            b.fx.qp,
            vec![recv(
                10,
                vec![Sge {
                    stag: dst,
                    to: VA + 8192,
                    len: 2048,
                }],
            )],
        )
        .unwrap();
    a.fx.rnic
        .post_sq(
            a.fx.qp,
            vec![send(
                20,
                vec![Sge {
                    stag: src,
                    to: VA,
                    len: 1000,
                }],
            )],
        )
        .unwrap();
    pump(&mut a, &mut b);
    let wa = a.wcs();
    assert_eq!(wa.len(), 1);
    assert_eq!((wa[0].wr_id, wa[0].status), (20, CompletionStatus::Success));
    let wb = b.wcs();
    assert_eq!(wb.len(), 1);
    assert_eq!(
        (wb[0].wr_id, wb[0].opcode, wb[0].status, wb[0].byte_len),
        (10, WcOpcode::Receive, CompletionStatus::Success, 1000)
    );
    assert_eq!(&b.fx.rnic.memory().bytes()[8192..9192], &payload[..]);
}

#[test]
fn sec01_b13_write_into_another_pd_terminates_with_1_1_02() {
    // RFC 5040 §8.1.1 item 1; RFC 5041 §8.2; digest B13
    let (mut a, mut b) = pair();
    let src = a.reg(0, 4096, all_rights());
    let other_pd = b.fx.rnic.alloc_pd(b.fx.ulp).unwrap();
    let foreign =
        b.fx.rnic
            .register_mr(&mr_spec(other_pd, 4096, 4096, VA, all_rights()))
            .unwrap();
    fill(&mut b.fx.rnic, GUARD);
    a.fx.rnic
        .post_sq(
            a.fx.qp,
            vec![SendWr::message(
                1,
                SendOp::Write {
                    sgl: vec![Sge {
                        stag: src,
                        to: VA,
                        len: 100,
                    }],
                    remote: RemoteBuf {
                        stag: foreign,
                        to: VA,
                    },
                },
            )],
        )
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(b.terminates_sent, vec![T::DDP_STAG_NOT_ASSOCIATED]);
    assert_eq!(a.terminates_received, vec![T::DDP_STAG_NOT_ASSOCIATED]);
    assert_eq!(touched(&b.fx.rnic, GUARD), 0);
    assert_eq!(b.state(), QpState::Terminate);
    assert!(events(&mut b.fx.rnic)
        .iter()
        .any(|e| e.kind == AsyncEventKind::InvalidPd));
    assert_eq!(a.state(), QpState::Terminate);
    assert!(events(&mut a.fx.rnic)
        .iter()
        .any(|e| e.kind == AsyncEventKind::TerminateMessageReceived));
}

#[test]
fn sec03_read_past_the_end_terminates_with_0_1_01() {
    // RFC 5040 §8.1.1 item 3, §7.2 4c; digest E06
    let (mut a, mut b) = pair();
    let sink = a.reg(0, 4096, all_rights());
    let source = b.reg(4096, 4096, all_rights());
    fill(&mut a.fx.rnic, GUARD);
    a.fx.rnic
        .post_sq(
            a.fx.qp,
            vec![SendWr::message(
                1,
                SendOp::Read {
                    sink: RemoteBuf { stag: sink, to: VA },
                    remote: RemoteBuf {
                        stag: source,
                        to: VA + 4096 + 4000,
                    },
                    len: 97,
                },
            )],
        )
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(b.terminates_sent, vec![T::RDMAP_BASE_BOUNDS]);
    assert_eq!(touched(&a.fx.rnic, GUARD), 0);
    assert!(events(&mut b.fx.rnic)
        .iter()
        .any(|e| e.kind == AsyncEventKind::IrrqBaseBounds));
}

#[test]
fn e07_read_without_remote_read_right() {
    // RFC 5040 Fig. 9; VERBS-00 §7.4.2
    let (mut a, mut b) = pair();
    let sink = a.reg(0, 4096, all_rights());
    let source = b.reg(
        0,
        4096,
        Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    );
    a.fx.rnic
        .post_sq(
            a.fx.qp,
            vec![SendWr::message(
                1,
                SendOp::Read {
                    sink: RemoteBuf { stag: sink, to: VA },
                    remote: RemoteBuf {
                        stag: source,
                        to: VA,
                    },
                    len: 8,
                },
            )],
        )
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(b.terminates_sent, vec![T::RDMAP_ACCESS_RIGHTS]);
}

#[test]
fn e14_read_response_into_sink_without_remote_write() {
    // VERBS-00 §7.4.2, §7.5.2: the requester's sink needs Remote Write; digest D10
    let (mut a, mut b) = pair();
    let sink = a.reg(0, 4096, Access::LOCAL_READ | Access::LOCAL_WRITE);
    let source = b.reg(0, 4096, all_rights());
    fill(&mut a.fx.rnic, GUARD);
    a.fx.rnic
        .post_sq(
            a.fx.qp,
            vec![SendWr::message(
                1,
                SendOp::Read {
                    sink: RemoteBuf { stag: sink, to: VA },
                    remote: RemoteBuf {
                        stag: source,
                        to: VA,
                    },
                    len: 8,
                },
            )],
        )
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(a.terminates_sent, vec![T::DDP_INVALID_STAG]);
    assert_eq!(touched(&a.fx.rnic, GUARD), 0);
    assert_eq!(a.state(), QpState::Terminate);
}

#[test]
fn sec11_e12_more_read_requests_than_ird() {
    // RFC 5040 §8.1.1 item 11; VERBS-00 §6.5; digest E12: the requester's ORD exceeds the
    // responder's IRD (a misbehaving peer); the responder answers with Terminate 1/2/03.
    let mut a = Node::new(|i| i.ord = 4);
    let mut b = Node::new(|i| i.ird = 1);
    let sink = a.reg(0, 4096, all_rights());
    let source = b.reg(0, 4096, all_rights());
    let wrs = (0..3)
        .map(|i| {
            SendWr::message(
                i,
                SendOp::Read {
                    sink: RemoteBuf {
                        stag: sink,
                        to: VA + 8 * i,
                    },
                    remote: RemoteBuf {
                        stag: source,
                        to: VA,
                    },
                    len: 8,
                },
            )
        })
        .collect();
    a.fx.rnic.post_sq(a.fx.qp, wrs).unwrap();
    // All three requests reach the responder before it can answer any.
    a.service();
    let reqs = a.tx();
    assert_eq!(reqs.len(), 3);
    for s in &reqs {
        b.rx(s);
    }
    b.service();
    assert_eq!(b.terminates_sent, vec![T::DDP_MSN_RANGE]);
    assert_eq!(b.state(), QpState::Terminate);
}

#[test]
fn f03_f04_send_with_invalidate_failures() {
    // RFC 5040 §5.3; VERBS-00 §7.8, Fig. 23; digest F03 (bound window -> 0/1/09) and F04
    // (local-only rights -> 0/1/02); the STag keeps its state.
    for (local_only, expect) in [
        (true, T::RDMAP_ACCESS_RIGHTS),
        (false, T::RDMAP_PROT_CANNOT_INVALIDATE),
    ] {
        let (mut a, mut b) = pair();
        let rights = if local_only {
            Access::LOCAL_READ | Access::LOCAL_WRITE
        } else {
            all_rights() | Access::BIND
        };
        let victim = b.reg(0, 4096, rights);
        if !local_only {
            let mw = b.fx.rnic.alloc_mw(b.fx.pd).unwrap();
            let bind = BindSpec {
                mw: STag::new(mw.index(), 1),
                mr: victim,
                mr_to: VA,
                len: 64,
                zero_based: false,
                access: Access::REMOTE_READ,
            };
            b.fx.rnic
                .post_sq(b.fx.qp, vec![SendWr::new(99, SqOp::Bind(bind))])
                .unwrap();
            b.service();
            assert_eq!(b.wcs()[0].status, CompletionStatus::Success);
        }
        let buf = b.reg(8192, 4096, all_rights());
        b.fx.rnic
            .post_rq(
                b.fx.qp,
                vec![recv(
                    5,
                    vec![Sge {
                        stag: buf,
                        to: VA + 8192,
                        len: 64,
                    }],
                )],
            )
            .unwrap();
        a.fx.rnic
            .post_sq(
                a.fx.qp,
                vec![SendWr::message(
                    1,
                    SendOp::Send {
                        sgl: vec![],
                        solicited: false,
                        invalidate: Some(victim),
                    },
                )],
            )
            .unwrap();
        pump(&mut a, &mut b);
        assert_eq!(b.terminates_sent, vec![expect]);
        assert_eq!(b.fx.rnic.query_mr(victim).unwrap().state, StagState::Valid);
    }
}

#[test]
fn f01_send_with_invalidate_then_write_fails() {
    // RFC 5040 §5.3; digest F01, F02
    let (mut a, mut b) = pair();
    let src = a.reg(0, 4096, all_rights());
    let victim = b.reg(0, 4096, all_rights());
    let buf = b.reg(8192, 4096, all_rights());
    b.fx.rnic
        .post_rq(
            b.fx.qp,
            vec![recv(
                5,
                vec![Sge {
                    stag: buf,
                    to: VA + 8192,
                    len: 64,
                }],
            )],
        )
        .unwrap();
    a.fx.rnic
        .post_sq(
            a.fx.qp,
            vec![SendWr::message(
                1,
                SendOp::Send {
                    sgl: vec![],
                    solicited: false,
                    invalidate: Some(victim),
                },
            )],
        )
        .unwrap();
    pump(&mut a, &mut b);
    let wb = b.wcs();
    assert_eq!(wb[0].invalidated, Some(victim));
    assert_eq!(
        b.fx.rnic.query_mr(victim).unwrap().state,
        StagState::Invalid
    );
    fill(&mut b.fx.rnic, GUARD);
    a.fx.rnic
        .post_sq(
            a.fx.qp,
            vec![SendWr::message(
                2,
                SendOp::Write {
                    sgl: vec![Sge {
                        stag: src,
                        to: VA,
                        len: 16,
                    }],
                    remote: RemoteBuf {
                        stag: victim,
                        to: VA,
                    },
                },
            )],
        )
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(b.terminates_sent, vec![T::DDP_INVALID_STAG]);
    assert_eq!(touched(&b.fx.rnic, GUARD), 0);
}

#[test]
fn window_bound_on_the_qp_accepts_a_remote_write() {
    // VERBS-00 §7.10.2: Bind WR on the responder, peer Write through the window lands.
    let (mut a, mut b) = pair();
    let src = a.reg(0, 4096, all_rights());
    a.fx.rnic.memory_mut().bytes_mut()[..4].copy_from_slice(b"WIND");
    let mr = b.reg(
        0,
        4096,
        Access::LOCAL_READ | Access::LOCAL_WRITE | Access::BIND,
    );
    let mw = b.fx.rnic.alloc_mw(b.fx.pd).unwrap();
    let w = STag::new(mw.index(), 0x33);
    let bind = BindSpec {
        mw: w,
        mr,
        mr_to: VA + 256,
        len: 256,
        zero_based: true,
        access: Access::REMOTE_WRITE,
    };
    b.fx.rnic
        .post_sq(b.fx.qp, vec![SendWr::new(1, SqOp::Bind(bind))])
        .unwrap();
    a.fx.rnic
        .post_sq(
            a.fx.qp,
            vec![SendWr::message(
                2,
                SendOp::Write {
                    sgl: vec![Sge {
                        stag: src,
                        to: VA,
                        len: 4,
                    }],
                    remote: RemoteBuf { stag: w, to: 16 },
                },
            )],
        )
        .unwrap();
    pump(&mut a, &mut b);
    assert!(b.terminates_sent.is_empty(), "{:?}", b.terminates_sent);
    assert_eq!(&b.fx.rnic.memory().bytes()[272..276], b"WIND");
}
