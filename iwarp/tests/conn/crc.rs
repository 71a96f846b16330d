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
        let (mut s, wr, src) = established_with_mib(seed, mpa, 9);
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

#[derive(Default)]
struct Damaged {
    tagged_seen: usize,
    /// Sequence number and end of the segment sent with a bad TCP checksum.
    bad: Option<(u32, u32)>,
    resent: bool,
    /// ACKs from B past the bad segment's start before its good copy was sent.
    acked_past: usize,
}

/// A connected pair with `mpa`'s settings over a clean link (`seed` for the simulation),
/// 1 MiB of pattern `pattern_seed` at offset 0 of A's memory: the simulation, a Write of
/// that MiB to offset `DST` of B's memory, and the pattern.
fn established_with_mib(seed: u64, mpa: MpaConfig, pattern_seed: u64) -> (Sim, SendWr, Vec<u8>) {
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
    let src = pattern(1 << 20, pattern_seed);
    s.mem_mut(Side::A).bytes_mut()[..1 << 20].copy_from_slice(&src);
    let wr = SendWr::new(
        1,
        SendOp::Write {
            sgl: iwarp::mem::Sgl::one(Sge {
                stag: sa,
                to: 0,
                len: 1 << 20,
            }),
            remote: RemoteBuf {
                stag: sb,
                to: DST as u64,
            },
        },
    );
    (s, wr, src)
}

/// `a` is after `b` in sequence space.
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

// A segment whose TCP checksum is wrong (a payload octet flipped, the checksum left) is
// refused before any of it is placed and before its FPDU's CRC matters: B does not ACK it,
// counts it as a bad checksum, raises no MPA error, and the good copy A retransmits lands.
// With CRCs on and FPDU-aligned segments, B verifies such segments from the sum taken in
// the pass that computes their FPDUs' CRCs.
#[test]
fn a_bad_tcp_checksum_places_nothing_and_is_not_acked() {
    let mpa = MpaConfig {
        require_crc: true,
        ..MpaConfig::default()
    };
    let (mut s, wr, src) = established_with_mib(3, mpa, 11);
    let seen = Rc::new(RefCell::new(Damaged::default()));
    let h = seen.clone();
    s.link.set_rewrite(move |_, from, p: &mut Vec<u8>| {
        let Some(v) = TcpView::parse(p) else {
            return true;
        };
        let (at, tcp) = (v.payload_start(), v.ip_header);
        let seq = u32::from_be_bytes(p[tcp + 4..tcp + 8].try_into().unwrap());
        let mut h = h.borrow_mut();
        if from == Side::B {
            let ack = u32::from_be_bytes(p[tcp + 8..tcp + 12].try_into().unwrap());
            if let Some((start, _)) = h.bad {
                if !h.resent && after(ack, start) {
                    h.acked_past += 1;
                }
            }
            return true;
        }
        if p.len() < at + 200 {
            return true;
        }
        if let Some((start, _)) = h.bad {
            h.resent |= seq == start;
            return true;
        }
        if p[at + 2] & 0x80 == 0 {
            return true;
        }
        h.tagged_seen += 1;
        if h.tagged_seen == 5 {
            p[at + 2 + 14 + 100] ^= 0x5a;
            h.bad = Some((seq, seq.wrapping_add((p.len() - at) as u32)));
        }
        true
    });
    s.with_conn(Side::A, |c, m, now| c.post_send(now, m, wr))
        .unwrap();
    let done = s.run_until(Duration::from_secs(10), |s| {
        s.mem(Side::B).bytes()[DST..DST + (1 << 20)] == src[..]
    });
    assert!(done, "A {:?}\nB {:?}", s.events(Side::A), s.events(Side::B));
    let h = seen.borrow();
    assert!(h.bad.is_some(), "a segment was damaged");
    assert!(h.resent, "A sent the damaged segment again");
    assert_eq!(h.acked_past, 0, "B acknowledged the damaged segment");
    assert_eq!(s.nodes[Side::B.index()].engine.stats().bad_checksums, 1);
    let b = s.conn(Side::B).unwrap();
    assert_eq!(b.stats().crc_errors, 0);
    assert_eq!(b.stats().terminates_sent, 0);
    assert!(matches!(b.state(), ConnState::Rdma(StreamState::Active)));
}
