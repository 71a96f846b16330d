//! NIC offloads chosen from a device's capabilities (`rte_eth_dev_info`): IPv4 and TCP
//! checksums on transmit and receive, and receive of frames in chained mbufs. The software
//! path stays the fallback: an offload the device does not offer is done by the stacks.
//!
//! On transmit, a TCP frame whose checksum the device fills carries `ol_flags`, its header
//! lengths, and the pseudo-header sum in its TCP checksum field ([`prepare_tcp`]); on
//! receive, the device's verdict ([`rx_verdict`]) spares the classifier its own check.

use std::fmt;

use crate::frame::{parse_l2, Checked, RxChecksum, IPV6_HLEN};

/// Offload bit `which` (0 IPv4 checksum, 1 TCP checksum, 2 TSO / LRO, 3 multi-segment /
/// scatter) of transmit (`tx`) or receive.
fn bit(tx: bool, which: i32) -> u64 {
    // SAFETY: plain constants of the shim.
    unsafe {
        if tx {
            dpdk_sys::dpdk_shim_tx_offload_bits(which)
        } else {
            dpdk_sys::dpdk_shim_rx_offload_bits(which)
        }
    }
}

/// The offloads enabled on a device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offloads {
    /// The device fills the IPv4 header checksum of frames flagged for it.
    pub tx_ipv4_cksum: bool,
    /// The device fills the TCP checksum of frames flagged for it.
    pub tx_tcp_cksum: bool,
    /// The device verifies IPv4 header checksums and says so in `ol_flags`.
    pub rx_ipv4_cksum: bool,
    /// The device verifies TCP checksums and says so in `ol_flags`.
    pub rx_tcp_cksum: bool,
    /// The device may hand a received frame in chained mbufs.
    pub rx_scatter: bool,
}

impl Offloads {
    /// Every offload of this module the device offers (`rx_capa`, `tx_capa`:
    /// `rx_offload_capa` and `tx_offload_capa` of `rte_eth_dev_info`); none when `enabled`
    /// is false, except receive in chained mbufs when `scatter` asks for it (the port's
    /// receive buffers are smaller than a frame). A transmit IPv4 checksum without the TCP
    /// one is not used (the stacks checksum both then).
    pub fn choose(enabled: bool, scatter: bool, rx_capa: u64, tx_capa: u64) -> Offloads {
        let has = |capa: u64, tx: bool, which: i32| capa & bit(tx, which) != 0;
        let rx_scatter = scatter && has(rx_capa, false, 3);
        if !enabled {
            return Offloads {
                rx_scatter,
                ..Offloads::default()
            };
        }
        let tx_tcp_cksum = has(tx_capa, true, 1);
        Offloads {
            tx_ipv4_cksum: tx_tcp_cksum && has(tx_capa, true, 0),
            tx_tcp_cksum,
            rx_ipv4_cksum: has(rx_capa, false, 0),
            rx_tcp_cksum: has(rx_capa, false, 1),
            rx_scatter,
        }
    }

    /// The `RTE_ETH_RX_OFFLOAD_*` bits to configure.
    pub fn rx_bits(&self) -> u64 {
        let mut b = 0;
        for (on, which) in [
            (self.rx_ipv4_cksum, 0),
            (self.rx_tcp_cksum, 1),
            (self.rx_scatter, 3),
        ] {
            if on {
                b |= bit(false, which);
            }
        }
        b
    }

    /// The `RTE_ETH_TX_OFFLOAD_*` bits to configure.
    pub fn tx_bits(&self) -> u64 {
        let mut b = 0;
        for (on, which) in [(self.tx_ipv4_cksum, 0), (self.tx_tcp_cksum, 1)] {
            if on {
                b |= bit(true, which);
            }
        }
        b
    }
}

/// `tx ipv4-cksum tcp-cksum, rx ipv4-cksum tcp-cksum scatter`, or `none`.
impl fmt::Display for Offloads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = |list: &[(bool, &'static str)]| -> Vec<&'static str> {
            list.iter().filter(|(on, _)| *on).map(|(_, n)| *n).collect()
        };
        let tx = names(&[
            (self.tx_ipv4_cksum, "ipv4-cksum"),
            (self.tx_tcp_cksum, "tcp-cksum"),
        ]);
        let rx = names(&[
            (self.rx_ipv4_cksum, "ipv4-cksum"),
            (self.rx_tcp_cksum, "tcp-cksum"),
            (self.rx_scatter, "scatter"),
        ]);
        let mut parts = Vec::new();
        if !tx.is_empty() {
            parts.push(format!("tx {}", tx.join(" ")));
        }
        if !rx.is_empty() {
            parts.push(format!("rx {}", rx.join(" ")));
        }
        if parts.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// What the device is to do for one transmitted TCP frame: `RTE_MBUF_F_TX_*` flags and the
/// header lengths the flags need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxOffload {
    /// `RTE_MBUF_F_TX_*` flags.
    pub flags: u64,
    /// Layer-2 header length (the tag included when it is in the frame).
    pub l2_len: u16,
    /// IP header length.
    pub l3_len: u16,
    /// TCP header length.
    pub l4_len: u16,
}

/// Readies a TCP frame (`frame`, whose 802.1Q tag the device inserts when `tag_offloaded`
/// holds its TCI) for a device that fills its TCP checksum: the checksum field gets the
/// pseudo-header sum (RFC 9293 §3.1, RFC 8200 §8.1), the IPv4 header checksum is zeroed
/// for the device when `ipv4_by_device`, else filled here. Returns the flags and lengths
/// for the mbuf, or `None` (frame untouched) when it is not an unfragmented TCP segment
/// over IPv4 or IPv6 without extension headers.
pub fn prepare_tcp(
    frame: &mut [u8],
    tag_offloaded: Option<u16>,
    ipv4_by_device: bool,
) -> Option<TxOffload> {
    let l2 = parse_l2(frame, tag_offloaded)?;
    let l3 = l2.l3_offset;
    let ip = frame.get(l3..)?;
    let (l3_len, tcp_len, ipv4) = match u16::from(l2.ethertype) {
        0x0800 => {
            let ihl = usize::from(*ip.first()? & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
            let fragment = u16::from_be_bytes([*ip.get(6)?, *ip.get(7)?]) & 0x3fff != 0;
            if ip[0] >> 4 != 4 || ihl < 20 || *ip.get(9)? != 6 || fragment || total < ihl {
                return None;
            }
            (ihl, total - ihl, true)
        }
        0x86dd => {
            if *ip.get(6)? != 6 {
                return None;
            }
            let payload = usize::from(u16::from_be_bytes([*ip.get(4)?, *ip.get(5)?]));
            (IPV6_HLEN, payload, false)
        }
        _ => return None,
    };
    let l4 = l3 + l3_len;
    let l4_len = usize::from(*frame.get(l4 + 12)? >> 4) * 4;
    if l4_len < 20 || tcp_len < l4_len || frame.len() < l4 + tcp_len {
        return None;
    }
    let mut pseudo = [0u8; 40];
    let n = if ipv4 {
        pseudo[..8].copy_from_slice(&frame[l3 + 12..l3 + 20]);
        pseudo[9] = 6;
        pseudo[10..12].copy_from_slice(&(tcp_len as u16).to_be_bytes());
        12
    } else {
        pseudo[..32].copy_from_slice(&frame[l3 + 8..l3 + 40]);
        pseudo[34..36].copy_from_slice(&(tcp_len as u16).to_be_bytes());
        pseudo[39] = 6;
        40
    };
    let sum = tcp::checksum::sum(&pseudo[..n]);
    frame[l4 + 16..l4 + 18].copy_from_slice(&sum.to_be_bytes());
    let mut flags = dpdk_sys::RTE_MBUF_F_TX_TCP_CKSUM;
    if ipv4 {
        flags |= dpdk_sys::RTE_MBUF_F_TX_IPV4;
        frame[l3 + 10..l3 + 12].fill(0);
        if ipv4_by_device {
            flags |= dpdk_sys::RTE_MBUF_F_TX_IP_CKSUM;
        } else {
            let c = !tcp::checksum::sum(&frame[l3..l3 + l3_len]);
            frame[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
        }
    } else {
        flags |= dpdk_sys::RTE_MBUF_F_TX_IPV6;
    }
    Some(TxOffload {
        flags,
        l2_len: l3 as u16,
        l3_len: l3_len as u16,
        l4_len: l4_len as u16,
    })
}

/// The device's verdict on a received frame's checksums, from its `ol_flags`. A layer-4
/// checksum the device marks "none" (the data is intact, the field holds only a partial
/// sum: a virtio peer left the checksum to its host) counts as good.
pub fn rx_verdict(ol_flags: u64) -> RxChecksum {
    let ip = match ol_flags & u64::from(dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_MASK) {
        f if f == u64::from(dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_GOOD) => Checked::Good,
        f if f == u64::from(dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_BAD) => Checked::Bad,
        _ => Checked::Unknown,
    };
    let l4 = match ol_flags & u64::from(dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_MASK) {
        f if f == u64::from(dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_GOOD)
            || f == u64::from(dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_NONE) =>
        {
            Checked::Good
        }
        f if f == u64::from(dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_BAD) => Checked::Bad,
        _ => Checked::Unknown,
    };
    RxChecksum { ip, l4 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    /// A TCP frame over `src` -> `dst` with checksums filled in software.
    fn tcp_frame(src: IpAddr, dst: IpAddr, payload: &[u8]) -> Vec<u8> {
        let ends = crate::frame::Ends {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: src,
            dst_ip: dst,
            vlan: None,
        };
        crate::test_frames::tcp_frame(ends, payload)
    }

    /// The device's part: the one's complement of the sum over the TCP segment, whose
    /// checksum field holds the pseudo-header sum.
    fn device_fills(frame: &mut [u8], t: &TxOffload) {
        let l4 = usize::from(t.l2_len + t.l3_len);
        let c = !tcp::checksum::sum(&frame[l4..]);
        frame[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
        if t.flags & dpdk_sys::RTE_MBUF_F_TX_IP_CKSUM != 0 {
            let l3 = usize::from(t.l2_len);
            let c = !tcp::checksum::sum(&frame[l3..l4]);
            frame[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
        }
    }

    #[test]
    fn device_checksums_equal_the_software_ones() {
        let v4 = (
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        );
        let v6 = (
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)),
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)),
        );
        for (src, dst) in [v4, v6] {
            for len in [0, 1, 7, 1460] {
                let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
                let want = tcp_frame(src, dst, &payload);
                for by_device in [false, true] {
                    let mut f = want.clone();
                    let t = prepare_tcp(&mut f, None, by_device).expect("a TCP frame");
                    assert_ne!(f, want, "the checksum field holds the pseudo-header sum");
                    assert_eq!((t.l2_len, t.l4_len), (14, 20));
                    device_fills(&mut f, &t);
                    assert_eq!(f, want, "{src} {len} octets, ipv4 by device {by_device}");
                }
            }
        }
    }

    #[test]
    fn other_frames_are_left_alone() {
        let mut arp = vec![0u8; 60];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(prepare_tcp(&mut arp, None, true), None);
        let mut f = tcp_frame(
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            b"x",
        );
        f[14 + 9] = 17;
        let before = f.clone();
        assert_eq!(prepare_tcp(&mut f, None, true), None);
        assert_eq!(f, before);
    }

    #[test]
    fn verdicts_from_flags() {
        let good = u64::from(
            dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_GOOD | dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_GOOD,
        );
        assert_eq!(
            rx_verdict(good),
            RxChecksum {
                ip: Checked::Good,
                l4: Checked::Good
            }
        );
        assert_eq!(rx_verdict(0), RxChecksum::default());
        let partial = u64::from(dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_NONE);
        assert_eq!(rx_verdict(partial).l4, Checked::Good);
        assert_eq!(rx_verdict(partial).ip, Checked::Unknown);
        let bad = u64::from(dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_BAD);
        assert_eq!(rx_verdict(bad).l4, Checked::Bad);
    }
}
