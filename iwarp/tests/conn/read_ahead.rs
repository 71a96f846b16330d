//! Reading ahead of TCP (issue #17): a connection reads a DDP segment out of registered
//! memory when TCP asks for a unit it can send now, so that the payload is copied, CRC'd
//! and sent back to back. Once TCP's window closes it holds no segment read and waiting
//! (that one would be cold by the connection's next turn), and TCP still knows it has more
//! to send (`pending` asks the engine).

use std::time::Duration;

use crate::common::*;
use iwarp::conn::ConnConfig;
use iwarp::mem::Sge;
use iwarp::mpa::MpaConfig;
use iwarp::rdmap::{CompletionStatus, RemoteBuf, SendOp, SendWr};

const LEN: u32 = 64 << 10;

/// DDP segments the connection of `side` took from its engine, and FPDUs it framed.
fn read_and_framed(s: &mut Sim, side: Side) -> (u64, u64) {
    let c = s.conn(side).unwrap();
    let read = c.op_counters().sent.iter().map(|o| o.segments).sum();
    (read, c.stats().fpdus_sent)
}

#[test]
fn no_segment_waits_read_while_the_window_is_closed() {
    for crc in [true, false] {
        let mpa = MpaConfig {
            require_crc: crc,
            ..MpaConfig::default()
        };
        // The data plane's budget: about one segment ahead (`RdmaHandler::tx_ahead`).
        let cfg = ConnConfig {
            tx_budget: 1460,
            ..conn_config(mpa)
        };
        let (ma, sa) = memory(1 << 20);
        let (mb, sb) = memory(1 << 20);
        let mut s = Sim::new(
            21,
            clean_link(),
            (cfg.clone(), ma),
            (cfg, mb),
            Decision::Accept(Vec::new()),
        );
        assert!(s.run_until(Duration::from_secs(2), |s| {
            s.established(Side::A) && s.established(Side::B)
        }));
        let src = pattern(LEN as usize, 5);
        s.mem_mut(Side::A).bytes_mut()[..LEN as usize].copy_from_slice(&src);
        let wr = SendWr::new(
            1,
            SendOp::Write {
                sgl: iwarp::mem::Sgl::one(Sge {
                    stag: sa,
                    to: 0,
                    len: LEN,
                }),
                remote: RemoteBuf { stag: sb, to: 0 },
            },
        );
        s.with_conn(Side::A, |a, m, now| a.post_send(now, m, wr).unwrap());

        // A sends what its window allows before any ACK comes back.
        let now = s.now;
        let mut buf = vec![0u8; 1500];
        let mut sent = 0;
        loop {
            let n = &mut s.nodes[Side::A.index()];
            let Some(t) = n.engine.poll_transmit(now, &mut n.mem, &mut buf) else {
                break;
            };
            s.link.send(now, Side::A, buf[..t.len].to_vec());
            sent += 1;
        }
        let (read, framed) = read_and_framed(&mut s, Side::A);
        assert!(sent >= 2, "A sent {sent} segments");
        assert!(
            framed > 0 && framed < u64::from(LEN / 1500),
            "the window closed before the Write was sent: {framed} FPDUs framed"
        );
        assert_eq!(
            read, framed,
            "segments read from memory and left waiting for the window"
        );
        assert!(
            s.conn(Side::A).unwrap().poll_completion().is_none(),
            "the Write completed before TCP took its last segment"
        );

        // The window opens with the ACKs: the rest goes out and lands whole.
        let mut done = None;
        assert!(s.run_until(Duration::from_secs(5), |s| {
            done = done.or_else(|| s.conn(Side::A).unwrap().poll_completion());
            done.is_some() && s.mem(Side::B).bytes()[..LEN as usize] == src[..]
        }));
        assert_eq!(done.unwrap().status, CompletionStatus::Success);
        let (read, framed) = read_and_framed(&mut s, Side::A);
        assert_eq!(read, framed);
    }
}
