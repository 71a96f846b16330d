//! SYNs to a port nobody listens on yet, held for [`crate::Config::syn_hold`] before the
//! RST that RFC 9293 §3.10.7.1 sends at once.
//!
//! An application that tells its peer "ready" and then listens (perftest's `-R` data
//! connection does: a handshake on one connection, then `rdma_listen` for the next) races
//! the peer's SYN. In the kernel the listen is a system call that wins that race nearly
//! always; through a data-plane thread it is a message, and under load the SYN can come
//! first. A held SYN is answered as soon as a listener for its port appears, or refused when
//! its time is up; nothing else changes (the SYN itself is kept only as the fields a
//! passive open needs).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use smoltcp::wire::TcpRepr;

use crate::time::Instant;

/// Most SYNs held at once; beyond it a SYN to a closed port is refused at once.
pub const MAX_HELD_SYNS: usize = 256;

/// One held SYN.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeldSyn {
    /// When it is refused unless a listener took it.
    pub(crate) expires: Instant,
    /// A listener on its port appeared: due at once (the listener may still not take it,
    /// for another address; it then waits on until it expires).
    listener_appeared: bool,
    /// Our address and port (the SYN's destination).
    pub(crate) local: SocketAddr,
    /// The peer's.
    pub(crate) remote: SocketAddr,
    /// The SYN, without payload.
    pub(crate) repr: TcpRepr<'static>,
}

/// The held SYNs, oldest first.
#[derive(Debug, Default)]
pub(crate) struct HeldSyns {
    entries: VecDeque<HeldSyn>,
}

impl HeldSyns {
    /// Holds `repr` (a SYN from `remote` to `local`, where nobody listens) until
    /// `now + hold`. A retransmitted SYN of a held one changes nothing. False when
    /// [`MAX_HELD_SYNS`] are held already (the caller refuses it at once).
    pub(crate) fn hold(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        repr: &TcpRepr,
        hold: Duration,
    ) -> bool {
        if self
            .entries
            .iter()
            .any(|h| h.local == local && h.remote == remote)
        {
            return true;
        }
        if self.entries.len() >= MAX_HELD_SYNS {
            return false;
        }
        self.entries.push_back(HeldSyn {
            expires: now + hold,
            listener_appeared: false,
            local,
            remote,
            repr: TcpRepr {
                payload: &[],
                sack_ranges: repr.sack_ranges,
                ..*repr
            },
        });
        true
    }

    /// A listener on `port` appeared: its SYNs are due at once.
    pub(crate) fn listening(&mut self, port: u16) {
        for h in &mut self.entries {
            if h.local.port() == port {
                h.listener_appeared = true;
            }
        }
    }

    /// The earliest time a held SYN is due (the oldest possible time for one whose port got
    /// a listener, so any `now` handles it).
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.entries.iter().map(HeldSyn::due).min()
    }

    /// Removes and returns the SYNs due at `now`, oldest first.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<HeldSyn> {
        if self.next_due().is_none_or(|d| d > now) {
            return Vec::new();
        }
        let (due, keep): (Vec<HeldSyn>, Vec<HeldSyn>) =
            self.entries.drain(..).partition(|h| h.due() <= now);
        self.entries = keep.into();
        due
    }

    /// Holds again a SYN [`Self::take_due`] returned that no listener took and that has not
    /// expired, until it expires.
    pub(crate) fn hold_on(&mut self, mut h: HeldSyn) {
        h.listener_appeared = false;
        self.entries.push_back(h);
    }
}

impl HeldSyn {
    fn due(&self) -> Instant {
        if self.listener_appeared {
            Instant::ZERO
        } else {
            self.expires
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::wire::{TcpControl, TcpSeqNumber};

    fn syn(port: u16) -> TcpRepr<'static> {
        TcpRepr {
            src_port: 40000,
            dst_port: port,
            control: TcpControl::Syn,
            seq_number: TcpSeqNumber(7),
            ack_number: None,
            window_len: 1000,
            window_scale: Some(7),
            max_seg_size: Some(1460),
            sack_permitted: true,
            sack_ranges: [None; 3],
            timestamp: None,
            payload: &[],
        }
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_held_syn_is_due_when_its_port_gets_a_listener_or_its_time_is_up() {
        let mut h = HeldSyns::default();
        let t0 = Instant::ZERO + 10 * MS;
        assert!(h.hold(
            t0,
            addr("10.0.0.1:5000"),
            addr("10.0.0.2:40000"),
            &syn(5000),
            250 * MS
        ));
        assert!(h.hold(
            t0,
            addr("10.0.0.1:6000"),
            addr("10.0.0.2:40001"),
            &syn(6000),
            250 * MS
        ));
        // The retransmitted SYN changes nothing.
        assert!(h.hold(
            t0 + 100 * MS,
            addr("10.0.0.1:5000"),
            addr("10.0.0.2:40000"),
            &syn(5000),
            250 * MS
        ));
        assert_eq!(h.entries.len(), 2);
        assert_eq!(h.next_due(), Some(t0 + 250 * MS));
        assert!(h.take_due(t0 + 100 * MS).is_empty());
        h.listening(6000);
        let due = h.take_due(t0 + 100 * MS);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].local, addr("10.0.0.1:6000"));
        // Not taken (the listener is for another address): due again when it expires.
        h.hold_on(due[0]);
        assert_eq!(h.next_due(), Some(t0 + 250 * MS));
        assert_eq!(due[0].repr.max_seg_size, Some(1460));
        assert_eq!(due[0].repr.seq_number, TcpSeqNumber(7));
        let due = h.take_due(t0 + 250 * MS);
        assert_eq!(due.len(), 2);
        assert_eq!(due[0].local, addr("10.0.0.1:5000"));
        assert_eq!(h.entries.len(), 0);
        assert_eq!(h.next_due(), None);
    }

    #[test]
    fn beyond_the_bound_a_syn_is_not_held() {
        let mut h = HeldSyns::default();
        for i in 0..MAX_HELD_SYNS as u16 {
            let remote = SocketAddr::new(addr("10.0.0.2:1").ip(), 1000 + i);
            assert!(h.hold(Instant::ZERO, addr("10.0.0.1:5000"), remote, &syn(5000), MS));
        }
        assert!(!h.hold(
            Instant::ZERO,
            addr("10.0.0.1:5000"),
            addr("10.0.0.3:1"),
            &syn(5000),
            MS
        ));
        assert_eq!(h.entries.len(), MAX_HELD_SYNS);
    }
}
