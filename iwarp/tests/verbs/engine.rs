//! Verbs end to end over two RDMAP engines: each side is an RNIC with a QP whose engine
//! places data through the verbs memory model (the engine's `MemoryTable`). Segments move
//! between the engines in order. These tests cover the security requirements and
//! checklist items that need the wire (digest §4 items 1, 3, 11, 30; B13, E07, E12, E14,
//! F03, F04).

use tcp::Instant;

use crate::common::*;
use iwarp::ddp::SegmentPos;
use iwarp::rdmap::{Engine, EngineConfig, Event, WorkQueue};
use iwarp::verbs::*;
use iwarp::wire::terminate::TerminateCause as T;

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
        Node::on(fx, cfg)
    }

    /// The fixture `fx` with an engine of configuration `cfg` on its QP.
    fn on(fx: Fx, cfg: EngineConfig) -> Node {
        Node {
            engine: Engine::new(cfg),
            fx,
            rx_pos: 0,
            terminates_sent: Vec::new(),
            terminates_received: Vec::new(),
        }
    }

    /// A node whose QP (in the fixture's PD) takes its receives from an S-RQ of another
    /// PD; returns the node and the S-RQ's PD and handle.
    fn with_srq() -> (Node, PdId, SrqHandle) {
        let mut fx = fixture();
        let srq_pd = fx.rnic.alloc_pd(fx.ulp).unwrap();
        let (srq, _) = fx.rnic.create_srq(srq_pd, 8, 1, 0).unwrap();
        let init = fx.srq_qp_init(srq);
        fx.rnic.destroy_qp(fx.qp).unwrap();
        let (qp, _) = fx.rnic.create_qp(init).unwrap();
        fx.qp = qp;
        to_rts(&mut fx.rnic, qp);
        let cfg = EngineConfig::new(fx.pd, qp.stream(), 4, 4);
        (Node::on(fx, cfg), srq_pd, srq)
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
        let mut retired = self.engine.take_retired();
        while let Some(c) = self.engine.poll_completion() {
            if retired != 0 && c.queue == WorkQueue::Send {
                retired = self.fx.rnic.retire_unsignaled(qp, retired, Some(c.wr_id));
            }
            self.fx.rnic.handle_completion(qp, c).unwrap();
        }
        if retired != 0 {
            self.fx.rnic.retire_unsignaled(qp, retired, None);
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
        while let Some(s) =
            self.engine
                .poll_segment(Instant::from_millis(1_000), MULPDU, self.fx.rnic.memory())
        {
            out.push(s.parts().concat());
        }
        out
    }

    fn rx(&mut self, seg: &[u8]) {
        let pos = SegmentPos::index(self.rx_pos);
        self.rx_pos += 1;
        self.engine.handle_ddp_segment(
            Instant::from_millis(1_000),
            pos,
            seg,
            self.fx.rnic.memory_mut(),
        );
    }

    fn reg(&mut self, offset: u64, len: u64, access: Access) -> STag {
        self.fx
            .rnic
            .register_mr(&mr_spec(self.fx.pd, offset, len, VA + offset, access))
            .unwrap()
    }

    fn post_send(&mut self, wr: SendWr) {
        self.fx.post_sq(vec![wr]);
    }

    fn post_recv(&mut self, wr: RecvWr) {
        self.fx.post_rq(vec![wr]);
    }

    fn wcs(&mut self) -> Vec<WorkCompletion> {
        drain(&mut self.fx.rnic, self.fx.cq)
    }

    fn state(&self) -> QpState {
        self.fx.rnic.query_qp(self.fx.qp).unwrap().state
    }

    /// Drains the RNIC's asynchronous events; whether one of them was `kind`.
    fn drain_events_saw(&mut self, kind: AsyncEventKind) -> bool {
        events(&mut self.fx.rnic).iter().any(|e| e.kind == kind)
    }
}

/// One scatter/gather element: `len` octets at `to` of `stag`.
fn sge(stag: STag, to: u64, len: u32) -> Sge {
    Sge { stag, to, len }
}

/// An RDMA Write of `sgl` to `to` in the peer's `stag`.
fn write(wr_id: u64, sgl: Vec<Sge>, stag: STag, to: u64) -> SendWr {
    SendWr::message(
        wr_id,
        SendOp::Write {
            sgl: sgl.into(),
            remote: RemoteBuf { stag, to },
        },
    )
}

/// An RDMA Read of `len` octets at `to` in the peer's `stag` into `sink_to` of `sink`.
fn read(wr_id: u64, sink: STag, sink_to: u64, stag: STag, to: u64, len: u32) -> SendWr {
    SendWr::message(
        wr_id,
        SendOp::Read {
            sink: RemoteBuf {
                stag: sink,
                to: sink_to,
            },
            remote: RemoteBuf { stag, to },
            len,
        },
    )
}

/// `a` sends a Send with Invalidate of `victim` (no payload) into a receive `b` posts (in a
/// new buffer), and both sides run.
fn send_invalidate(a: &mut Node, b: &mut Node, victim: STag) {
    let buf = b.reg(8192, 4096, all_rights());
    b.post_recv(recv(5, vec![sge(buf, VA + 8192, 64)]));
    a.post_send(SendWr::message(
        1,
        SendOp::Send {
            sgl: iwarp::mem::Sgl::new(),
            solicited: false,
            invalidate: Some(victim),
        },
    ));
    pump(a, b);
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
    b.post_recv(recv(10, vec![sge(dst, VA + 8192, 2048)]));
    a.post_send(send(20, vec![sge(src, VA, 1000)]));
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
    a.post_send(write(1, vec![sge(src, VA, 100)], foreign, VA));
    pump(&mut a, &mut b);
    assert_eq!(b.terminates_sent, vec![T::DDP_STAG_NOT_ASSOCIATED]);
    assert_eq!(a.terminates_received, vec![T::DDP_STAG_NOT_ASSOCIATED]);
    assert_eq!(touched(&b.fx.rnic, GUARD), 0);
    assert_eq!(b.state(), QpState::Terminate);
    assert!(b.drain_events_saw(AsyncEventKind::InvalidPd));
    assert_eq!(a.state(), QpState::Terminate);
    assert!(a.drain_events_saw(AsyncEventKind::TerminateMessageReceived));
}

#[test]
fn sec03_read_past_the_end_terminates_with_0_1_01() {
    // RFC 5040 §8.1.1 item 3, §7.2 4c; digest E06
    let (mut a, mut b) = pair();
    let sink = a.reg(0, 4096, all_rights());
    let source = b.reg(4096, 4096, all_rights());
    fill(&mut a.fx.rnic, GUARD);
    a.post_send(read(1, sink, VA, source, VA + 4096 + 4000, 97));
    pump(&mut a, &mut b);
    assert_eq!(b.terminates_sent, vec![T::RDMAP_BASE_BOUNDS]);
    assert_eq!(touched(&a.fx.rnic, GUARD), 0);
    assert!(b.drain_events_saw(AsyncEventKind::IrrqBaseBounds));
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
    a.post_send(read(1, sink, VA, source, VA, 8));
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
    a.post_send(read(1, sink, VA, source, VA, 8));
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
        .map(|i| read(i, sink, VA + 8 * i, source, VA, 8))
        .collect();
    a.fx.post_sq(wrs);
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
            b.post_send(SendWr::new(99, SqOp::Bind(bind)));
            b.service();
            assert_eq!(b.wcs()[0].status, CompletionStatus::Success);
        }
        send_invalidate(&mut a, &mut b, victim);
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
    send_invalidate(&mut a, &mut b, victim);
    let wb = b.wcs();
    assert_eq!(wb[0].invalidated, Some(victim));
    assert_eq!(
        b.fx.rnic.query_mr(victim).unwrap().state,
        StagState::Invalid
    );
    fill(&mut b.fx.rnic, GUARD);
    a.post_send(write(2, vec![sge(src, VA, 16)], victim, VA));
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
    b.post_send(SendWr::new(1, SqOp::Bind(bind)));
    a.post_send(write(2, vec![sge(src, VA, 4)], w, 16));
    pump(&mut a, &mut b);
    assert!(b.terminates_sent.is_empty(), "{:?}", b.terminates_sent);
    assert_eq!(&b.fx.rnic.memory().bytes()[272..276], b"WIND");
}

#[test]
fn k05_read_fence_holds_the_send_until_the_response_landed() {
    // VERBS-00 §8.2.2.2; digest K05
    let (mut a, mut b) = pair();
    let sink = a.reg(0, 4096, all_rights());
    let source = b.reg(0, 4096, all_rights());
    let buf = b.reg(8192, 4096, all_rights());
    b.post_recv(recv(7, vec![sge(buf, VA + 8192, 64)]));
    let mut fenced = send(2, vec![sge(sink, VA, 8)]);
    fenced.read_fence = true;
    a.fx.post_sq(vec![read(1, sink, VA, source, VA, 8), fenced]);
    b.fx.rnic.memory_mut().bytes_mut()[..8].copy_from_slice(b"readdata");
    a.service();
    let first = a.tx();
    assert_eq!(
        first.len(),
        1,
        "only the Read Request leaves before the response"
    );
    b.service();
    for s in &first {
        b.rx(s);
    }
    pump(&mut a, &mut b);
    // The fenced Send carried the data the Read brought in.
    assert_eq!(&b.fx.rnic.memory().bytes()[8192..8200], b"readdata");
    let ids: Vec<_> = a
        .wcs()
        .iter()
        .map(|w| (w.wr_id, w.opcode, w.status))
        .collect();
    assert_eq!(
        ids,
        vec![
            (1, WcOpcode::RdmaRead, CompletionStatus::Success),
            (2, WcOpcode::Send, CompletionStatus::Success)
        ]
    );
}

#[test]
fn c06_mixed_sq_completes_in_posting_order() {
    // RFC 5040 §5.5 rule 15; VERBS-00 §8.2.2 rule 2; digest C06
    let (mut a, mut b) = pair();
    let local = a.reg(0, 4096, all_rights());
    let remote = b.reg(0, 4096, all_rights());
    let buf = b.reg(8192, 4096, all_rights());
    b.fx.post_rq(vec![
        recv(1, vec![sge(buf, VA + 8192, 64)]),
        recv(2, vec![sge(buf, VA + 8192, 64)]),
    ]);
    let wrs = vec![
        send(10, vec![sge(local, VA, 10)]),
        read(11, local, VA + 100, remote, VA, 600),
        write(12, vec![sge(local, VA, 700)], remote, VA + 1000),
        send(13, vec![sge(local, VA, 1)]),
    ];
    a.fx.post_sq(wrs);
    pump(&mut a, &mut b);
    let ids: Vec<_> = a.wcs().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        ids,
        (10..14)
            .map(|i| (i, CompletionStatus::Success))
            .collect::<Vec<_>>()
    );
    let rb: Vec<_> = b.wcs().iter().map(|w| (w.wr_id, w.byte_len)).collect();
    assert_eq!(rb, vec![(1, 10), (2, 1)]);
}

#[test]
fn remote_terminate_flushes_the_wrs_in_flight() {
    // VERBS-00 §6.2.2.3, §6.2.4: a Terminate from the peer stops the QP; what was not
    // done is flushed, and Query QP shows the remote Terminate.
    let (mut a, mut b) = pair();
    let local = a.reg(0, 4096, all_rights());
    let wrs = vec![
        write(1, vec![sge(local, VA, 8)], STag(0x0055_5501), 0),
        read(2, local, VA, STag(0x0055_5501), 0, 8),
        send(3, vec![]),
    ];
    a.fx.post_sq(wrs);
    pump(&mut a, &mut b);
    assert_eq!(b.terminates_sent, vec![T::DDP_INVALID_STAG]);
    assert_eq!(a.state(), QpState::Terminate);
    a.fx.rnic
        .handle_llp_event(a.fx.qp, LlpEvent::Closed)
        .unwrap();
    assert_eq!(a.state(), QpState::Error);
    let wcs = a.wcs();
    assert_eq!(wcs.len(), 3, "{wcs:?}");
    // The Write completed locally before the peer's Terminate arrived (VERBS-00 §8.2.2
    // rule 11); the Read in flight is flushed; the Send sent before the Terminate arrived
    // completed; no second error status appears.
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        vec![
            (1, CompletionStatus::Success),
            (2, CompletionStatus::Flushed),
            (3, CompletionStatus::Success)
        ]
    );
    assert_eq!(
        a.fx.rnic.query_qp(a.fx.qp).unwrap().terminate,
        Some((T::DDP_INVALID_STAG, TerminateOrigin::Remote))
    );
}

#[test]
fn h02_fetch_add_through_verbs() {
    // RFC 7306 §5.1.1; digest H02: original 0x00000000FFFFFFFF + 1 with mask 0.
    let (mut a, mut b) = pair();
    let result = a.reg(0, 4096, all_rights());
    let target = b.reg(0, 4096, all_rights());
    b.fx.rnic.memory_mut().bytes_mut()[64..72]
        .copy_from_slice(&0x0000_0000_FFFF_FFFFu64.to_ne_bytes());
    let op = SendOp::Atomic {
        op: iwarp::wire::atomic::AtomicOp::FetchAdd,
        remote: RemoteBuf {
            stag: target,
            to: VA + 64,
        },
        add_swap: 1,
        add_swap_mask: 0,
        compare: 0,
        compare_mask: 0,
        result: sge(result, VA + 8, 8),
    };
    a.post_send(SendWr::message(1, op));
    pump(&mut a, &mut b);
    let wc = a.wcs()[0];
    assert_eq!(
        (wc.opcode, wc.status),
        (WcOpcode::FetchAdd, CompletionStatus::Success)
    );
    assert_eq!(wc.atomic_original, Some(0x0000_0000_FFFF_FFFF));
    let mut now = [0u8; 8];
    now.copy_from_slice(&b.fx.rnic.memory().bytes()[64..72]);
    assert_eq!(u64::from_ne_bytes(now), 0x0000_0001_0000_0000);
    let mut got = [0u8; 8];
    got.copy_from_slice(&a.fx.rnic.memory().bytes()[8..16]);
    assert_eq!(u64::from_ne_bytes(got), 0x0000_0000_FFFF_FFFF);
}

#[test]
fn h09_immediate_data_consumes_a_receive() {
    // RFC 7306 §6; digest H09
    let (mut a, mut b) = pair();
    b.post_recv(recv(4, vec![]));
    let op = SendOp::Immediate {
        data: *b"IMMEDIAT",
        solicited: true,
    };
    a.post_send(SendWr::message(1, op));
    b.fx.rnic
        .request_notification(b.fx.cq, NotifyType::NextSolicited)
        .unwrap();
    pump(&mut a, &mut b);
    assert_eq!(a.wcs()[0].opcode, WcOpcode::ImmediateData);
    let wc = b.wcs()[0];
    assert_eq!(
        (wc.wr_id, wc.immediate, wc.solicited),
        (4, Some(*b"IMMEDIAT"), true)
    );
    assert_eq!(b.fx.rnic.poll_completion_event(), Some(b.fx.cq));
}

#[test]
fn srq_receive_buffers_are_checked_against_the_srq_pd() {
    // VERBS-00 §6.3.5: incoming Sends consuming S-RQ WQEs use the S-RQ's PD.
    for srq_buffer in [true, false] {
        let mut a = Node::new(|_| {});
        let (mut b, srq_pd, srq) = Node::with_srq();
        let src = a.reg(0, 4096, all_rights());
        a.fx.rnic.memory_mut().bytes_mut()[..5].copy_from_slice(b"s-rq!");
        let pd = if srq_buffer {
            srq_pd
        } else {
            b.fx.rnic.alloc_pd(b.fx.ulp).unwrap()
        };
        let buf =
            b.fx.rnic
                .register_mr(&mr_spec(pd, 8192, 4096, VA, all_rights()))
                .unwrap();
        b.fx.rnic
            .post_srq(srq, vec![recv(3, vec![sge(buf, VA, 64)])])
            .unwrap();
        a.post_send(send(1, vec![sge(src, VA, 5)]));
        pump(&mut a, &mut b);
        if srq_buffer {
            assert!(b.terminates_sent.is_empty(), "{:?}", b.terminates_sent);
            assert_eq!(&b.fx.rnic.memory().bytes()[8192..8197], b"s-rq!");
            let wc = b.wcs()[0];
            assert_eq!(
                (wc.wr_id, wc.byte_len, wc.status),
                (3, 5, CompletionStatus::Success)
            );
        } else {
            assert_eq!(b.terminates_sent.len(), 1);
            assert_eq!(&b.fx.rnic.memory().bytes()[8192..8197], &[0; 5]);
        }
    }
}

/// What happens to the source of a message under way, between its segments.
#[derive(Clone, Copy, Debug)]
enum SourceChange {
    /// Nothing.
    None,
    /// Another STag is registered (the table changes, the source does not).
    OtherRegistered,
    /// The source STag is invalidated (as a Send with Invalidate does).
    Invalidated,
    /// The source STag is deregistered.
    Deregistered,
}

impl SourceChange {
    const ALL: [SourceChange; 4] = [
        SourceChange::None,
        SourceChange::OtherRegistered,
        SourceChange::Invalidated,
        SourceChange::Deregistered,
    ];

    fn apply(self, n: &mut Node, stag: STag) {
        match self {
            SourceChange::None => {}
            SourceChange::OtherRegistered => {
                n.reg(60 * 1024, 4096, all_rights());
            }
            SourceChange::Invalidated => {
                let (pd, stream) = (n.fx.pd, n.fx.qp.stream());
                iwarp::mem::MemoryTable::invalidate(n.fx.rnic.memory_mut(), stag, pd, stream)
                    .unwrap();
            }
            SourceChange::Deregistered => n.fx.rnic.dealloc_stag(stag).unwrap(),
        }
    }

    fn fails(self) -> bool {
        matches!(self, SourceChange::Invalidated | SourceChange::Deregistered)
    }
}

/// The first `n` segments `node` sends.
fn tx_some(node: &mut Node, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map_while(|_| {
            node.engine
                .poll_segment(Instant::from_millis(1_000), MULPDU, node.fx.rnic.memory())
                .map(|s| s.parts().concat())
        })
        .collect()
}

#[test]
fn write_source_changed_mid_message() {
    // RFC 5041 §7.2 (the checks of the local source), RFC 5040 §7.1 case 1: a Write's
    // source is checked when the message starts and its later segments read through that
    // check while the table is unchanged; an STag invalidated or deregistered after the
    // first segments fails the next read (a Terminate instead of the rest, the WR failed),
    // a change elsewhere in the table does not.
    for change in SourceChange::ALL {
        let (mut a, mut b) = pair();
        let src = a.reg(0, 8192, all_rights());
        let dst = b.reg(16384, 8192, all_rights());
        let payload: Vec<u8> = (0..4096u32).map(|i| (i * 13 + 5) as u8).collect();
        a.fx.rnic.memory_mut().bytes_mut()[..4096].copy_from_slice(&payload);
        a.post_send(write(1, vec![sge(src, VA, 4096)], dst, VA + 16384));
        a.service();
        let first = tx_some(&mut a, 3);
        assert_eq!(first.len(), 3);
        for s in &first {
            b.rx(s);
        }
        change.apply(&mut a, src);
        pump(&mut a, &mut b);
        let placed = b.fx.rnic.memory().bytes()[16384..16384 + 4096].to_vec();
        let wa = a.wcs();
        assert_eq!(wa.len(), 1, "{change:?}");
        if change.fails() {
            assert_eq!(
                a.terminates_sent,
                vec![T::RDMAP_LOCAL_CATASTROPHIC],
                "{change:?}"
            );
            assert_eq!(
                (wa[0].wr_id, wa[0].status),
                (1, CompletionStatus::InvalidStag)
            );
            assert_eq!(a.state(), QpState::Terminate);
            // The segments sent before the change carried the source's octets.
            let sent = placed
                .iter()
                .zip(&payload)
                .take_while(|(p, q)| p == q)
                .count();
            assert!((3 * 400..4096).contains(&sent), "{change:?}: {sent}");
        } else {
            assert!(a.terminates_sent.is_empty(), "{change:?}");
            assert_eq!((wa[0].wr_id, wa[0].status), (1, CompletionStatus::Success));
            assert_eq!(placed, payload, "{change:?}");
        }
    }
}

#[test]
fn read_response_source_changed_mid_message() {
    // RFC 5040 §4.8, §7.2 item 4: the responder checks the Read's source when the Read
    // Request arrives; its Read Response segments read through that check while the table
    // is unchanged; a source invalidated or deregistered mid-response ends it with a
    // Terminate (Invalid STag) carrying the Read Request advanced by what was sent.
    for change in SourceChange::ALL {
        let (mut a, mut b) = pair();
        let sink = a.reg(0, 8192, all_rights());
        let source = b.reg(16384, 8192, all_rights());
        let payload: Vec<u8> = (0..4096u32).map(|i| (i * 29 + 1) as u8).collect();
        b.fx.rnic.memory_mut().bytes_mut()[16384..16384 + 4096].copy_from_slice(&payload);
        a.post_send(read(1, sink, VA, source, VA + 16384, 4096));
        a.service();
        for s in a.tx() {
            b.rx(&s);
        }
        b.service();
        let first = tx_some(&mut b, 3);
        assert_eq!(first.len(), 3);
        for s in &first {
            a.rx(s);
        }
        change.apply(&mut b, source);
        pump(&mut a, &mut b);
        let placed = a.fx.rnic.memory().bytes()[..4096].to_vec();
        if change.fails() {
            assert_eq!(b.terminates_sent, vec![T::RDMAP_INVALID_STAG], "{change:?}");
            assert_eq!(a.terminates_received, vec![T::RDMAP_INVALID_STAG]);
            let sent = placed
                .iter()
                .zip(&payload)
                .take_while(|(p, q)| p == q)
                .count();
            assert!((3 * 400..4096).contains(&sent), "{change:?}: {sent}");
        } else {
            assert!(b.terminates_sent.is_empty(), "{change:?}");
            let wa = a.wcs();
            assert_eq!((wa[0].wr_id, wa[0].status), (1, CompletionStatus::Success));
            assert_eq!(placed, payload, "{change:?}");
        }
    }
}

#[test]
fn write_from_pages_apart_in_the_backend() {
    // RFC 5041 §7.2: a source whose pages are not adjacent in the backend (page list in
    // reverse order) is read page by page, segment after segment, with every octet where
    // the page list puts it.
    let (mut a, mut b) = pair();
    let pbl = PageList {
        page_size: PAGE,
        pages: vec![3 * PAGE, 2 * PAGE, PAGE],
        fbo: 100,
        len: 3 * PAGE - 100,
    };
    let src =
        a.fx.rnic
            .register_mr(&MrSpec {
                pbl,
                base: TaggedBase::Va(VA + 100),
                pd: a.fx.pd,
                key: 0x5A,
                remote_access: true,
                access: all_rights(),
            })
            .unwrap();
    let dst = b.reg(16384, 3 * PAGE, all_rights());
    let len = 3 * PAGE as usize - 300;
    let payload: Vec<u8> = (0..len as u32).map(|i| (i * 7 + 3) as u8).collect();
    // Octet k of the region lives in page k / PAGE of the list, at FBO 100 from its start.
    {
        let mem = a.fx.rnic.memory_mut().bytes_mut();
        for (k, &x) in payload.iter().enumerate() {
            let pos = k as u64 + 100;
            let page = [3 * PAGE, 2 * PAGE, PAGE][(pos / PAGE) as usize];
            mem[(page + pos % PAGE) as usize] = x;
        }
    }
    a.post_send(write(
        1,
        vec![sge(src, VA + 100, len as u32)],
        dst,
        VA + 16384,
    ));
    pump(&mut a, &mut b);
    let wa = a.wcs();
    assert_eq!((wa[0].wr_id, wa[0].status), (1, CompletionStatus::Success));
    assert_eq!(
        &b.fx.rnic.memory().bytes()[16384..16384 + len],
        &payload[..]
    );
}

#[test]
fn write_source_changed_between_the_verbs_check_and_the_start() {
    // VERBS-00 §8.1.3.2, Fig. 36 (the source SGL checked when the WR is processed), RFC 5040
    // §5 and §7.1 case 1: the verbs layer hands the engine a one-SGE Write with its check;
    // the engine starts the message on that check while the table is unchanged, and checks
    // again after any change: an STag invalidated or deregistered in between fails the WR
    // with a Terminate and nothing sent of it; another STag registered changes nothing.
    for change in SourceChange::ALL {
        let (mut a, mut b) = pair();
        let src = a.reg(0, 8192, all_rights());
        let dst = b.reg(16384, 8192, all_rights());
        let payload: Vec<u8> = (0..1024u32).map(|i| (i * 7 + 3) as u8).collect();
        a.fx.rnic.memory_mut().bytes_mut()[..1024].copy_from_slice(&payload);
        fill(&mut b.fx.rnic, GUARD);
        a.post_send(write(1, vec![sge(src, VA, 1024)], dst, VA + 16384));
        let (wr, checked) = a.fx.rnic.next_checked_send_wr(a.fx.qp).expect("the Write");
        assert!(checked.is_some(), "the one SGE goes checked");
        a.engine
            .post_checked_send(wr, checked)
            .expect("engine accepts the WR");
        change.apply(&mut a, src);
        pump(&mut a, &mut b);
        let wa = a.wcs();
        assert_eq!(wa.len(), 1, "{change:?}");
        if change.fails() {
            assert_eq!(
                a.terminates_sent,
                vec![T::RDMAP_LOCAL_CATASTROPHIC],
                "{change:?}"
            );
            assert_eq!(
                (wa[0].wr_id, wa[0].status),
                (1, CompletionStatus::InvalidStag)
            );
            assert_eq!(touched(&b.fx.rnic, GUARD), 0, "{change:?}");
        } else {
            assert!(a.terminates_sent.is_empty(), "{change:?}");
            assert_eq!((wa[0].wr_id, wa[0].status), (1, CompletionStatus::Success));
            let placed = &b.fx.rnic.memory().bytes()[16384..16384 + 1024];
            assert_eq!(placed, &payload[..], "{change:?}");
        }
    }
}

#[test]
fn a_checked_write_source_is_read_where_the_check_found_it() {
    // RFC 5040 §5 (the local source checked once, when the WR is processed), RFC 5041 §7.2:
    // the verbs layer's check of a Write's one SGE also gives the backend address of the
    // range, and the message's reads use it with no second look-up while the table is
    // unchanged: the octets sent are exactly those of the SGE's range, at an offset into the
    // MR and into a page, for a range within one page and one across pages.
    for (off, len) in [(100u64, 200u32), (4000, 300)] {
        let (mut a, mut b) = pair();
        let src = a.reg(4096, 16384, all_rights());
        let dst = b.reg(32768, 8192, all_rights());
        fill(&mut a.fx.rnic, GUARD);
        let payload: Vec<u8> = (0..len).map(|i| (i * 13 + 5) as u8).collect();
        let at = (4096 + off) as usize;
        a.fx.rnic.memory_mut().bytes_mut()[at..at + len as usize].copy_from_slice(&payload);
        fill(&mut b.fx.rnic, GUARD);
        a.post_send(write(
            1,
            vec![sge(src, VA + 4096 + off, len)],
            dst,
            VA + 32768,
        ));
        let (wr, checked) = a.fx.rnic.next_checked_send_wr(a.fx.qp).expect("the Write");
        let checked = checked.expect("the one SGE goes checked");
        assert_eq!(checked.start, Some(4096 + off), "one backend range");
        a.engine
            .post_checked_send(wr, Some(checked))
            .expect("engine accepts the WR");
        pump(&mut a, &mut b);
        let wa = a.wcs();
        assert_eq!((wa[0].wr_id, wa[0].status), (1, CompletionStatus::Success));
        let placed = &b.fx.rnic.memory().bytes()[32768..32768 + len as usize];
        assert_eq!(placed, &payload[..]);
        // Nothing else written.
        let in_payload = payload.iter().filter(|&&x| x != GUARD).count();
        assert_eq!(touched(&b.fx.rnic, GUARD), in_payload);
    }
}

#[test]
fn write_source_moved_to_another_pd_after_the_verbs_check() {
    // VERBS-00 §7.3.2.3 (Reregister keeps the STag), §7.2.1 (the PD association), RFC 5040
    // §7.1 case 1: the source MR reregistered into another PD between the verbs layer's
    // check and the message's start stays live under the same STag, but no longer passes
    // the check on this QP's PD: the engine's own check refuses it (a Terminate, the WR
    // failed, nothing sent of it).
    let (mut a, mut b) = pair();
    let src = a.reg(0, 8192, all_rights());
    let dst = b.reg(16384, 8192, all_rights());
    fill(&mut b.fx.rnic, GUARD);
    a.post_send(write(1, vec![sge(src, VA, 1024)], dst, VA + 16384));
    let (wr, checked) = a.fx.rnic.next_checked_send_wr(a.fx.qp).expect("the Write");
    assert!(checked.is_some(), "the one SGE goes checked");
    a.engine
        .post_checked_send(wr, checked)
        .expect("engine accepts the WR");
    let other_pd = a.fx.rnic.alloc_pd(a.fx.ulp).unwrap();
    let moved =
        a.fx.rnic
            .reregister_mr(src, &mr_spec(other_pd, 0, 8192, VA, all_rights()))
            .unwrap();
    assert_eq!(moved, src, "the same STag");
    pump(&mut a, &mut b);
    assert_eq!(a.terminates_sent, vec![T::RDMAP_LOCAL_CATASTROPHIC]);
    let wa = a.wcs();
    assert_eq!(wa.len(), 1);
    assert_eq!(wa[0].wr_id, 1);
    assert!(!wa[0].status.is_success(), "{:?}", wa[0].status);
    assert_eq!(touched(&b.fx.rnic, GUARD), 0);
}

#[test]
fn only_a_messages_one_sge_goes_checked() {
    // VERBS-00 §8.1.3.2: zero-length SGEs are not checked, so neither they nor a gather
    // list of several SGEs carry a check to the engine (it checks those itself).
    let (mut a, _b) = pair();
    let src = a.reg(0, 8192, all_rights());
    for (sgl, carried) in [
        (vec![sge(src, VA, 8)], true),
        (vec![sge(src, VA, 0)], false),
        (vec![sge(src, VA, 8), sge(src, VA + 8, 8)], false),
    ] {
        a.post_send(write(1, sgl.clone(), src, VA));
        let (wr, checked) = a.fx.rnic.next_checked_send_wr(a.fx.qp).expect("the Write");
        assert_eq!(checked.is_some(), carried, "{sgl:?}");
        a.engine
            .post_checked_send(wr, checked)
            .expect("engine accepts the WR");
    }
}

#[test]
fn unsignaled_writes_free_their_sq_slots_without_a_completion() {
    // VERBS-00 §8.2.1, §8.2.2: an unsignaled WR that succeeds leaves the SQ with no WC and
    // its slot is free again; the engine reports it with a count (RFC 5040 §5: it ends
    // after every earlier WR), not a completion.
    let (mut a, mut b) = (Node::new(|i| i.sq_depth = 4), Node::new(|_| {}));
    let src = a.reg(0, 4096, all_rights());
    let dst = b.reg(0, 4096, all_rights());
    for round in 0..3u64 {
        let wrs = (0..4)
            .map(|i| write(round * 4 + i, vec![sge(src, VA, 8)], dst, VA).unsignaled())
            .collect();
        a.fx.post_sq(wrs);
        assert_eq!(a.fx.rnic.wq_occupancy(a.fx.qp), Some((4, 0)));
        pump(&mut a, &mut b);
        assert_eq!(
            a.fx.rnic.wq_occupancy(a.fx.qp),
            Some((0, 0)),
            "round {round}"
        );
        assert!(!a.engine.has_completions());
        assert_eq!(a.engine.take_retired(), 0, "the service took every end");
    }
    assert!(a.wcs().is_empty());
    assert_eq!(a.state(), QpState::Rts);
}

#[test]
fn unsignaled_writes_retire_in_order_around_a_signaled_read() {
    // VERBS-00 §8.2.2 (SQ WCs in posting order): a Write finished after a Read still in
    // flight waits for the Read's WC; the Read's WC is the only one, the SQ empties.
    let (mut a, mut b) = pair();
    let local = a.reg(0, 4096, all_rights());
    let remote = b.reg(0, 4096, all_rights());
    b.fx.rnic.memory_mut().bytes_mut()[..8].copy_from_slice(b"READDATA");
    a.fx.post_sq(vec![
        write(1, vec![sge(local, VA + 64, 8)], remote, VA + 64).unsignaled(),
        read(2, local, VA + 128, remote, VA, 8),
        write(3, vec![sge(local, VA + 64, 8)], remote, VA + 64).unsignaled(),
    ]);
    // The three go out before any answer: the Writes are done, the Read is not.
    a.service();
    let out = a.tx();
    a.service();
    assert_eq!(
        a.fx.rnic.wq_occupancy(a.fx.qp),
        Some((2, 0)),
        "the first Write retired"
    );
    for s in &out {
        b.rx(s);
    }
    pump(&mut a, &mut b);
    let wcs = a.wcs();
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(got, vec![(2, CompletionStatus::Success)]);
    assert_eq!(&a.fx.rnic.memory().bytes()[128..136], b"READDATA");
    assert_eq!(a.fx.rnic.wq_occupancy(a.fx.qp), Some((0, 0)));
}

#[test]
fn unsignaled_wrs_that_fail_still_complete_as_errors() {
    // VERBS-00 §6.2.4, §8.2.2: an unsignaled WR's error gets a WC; the unsignaled success
    // before it has none, nor has the Write behind it, sent and done before the peer's
    // Terminate came (RFC 5040 §5.4 flushes what is not done). The engine counts both
    // Writes: the count must not retire the failed Read ahead of its own completion.
    let (mut a, mut b) = pair();
    let local = a.reg(0, 4096, all_rights());
    let remote = b.reg(0, 4096, all_rights());
    a.fx.post_sq(vec![
        write(1, vec![sge(local, VA, 8)], remote, VA).unsignaled(),
        read(2, local, VA, STag(0x0055_5501), 0, 8).unsignaled(),
        write(3, vec![sge(local, VA, 8)], remote, VA).unsignaled(),
    ]);
    pump(&mut a, &mut b);
    // RFC 5040 §7.2: the Read Request names an invalid STag.
    assert_eq!(b.terminates_sent, vec![T::RDMAP_INVALID_STAG]);
    a.fx.rnic
        .handle_llp_event(a.fx.qp, LlpEvent::Closed)
        .unwrap();
    let wcs = a.wcs();
    let got: Vec<_> = wcs
        .iter()
        .map(|w| (w.wr_id, w.status.is_success()))
        .collect();
    assert_eq!(got, vec![(2, false)], "{wcs:?}");
    assert_eq!(a.fx.rnic.wq_occupancy(a.fx.qp), Some((0, 0)));
}

#[test]
fn write_placed_ahead_is_checked_again_after_a_table_change() {
    // VERBS-00 §7.8, RFC 5040 §5.3, RFC 5041 §7.2: a Write placed ahead of a Send (through
    // `place_early_write` or `handle_ddp_segment`) is checked again when it is reached in
    // order if the memory table changed since its placement: its STag invalidated by the
    // Send (with Invalidate) or by the verbs in between, or deregistered, gives the
    // in-order stream's Terminate; a change elsewhere in the table, or none, does not (the
    // Write then lands).
    for early in [true, false] {
        for in_stream in [true, false] {
            for change in SourceChange::ALL {
                let (mut a, mut b) = pair();
                let src = a.reg(0, 4096, all_rights());
                a.fx.rnic.memory_mut().bytes_mut()[..16].copy_from_slice(b"placed ahead 16B");
                let target = b.reg(0, 4096, all_rights());
                let buf = b.reg(8192, 4096, all_rights());
                b.post_recv(recv(5, vec![sge(buf, VA + 8192, 64)]));
                b.service();
                let invalidate = in_stream.then_some(target);
                a.post_send(SendWr::message(
                    1,
                    SendOp::Send {
                        sgl: iwarp::mem::Sgl::new(),
                        solicited: false,
                        invalidate,
                    },
                ));
                a.post_send(write(2, vec![sge(src, VA, 16)], target, VA));
                a.service();
                let segs = a.tx();
                assert_eq!(segs.len(), 2);
                let now = Instant::from_millis(1_000);
                let pos = SegmentPos::index(1);
                let mem = b.fx.rnic.memory_mut();
                if early {
                    assert!(b
                        .engine
                        .place_early_write(now, pos, &segs[1], mem)
                        .is_some());
                } else {
                    b.engine.handle_ddp_segment(now, pos, &segs[1], mem);
                }
                change.apply(&mut b, target);
                b.rx(&segs[0]);
                b.service();
                // A Send invalidating a deregistered STag fails first (RFC 5040 §5.3).
                let expect = match (in_stream, change) {
                    (true, SourceChange::Deregistered) => vec![T::RDMAP_INVALID_STAG],
                    _ if in_stream || change.fails() => vec![T::DDP_INVALID_STAG],
                    _ => vec![],
                };
                assert_eq!(
                    b.terminates_sent, expect,
                    "early {early}, Send with Invalidate {in_stream}, {change:?}"
                );
                if expect.is_empty() {
                    let at = b.fx.rnic.memory().bytes()[..16].to_vec();
                    assert_eq!(at, a.fx.rnic.memory().bytes()[..16]);
                }
            }
        }
    }
}
