//! Verbs QPs over connections: two RNICs, each the memory table its connection is lent,
//! WRs posted with PostSQ/PostRQ and Work Completions polled from the CQs (VERBS-00 §8.2),
//! the wire in between being the connections' TCP units.

use iwarp::conn::{ConnConfig, ConnEvent, Connection, LlpRequest};
use iwarp::mem::HeapBackend;
use iwarp::mpa::MpaConfig;
use iwarp::verbs::*;
use iwarp::wire::mpa::RtrTypes;
use iwarp::wire::terminate::TerminateCause;
use tcp::{Instant, SegmentSink, SegmentSource};

const ARENA: usize = 64 * 4096;
const MSS: usize = 1448;

/// The time of every call: nothing here waits.
fn now() -> Instant {
    Instant::from_millis(1_000)
}

struct Side {
    rnic: Rnic,
    qp: QpId,
    cq: CqHandle,
    mr: STag,
    conn: Connection,
    tx_seq: u32,
}

fn side(initiator: bool, seed: u64) -> Side {
    side_with(initiator, seed, MpaConfig::default())
}

fn side_with(initiator: bool, seed: u64, mpa: MpaConfig) -> Side {
    let device = RnicDevice::new("rnic0", RnicAttributes::default());
    let mut rnic = device
        .open(
            AddressingMode::Page,
            Box::new(HeapBackend::new(ARENA)),
            seed,
        )
        .unwrap();
    let ulp = UlpId(1);
    let pd = rnic.alloc_pd(ulp).unwrap();
    let (cq, _) = rnic.create_cq(ulp, 64).unwrap();
    let (qp, _) = rnic.create_qp(QpInit::new(pd, cq, cq)).unwrap();
    let mr = rnic
        .register_mr(&MrSpec {
            pbl: PageList::contiguous(0, ARENA as u64, 4096),
            base: TaggedBase::Va(0x10_0000),
            pd,
            key: 0x5a,
            remote_access: true,
            access: Access::LOCAL_READ
                | Access::LOCAL_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_WRITE,
        })
        .unwrap();
    let cfg = ConnConfig {
        pd,
        stream: qp.stream(),
        ..ConnConfig::new(mpa)
    };
    let mut conn = if initiator {
        Connection::initiator(cfg, now()).unwrap()
    } else {
        Connection::responder(cfg, now()).unwrap()
    };
    conn.pump_verbs(now(), &mut rnic, qp);
    Side {
        rnic,
        qp,
        cq,
        mr,
        conn,
        tx_seq: 1000 + seed as u32,
    }
}

/// Everything `from` wants to send, delivered in order to `to`.
fn carry(from: &mut Side, to: &mut Side) -> bool {
    carry_units(
        (&mut from.conn, &mut from.rnic, &mut from.tx_seq),
        (&mut to.conn, &mut to.rnic),
    )
}

/// Everything the connection `from` (lent its RNIC, sending at `seq`) wants to send,
/// delivered in order to the connection `to`.
fn carry_units(
    from: (&mut Connection, &mut Rnic, &mut u32),
    to: (&mut Connection, &mut Rnic),
) -> bool {
    let ((conn, rnic, tx_seq), (to_conn, to_rnic)) = (from, to);
    let mut moved = false;
    while let Some(u) = conn.next_unit(rnic, now(), *tx_seq, MSS) {
        let seq = *tx_seq;
        to_conn.on_segment(to_rnic, now(), seq, u.octets(), true, seq);
        *tx_seq = seq.wrapping_add(u.octets().len() as u32);
        to_conn.on_advance(to_rnic, now(), *tx_seq);
        moved = true;
    }
    moved
}

/// The poll core: connection events → QP transitions, WRs and completions both ways.
fn poll(s: &mut Side) {
    poll_conn(&mut s.conn, &mut s.rnic, s.qp, LlpStreamHandle(1));
}

/// The poll core for the connection `conn` of `qp` on `rnic`, its LLP stream `llp`.
fn poll_conn(conn: &mut Connection, rnic: &mut Rnic, qp: QpId, llp: LlpStreamHandle) {
    while let Some(ev) = conn.poll_event() {
        match ev {
            ConnEvent::ConnectRequest(_) => conn.accept(now(), rnic.memory_mut(), &[]).unwrap(),
            ConnEvent::Established(_) => {
                // VERBS-00 §6.2.1.2: Idle → RTS with the established LLP stream.
                rnic.modify_qp(
                    qp,
                    ModifyQp::to_rts(LlpAttach {
                        stream: llp,
                        established: true,
                        stream_message: None,
                    }),
                )
                .unwrap();
            }
            _ => {}
        }
    }
    conn.pump_verbs(now(), rnic, qp);
}

fn run(a: &mut Side, b: &mut Side) {
    for _ in 0..1000 {
        poll(a);
        poll(b);
        let m1 = carry(a, b);
        let m2 = carry(b, a);
        if !m1 && !m2 {
            poll(a);
            poll(b);
            if !carry(a, b) && !carry(b, a) {
                return;
            }
        }
    }
}

fn wcs(s: &mut Side) -> Vec<WorkCompletion> {
    let mut v = Vec::new();
    while let Ok(wc) = s.rnic.poll_cq(s.cq) {
        v.push(wc);
    }
    v
}

// VERBS-00 §8.2: PostSQ Send + RDMA Write on A, PostRQ on B; the CQs report them in order
// and the bytes land through the RNIC's memory model.
#[test]
fn verbs_qps_over_connections() {
    let mut a = side(true, 11);
    let mut b = side(false, 12);
    run(&mut a, &mut b);
    assert!(a.conn.negotiated().is_some() && b.conn.negotiated().is_some());
    let data: Vec<u8> = (0..6000u32).map(|i| (i * 7 + 3) as u8).collect();
    a.rnic.memory_mut().bytes_mut()[..6000].copy_from_slice(&data);
    b.rnic
        .post_rq(
            b.qp,
            vec![RecvWr {
                wr_id: 77,
                sgl: vec![Sge {
                    stag: b.mr,
                    to: 0x10_0000 + 8192,
                    len: 8192,
                }],
            }],
        )
        .unwrap();
    a.rnic
        .post_sq(
            a.qp,
            vec![
                SendWr::message(
                    1,
                    SendOp::Send {
                        sgl: iwarp::mem::Sgl::one(Sge {
                            stag: a.mr,
                            to: 0x10_0000,
                            len: 6000,
                        }),
                        solicited: false,
                        invalidate: None,
                    },
                ),
                SendWr::message(
                    2,
                    SendOp::Write {
                        sgl: iwarp::mem::Sgl::one(Sge {
                            stag: a.mr,
                            to: 0x10_0000,
                            len: 6000,
                        }),
                        remote: RemoteBuf {
                            stag: b.mr,
                            to: 0x10_0000 + 65536,
                        },
                    },
                ),
            ],
        )
        .unwrap();
    run(&mut a, &mut b);
    let wa = wcs(&mut a);
    let wb = wcs(&mut b);
    assert_eq!(wa.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![1, 2]);
    assert!(wa.iter().all(|w| w.status == CompletionStatus::Success));
    assert_eq!(wb.len(), 1);
    assert_eq!((wb[0].wr_id, wb[0].byte_len), (77, 6000));
    assert_eq!(wb[0].status, CompletionStatus::Success);
    let mem = b.rnic.memory().bytes();
    assert_eq!(&mem[8192..8192 + 6000], &data[..]);
    assert_eq!(&mem[65536..65536 + 6000], &data[..]);
}

fn recv_wr(s: &Side, wr_id: u64, off: u64) -> RecvWr {
    RecvWr {
        wr_id,
        sgl: vec![Sge {
            stag: s.mr,
            to: 0x10_0000 + off,
            len: 4096,
        }],
    }
}

// A Send that arrived just before the stream was reset (the peer sent its last message and
// closed abortively, both in one receive burst) completes successfully; only the receives
// still waiting are flushed (VERBS-00 §8.2: completions in order; RFC 5040 §5.3: a message
// whose last DDP segment was placed is delivered). No data already accepted is lost.
#[test]
fn a_send_placed_before_a_reset_completes_before_the_flush() {
    let mut a = side(true, 21);
    let mut b = side(false, 22);
    run(&mut a, &mut b);
    a.rnic.memory_mut().bytes_mut()[..80].copy_from_slice(&[0x5c; 80]);
    b.rnic
        .post_rq(b.qp, vec![recv_wr(&b, 7, 8192), recv_wr(&b, 8, 12288)])
        .unwrap();
    poll(&mut b);
    let send = SendOp::Send {
        sgl: iwarp::mem::Sgl::one(Sge {
            stag: a.mr,
            to: 0x10_0000,
            len: 80,
        }),
        solicited: false,
        invalidate: None,
    };
    a.rnic
        .post_sq(a.qp, vec![SendWr::message(1, send)])
        .unwrap();
    poll(&mut a);
    assert!(carry(&mut a, &mut b));
    // The reset arrives in the same burst: nothing ran between the segment and the close.
    b.conn.handle_llp_closed(now(), b.rnic.memory(), false);
    b.conn.pump_verbs(now(), &mut b.rnic, b.qp);
    let wb = wcs(&mut b);
    let got: Vec<_> = wb.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        vec![
            (7, CompletionStatus::Success),
            (8, CompletionStatus::Flushed)
        ]
    );
    assert_eq!(wb[0].byte_len, 80);
    assert_eq!(&b.rnic.memory().bytes()[8192..8192 + 80], &[0x5c; 80]);
}

/// A Send of `len` octets from the start of `s`'s buffer.
fn send_of(s: &Side, wr_id: u64, len: u32) -> SendWr {
    SendWr::message(
        wr_id,
        SendOp::Send {
            sgl: iwarp::mem::Sgl::one(Sge {
                stag: s.mr,
                to: 0x10_0000,
                len,
            }),
            solicited: false,
            invalidate: None,
        },
    )
}

// VERBS-00 §6.1.4: a QP destroyed with its stream up releases the LLP. The Sends that
// completed (their FPDUs built, waiting for TCP) still reach the peer; the Write under way
// behind them stops where it is (the rest of it is never read from memory); no Terminate
// is built; the driver is asked for a graceful close (FIN after what is queued); segments
// arriving afterwards are dropped without an answer.
#[test]
fn a_destroyed_qp_releases_its_stream_and_what_was_built_still_arrives() {
    const WRITE: u32 = 200 << 10;
    const WRITE_AT: u64 = 16 << 10;
    let mut a = side(true, 31);
    let mut b = side(false, 32);
    run(&mut a, &mut b);
    a.rnic.memory_mut().bytes_mut()[..WRITE as usize].fill(0x6d);
    b.rnic
        .post_rq(b.qp, vec![recv_wr(&b, 7, 8192), recv_wr(&b, 8, 12288)])
        .unwrap();
    poll(&mut b);
    let write = SendWr::message(
        3,
        SendOp::Write {
            sgl: iwarp::mem::Sgl::one(Sge {
                stag: a.mr,
                to: 0x10_0000,
                len: WRITE,
            }),
            remote: RemoteBuf {
                stag: b.mr,
                to: 0x10_0000 + WRITE_AT,
            },
        },
    );
    a.rnic
        .post_sq(a.qp, vec![send_of(&a, 1, 80), send_of(&a, 2, 2000), write])
        .unwrap();
    poll(&mut a);
    // TCP takes the first unit; the connection builds ahead up to its budget: both Sends
    // complete, the Write does not.
    let held = a
        .conn
        .next_unit(&mut a.rnic, now(), a.tx_seq, MSS)
        .expect("the first Send's FPDU");
    poll(&mut a);
    assert_eq!(
        wcs(&mut a)
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        vec![
            (1, CompletionStatus::Success),
            (2, CompletionStatus::Success)
        ]
    );

    a.rnic.destroy_qp(a.qp).unwrap();
    let mut llp = Vec::new();
    while let Some(act) = a.rnic.poll_action() {
        llp.extend(a.conn.apply_qp_action(now(), a.rnic.memory(), &act));
    }
    while let Some(r) = a.conn.poll_llp_request() {
        llp.push(r);
    }
    assert_eq!(llp, vec![LlpRequest::Close]);

    // What was built goes out, then nothing more.
    let seq = a.tx_seq;
    b.conn
        .on_segment(&mut b.rnic, now(), seq, held.octets(), true, seq);
    a.tx_seq = seq.wrapping_add(held.octets().len() as u32);
    b.conn.on_advance(&mut b.rnic, now(), a.tx_seq);
    let before = a.tx_seq;
    assert!(carry(&mut a, &mut b), "the queued FPDUs follow");
    let sent = a.tx_seq.wrapping_sub(seq) as usize;
    assert!(
        a.tx_seq != before && sent < WRITE as usize,
        "{sent} octets sent"
    );
    assert!(a.conn.is_drained());
    assert!(a
        .conn
        .next_unit(&mut a.rnic, now(), a.tx_seq, MSS)
        .is_none());
    poll(&mut b);
    assert_eq!(
        wcs(&mut b)
            .iter()
            .map(|w| (w.wr_id, w.status, w.byte_len))
            .collect::<Vec<_>>(),
        vec![
            (7, CompletionStatus::Success, 80),
            (8, CompletionStatus::Success, 2000)
        ]
    );
    let bmem = b.rnic.memory().bytes();
    assert_eq!(&bmem[8192..8192 + 80], &[0x6d; 80]);
    let write_end = (WRITE_AT + u64::from(WRITE)) as usize;
    assert!(
        bmem[write_end - 4096..write_end].iter().all(|&x| x == 0),
        "the Write's tail was never sent"
    );

    // B's Send to the released stream is dropped: no Terminate comes back.
    a.rnic.memory_mut().bytes_mut()[..80].fill(0);
    b.rnic.post_sq(b.qp, vec![send_of(&b, 4, 80)]).unwrap();
    poll(&mut b);
    assert!(carry(&mut b, &mut a));
    assert!(a
        .conn
        .next_unit(&mut a.rnic, now(), a.tx_seq, MSS)
        .is_none());
    assert!(a.rnic.memory().bytes()[..80].iter().all(|&x| x == 0));
}

/// One RNIC whose two QPs take their receives from one S-RQ, each QP with its own CQ and
/// its own (responder) connection.
struct Shared {
    rnic: Rnic,
    srq: SrqHandle,
    mr: STag,
    qps: [QpId; 2],
    cqs: [CqHandle; 2],
    conns: [Connection; 2],
    tx_seq: [u32; 2],
}

fn shared_side(mpa: MpaConfig) -> Shared {
    let device = RnicDevice::new("rnic0", RnicAttributes::default());
    let mut rnic = device
        .open(AddressingMode::Page, Box::new(HeapBackend::new(ARENA)), 40)
        .unwrap();
    let ulp = UlpId(1);
    let pd = rnic.alloc_pd(ulp).unwrap();
    let (srq, _) = rnic.create_srq(pd, 16, 1, 0).unwrap();
    let mr = rnic
        .register_mr(&MrSpec {
            pbl: PageList::contiguous(0, ARENA as u64, 4096),
            base: TaggedBase::Va(0x10_0000),
            pd,
            key: 0x5b,
            remote_access: false,
            access: Access::LOCAL_READ | Access::LOCAL_WRITE,
        })
        .unwrap();
    let mut qp_on_srq = || {
        let (cq, _) = rnic.create_cq(ulp, 64).unwrap();
        let mut init = QpInit::new(pd, cq, cq);
        init.srq = Some(srq);
        let (qp, _) = rnic.create_qp(init).unwrap();
        (qp, cq)
    };
    let (q0, c0) = qp_on_srq();
    let (q1, c1) = qp_on_srq();
    let conn = |qp: QpId| {
        let cfg = ConnConfig {
            pd,
            stream: qp.stream(),
            ..ConnConfig::new(mpa.clone())
        };
        Connection::responder(cfg, now()).unwrap()
    };
    let mut conns = [conn(q0), conn(q1)];
    for (c, qp) in conns.iter_mut().zip([q0, q1]) {
        c.pump_verbs(now(), &mut rnic, qp);
    }
    Shared {
        rnic,
        srq,
        mr,
        qps: [q0, q1],
        cqs: [c0, c1],
        conns,
        tx_seq: [5000, 6000],
    }
}

impl Shared {
    /// Runs the poll core of the QP `i`.
    fn poll(&mut self, i: usize) {
        let llp = LlpStreamHandle(i as u64 + 1);
        poll_conn(&mut self.conns[i], &mut self.rnic, self.qps[i], llp);
    }

    fn wcs(&mut self, i: usize) -> Vec<WorkCompletion> {
        let mut v = Vec::new();
        while let Ok(wc) = self.rnic.poll_cq(self.cqs[i]) {
            v.push(wc);
        }
        v
    }

    /// Posts to the S-RQ receives `first..first + n`, each 4 KiB at its own place.
    fn post_srq(&mut self, first: u64, n: u64) {
        let wrs = (first..first + n)
            .map(|id| RecvWr {
                wr_id: id,
                sgl: vec![Sge {
                    stag: self.mr,
                    to: 0x10_0000 + srq_buffer(id),
                    len: 4096,
                }],
            })
            .collect();
        self.rnic.post_srq(self.srq, wrs).unwrap();
    }

    fn available(&self) -> u32 {
        self.rnic.query_srq(self.srq).unwrap().available
    }
}

/// Where the S-RQ receive `wr_id` lands in the shared side's arena.
fn srq_buffer(wr_id: u64) -> u64 {
    16384 + wr_id * 4096
}

/// Runs the peers `a[i]` (initiators) and the QPs `i` of `b` until nothing moves.
fn run_shared(a: &mut [Side; 2], b: &mut Shared) {
    for _ in 0..1000 {
        let mut moved = false;
        for (i, s) in a.iter_mut().enumerate() {
            poll(s);
            b.poll(i);
        }
        for (i, s) in a.iter_mut().enumerate() {
            moved |= carry_units(
                (&mut s.conn, &mut s.rnic, &mut s.tx_seq),
                (&mut b.conns[i], &mut b.rnic),
            );
            moved |= carry_units(
                (&mut b.conns[i], &mut b.rnic, &mut b.tx_seq[i]),
                (&mut s.conn, &mut s.rnic),
            );
        }
        if !moved {
            for (i, s) in a.iter_mut().enumerate() {
                poll(s);
                b.poll(i);
            }
            return;
        }
    }
    panic!("the connections never settled");
}

/// `s` sends `n` Sends of 100 octets each, the k-th filled with `fill + k`.
fn post_sends(s: &mut Side, fill: u8, n: u8) {
    let wrs = (0..n)
        .map(|k| {
            let off = usize::from(k) * 128;
            s.rnic.memory_mut().bytes_mut()[off..off + 100].fill(fill + k);
            let send = SendOp::Send {
                sgl: iwarp::mem::Sgl::one(Sge {
                    stag: s.mr,
                    to: 0x10_0000 + off as u64,
                    len: 100,
                }),
                solicited: false,
                invalidate: None,
            };
            SendWr::message(u64::from(k) + 1, send)
        })
        .collect();
    s.rnic.post_sq(s.qp, wrs).unwrap();
}

/// Two initiators, each connected to one of the shared side's QPs.
fn shared_setup() -> ([Side; 2], Shared) {
    let mut a = [side(true, 41), side(true, 42)];
    let mut b = shared_side(MpaConfig::default());
    run_shared(&mut a, &mut b);
    for (s, c) in a.iter().zip(&b.conns) {
        assert!(s.conn.negotiated().is_some() && c.negotiated().is_some());
    }
    (a, b)
}

/// Checks that the receives of the QP `i` of `b` completed `n` Sends of 100 octets filled
/// with `fill + k` (k = 0..n), in order, each in the S-RQ buffer its WC names.
fn assert_received(b: &mut Shared, i: usize, fill: u8, n: u8) {
    let wcs = b.wcs(i);
    assert_eq!(wcs.len(), usize::from(n), "QP {i}: {wcs:?}");
    for (k, wc) in wcs.iter().enumerate() {
        assert_eq!(wc.status, CompletionStatus::Success, "QP {i}: {wc:?}");
        assert_eq!(
            (wc.qp, wc.opcode, wc.byte_len),
            (b.qps[i], WcOpcode::Receive, 100)
        );
        let at = srq_buffer(wc.wr_id) as usize;
        let want = fill + k as u8;
        assert_eq!(
            &b.rnic.memory().bytes()[at..at + 100],
            &[want; 100],
            "QP {i} Send {k}"
        );
    }
}

fn assert_sends_succeeded(s: &mut Side, n: u64) {
    let got: Vec<_> = wcs(s).iter().map(|w| (w.wr_id, w.status)).collect();
    let want: Vec<_> = (1..=n).map(|id| (id, CompletionStatus::Success)).collect();
    assert_eq!(got, want);
}

// VERBS-00 §6.3.5: a WQE of an S-RQ is consumed by the QP a message arrives on ("when an
// incoming Untagged Message arrives on a QP ... as if the WQE has been dequeued from the S-RQ
// and queued to the QP's local RQ"), and "all QPs that use an S-RQ MUST be able to consume
// S-RQ WQEs, as long as the S-RQ has unconsumed WQEs available". With exactly as many WQEs
// as Sends, Sends on both QPs all complete, on their QP's CQ, with their bytes; nothing is
// Terminated (RFC 5040 §7: a Send without a buffer would be).
#[test]
fn srq_wqes_go_to_the_qp_a_send_arrives_on() {
    let (mut a, mut b) = shared_setup();
    b.post_srq(0, 4);
    for i in 0..2 {
        b.poll(i);
    }
    assert_eq!(
        b.available(),
        4,
        "no QP takes a WQE before a message needs one"
    );
    post_sends(&mut a[0], 0x10, 2);
    post_sends(&mut a[1], 0x20, 2);
    run_shared(&mut a, &mut b);
    for (i, s) in a.iter_mut().enumerate() {
        let q = b.rnic.query_qp(b.qps[i]).unwrap();
        assert_eq!((q.state, q.terminate), (QpState::Rts, None), "QP {i}");
        assert_sends_succeeded(s, 2);
    }
    assert_received(&mut b, 0, 0x10, 2);
    assert_received(&mut b, 1, 0x20, 2);
    assert_eq!(b.available(), 0);
}

// VERBS-00 §6.3.5: "If there are no S-RQ WQEs when an Untagged Message arrives on a QP which
// is associated with that S-RQ, then the LLP Stream MAY be Terminated": here with the DDP
// untagged "no buffer" error (RFC 5041 §7.2, layer DDP, type 2, code 2). §6.3.6: the other
// QP on the S-RQ is unaffected and takes the WQEs posted afterwards.
#[test]
fn a_send_finding_the_srq_empty_is_terminated_with_no_buffer() {
    let (mut a, mut b) = shared_setup();
    b.post_srq(0, 2);
    post_sends(&mut a[1], 0x20, 1);
    run_shared(&mut a, &mut b);
    assert_received(&mut b, 1, 0x20, 1);
    post_sends(&mut a[0], 0x10, 2);
    run_shared(&mut a, &mut b);
    let q0 = b.rnic.query_qp(b.qps[0]).unwrap();
    assert_eq!(
        q0.terminate,
        Some((TerminateCause::DDP_NO_BUFFER, TerminateOrigin::Local))
    );
    let peer = a[0].rnic.query_qp(a[0].qp).unwrap();
    assert_eq!(
        peer.terminate,
        Some((TerminateCause::DDP_NO_BUFFER, TerminateOrigin::Remote))
    );
    // The first Send had the last WQE; the second found none.
    let got = b.wcs(0);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0].status, got[0].byte_len),
        (CompletionStatus::Success, 100)
    );
    let at = srq_buffer(got[0].wr_id) as usize;
    assert_eq!(&b.rnic.memory().bytes()[at..at + 100], &[0x10; 100]);
    assert_eq!(b.available(), 0);
    // QP 1 goes on with WQEs posted now.
    b.post_srq(10, 2);
    post_sends(&mut a[1], 0x30, 2);
    run_shared(&mut a, &mut b);
    let q1 = b.rnic.query_qp(b.qps[1]).unwrap();
    assert_eq!((q1.state, q1.terminate), (QpState::Rts, None));
    assert_received(&mut b, 1, 0x30, 2);
}

// VERBS-00 §6.3.6: "The RI MUST NOT flush the WQEs on an S-RQ which have not been used to
// Place incoming Untagged Messages when any associated QP transitions to the Terminate,
// Error or Closing states", and other QPs on the S-RQ stay unaffected: a QP whose stream is
// reset flushes no S-RQ WQE, and the other QP receives into all of them.
#[test]
fn a_qp_leaving_rts_leaves_the_srq_wqes_to_the_others() {
    let (mut a, mut b) = shared_setup();
    b.post_srq(0, 3);
    for i in 0..2 {
        b.poll(i);
    }
    b.conns[0].handle_llp_closed(now(), b.rnic.memory(), false);
    b.poll(0);
    assert_eq!(b.rnic.query_qp(b.qps[0]).unwrap().state, QpState::Error);
    assert_eq!(b.wcs(0), Vec::new(), "no S-RQ WQE is flushed to QP 0's CQ");
    assert_eq!(b.available(), 3);
    post_sends(&mut a[1], 0x40, 3);
    run_shared(&mut a, &mut b);
    assert_sends_succeeded(&mut a[1], 3);
    assert_received(&mut b, 1, 0x40, 3);
}

// VERBS-00 §6.3.8: the S-RQ limit event fires when a WQE taken for an arriving Send leaves
// fewer WQEs than the armed limit, once.
#[test]
fn srq_limit_fires_when_sends_take_the_wqes() {
    let (mut a, mut b) = shared_setup();
    b.rnic.modify_srq(b.srq, None, Some(2), true).unwrap();
    b.post_srq(0, 4);
    let limit_events = |b: &mut Shared| {
        std::iter::from_fn(|| b.rnic.poll_async_event())
            .filter(|e| e.kind == AsyncEventKind::SrqLimitReached)
            .count()
    };
    post_sends(&mut a[0], 0x50, 2);
    run_shared(&mut a, &mut b);
    assert_eq!(b.available(), 2);
    assert_eq!(limit_events(&mut b), 0, "2 left: not below the limit");
    post_sends(&mut a[1], 0x60, 2);
    run_shared(&mut a, &mut b);
    assert_eq!(b.available(), 0);
    assert_eq!(limit_events(&mut b), 1);
    assert!(!b.rnic.query_srq(b.srq).unwrap().armed);
    assert_received(&mut b, 0, 0x50, 2);
    assert_received(&mut b, 1, 0x60, 2);
}

// RFC 6581 §5: a peer-to-peer initiator may send its first message right behind the RTR,
// before the responder's QP is in RTS; the responder holds it until then. A QP on an S-RQ
// takes the WQE for it when the held segments go in, once the QP is in RTS.
#[test]
fn a_send_right_behind_the_rtr_takes_an_srq_wqe_once_the_qp_is_in_rts() {
    let mpa = MpaConfig {
        p2p: Some(RtrTypes {
            send: true,
            write: true,
            read: true,
        }),
        ..MpaConfig::default()
    };
    let mut a = [
        side_with(true, 43, mpa.clone()),
        side_with(true, 44, mpa.clone()),
    ];
    let mut b = shared_side(mpa);
    b.post_srq(0, 2);
    // Posted before the connections exist: each Send follows its RTR at once.
    post_sends(&mut a[0], 0x70, 1);
    post_sends(&mut a[1], 0x78, 1);
    run_shared(&mut a, &mut b);
    for (i, s) in a.iter_mut().enumerate() {
        assert!(s.conn.negotiated().is_some_and(|n| n.rtr.is_some()), "{i}");
        assert_sends_succeeded(s, 1);
    }
    assert_received(&mut b, 0, 0x70, 1);
    assert_received(&mut b, 1, 0x78, 1);
    assert_eq!(b.available(), 0);
}

// What the driver's service must see after TCP ran a connection (`needs_service`): an
// RDMA Write placed at its data sink is not reported there (RFC 5040 §4.4, VERBS-00 §8.2:
// no receive WQE, no completion), so the sink's visit would find nothing; a Send's receive
// completion and a close (RFC 5040 §6.2) are the service's.
#[test]
fn a_placed_write_gives_the_sink_nothing_to_service() {
    let mut a = side(true, 21);
    let mut b = side(false, 22);
    assert!(
        a.conn.needs_service() && b.conn.needs_service(),
        "negotiating"
    );
    run(&mut a, &mut b);
    assert!(a.conn.negotiated().is_some() && b.conn.negotiated().is_some());
    assert!(
        !a.conn.needs_service() && !b.conn.needs_service(),
        "open and idle"
    );

    let write = SendWr::message(
        2,
        SendOp::Write {
            sgl: iwarp::mem::Sgl::one(Sge {
                stag: a.mr,
                to: 0x10_0000,
                len: 6000,
            }),
            remote: RemoteBuf {
                stag: b.mr,
                to: 0x10_0000 + 65536,
            },
        },
    );
    a.rnic.post_sq(a.qp, vec![write]).unwrap();
    poll(&mut a);
    assert!(carry(&mut a, &mut b));
    assert!(
        !b.conn.needs_service(),
        "a placed Write reports nothing at its sink"
    );
    // The whole Write fit the default read-ahead budget: it completed in the pump that
    // took it, which forwarded the completion.
    assert!(!a.conn.needs_service(), "nothing new at the source either");
    let wa = wcs(&mut a);
    assert_eq!((wa.len(), wa[0].wr_id), (1, 2));
    assert_eq!(wa[0].status, CompletionStatus::Success);

    b.rnic.post_rq(b.qp, vec![recv_wr(&b, 5, 8192)]).unwrap();
    poll(&mut b);
    a.rnic.post_sq(a.qp, vec![send_of(&a, 6, 100)]).unwrap();
    poll(&mut a);
    assert!(carry(&mut a, &mut b));
    assert!(b.conn.needs_service(), "a Send's receive completion");
    poll(&mut b);
    assert!(!b.conn.needs_service());
    assert_eq!(
        wcs(&mut b).iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        vec![5]
    );

    a.conn.close(now(), a.rnic.memory());
    assert!(a.conn.needs_service(), "closing");
}
