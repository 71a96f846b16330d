//! MPA CRC corruption that TCP cannot see (payload changed, TCP checksum recomputed): the
//! receiver stops with Terminate 2/0/02 and places none of the corrupted FPDU
//! (RFC 5044 §8, RFC 5040 §7.2).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use crate::common::*;
use iwarp::conn::{ConnEvent, ConnState};
use iwarp::mem::Sge;
use iwarp::mpa::MpaConfig;
use iwarp::rdmap::{Event, RemoteBuf, SendOp, SendWr, StreamState};
use iwarp::wire::terminate::TerminateCause;

const MEM: usize = 4 << 20;
const DST: usize = 2 << 20;

#[derive(Default)]
struct Hit {
    tagged_seen: usize,
    corrupted: Option<(u64, usize)>,
}

#[test]
fn crc_corruption_with_good_tcp_checksum_terminates_2_0_02() {
    for (seed, markers) in [(1, false), (2, true)] {
        let mpa = MpaConfig {
            require_crc: true,
            want_markers: markers,
            accept_markers: markers,
            ..MpaConfig::default()
        };
        let (ma, sa) = memory(MEM);
        let (mb, sb) = memory(MEM);
        let mut s = Sim::new(
            seed,
            clean_link(),
            (conn_config(mpa.clone()), ma),
            (conn_config(mpa), mb),
            Decision::Accept(Vec::new()),
        );
        assert!(s.run_until(Duration::from_secs(2), |s| {
            s.established(Side::A) && s.established(Side::B)
        }));
        let src = pattern(1 << 20, 9);
        s.mem_mut(Side::A).bytes_mut()[..1 << 20].copy_from_slice(&src);
        let hit = Rc::new(RefCell::new(Hit::default()));
        let h = hit.clone();
        s.link.set_rewrite(move |_, from, p: &mut Vec<u8>| {
            let Some(v) = TcpView::parse(p) else {
                return true;
            };
            let at = v.payload_start();
            if from != Side::A || p.len() < at + 200 {
                return true;
            }
            let mut h = h.borrow_mut();
            // Skip a leading marker: a tagged FPDU's control octet follows ULPDU_Length.
            let fpdu = if markers && p[at + 2] & 0x80 == 0 && p[at + 6] & 0x80 != 0 {
                at + 4
            } else {
                at
            };
            if p[fpdu + 2] & 0x80 == 0 || h.corrupted.is_some() {
                return true;
            }
            h.tagged_seen += 1;
            if h.tagged_seen == 5 {
                let to = u64::from_be_bytes(p[fpdu + 8..fpdu + 16].try_into().unwrap());
                let i = fpdu + 2 + 14 + 100;
                p[i] ^= 0x5a;
                h.corrupted = Some((to, 100));
                refresh_tcp_checksum(p).expect("an IPv4/TCP packet");
            }
            true
        });
        let wr = SendWr::new(
            1,
            SendOp::Write {
                sgl: vec![Sge {
                    stag: sa,
                    to: 0,
                    len: 1 << 20,
                }],
                remote: RemoteBuf {
                    stag: sb,
                    to: DST as u64,
                },
            },
        );
        s.with_conn(Side::A, |c, m, now| c.post_send(now, m, wr))
            .unwrap();
        let ok = s.run_until(Duration::from_secs(10), |s| {
            s.events(Side::A).iter().any(|e| {
                matches!(e, ConnEvent::Stream(Event::TerminateReceived(t))
                    if t.cause == TerminateCause::MPA_CRC_ERROR)
            })
        });
        assert!(ok, "A {:?}\nB {:?}", s.events(Side::A), s.events(Side::B));
        let (to, off) = hit.borrow().corrupted.expect("a segment was corrupted");
        let b = s.conn(Side::B).unwrap();
        assert_eq!(b.stats().crc_errors, 1);
        assert_eq!(b.stats().terminates_sent, 1);
        assert!(matches!(
            b.state(),
            ConnState::Rdma(StreamState::Terminated | StreamState::Closed | StreamState::Error)
        ));
        let mem = s.mem(Side::B).bytes();
        // No corrupted octet was placed: every octet is either untouched or the sent one,
        // and the corrupted FPDU's octets are all untouched.
        let dst = &mem[DST..DST + (1 << 20)];
        assert!(dst.iter().zip(&src).all(|(&d, &s)| d == 0 || d == s));
        let start = to as usize - DST;
        assert_eq!(dst[start + off], 0);
        assert!(dst[start..start + 1000].iter().all(|&d| d == 0));
        // Data before the corrupted FPDU did land.
        assert_eq!(&dst[..1000], &src[..1000]);
    }
}
