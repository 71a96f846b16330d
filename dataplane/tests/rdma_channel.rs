//! An application on its own thread drives a QP through the SPSC rings while the poll
//! loops run on the test thread (the data plane's threading model).

mod rdma_common;

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dataplane::clock::{self};

use dataplane::apps::{all_rights, Resources};
use dataplane::port::fault::FaultConfig;
use dataplane::rdma::CmEvent;
use iwarp::mpa::MpaConfig;
use iwarp::verbs::channel::{pair as channel_pair, Notice};
use iwarp::verbs::{CompletionStatus, SendOp, SendWr, WcOpcode};
use rdma_common::*;

// RFC 5040 §5.1 and §5.3 posted from another thread: RDMA Write then Send, completions
// come back through the ring in posting order; the peer's memory holds the data.
#[test]
fn app_thread_posts_through_the_rings() {
    let (mut ls, mut lc) = pair(MpaConfig::default(), 4 << 20, FaultConfig::default());
    let mut sres = Resources::new(ls.handler_mut(), 64, 32, 32, 4).unwrap();
    let mut cres = Resources::new(lc.handler_mut(), 64, 32, 32, 4).unwrap();
    let sbuf = sres
        .buffer(ls.handler_mut(), 1 << 20, all_rights())
        .unwrap();
    let cbuf = cres
        .buffer(lc.handler_mut(), 1 << 20, all_rights())
        .unwrap();
    let addr = SocketAddrV4::new(SERVER_IP, 5001);
    ls.handler_mut().listen(addr, sres.init).unwrap();
    let (_, cqp) = lc
        .handler_mut()
        .connect(CLIENT_IP, addr, cres.init, &[])
        .unwrap();
    let mut up = 0;
    let end = clock::now() + Duration::from_secs(10);
    while up < 2 {
        assert!(clock::now() < end);
        let now = clock::now();
        ls.poll_once(now);
        lc.poll_once(now);
        while let Some(e) = ls.handler_mut().poll_cm_event() {
            match e {
                CmEvent::ConnectRequest { id, qp, .. } => {
                    ls.handler_mut()
                        .rnic_mut()
                        .post_rq(qp, vec![sbuf.recv_wr(9, 0, 64)])
                        .unwrap();
                    ls.handler_mut().accept(id, &[]).unwrap();
                }
                CmEvent::Established { .. } => up += 1,
                e => panic!("{e:?}"),
            }
        }
        while let Some(e) = lc.handler_mut().poll_cm_event() {
            assert!(matches!(e, CmEvent::Established { .. }), "{e:?}");
            up += 1;
        }
    }
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    cbuf.bytes_mut(lc.handler_mut().rnic_mut())[..data.len()].copy_from_slice(&data);
    let (app, core) = channel_pair(64, vec![cres.cq], vec![cqp]);
    lc.handler_mut().attach_channel(core);
    let done = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&done);
    let thread = std::thread::spawn(move || {
        app.post_send(
            cqp,
            SendWr::message(
                1,
                SendOp::Write {
                    sgl: iwarp::mem::Sgl::one(cbuf.sge(0, 100_000)),
                    remote: sbuf.remote(4096),
                },
            ),
        )
        .unwrap();
        app.post_send(cqp, SendWr::message(2, cbuf.send(0, 64)))
            .unwrap();
        let mut got = Vec::new();
        let end = clock::now() + Duration::from_secs(20);
        while got.len() < 2 && clock::now() < end {
            match app.poll() {
                Some(Notice::Completion { wc, .. }) => got.push(wc),
                Some(other) => panic!("{other:?}"),
                None => std::thread::yield_now(),
            }
        }
        flag.store(true, Ordering::Relaxed);
        got
    });
    let end = clock::now() + Duration::from_secs(20);
    let mut server_wc = None;
    while (!done.load(Ordering::Relaxed) || server_wc.is_none()) && clock::now() < end {
        let now = clock::now();
        ls.poll_once(now);
        lc.poll_once(now);
        if let Some(wc) = sres.poll_cq(ls.handler_mut()) {
            server_wc = Some(wc);
        }
    }
    let got = thread.join().unwrap();
    assert_eq!(
        got.iter().map(|w| (w.wr_id, w.opcode)).collect::<Vec<_>>(),
        vec![(1, WcOpcode::RdmaWrite), (2, WcOpcode::Send)]
    );
    assert!(got.iter().all(|w| w.status == CompletionStatus::Success));
    let wc = server_wc.expect("server receive");
    assert_eq!((wc.wr_id, wc.byte_len), (9, 64));
    let placed = sbuf.bytes(ls.handler().rnic())[4096..4096 + data.len()].to_vec();
    assert_eq!(placed, data);
}
