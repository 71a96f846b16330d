//! The engine's connection timers over a connection that goes idle and busy again.

mod common;

use common::*;
use smoltcp::wire::TcpControl;
use std::time::Duration;

// RFC 7323 §5.5 (a connection idle for long refreshes the peer's TS.Recent: the engine
// keeps an idle deadline while the connection is established) and RFC 9293 §3.8.1 (the
// retransmission timer runs while data is outstanding): a connection that sends, is
// acknowledged and goes idle over and over moves its timer between the retransmission
// deadline and the same far idle deadline; the timers hold a bounded number of entries
// for it, not one more per idle spell.
#[test]
fn an_idle_deadline_filed_again_adds_no_entry() {
    let mut p = RawPeer::new(test_config());
    let conn = p.handshake();
    let base = p.e.timer_entries();
    for round in 0..200 {
        assert_eq!(p.e.ulp_mut(conn).unwrap().write(&[7; 100]), 100);
        let out = p.output();
        let data = out
            .iter()
            .find(|s| !s.payload.is_empty())
            .expect("data sent");
        p.rcv = data.seq.wrapping_add(data.payload.len() as u32);
        if let Some(v) = p.tsval.as_mut() {
            *v += 1;
        }
        let ack = p.seg(TcpControl::None, &[]);
        p.send(&ack);
        assert_eq!(p.e.info(conn).unwrap().pipe, 0, "round {round}");
        // Past the retransmission deadline filed when the data went out: its entry comes
        // due and the connection's next deadline is the idle one.
        p.advance(Duration::from_secs(2));
        let (_, at) = p.e.schedule_state(conn).unwrap();
        assert!(
            at.is_some_and(|t| t > p.now + Duration::from_secs(60)),
            "round {round}: {at:?}"
        );
    }
    let entries = p.e.timer_entries();
    assert!(
        entries <= base + 3,
        "{entries} entries after 200 idle spells (from {base})"
    );
}
