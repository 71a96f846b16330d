//! NIC offloads chosen from a device's capabilities (`rte_eth_dev_info`): IPv4 and TCP
//! checksums on transmit and receive, TCP segmentation (TSO), and receive of frames in
//! chained mbufs. The software path stays the fallback: an offload the device does not
//! offer is done by the stacks.
//!
//! On transmit, a TCP frame whose checksum the device fills carries `ol_flags`, its header
//! lengths, and the pseudo-header sum in its TCP checksum field ([`prepare_tcp`]). With
//! TSO, consecutive segments of one connection that the engine made of equal-sized units
//! (one FPDU each) go to the device as one frame in chained mbufs with the unit size as
//! segment size ([`prepare_burst`]): the device cuts it where the engine did, so every cut
//! lands on an FPDU boundary, and the engine still retransmits its own units. On receive,
//! the device's verdict ([`rx_verdict`]) spares the classifier its own check.

use std::fmt;

use super::mbuf::{Mbuf, TxOffload};
use crate::frame::{parse_tcp, Checked, RxChecksum, TcpFrame};
use crate::tso::{InPlaceTso, TSO_MAX_PAYLOAD, TSO_MAX_SEGS};

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
    /// The device segments TCP frames in chained mbufs (TSO and multi-segment transmit).
    pub tso: bool,
}

impl Offloads {
    /// Every offload of this module the device offers (`rx_capa`, `tx_capa`:
    /// `rx_offload_capa` and `tx_offload_capa` of `rte_eth_dev_info`); none when `enabled`
    /// is false, except receive in chained mbufs when `scatter` asks for it (the port's
    /// receive buffers are smaller than a frame). A transmit IPv4 checksum without the TCP
    /// one is not used (the stacks checksum both then). `driver` is the PMD's name: TSO is
    /// not used on `net_tap`, whose segmentation in software measures a segment with its
    /// Ethernet header against the IP MTU and so refuses MSS-sized ones (the frame would
    /// block its queue).
    pub fn choose(
        enabled: bool,
        scatter: bool,
        rx_capa: u64,
        tx_capa: u64,
        driver: &str,
    ) -> Offloads {
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
            tso: tx_tcp_cksum
                && has(tx_capa, true, 2)
                && has(tx_capa, true, 3)
                && driver != "net_tap",
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
        for (on, which) in [
            (self.tx_ipv4_cksum, 0),
            (self.tx_tcp_cksum, 1),
            (self.tso, 2),
            (self.tso, 3),
        ] {
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
            (self.tso, "tso"),
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

/// Writes the checksum fields of a TCP frame `t` for the device: the pseudo-header sum
/// (over `tcp_len` octets; none for TSO, whose segments the device sums with their own
/// length) in the TCP checksum field, and the IPv4 header checksum zeroed for the device
/// (`ipv4_by_device`) or filled here. Returns the offload request.
fn write_for_device(
    frame: &mut [u8],
    t: &TcpFrame,
    ipv4_by_device: bool,
    tso_segsz: u16,
) -> TxOffload {
    let (l3, l4) = (t.l3, t.l3 + t.l3_len);
    let len = if tso_segsz > 0 { 0 } else { t.tcp_len };
    let mut pseudo = [0u8; 40];
    let n = if t.ipv4 {
        pseudo[..8].copy_from_slice(&frame[l3 + 12..l3 + 20]);
        pseudo[9] = 6;
        pseudo[10..12].copy_from_slice(&(len as u16).to_be_bytes());
        12
    } else {
        pseudo[..32].copy_from_slice(&frame[l3 + 8..l3 + 40]);
        pseudo[34..36].copy_from_slice(&(len as u16).to_be_bytes());
        pseudo[39] = 6;
        40
    };
    let sum = tcp::checksum::sum(&pseudo[..n]);
    frame[l4 + 16..l4 + 18].copy_from_slice(&sum.to_be_bytes());
    let mut flags = dpdk_sys::RTE_MBUF_F_TX_TCP_CKSUM;
    if tso_segsz > 0 {
        flags |= dpdk_sys::RTE_MBUF_F_TX_TCP_SEG;
    }
    if t.ipv4 {
        flags |= dpdk_sys::RTE_MBUF_F_TX_IPV4;
        frame[l3 + 10..l3 + 12].fill(0);
        if ipv4_by_device {
            flags |= dpdk_sys::RTE_MBUF_F_TX_IP_CKSUM;
        } else {
            let c = !tcp::checksum::sum(&frame[l3..l4]);
            frame[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
        }
    } else {
        flags |= dpdk_sys::RTE_MBUF_F_TX_IPV6;
    }
    TxOffload {
        flags,
        l2_len: l3 as u16,
        l3_len: t.l3_len as u16,
        l4_len: t.l4_len as u16,
        tso_segsz,
    }
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
    let t = parse_tcp(frame, tag_offloaded)?;
    Some(write_for_device(frame, &t, ipv4_by_device, 0))
}

/// A TSO frame being built: its first frame's layout and what has joined it.
struct Group {
    at: usize,
    t: TcpFrame,
    tag: Option<u16>,
    /// Payload octets per segment: the first frame's.
    segsz: usize,
    payload: usize,
    segs: u16,
    next_seq: u32,
    /// A shorter segment joined: it must be the last.
    closed: bool,
}

/// Readies a burst of frames for a device with the offloads `o`: TCP frames get the
/// checksum offload ([`prepare_tcp`]); with TSO, runs of consecutive segments of one
/// connection with equal headers (but for lengths, sequence numbers and checksums),
/// contiguous sequence numbers and payloads of one size (the last may be shorter) become
/// one frame in chained mbufs, the size as its segment size. Frames prepared already (a
/// burst offered again) are left as they are. `scratch` is an empty vector kept for reuse.
/// Returns how many TSO frames were made.
pub fn prepare_burst(o: &Offloads, bufs: &mut Vec<Mbuf>, scratch: &mut Vec<Mbuf>) -> u64 {
    if !o.tx_tcp_cksum {
        return 0;
    }
    if !o.tso {
        for m in bufs.iter_mut() {
            if m.ol_flags() & dpdk_sys::RTE_MBUF_F_TX_L4_MASK == 0 {
                let tag = m.offloaded_vlan();
                if let Some(t) = prepare_tcp(m.as_mut(), tag, o.tx_ipv4_cksum) {
                    m.set_tx_offload(&t);
                }
            }
        }
        return 0;
    }
    let mut made = 0;
    std::mem::swap(bufs, scratch);
    let mut group: Option<Group> = None;
    for mut m in scratch.drain(..) {
        let fresh = m.ol_flags() & dpdk_sys::RTE_MBUF_F_TX_L4_MASK == 0 && m.segments() == 1;
        let tag = m.offloaded_vlan();
        let parsed = if fresh {
            parse_tcp(m.as_ref(), tag)
        } else {
            None
        };
        if let (Some(g), Some(t)) = (group.as_mut(), parsed) {
            if joins(g, bufs[g.at].as_ref(), m.as_ref(), &t, tag) && m.adj(t.header_len()).is_ok() {
                // Its payload waits after the group's first frame, chained in `finish`.
                let p = t.payload_len();
                g.closed = p < g.segsz;
                g.payload += p;
                g.segs += 1;
                g.next_seq = g.next_seq.wrapping_add(p as u32);
                bufs.push(m);
                continue;
            }
        }
        if let Some(g) = group.take() {
            made += finish(o, bufs, &g);
        }
        match parsed {
            Some(t) if t.payload_len() > 0 => {
                group = Some(Group {
                    at: bufs.len(),
                    t,
                    tag,
                    segsz: t.payload_len(),
                    payload: t.payload_len(),
                    segs: 1,
                    next_seq: t.seq(m.as_ref()).wrapping_add(t.payload_len() as u32),
                    closed: false,
                });
            }
            Some(t) => {
                let off = write_for_device(m.as_mut(), &t, o.tx_ipv4_cksum, 0);
                m.set_tx_offload(&off);
            }
            None => {}
        }
        bufs.push(m);
    }
    if let Some(g) = group.take() {
        made += finish(o, bufs, &g);
    }
    made
}

/// Whether frame `b` (parsed as `t`, its tag `tag`) continues the TSO frame of `g`, whose
/// first frame is `a`.
fn joins(g: &Group, a: &[u8], b: &[u8], t: &TcpFrame, tag: Option<u16>) -> bool {
    let p = t.payload_len();
    if g.closed
        || tag != g.tag
        || p == 0
        || p > g.segsz
        || g.payload + p > TSO_MAX_PAYLOAD
        || g.segs >= TSO_MAX_SEGS
        || (t.l3, t.l3_len, t.l4_len, t.ipv4) != (g.t.l3, g.t.l3_len, g.t.l4_len, g.t.ipv4)
    {
        return false;
    }
    t.seq(b) == g.next_seq && t.same_headers(a, b)
}

/// Completes the group at the end of `bufs` (its first frame at `g.at`, the payloads that
/// joined it after): one TSO frame of all the payload when others joined (returns 1), else
/// the first frame with the plain checksum offload (0).
fn finish(o: &Offloads, bufs: &mut Vec<Mbuf>, g: &Group) -> u64 {
    let segsz = if g.segs > 1 { g.segsz } else { 0 };
    let mut rest = bufs.drain(g.at..);
    let Some(mut head) = rest.next() else {
        return 0;
    };
    head.chain_all(rest);
    let off = finish_headers(head.as_mut(), g.t, g.payload, segsz, o.tx_ipv4_cksum);
    head.set_tx_offload(&off);
    bufs.push(head);
    u64::from(g.segs > 1)
}

/// Readies a frame built in place ([`InPlaceTso`], the buffer truncated to its length) for
/// a device with the offloads `o`: one TSO frame of its segments (a frame of one segment
/// gets the plain checksum offload).
pub fn finish_in_place(o: &Offloads, frame: &mut [u8], tso: &InPlaceTso) -> TxOffload {
    finish_headers(
        frame,
        tso.layout(),
        tso.payload(),
        tso.segsz(),
        o.tx_ipv4_cksum,
    )
}

/// The headers of a TSO frame of `payload` octets cut every `segsz` (0: one segment)
/// whose first frame `frame` (laid out as `t`) starts: its IP length covers all of it.
fn finish_headers(
    frame: &mut [u8],
    mut t: TcpFrame,
    payload: usize,
    segsz: usize,
    ipv4_by_device: bool,
) -> TxOffload {
    if segsz > 0 {
        t.tcp_len = t.l4_len + payload;
        let l3 = t.l3;
        if t.ipv4 {
            let total = (t.l3_len + t.tcp_len) as u16;
            frame[l3 + 2..l3 + 4].copy_from_slice(&total.to_be_bytes());
        } else {
            frame[l3 + 4..l3 + 6].copy_from_slice(&(t.tcp_len as u16).to_be_bytes());
        }
    }
    write_for_device(frame, &t, ipv4_by_device, segsz as u16)
}

/// Whether a device may send TCP payloads from the engine's own buffers, attached as
/// external buffers behind the headers' mbuf: its PMD (`driver`) copies or hands on frames
/// by virtual address (memif without zero-copy: `device` is its vdev string; vhost-user;
/// TAP), takes chained mbufs (`tx_capa`), and the stacks fill the checksums (`o`: no
/// checksum offload, so no TSO either, both of which expect a whole frame in the first
/// mbuf). Drivers that hand descriptors to another process's memory map (virtio-user,
/// memif zero-copy) or to a device (DMA by IOVA) keep the copy.
pub fn sends_external_payloads(driver: &str, device: &str, tx_capa: u64, o: &Offloads) -> bool {
    let by_address = match driver {
        "net_memif" => !device.contains("zero-copy=yes"),
        "net_vhost" | "net_tap" => true,
        _ => false,
    };
    by_address && tx_capa & bit(true, 3) != 0 && !o.tx_tcp_cksum && !o.tso
}

/// Whether a device (PMD `driver`, receive capabilities `rx_capa`) may hand over received
/// frames longer than the MTU: one with large receive (LRO), or a vhost-user backend,
/// which takes a virtio peer's TSO frames whole.
pub fn takes_large_frames(driver: &str, rx_capa: u64) -> bool {
    driver == "net_vhost" || rx_capa & bit(false, 2) != 0
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

    /// A data segment of `len` octets at `seq` from 10.0.0.1:4000 to 10.0.0.2:5000.
    fn segment(seq: u32, len: usize) -> Vec<u8> {
        let mut f = tcp_frame(
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            &vec![0u8; len],
        );
        let payload: Vec<u8> = (0..len).map(|i| (seq as usize + i) as u8).collect();
        f[54..].copy_from_slice(&payload);
        f[38..42].copy_from_slice(&seq.to_be_bytes());
        // The checksums as the engine fills them.
        f[24..26].fill(0);
        let c = !tcp::checksum::sum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        f[50..52].fill(0);
        let c = tcp::checksum::tcp_checksum(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            &f[34..],
        );
        f[50..52].copy_from_slice(&c.to_be_bytes());
        f
    }

    /// What a device makes of a TSO frame: a segment per `segsz` payload octets, each with
    /// the headers, its own sequence number, IP length and checksums.
    fn device_cuts(frame: &[u8], t: &TxOffload) -> Vec<Vec<u8>> {
        let hdr = usize::from(t.l2_len + t.l3_len + t.l4_len);
        let (l3, l4) = (usize::from(t.l2_len), usize::from(t.l2_len + t.l3_len));
        let seq0 = u32::from_be_bytes(frame[l4 + 4..l4 + 8].try_into().unwrap());
        frame[hdr..]
            .chunks(usize::from(t.tso_segsz))
            .enumerate()
            .map(|(i, chunk)| {
                let mut s = frame[..hdr].to_vec();
                s.extend_from_slice(chunk);
                let seq = seq0 + (i * usize::from(t.tso_segsz)) as u32;
                s[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
                let total = (s.len() - l3) as u16;
                s[l3 + 2..l3 + 4].copy_from_slice(&total.to_be_bytes());
                // The pseudo-header sum with this segment's length, then the whole sum.
                let tcp_len = (s.len() - l4) as u16;
                let mut pseudo = s[l3 + 12..l3 + 20].to_vec();
                pseudo.extend_from_slice(&[0, 6]);
                pseudo.extend_from_slice(&tcp_len.to_be_bytes());
                s[l4 + 16..l4 + 18].copy_from_slice(&tcp::checksum::sum(&pseudo).to_be_bytes());
                let c = !tcp::checksum::sum(&s[l4..]);
                s[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
                s[l3 + 10..l3 + 12].fill(0);
                let c = !tcp::checksum::sum(&s[l3..l4]);
                s[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
                s
            })
            .collect()
    }

    // Segments of one size (FPDUs filling the MSS) and a shorter last one join into one TSO
    // frame; cut every segment size, it gives back exactly the engine's segments, so every
    // cut lands on a unit (FPDU) boundary.
    #[test]
    fn tso_frame_cuts_back_into_the_engine_segments() {
        let mss = 1448;
        let lens = [mss, mss, mss, 700];
        let mut seq = 1000u32;
        let segs: Vec<Vec<u8>> = lens
            .iter()
            .map(|&len| {
                let s = segment(seq, len);
                seq += len as u32;
                s
            })
            .collect();
        let t = parse_tcp(&segs[0], None).unwrap();
        let mut g = Group {
            at: 0,
            t,
            tag: None,
            segsz: mss,
            payload: mss,
            segs: 1,
            next_seq: 1000 + mss as u32,
            closed: false,
        };
        let mut tso = segs[0].clone();
        for s in &segs[1..] {
            let ts = parse_tcp(s, None).unwrap();
            assert!(joins(&g, &segs[0], s, &ts, None));
            g.closed = ts.payload_len() < g.segsz;
            g.payload += ts.payload_len();
            g.segs += 1;
            g.next_seq += ts.payload_len() as u32;
            tso.extend_from_slice(&s[ts.header_len()..]);
        }
        // Nothing joins after the shorter segment.
        let after = segment(g.next_seq, mss);
        assert!(!joins(&g, &segs[0], &after, &t, None));
        let off = finish_headers(&mut tso, t, g.payload, g.segsz, true);
        assert_eq!(off.tso_segsz as usize, mss);
        assert_ne!(off.flags & dpdk_sys::RTE_MBUF_F_TX_TCP_SEG, 0);
        assert_eq!(device_cuts(&tso, &off), segs);
    }

    // The same segments written in place into one buffer ([`InPlaceTso`]) make the same TSO
    // frame: cut by the device, it gives back exactly the engine's segments.
    #[test]
    fn tso_frame_built_in_place_cuts_back_into_the_engine_segments() {
        let mss = 1448;
        let mut seq = 1000u32;
        let segs: Vec<Vec<u8>> = [mss, mss, mss, mss, 100]
            .iter()
            .map(|&len| {
                let s = segment(seq, len);
                seq += len as u32;
                s
            })
            .collect();
        let mut buf = vec![0u8; 65535];
        buf[..segs[0].len()].copy_from_slice(&segs[0]);
        let mut t = InPlaceTso::open(&buf, None).unwrap();
        for s in &segs[1..] {
            let (at, h) = (t.next_packet(), t.packet_headers());
            let saved = buf[at..at + h].to_vec();
            buf[at..at + s.len() - 14].copy_from_slice(&s[14..]);
            assert!(t.join(&buf, s.len() - 14));
            buf[at..at + h].copy_from_slice(&saved);
        }
        buf.truncate(t.len());
        let o = Offloads {
            tx_ipv4_cksum: true,
            tx_tcp_cksum: true,
            tso: true,
            ..Offloads::default()
        };
        let off = finish_in_place(&o, &mut buf, &t);
        assert_eq!((off.tso_segsz as usize, t.segments()), (mss, 5));
        assert_ne!(off.flags & dpdk_sys::RTE_MBUF_F_TX_TCP_SEG, 0);
        assert_eq!(device_cuts(&buf, &off), segs);
    }

    // A gap in the sequence, a larger payload or another header (the ACK moved) starts a
    // new frame.
    #[test]
    fn only_contiguous_equal_segments_join() {
        let first = segment(1000, 1000);
        let t = parse_tcp(&first, None).unwrap();
        let g = Group {
            at: 0,
            t,
            tag: None,
            segsz: 1000,
            payload: 1000,
            segs: 1,
            next_seq: 2000,
            closed: false,
        };
        let ok = segment(2000, 1000);
        assert!(joins(&g, &first, &ok, &t, None));
        assert!(!joins(&g, &first, &segment(2001, 1000), &t, None));
        let longer = segment(2000, 1001);
        assert!(!joins(
            &g,
            &first,
            &longer,
            &parse_tcp(&longer, None).unwrap(),
            None
        ));
        let mut acked = ok.clone();
        acked[45] ^= 1;
        assert!(!joins(&g, &first, &acked, &t, None));
        assert!(!joins(&g, &first, &ok, &t, Some(100)));
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
