//! The idle poll iteration (issue #18 `lat-vs-l2`): with nothing to send, the handler says
//! so and the loop's transmit half skips it; a WR posted between iterations still leaves
//! in the next one.

mod rdma_common;

use std::net::SocketAddrV4;
use std::time::Duration;

use dataplane::apps::{all_rights, Resources};
use dataplane::clock;
use dataplane::lcore::Handler;
use dataplane::port::fault::{FaultConfig, FaultPort};
use dataplane::port::soft_pair::SoftPort;
use dataplane::rdma::RdmaHandler;
use iwarp::mpa::MpaConfig;
use iwarp::verbs::{CompletionStatus, RemoteBuf, STag, SendOp, SendWr};
use rdma_common::*;

/// Whether the loop's transmit half would call the handler.
fn transmit_work(l: &Loop) -> bool {
    <RdmaHandler as Handler<FaultPort<SoftPort>>>::has_transmit_work(l.handler())
}

#[test]
fn an_idle_handler_has_no_transmit_work_until_a_wr_is_posted() {
    let (mut ls, mut lc) = pair(MpaConfig::default(), 8 << 20, FaultConfig::default());
    let mut sres = Resources::new(ls.handler_mut(), 64, 4, 4, 4).unwrap();
    let mut cres = Resources::new(lc.handler_mut(), 64, 4, 4, 4).unwrap();
    let dst = sres.buffer(ls.handler_mut(), 4096, all_rights()).unwrap();
    let src = cres.buffer(lc.handler_mut(), 4096, all_rights()).unwrap();
    let addr = SocketAddrV4::new(SERVER_IP, 7300);
    ls.handler_mut().listen(addr, sres.init).unwrap();
    let qp = connect_qps(&mut ls, &mut lc, addr, cres.init, 1, |_, _, _| ()).client[0].2;
    settle(&mut ls, &mut lc, 50);
    assert!(
        !transmit_work(&ls) && !transmit_work(&lc),
        "connected and idle"
    );

    src.bytes_mut(lc.handler_mut().rnic_mut())[..8].copy_from_slice(b"8 octets");
    let wr = SendWr::message(
        7,
        SendOp::Write {
            sgl: iwarp::mem::Sgl::one(src.sge(0, 8)),
            remote: RemoteBuf {
                stag: STag(dst.stag.0),
                to: dst.addr(0),
            },
        },
    );
    lc.handler_mut().rnic_mut().post_sq(qp, vec![wr]).unwrap();
    assert!(
        transmit_work(&lc),
        "a posted WR is work for the transmit half"
    );
    // VERBS-00 §8.2.1 (PostSQ): the WR is handed on in the loop's next iteration;
    // RFC 5040 §5: its Tagged DDP segment goes out then.
    let tx = lc.counters(0).tx;
    lc.poll_once(clock::now());
    assert_eq!(
        lc.counters(0).tx,
        tx + 1,
        "the Write left in the next iteration"
    );

    let end = clock::now() + Duration::from_secs(10);
    loop {
        assert!(clock::now() < end, "no completion");
        settle(&mut ls, &mut lc, 1);
        if let Some(wc) = cres.poll_cq(lc.handler_mut()) {
            assert_eq!((wc.wr_id, wc.status), (7, CompletionStatus::Success));
            break;
        }
    }
    assert_eq!(
        &dst.bytes_mut(ls.handler_mut().rnic_mut())[..8],
        b"8 octets"
    );
    settle(&mut ls, &mut lc, 50);
    assert!(!transmit_work(&ls) && !transmit_work(&lc), "idle again");
}
