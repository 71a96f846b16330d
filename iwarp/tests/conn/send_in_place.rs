//! The send path without the unit copy: an FPDU alone in its unit is finished in the
//! buffer its payload was read into from registered memory. Over a lossy link every FPDU
//! carries a good CRC, every retransmission carries the same octets as the original at the
//! same sequence number, the data arrives whole, and the buffers cycle through the
//! connection's pool instead of being allocated per unit.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use crate::common::*;
use iwarp::mem::Sge;
use iwarp::mpa::MpaConfig;
use iwarp::rdmap::{CompletionStatus, RemoteBuf, SendOp, SendWr};
use iwarp::wire::crc::crc32c;
use iwarp::wire::mpa::{Fpdu, REQUEST_KEY};

const MEM: usize = 8 << 20;
const LEN: usize = 4 << 20;
const WRITE: u32 = 64 << 10;

#[derive(Default)]
struct Wire {
    /// A's TCP payloads by sequence number.
    sent: HashMap<u32, Vec<u8>>,
    /// Payloads A sent again at a sequence number it had used.
    resent: usize,
    /// Of those, payloads that differed from the first.
    changed: usize,
    /// FPDUs checked.
    fpdus: usize,
    /// FPDUs whose CRC did not match.
    bad_crc: usize,
}

// At MTU 9000 the FPDUs' CRCs and TCP sums are taken in the pass that reads their payload
// out of registered memory (`conn::outbound::DIGEST_MIN_LEN`); at 1500 in a second pass.
#[test]
fn retransmitted_fpdus_are_identical_and_buffers_are_reused() {
    for (seed, crc, mtu) in [(11, true, 1500), (12, false, 1500), (13, true, 9000)] {
        let mpa = MpaConfig {
            require_crc: crc,
            ..MpaConfig::default()
        };
        let (ma, sa) = memory(MEM);
        let (mb, sb) = memory(MEM);
        let mut s = Sim::with_mtu(
            mtu,
            seed,
            lossy_link(),
            (conn_config(mpa.clone()), ma),
            (conn_config(mpa), mb),
            Decision::Accept(Vec::new()),
        );
        let wire = Rc::new(RefCell::new(Wire::default()));
        let w = wire.clone();
        s.link.set_rewrite(move |_, from, p: &mut Vec<u8>| {
            let Some(v) = TcpView::parse(p) else {
                return true;
            };
            let payload = &p[v.payload_start()..];
            if from != Side::A || payload.is_empty() {
                return true;
            }
            let at = v.ip_header;
            let seq = u32::from_be_bytes([p[at + 4], p[at + 5], p[at + 6], p[at + 7]]);
            let mut w = w.borrow_mut();
            if !payload.starts_with(REQUEST_KEY) {
                let mut rest = payload;
                while !rest.is_empty() {
                    let f = Fpdu::new_checked(rest).expect("units hold whole FPDUs");
                    let n = f.total_len();
                    w.fpdus += 1;
                    if crc && f.crc() != crc32c(f.crc_covered()) {
                        w.bad_crc += 1;
                    }
                    rest = &rest[n..];
                }
            }
            match w.sent.get(&seq) {
                Some(first) => {
                    let changed = first.as_slice() != payload;
                    w.resent += 1;
                    w.changed += usize::from(changed);
                }
                None => {
                    w.sent.insert(seq, payload.to_vec());
                }
            }
            true
        });
        assert!(s.run_until(Duration::from_secs(2), |s| {
            s.established(Side::A) && s.established(Side::B)
        }));
        let src = pattern(LEN, seed);
        s.mem_mut(Side::A).bytes_mut()[..LEN].copy_from_slice(&src);
        let writes = LEN as u32 / WRITE;
        s.with_conn(Side::A, |a, m, now| {
            for i in 0..writes {
                let to = i * WRITE;
                let wr = SendWr::new(
                    u64::from(i),
                    SendOp::Write {
                        sgl: iwarp::mem::Sgl::one(Sge {
                            stag: sa,
                            to: u64::from(to),
                            len: WRITE,
                        }),
                        remote: RemoteBuf {
                            stag: sb,
                            to: u64::from(to),
                        },
                    },
                );
                a.post_send(now, m, wr).unwrap();
            }
        });
        let mut done = Vec::new();
        assert!(s.run_until(Duration::from_secs(60), |s| {
            while let Some(c) = s.conn(Side::A).unwrap().poll_completion() {
                done.push(c);
            }
            done.len() == writes as usize
        }));
        assert!(done.iter().all(|c| c.status == CompletionStatus::Success));
        // The last Write's completion says its data was framed, not placed: let it land.
        s.run_until(Duration::from_secs(5), |s| {
            hash(&s.mem(Side::B).bytes()[..LEN]) == hash(&src)
        });
        assert_eq!(hash(&s.mem(Side::B).bytes()[..LEN]), hash(&src));

        let w = wire.borrow();
        let a = s.conn(Side::A).unwrap().stats();
        let b = s.conn(Side::B).unwrap().stats();
        assert!(s.link.stats().lost > 0, "the link lost packets");
        assert!(w.resent > 0, "A retransmitted");
        assert_eq!(w.changed, 0, "retransmissions carry the original octets");
        assert_eq!(w.bad_crc, 0, "every FPDU on the wire has a good CRC");
        assert!(w.fpdus as u64 >= a.fpdus_sent);
        assert_eq!(b.crc_errors, 0);
        // Full-sized FPDUs are one unit each and go out of the buffer they were read into.
        assert!(
            a.units_in_place * 10 >= a.fpdus_sent * 9,
            "{} of {} FPDUs in place",
            a.units_in_place,
            a.fpdus_sent
        );
        // Buffers come back from TCP's acknowledgements: a few hundred at most (the window
        // in flight plus the framing budget), for thousands of units.
        assert!(
            a.units_sent as usize > LEN / mtu * 9 / 10,
            "{} units",
            a.units_sent
        );
        assert!(
            a.tx_buffers_allocated * 5 < a.units_sent,
            "{} buffers allocated for {} units",
            a.tx_buffers_allocated,
            a.units_sent
        );
    }
}
