//! Verbs QPs over connections: two RNICs, each the memory table its connection is lent,
//! WRs posted with PostSQ/PostRQ and Work Completions polled from the CQs (VERBS-00 §8.2),
//! the wire in between being the connections' TCP units.

use iwarp::conn::{ConnConfig, ConnEvent, Connection};
use iwarp::mem::HeapBackend;
use iwarp::mpa::MpaConfig;
use iwarp::verbs::*;
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
        ..ConnConfig::new(MpaConfig::default())
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
    let mut moved = false;
    while let Some(u) = from.conn.next_unit(&mut from.rnic, now(), from.tx_seq, MSS) {
        let seq = from.tx_seq;
        to.conn
            .on_segment(&mut to.rnic, now(), seq, &u.payload, true, seq);
        from.tx_seq = seq.wrapping_add(u.payload.len() as u32);
        to.conn.on_advance(&mut to.rnic, now(), from.tx_seq);
        moved = true;
    }
    moved
}

/// The poll core: connection events → QP transitions, WRs and completions both ways.
fn poll(s: &mut Side) {
    while let Some(ev) = s.conn.poll_event() {
        match ev {
            ConnEvent::ConnectRequest(_) => s.conn.accept(now(), s.rnic.memory_mut(), &[]).unwrap(),
            ConnEvent::Established(_) => {
                // VERBS-00 §6.2.1.2: Idle → RTS with the established LLP stream.
                s.rnic
                    .modify_qp(
                        s.qp,
                        ModifyQp::to_rts(LlpAttach {
                            stream: LlpStreamHandle(1),
                            established: true,
                            stream_message: None,
                        }),
                    )
                    .unwrap();
            }
            _ => {}
        }
    }
    s.conn.pump_verbs(now(), &mut s.rnic, s.qp);
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
                        sgl: vec![Sge {
                            stag: a.mr,
                            to: 0x10_0000,
                            len: 6000,
                        }],
                        solicited: false,
                        invalidate: None,
                    },
                ),
                SendWr::message(
                    2,
                    SendOp::Write {
                        sgl: vec![Sge {
                            stag: a.mr,
                            to: 0x10_0000,
                            len: 6000,
                        }],
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
        sgl: vec![Sge {
            stag: a.mr,
            to: 0x10_0000,
            len: 80,
        }],
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
