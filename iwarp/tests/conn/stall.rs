//! A partial FPDU that stops growing while TCP has nothing missing around it: an
//! FPDU-aligned sender never leaves part of an FPDU unsent (RFC 5044 §4.1, §5), so after
//! `ConnConfig::partial_fpdu_timeout` the stream ends with Terminate 2/0/03 (a length the
//! CRC cannot vouch for, RFC 5044 §7.1; SPEC-DIGEST §8 item 8). The two connections are
//! driven directly through their TCP-facing traits, so every octet and instant is chosen.

use std::time::Duration;

use tcp::Instant;

use crate::common::{conn_config, memory, pattern};
use iwarp::conn::{ConnEvent, ConnState};
use iwarp::mem::{STag, Sge, SimpleMemory};
use iwarp::mpa::MpaConfig;
use iwarp::rdmap::{Event, RemoteBuf, SendOp, SendWr, StreamState};
use iwarp::wire::terminate::TerminateCause;
use tcp::{SegmentSink, SegmentSource};

type Conn = iwarp::conn::Connection;

const MSS: usize = 1460;
const MEM: usize = 64 << 10;
const DST: u64 = 32 << 10;
const LEN: usize = 600;

struct Pair {
    a: Conn,
    b: Conn,
    /// A's and B's memories.
    ma: SimpleMemory,
    mb: SimpleMemory,
    sb: STag,
    sa: STag,
    /// Next sequence number each side sends.
    a_seq: u32,
    b_seq: u32,
    t0: Instant,
    /// B's clock: the time of the calls into B.
    b_now: Instant,
}

/// Initiator A and responder B with CRCs, established by handing each unit across.
fn pair() -> Pair {
    let mpa = MpaConfig {
        require_crc: true,
        ..MpaConfig::default()
    };
    let t0 = Instant::from_millis(1_000);
    let (mut ma, sa) = memory(MEM);
    let (mut mb, sb) = memory(MEM);
    let mut a = Conn::initiator(conn_config(mpa.clone()), t0).unwrap();
    let mut b = Conn::responder(conn_config(mpa), t0).unwrap();
    let req = a
        .next_unit(&mut ma, t0, 1, MSS)
        .expect("request")
        .into_octets();
    b.on_segment(&mut mb, t0, 1, &req, true, 1);
    assert!(matches!(b.poll_event(), Some(ConnEvent::ConnectRequest(_))));
    b.accept(t0, &mut mb, &[]).unwrap();
    let rep = b
        .next_unit(&mut mb, t0, 1, MSS)
        .expect("reply")
        .into_octets();
    a.on_segment(&mut ma, t0, 1, &rep, true, 1);
    let a_seq = 1 + req.len() as u32;
    let b_seq = 1 + rep.len() as u32;
    assert!(matches!(a.poll_event(), Some(ConnEvent::Established(_))));
    assert!(matches!(b.poll_event(), Some(ConnEvent::Established(_))));
    Pair {
        a,
        b,
        ma,
        mb,
        sb,
        sa,
        a_seq,
        b_seq,
        t0,
        b_now: t0,
    }
}

impl Pair {
    /// A writes `LEN` octets to B; returns the one unit (one FPDU) A hands TCP.
    fn write_unit(&mut self) -> Vec<u8> {
        self.ma.bytes_mut()[..LEN].copy_from_slice(&pattern(LEN, 3));
        let wr = SendWr::new(
            7,
            SendOp::Write {
                sgl: iwarp::mem::Sgl::one(Sge {
                    stag: self.sa,
                    to: 0,
                    len: LEN as u32,
                }),
                remote: RemoteBuf {
                    stag: self.sb,
                    to: DST,
                },
            },
        );
        let (t0, ma) = (self.t0, &mut self.ma);
        self.a.post_send(t0, ma, wr).unwrap();
        let u = self
            .a
            .next_unit(ma, t0, self.a_seq, MSS)
            .expect("write")
            .into_octets();
        let next = self.a_seq + u.len() as u32;
        assert!(self.a.next_unit(ma, t0, next, MSS).is_none());
        u
    }

    /// Hands `bytes` to B in order at stream offset `at` of A's FPDU stream.
    fn hand_b(&mut self, at: usize, bytes: &[u8]) {
        let seq = self.a_seq.wrapping_add(at as u32);
        self.b
            .on_segment(&mut self.mb, self.b_now, seq, bytes, true, seq);
    }

    fn b_time(&mut self, after: Duration) {
        self.b_now = self.t0 + after;
        self.b.handle_timeout(self.b_now, &self.mb);
    }

    fn b_terminate(&mut self) -> Option<TerminateCause> {
        let mut cause = None;
        while let Some(e) = self.b.poll_event() {
            if let ConnEvent::Stream(Event::TerminateSent(c)) = e {
                cause = Some(c);
            }
        }
        cause
    }
}

// RFC 5044 §4.1/§7.1: a ULPDU_Length grown within the MSS bound leaves B waiting for
// octets A never sends; the timeout ends the stream with 2/0/03 and the Terminate goes out.
#[test]
fn grown_ulpdu_length_terminates_2_0_03_after_the_timeout() {
    let mut p = pair();
    let mut u = p.write_unit();
    let len = u16::from_be_bytes([u[0], u[1]]) + 8;
    u[..2].copy_from_slice(&len.to_be_bytes());
    p.hand_b(0, &u);
    let deadline = p.b.poll_timeout().expect("the stall deadline");
    assert_eq!(deadline, p.t0 + Duration::from_secs(3));
    p.b_time(Duration::from_millis(2900));
    assert_eq!(p.b_terminate(), None);
    assert_eq!(p.b.stats().stalled_fpdus, 0);
    p.b_time(Duration::from_secs(3));
    assert_eq!(p.b_terminate(), Some(TerminateCause::MPA_MARKER_MISMATCH));
    assert_eq!(p.b.stats().stalled_fpdus, 1);
    assert_eq!(p.b.stats().terminates_sent, 1);
    assert_eq!(p.b.state(), ConnState::Rdma(StreamState::Terminated));
    // The Terminate is B's next unit (RFC 5040 §5.4: DDP untagged queue 2, RDMAP opcode 7).
    let t =
        p.b.next_unit(&mut p.mb, p.b_now, p.b_seq, MSS)
            .expect("terminate unit")
            .into_octets();
    assert_eq!(t[2] & 0x80, 0, "untagged");
    assert_eq!(t[3] & 0x0f, 0x07, "RDMAP Terminate opcode");
    // Nothing of the unchecked FPDU was placed (RFC 5044 §6.5: CRC checked first).
    let dst = &p.mb.bytes()[DST as usize..DST as usize + LEN];
    assert!(dst.iter().all(|&d| d == 0));
    // The timer is done.
    assert_eq!(p.b.poll_timeout(), None);
}

// A partial FPDU whose octets keep coming, each piece within the timeout, is not stalled.
#[test]
fn slow_but_progressing_fpdu_is_placed() {
    let mut p = pair();
    let u = p.write_unit();
    let thirds = [0, u.len() / 3, 2 * u.len() / 3, u.len()];
    for (i, w) in thirds.windows(2).enumerate() {
        p.b_now = p.t0 + Duration::from_secs(2 * i as u64);
        p.hand_b(w[0], &u[w[0]..w[1]]);
        p.b_time(Duration::from_secs(2 * i as u64 + 2));
        assert_eq!(p.b_terminate(), None, "piece {i}");
    }
    assert_eq!(p.b.stats().stalled_fpdus, 0);
    assert_eq!(p.b.stats().fpdus_received, 1);
    let dst = &p.mb.bytes()[DST as usize..DST as usize + LEN];
    assert_eq!(dst, &pattern(LEN, 3)[..]);
    assert_eq!(p.b.poll_timeout(), None);
}

// Octets ahead of the partial FPDU mean TCP is missing something before them: the loss is
// TCP's to repair (RFC 9293 §3.10.7.4), so no MPA timeout runs.
#[test]
fn partial_fpdu_with_data_ahead_does_not_time_out() {
    let mut p = pair();
    let u = p.write_unit();
    let half = u.len() / 2;
    p.hand_b(0, &u[..half]);
    assert!(p.b.poll_timeout().is_some());
    let seq = p.a_seq.wrapping_add(half as u32 + 100);
    let rcv_nxt = p.a_seq.wrapping_add(half as u32);
    p.b.on_segment(&mut p.mb, p.b_now, seq, &u[half + 100..], false, rcv_nxt);
    assert_eq!(p.b.poll_timeout(), None);
    p.b_time(Duration::from_secs(10));
    assert_eq!(p.b_terminate(), None);
    assert_eq!(p.b.stats().stalled_fpdus, 0);
}
