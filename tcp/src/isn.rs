//! Initial sequence numbers per RFC 6528: `ISN = M + F(localip, localport, remoteip,
//! remoteport, secretkey)`, with M a 4 µs clock and F SipHash-2-4 keyed by a secret.

use std::net::{IpAddr, SocketAddr};

use crate::time::Instant;

/// Generates RFC 6528 initial sequence numbers and per-connection timestamp offsets.
#[derive(Clone, Debug)]
pub struct IsnGenerator {
    k0: u64,
    k1: u64,
}

impl IsnGenerator {
    /// A generator keyed by a 128-bit secret (random per boot in production, fixed in tests).
    pub fn new(secret: [u8; 16]) -> Self {
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        a.copy_from_slice(&secret[..8]);
        b.copy_from_slice(&secret[8..]);
        IsnGenerator {
            k0: u64::from_le_bytes(a),
            k1: u64::from_le_bytes(b),
        }
    }

    fn keyed(&self, tag: u8, local: SocketAddr, remote: SocketAddr) -> u64 {
        // Address, port, address, port, tag: 13 octets for IPv4, 37 for IPv6.
        let mut msg = [0u8; 37];
        let mut at = 0;
        for end in [local, remote] {
            let n = match end.ip() {
                IpAddr::V4(a) => {
                    msg[at..at + 4].copy_from_slice(&a.octets());
                    4
                }
                IpAddr::V6(a) => {
                    msg[at..at + 16].copy_from_slice(&a.octets());
                    16
                }
            };
            msg[at + n..at + n + 2].copy_from_slice(&end.port().to_be_bytes());
            at += n + 2;
        }
        msg[at] = tag;
        siphash24(self.k0, self.k1, &msg[..=at])
    }

    /// The ISN for a connection opened at `now` (RFC 6528 §3).
    pub fn isn(&self, now: Instant, local: SocketAddr, remote: SocketAddr) -> u32 {
        let m = (now.as_micros() / 4) as u32;
        m.wrapping_add(self.keyed(0, local, remote) as u32)
    }

    /// A secret-dependent offset into the ephemeral port range (RFC 6056 §3.3.1).
    pub fn port_offset(&self) -> u64 {
        let none = SocketAddr::from(([0, 0, 0, 0], 0));
        self.keyed(2, none, none)
    }

    /// The keyed hash of a SYN cookie ([`crate::syn_cookie`]): the connection's addresses,
    /// the peer's ISN and the cookie's time slot.
    pub(crate) fn cookie_hash(
        &self,
        local: SocketAddr,
        remote: SocketAddr,
        peer_isn: u32,
        slot: u32,
    ) -> u32 {
        let k = self.keyed(3, local, remote);
        let mut msg = [0u8; 16];
        msg[..8].copy_from_slice(&k.to_le_bytes());
        msg[8..12].copy_from_slice(&peer_isn.to_le_bytes());
        msg[12..].copy_from_slice(&slot.to_le_bytes());
        siphash24(self.k0, self.k1, &msg) as u32
    }

    /// A per-connection offset for the TSval clock (RFC 7323 §5.4 recommends one).
    pub fn ts_offset(&self, local: SocketAddr, remote: SocketAddr) -> u32 {
        self.keyed(1, local, remote) as u32
    }
}

/// SipHash-2-4 (Aumasson and Bernstein, 2012) of `msg` under the key `(k0, k1)`.
pub(crate) fn siphash24(k0: u64, k1: u64, msg: &[u8]) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }
    let mut chunks = msg.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        let m = u64::from_le_bytes(w);
        v[3] ^= m;
        round(&mut v);
        round(&mut v);
        v[0] ^= m;
    }
    let mut last = [0u8; 8];
    let rest = chunks.remainder();
    last[..rest.len()].copy_from_slice(rest);
    let m = u64::from_le_bytes(last) | ((msg.len() as u64) << 56);
    v[3] ^= m;
    round(&mut v);
    round(&mut v);
    v[0] ^= m;
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4};

    fn key() -> (u64, u64) {
        let k: Vec<u8> = (0u8..16).collect();
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        a.copy_from_slice(&k[..8]);
        b.copy_from_slice(&k[8..]);
        (u64::from_le_bytes(a), u64::from_le_bytes(b))
    }

    // SipHash paper, Appendix A test vectors (key 00..0f, messages 00..len-1).
    #[test]
    fn siphash_reference_vectors() {
        let (k0, k1) = key();
        assert_eq!(siphash24(k0, k1, &[]), 0x726f_db47_dd0e_0e31);
        let msg: Vec<u8> = (0u8..15).collect();
        assert_eq!(siphash24(k0, k1, &msg), 0xa129_ca61_49be_45e5);
    }

    // RFC 6528 §3: ISN advances with the 4 µs clock, and differs per 4-tuple and per secret.
    #[test]
    fn isn_depends_on_clock_tuple_and_secret() {
        let g = IsnGenerator::new([7; 16]);
        let l = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1000).into();
        let r = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80).into();
        let r2 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 81).into();
        let a = g.isn(Instant::from_micros(0), l, r);
        let b = g.isn(Instant::from_micros(400), l, r);
        assert_eq!(b.wrapping_sub(a), 100);
        assert_ne!(g.isn(Instant::ZERO, l, r2), a);
        assert_ne!(IsnGenerator::new([8; 16]).isn(Instant::ZERO, l, r), a);
    }

    // The IPv6 4-tuple is hashed whole: tuples that differ in any address octet differ.
    #[test]
    fn isn_covers_ipv6_addresses() {
        let g = IsnGenerator::new([7; 16]);
        let l: SocketAddr = (Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1), 1000).into();
        let r: SocketAddr = (Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2), 80).into();
        let r2: SocketAddr = (Ipv6Addr::new(0xfd01, 0, 0, 0, 0, 0, 0, 2), 80).into();
        let a = g.isn(Instant::ZERO, l, r);
        assert_ne!(g.isn(Instant::ZERO, l, r2), a);
        assert_ne!(g.ts_offset(l, r), g.ts_offset(l, r2));
        let b = g.isn(Instant::from_micros(40), l, r);
        assert_eq!(b.wrapping_sub(a), 10);
    }
}
