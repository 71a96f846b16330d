//! SYN cookies (RFC 4987 §3.6): a listener whose backlog of half-open connections is full
//! answers a SYN with a SYN-ACK whose initial sequence number carries what the connection
//! needs, and keeps nothing. The ACK that completes the handshake acknowledges that number;
//! if it checks out, the connection is made as if its SYN had been kept.
//!
//! The ISS is a keyed hash (SipHash-2-4 under the ISN secret) of the connection's addresses,
//! the peer's ISN and a 64-second time slot, its low three bits replaced by the index of the
//! peer's MSS in [`MSS_TABLE`] (rounded down). A cookie is good in the slot it was made in
//! and the next. With timestamps (RFC 7323) the SYN-ACK's TSval carries the peer's window
//! scale and SACK-permitted in its low five bits, and the ACK echoes them in TSecr; without
//! timestamps such a connection goes without window scaling and SACK (the loss RFC 4987
//! §3.6 names).

use std::net::SocketAddr;

use crate::isn::IsnGenerator;
use crate::time::Instant;

/// The MSS values a cookie can name; a peer's MSS is rounded down to one of them.
pub(crate) const MSS_TABLE: [u16; 8] = [536, 1220, 1360, 1400, 1440, 1460, 4036, 8960];

/// Seconds of one cookie time slot.
const SLOT_SECS: u64 = 64;

/// The TSval bits a cookie uses.
const TS_BITS: u32 = 0x1f;

/// The window scale that stands for none in the TSval bits.
const NO_WSCALE: u32 = 0xf;

fn slot(now: Instant) -> u32 {
    (now.as_micros() / 1_000_000 / SLOT_SECS) as u32
}

fn mss_index(mss: u16) -> u32 {
    MSS_TABLE.iter().rposition(|&m| m <= mss).unwrap_or(0) as u32
}

/// The ISS of a SYN-ACK answering, at `now`, the SYN of `remote` to `local` with ISN
/// `peer_isn` and MSS `peer_mss`.
pub(crate) fn iss(
    isn: &IsnGenerator,
    now: Instant,
    local: SocketAddr,
    remote: SocketAddr,
    peer_isn: u32,
    peer_mss: u16,
) -> u32 {
    (isn.cookie_hash(local, remote, peer_isn, slot(now)) & !7) | mss_index(peer_mss)
}

/// The peer's MSS (from [`MSS_TABLE`]) if `iss` is a cookie made for `remote`, `local` and
/// `peer_isn` in this time slot or the one before, else `None`.
pub(crate) fn check(
    isn: &IsnGenerator,
    now: Instant,
    local: SocketAddr,
    remote: SocketAddr,
    peer_isn: u32,
    iss: u32,
) -> Option<u16> {
    let s = slot(now);
    [s, s.wrapping_sub(1)]
        .into_iter()
        .any(|s| isn.cookie_hash(local, remote, peer_isn, s) & !7 == iss & !7)
        .then(|| MSS_TABLE[(iss & 7) as usize])
}

/// `tsval` with the peer's window scale (`None`: it offered none) and SACK-permitted in its
/// low bits, moved back (by less than 32 ticks), never forward: the clock a peer echoes is
/// never ahead of ours.
pub(crate) fn with_options(tsval: u32, wscale: Option<u8>, sack: bool) -> u32 {
    let ws = wscale.map_or(NO_WSCALE, |w| u32::from(w.min(14)));
    let bits = (ws << 1) | u32::from(sack);
    tsval.wrapping_sub(tsval.wrapping_sub(bits) & TS_BITS)
}

/// The peer's window scale and SACK-permitted from the TSecr echoing a cookie's TSval.
pub(crate) fn options(tsecr: u32) -> (Option<u8>, bool) {
    let ws = (tsecr >> 1) & 0xf;
    ((ws != NO_WSCALE).then_some(ws as u8), tsecr & 1 == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends() -> (SocketAddr, SocketAddr) {
        (
            "10.0.0.1:7174".parse().unwrap(),
            "10.0.0.2:40000".parse().unwrap(),
        )
    }

    // RFC 4987 §3.6: the cookie names the MSS, binds the addresses and the peer's ISN, and
    // expires.
    #[test]
    fn a_cookie_checks_for_its_connection_in_its_slot_and_the_next_only() {
        let g = IsnGenerator::new([7; 16]);
        let (l, r) = ends();
        let t = Instant::from_micros(1_000_000_000);
        let c = iss(&g, t, l, r, 1234, 1460);
        assert_eq!(check(&g, t, l, r, 1234, c), Some(1460));
        assert_eq!(
            check(&g, t + std::time::Duration::from_secs(64), l, r, 1234, c),
            Some(1460)
        );
        assert_eq!(
            check(&g, t + std::time::Duration::from_secs(130), l, r, 1234, c),
            None
        );
        assert_eq!(check(&g, t, l, r, 1235, c), None);
        let other: SocketAddr = "10.0.0.2:40001".parse().unwrap();
        assert_eq!(check(&g, t, l, other, 1234, c), None);
        assert_eq!(check(&g, t, l, r, 1234, c ^ 8), None);
        assert_eq!(check(&IsnGenerator::new([8; 16]), t, l, r, 1234, c), None);
    }

    #[test]
    fn the_mss_rounds_down_to_the_table() {
        let g = IsnGenerator::new([7; 16]);
        let (l, r) = ends();
        let t = Instant::from_micros(5);
        for (mss, want) in [
            (100, 536),
            (536, 536),
            (1459, 1440),
            (1460, 1460),
            (9000, 8960),
        ] {
            let c = iss(&g, t, l, r, 9, mss);
            assert_eq!(check(&g, t, l, r, 9, c), Some(want), "{mss}");
        }
    }

    #[test]
    fn window_scale_and_sack_ride_in_the_tsval() {
        for (ws, sack) in [
            (None, false),
            (Some(0), true),
            (Some(7), false),
            (Some(14), true),
        ] {
            for tsval in [0xdead_beef, 0, 31, 32, u32::MAX] {
                let v = with_options(tsval, ws, sack);
                assert!(tsval.wrapping_sub(v) < 32, "{tsval:#x} -> {v:#x}");
                assert_eq!(options(v), (ws, sack));
            }
        }
    }
}
