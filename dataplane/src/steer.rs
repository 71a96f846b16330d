//! Flow steering: which lane (lcore and port queue) owns a TCP connection.
//!
//! One function decides it everywhere: the Toeplitz hash of the 4-tuple under a symmetric
//! key ([`SYMMETRIC_RSS_KEY`], the 16-bit pattern `6d5a` repeated), so both directions of a
//! connection hash alike; the lane is [`lane_of`] that hash. A device with RSS computes the
//! same hash and its redirection table is filled with [`reta_entry`], so its queue is the
//! lane. A device without RSS (memif, virtio-user, TAP, af_packet) delivers on queue `i`
//! what the peer sent on its queue `i`: each lane transmits on its own queue, and as a
//! connection lives on the lane of its hash on both sides, that is the queue of its hash.
//! An active opener picks its ephemeral port so that the connection hashes to its own lane
//! ([`steered_port`]).

use std::net::{IpAddr, SocketAddr};

/// The symmetric Toeplitz key: `6d5a` repeated over 40 octets. Its period (16 bits) divides
/// the distance between the two addresses and between the two ports in the hash input, so
/// swapping source and destination leaves the hash unchanged.
pub const SYMMETRIC_RSS_KEY: [u8; 40] = {
    let mut k = [0u8; 40];
    let mut i = 0;
    while i < 40 {
        k[i] = if i % 2 == 0 { 0x6d } else { 0x5a };
        i += 1;
    }
    k
};

/// Redirection-table entries a lane decision looks at: the low 6 bits of the hash (the
/// smallest redirection table devices have is 64 entries; larger ones repeat this pattern).
const RETA_SPAN: u32 = 64;

/// The Toeplitz hash (Microsoft RSS) of `input` under `key`; `input` is at most
/// `key.len() - 4` octets.
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    debug_assert!(input.len() + 4 <= key.len());
    let mut result = 0u32;
    // The key's 32-bit window at the current input bit, with the next 32 key bits behind.
    let mut window = u64::from_be_bytes([
        key[0],
        key.get(1).copied().unwrap_or(0),
        key.get(2).copied().unwrap_or(0),
        key.get(3).copied().unwrap_or(0),
        key.get(4).copied().unwrap_or(0),
        key.get(5).copied().unwrap_or(0),
        key.get(6).copied().unwrap_or(0),
        key.get(7).copied().unwrap_or(0),
    ]);
    for (i, &byte) in input.iter().enumerate() {
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                result ^= (window >> 32) as u32;
            }
            window <<= 1;
        }
        // Bring in the next key octet behind the window.
        window |= u64::from(key.get(i + 8).copied().unwrap_or(0));
    }
    result
}

/// The symmetric hash of a TCP connection between `a` and `b` (either order: the same
/// value). Addresses of two families hash as 0 (no such connection).
pub fn flow_hash(a: SocketAddr, b: SocketAddr) -> u32 {
    let mut input = [0u8; 36];
    let n = match (a.ip(), b.ip()) {
        (IpAddr::V4(x), IpAddr::V4(y)) => {
            input[..4].copy_from_slice(&x.octets());
            input[4..8].copy_from_slice(&y.octets());
            8
        }
        (IpAddr::V6(x), IpAddr::V6(y)) => {
            input[..16].copy_from_slice(&x.octets());
            input[16..32].copy_from_slice(&y.octets());
            32
        }
        _ => return 0,
    };
    input[n..n + 2].copy_from_slice(&a.port().to_be_bytes());
    input[n + 2..n + 4].copy_from_slice(&b.port().to_be_bytes());
    toeplitz(&SYMMETRIC_RSS_KEY, &input[..n + 4])
}

/// The lane (0..`lanes`) of a flow whose hash is `hash`: what a redirection table filled
/// with [`reta_entry`] gives.
pub fn lane_of(hash: u32, lanes: u16) -> u16 {
    reta_entry(hash & (RETA_SPAN - 1), lanes)
}

/// Entry `index` of a device's redirection table spread over `lanes` queues.
pub fn reta_entry(index: u32, lanes: u16) -> u16 {
    ((index % RETA_SPAN) % u32::from(lanes.max(1))) as u16
}

/// One lane of a multi-lane port: this is lane `lane` of `lanes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lane {
    /// This lane's index.
    pub lane: u16,
    /// How many lanes share the port.
    pub lanes: u16,
}

impl Lane {
    /// The only lane of a one-queue port.
    pub const SOLE: Lane = Lane { lane: 0, lanes: 1 };

    /// True when the connection between `a` and `b` belongs to this lane.
    pub fn owns(&self, a: SocketAddr, b: SocketAddr) -> bool {
        self.lanes <= 1 || lane_of(flow_hash(a, b), self.lanes) == self.lane
    }
}

/// The first port of `candidates` that, as the local port of a connection from `local` to
/// `remote`, makes it belong to `lane` and that `free` accepts; `None` when there is none.
pub fn steered_port(
    local: IpAddr,
    remote: SocketAddr,
    lane: Lane,
    candidates: impl IntoIterator<Item = u16>,
    mut free: impl FnMut(u16) -> bool,
) -> Option<u16> {
    candidates
        .into_iter()
        .find(|&p| lane.owns(SocketAddr::new(local, p), remote) && free(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key of Microsoft's RSS verification suite.
    const MS_KEY: [u8; 40] = [
        0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f,
        0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
        0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
    ];

    #[test]
    fn toeplitz_matches_the_microsoft_verification_suite() {
        // Destination 161.142.100.80:1766, source 66.9.149.187:2794 (input: source address,
        // destination address, source port, destination port).
        let v4 = [66, 9, 149, 187, 161, 142, 100, 80];
        assert_eq!(toeplitz(&MS_KEY, &v4), 0x323e_8fc2, "IPv4 2-tuple");
        let mut v4tcp = v4.to_vec();
        v4tcp.extend_from_slice(&2794u16.to_be_bytes());
        v4tcp.extend_from_slice(&1766u16.to_be_bytes());
        assert_eq!(
            toeplitz(&MS_KEY, &v4tcp),
            0x51cc_c178,
            "IPv4 with TCP ports"
        );
        // Destination 65.69.140.83:4739, source 199.92.111.2:14230.
        let mut b = vec![199, 92, 111, 2, 65, 69, 140, 83];
        assert_eq!(toeplitz(&MS_KEY, &b), 0xd718_262a);
        b.extend_from_slice(&14230u16.to_be_bytes());
        b.extend_from_slice(&4739u16.to_be_bytes());
        assert_eq!(toeplitz(&MS_KEY, &b), 0xc626_b0ea);
    }

    #[test]
    fn the_hash_is_symmetric_for_both_families() {
        for (a, b) in [
            ("10.99.4.2:49153", "10.99.4.1:18515"),
            ("192.168.1.7:1", "10.0.0.9:65535"),
            ("[fd00::2]:50000", "[fd00::1]:18515"),
        ] {
            let (a, b): (SocketAddr, SocketAddr) = (a.parse().unwrap(), b.parse().unwrap());
            assert_eq!(flow_hash(a, b), flow_hash(b, a), "{a} {b}");
            assert_ne!(flow_hash(a, b), 0);
        }
    }

    #[test]
    fn lanes_follow_a_redirection_table_and_spread_evenly() {
        // A 128-entry table filled with reta_entry gives the lane of the low hash bits.
        let table: Vec<u16> = (0..128).map(|i| reta_entry(i, 3)).collect();
        for hash in [0u32, 5, 63, 64, 127, 0xdead_beef, u32::MAX] {
            assert_eq!(table[(hash & 127) as usize], lane_of(hash, 3), "{hash:#x}");
        }
        // Ports 49152.. from one client to one server spread over 2 and 4 lanes evenly.
        let server: SocketAddr = "10.99.4.1:18515".parse().unwrap();
        for lanes in [2u16, 4] {
            let mut count = vec![0u32; usize::from(lanes)];
            for p in 49152..49152 + 4096 {
                let local = SocketAddr::new("10.99.4.2".parse().unwrap(), p);
                count[usize::from(lane_of(flow_hash(local, server), lanes))] += 1;
            }
            let even = 4096 / u32::from(lanes);
            for c in &count {
                assert!(c.abs_diff(even) < even / 10, "{lanes} lanes: {count:?}");
            }
        }
    }

    #[test]
    fn an_active_opener_picks_a_port_of_its_own_lane() {
        let local: IpAddr = "10.99.4.2".parse().unwrap();
        let server: SocketAddr = "10.99.4.1:18515".parse().unwrap();
        for lanes in [1u16, 2, 4] {
            for lane in 0..lanes {
                let me = Lane { lane, lanes };
                let mut used = Vec::new();
                for _ in 0..8 {
                    let p = steered_port(local, server, me, 49152..=65535, |p| !used.contains(&p))
                        .unwrap();
                    // The peer (whose lane is computed from the reversed tuple) agrees.
                    let peer = Lane { lane, lanes };
                    assert!(peer.owns(server, SocketAddr::new(local, p)));
                    used.push(p);
                }
                used.sort_unstable();
                used.dedup();
                assert_eq!(used.len(), 8);
            }
        }
        let none = steered_port(local, server, Lane { lane: 1, lanes: 2 }, [], |_| true);
        assert_eq!(none, None);
    }
}
