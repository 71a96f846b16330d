//! The cost of posting to an S-RQ that N QPs share (README "Many QPs"): N QPs in RTS on one
//! S-RQ, each having found it empty; then, per round, one WR posted and every QP the RNIC
//! lists as touched serviced as the data plane's poll loop does (`next_recv_wr` until it
//! has none). Prints the time per post, per post with the service, and the QPs serviced
//! per post.
//!
//! `cargo run --release -p iwarp --example srq_post -- 1000`

use std::time::Instant;

use iwarp::mem::HeapBackend;
use iwarp::verbs::{
    AddressingMode, LlpAttach, LlpStreamHandle, ModifyQp, QpInit, RecvWr, RnicAttributes,
    RnicDevice, UlpId,
};

/// Rounds (one WR each); the S-RQ holds them all, none is completed.
const ROUNDS: u64 = 16_000;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let attrs = RnicAttributes {
        max_qps: n.max(1) as u32 + 16,
        ..RnicAttributes::default()
    };
    let dev = RnicDevice::new("srq-post", attrs);
    let mut rnic = dev
        .open(AddressingMode::Page, Box::new(HeapBackend::new(1 << 20)), 1)
        .expect("RNIC");
    let ulp = UlpId(1);
    let pd = rnic.alloc_pd(ulp).expect("PD");
    let (cq, _) = rnic.create_cq(ulp, 1 << 16).expect("CQ");
    let (srq, _) = rnic.create_srq(pd, ROUNDS as u32, 1, 0).expect("S-RQ");
    let mut qps = Vec::new();
    for i in 0..n {
        let mut init = QpInit::new(pd, cq, cq);
        init.srq = Some(srq);
        let (qp, _) = rnic.create_qp(init).expect("QP");
        let llp = LlpAttach {
            stream: LlpStreamHandle(i as u64 + 1),
            established: true,
            stream_message: None,
        };
        rnic.modify_qp(qp, ModifyQp::to_rts(llp)).expect("RTS");
        qps.push(qp);
    }
    for &qp in &qps {
        assert!(rnic.next_recv_wr(qp).is_none(), "the S-RQ starts empty");
    }
    let mut touched = Vec::new();
    rnic.take_touched_qps(&mut touched);
    touched.clear();
    let (mut post_ns, mut serviced) = (0u128, 0usize);
    let start = Instant::now();
    for r in 0..ROUNDS {
        let t = Instant::now();
        rnic.post_srq(
            srq,
            vec![RecvWr {
                wr_id: r,
                sgl: vec![],
            }],
        )
        .expect("post");
        post_ns += t.elapsed().as_nanos();
        rnic.take_touched_qps(&mut touched);
        serviced += touched.len();
        for qp in touched.drain(..) {
            while rnic.next_recv_wr(qp).is_some() {}
        }
    }
    let total = start.elapsed().as_nanos();
    let per = |ns: u128| ns as f64 / ROUNDS as f64;
    println!(
        "qps {n}: post_srq {:.0} ns/post, with the service of the touched QPs {:.0} ns/post, \
         QPs serviced per post {:.1}",
        per(post_ns),
        per(total),
        serviced as f64 / ROUNDS as f64
    );
}
