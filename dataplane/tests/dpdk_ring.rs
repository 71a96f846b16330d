//! DPDK with the `net_ring` PMD as a loopback (its rx and tx queues share one ring), in this
//! test binary's own process: a known frame sequence goes out and comes back byte for byte.

#[path = "dpdk_common/mod.rs"]
mod dpdk_common;

use dataplane::dpdk::mbuf::{ExtSlab, ExtSlabCounts};
use dataplane::dpdk::{Eal, Mbuf};
use dataplane::port::any::{AnyBuf, AnyPort, Backend};
use dataplane::port::dpdk::{DpdkPort, DpdkPortConfig};
use dataplane::port::{PacketBuf, Port, PortStats};
use dpdk_common::*;

fn eal() -> &'static Eal {
    shared_eal(
        "ring",
        &[
            "-l",
            "0",
            "--vdev",
            "net_ring0",
            "--vdev",
            "net_ring1",
            "--vdev",
            "net_ring2",
            "--vdev",
            "net_ring3",
            "--vdev",
            "net_ring4",
            "--vdev",
            "net_ring5",
            "--vdev",
            "net_ring6",
        ],
    )
}

#[test]
fn ring_loopback_returns_every_frame_intact() {
    let mut port = DpdkPort::open(eal(), &DpdkPortConfig::new("loop", "net_ring0")).unwrap();
    const N: u32 = 5000;
    let mut next_tx = 0u32;
    let mut next_rx = 0u32;
    let mut tx = Vec::new();
    let mut rx: Vec<Mbuf> = Vec::new();
    while next_rx < N {
        while next_tx < N && tx.len() < 32 {
            let mut m = port.alloc_tx(frame_len(next_tx)).expect("pool has mbufs");
            fill_frame(next_tx, m.as_mut());
            tx.push(m);
            next_tx += 1;
        }
        let sent = port.tx_burst(&mut tx);
        assert!(
            sent > 0 || next_tx == N,
            "the ring never stays full while we drain it"
        );
        port.rx_burst(&mut rx, 64);
        for frame in rx.drain(..) {
            check_frame(next_rx, frame.as_ref()).unwrap();
            next_rx += 1;
        }
    }
    assert!(tx.is_empty());
    let stats = port.stats();
    assert_eq!(
        stats,
        PortStats {
            rx_packets: u64::from(N),
            rx_bytes: total_bytes(N),
            tx_packets: u64::from(N),
            tx_bytes: total_bytes(N),
            ..PortStats::default()
        }
    );
    let hw = port.hw_stats().unwrap();
    assert_eq!((hw.rx_packets, hw.tx_packets), (u64::from(N), u64::from(N)));
    assert_eq!(port.pool().in_use(), 0);
}

#[test]
fn frames_a_full_ring_rejects_stay_with_the_caller() {
    let mut cfg = DpdkPortConfig::new("full", "net_ring1");
    cfg.pool_size = 4095;
    let mut port = DpdkPort::open(eal(), &cfg).unwrap();
    let mut tx = Vec::new();
    for seq in 0..3000 {
        let mut m = port.alloc_tx(frame_len(seq)).expect("pool has mbufs");
        fill_frame(seq, m.as_mut());
        tx.push(m);
    }
    // Nobody receives: the ring fills up and refuses the rest.
    let mut accepted = 0;
    loop {
        let sent = port.tx_burst(&mut tx);
        if sent == 0 {
            break;
        }
        accepted += sent;
    }
    assert!(accepted > 0 && accepted < 3000, "accepted {accepted}");
    assert_eq!(tx.len(), 3000 - accepted);
    // The rejected frames are still ours, intact and in order.
    for (i, m) in tx.iter().enumerate() {
        check_frame((accepted + i) as u32, m.as_ref()).unwrap();
    }
    assert_eq!(port.stats().tx_packets, accepted as u64);
    assert_eq!(port.stats().tx_bytes, total_bytes(accepted as u32));
    // Receive what the ring holds; nothing is lost or reordered.
    let mut rx = Vec::new();
    while port.rx_burst(&mut rx, 256) > 0 {}
    assert_eq!(rx.len(), accepted);
    for (seq, m) in rx.iter().enumerate() {
        check_frame(seq as u32, m.as_ref()).unwrap();
    }
    assert_eq!(port.pool().in_use(), 3000);
    drop(rx);
    drop(tx);
    assert_eq!(port.pool().in_use(), 0);
}

#[test]
#[allow(unsafe_code)] // links two mbufs into a chain through the raw `rte_mbuf` header
fn received_chained_mbufs_are_copied_into_one_and_counted() {
    let mut port = DpdkPort::open(eal(), &DpdkPortConfig::new("chain", "net_ring2")).unwrap();
    let mut head = port.alloc_tx(100).unwrap();
    let mut tail = port.alloc_tx(50).unwrap();
    let want: Vec<u8> = (0..150u32).map(|i| (i * 7 + 1) as u8).collect();
    head.as_mut().copy_from_slice(&want[..100]);
    tail.as_mut().copy_from_slice(&want[100..]);
    // Build a two-segment frame by hand (the ring PMD passes mbuf pointers through, so it
    // comes back chained, as a PMD with scatter would deliver an oversized frame).
    let h = head.as_ptr();
    // SAFETY: `head` and `tail` are live single-segment mbufs we own; linking `tail` as the
    // second segment hands its ownership to `head`, whose drop frees the whole chain.
    unsafe {
        (*h).next = tail.into_raw();
        (*h).nb_segs = 2;
        (*h).pkt_len = 150;
    }
    assert_eq!((head.segments(), head.pkt_len()), (2, 150));
    let mut plain = port.alloc_tx(frame_len(1)).unwrap();
    fill_frame(1, plain.as_mut());
    let mut tx = vec![head, plain];
    assert_eq!(port.tx_burst(&mut tx), 2);
    assert_eq!(port.pool().in_use(), 3);
    let mut rx = Vec::new();
    assert_eq!(port.rx_burst(&mut rx, 32), 2, "both frames are handed out");
    assert_eq!(rx[0].segments(), 1, "the chained frame comes in one mbuf");
    assert_eq!(
        rx[0].as_ref(),
        &want[..],
        "with the bytes of both segments in order"
    );
    check_frame(1, rx[1].as_ref()).unwrap();
    let stats = port.stats();
    assert_eq!(
        (stats.rx_packets, stats.rx_errors, stats.rx_chained),
        (2, 0, 1)
    );
    assert_eq!(stats.rx_bytes, 150 + frame_len(1) as u64);
    assert_eq!(
        port.pool().in_use(),
        2,
        "both segments of the chain were freed"
    );
    drop(rx);
    assert_eq!(port.pool().in_use(), 0);
}

// A device with fewer queue pairs than configured (a net_ring vdev has 16) is refused with
// both numbers, and the device is released for another try.
#[test]
fn more_queues_than_the_device_has_is_a_setup_error() {
    let cfg = DpdkPortConfig {
        queues: 64,
        ..DpdkPortConfig::new("many", "net_ring3")
    };
    let err = DpdkPort::open_queues(eal(), &cfg).unwrap_err().to_string();
    assert!(
        err.contains("64 queues asked for, it has at most 16"),
        "{err}"
    );
    let port = DpdkPort::open(eal(), &DpdkPortConfig::new("one", "net_ring3")).unwrap();
    assert_eq!(port.queue(), (0, 1));
}

// A received burst retired and freed at once (the poll loop's end of burst,
// `PacketBuf::free_all`: one call from the spent list's storage) gives every mbuf back to
// its pool, over more frames than a receive burst holds (32).
#[test]
fn a_burst_freed_in_bulk_gives_every_mbuf_back_to_its_pool() {
    let port = DpdkPort::open(eal(), &DpdkPortConfig::new("bulk", "net_ring4")).unwrap();
    let mut port = AnyPort::from(port);
    let in_use = |port: &AnyPort| match port.backend() {
        Backend::Dpdk(p) => p.pool().in_use(),
        _ => unreachable!("a DPDK port"),
    };
    assert_eq!(in_use(&port), 0);
    const N: u32 = 100;
    let mut tx: Vec<AnyBuf> = (0..N)
        .map(|i| {
            let mut m = port.alloc_tx(frame_len(i)).expect("pool has mbufs");
            fill_frame(i, m.as_mut());
            m
        })
        .collect();
    assert_eq!(port.tx_burst(&mut tx), N as usize);
    let mut rx = Vec::new();
    assert_eq!(port.rx_burst(&mut rx, 128), N as usize);
    for (i, frame) in rx.iter().enumerate() {
        check_frame(i as u32, frame.as_ref()).unwrap();
    }
    assert_eq!(in_use(&port), N, "the received frames hold their mbufs");
    // Retired as the TCP handler retires them: the mbufs, out of their enum, into the
    // burst's spent list, still held until the list is freed.
    let mut spent: Vec<Mbuf> = Vec::new();
    for frame in rx.drain(..) {
        frame.retire(&mut spent);
    }
    assert_eq!(spent.len(), N as usize);
    assert_eq!(
        in_use(&port),
        N,
        "a retired frame is not freed before free_all"
    );
    AnyBuf::free_all(&mut spent);
    assert!(spent.is_empty());
    assert_eq!(
        in_use(&port),
        0,
        "every mbuf of the burst is back in its pool"
    );
}

// A chained frame and one whose data are a lent payload (an external buffer, lent by its
// owner) freed in bulk among plain ones: every segment goes back to the pool, and the
// payload's token is given back.
#[test]
#[allow(unsafe_code)] // lends a payload to an mbuf (`ExtSlab::attach_octets`)
fn chained_and_shared_mbufs_in_a_bulk_free_are_freed_right() {
    let port = DpdkPort::open(eal(), &DpdkPortConfig::new("bulk2", "net_ring5")).unwrap();
    let pool = port.pool();
    let before = pool.in_use();
    let mut head = Mbuf::alloc(pool, 100).unwrap();
    let tail = Mbuf::alloc(pool, 50).unwrap();
    head.chain_all([tail]);
    assert_eq!((head.segments(), head.pkt_len()), (2, 150));
    let payload = vec![0x5au8; 1000];
    let mut slab = ExtSlab::new(4).unwrap();
    // SAFETY: `payload` outlives the slab and every mbuf attached to it.
    let lent = unsafe { slab.attach_octets(pool, &payload, 77) }.unwrap();
    let plain = Mbuf::alloc(pool, 60).unwrap();
    let plain2 = Mbuf::alloc(pool, 60).unwrap();
    let mut burst = vec![plain, head, lent, plain2];
    assert_eq!(pool.in_use(), before + 5);
    Mbuf::free_all(&mut burst);
    assert!(burst.is_empty());
    assert_eq!(
        pool.in_use(),
        before,
        "both segments of the chain are back too"
    );
    let mut back = Vec::new();
    slab.take_returned(&mut back);
    assert_eq!(
        back,
        vec![77],
        "the external buffer's owner got its token back"
    );
}

// The shared-info records of lent payloads come from a bounded slab and are reused: a slab
// of two lends two payloads, refuses the third (counted), and lends again once a frame that
// held one was freed; the tokens of freed frames come out when the slab is reaped (or runs
// out of records), each once, and none after the slab was closed.
#[test]
#[allow(unsafe_code)] // lends a payload to mbufs (`ExtSlab::attach_octets`)
fn lent_payload_records_are_reused_and_bounded() {
    let port = DpdkPort::open(eal(), &DpdkPortConfig::new("slab", "net_ring6")).unwrap();
    let pool = port.pool();
    let before = pool.in_use();
    let payload = vec![0xa5u8; 1448];
    let mut slab = ExtSlab::new(2).unwrap();
    let attach = |slab: &mut ExtSlab, token| {
        // SAFETY: `payload` outlives the slab and every mbuf attached to it.
        unsafe { slab.attach_octets(pool, &payload, token) }
    };
    let a = attach(&mut slab, 1).unwrap();
    let b = attach(&mut slab, 2).unwrap();
    assert_eq!(
        a.as_ref(),
        &payload[..],
        "the mbuf's data are the payload's octets"
    );
    assert!(attach(&mut slab, 3).is_none());
    assert_eq!(
        slab.counts(),
        ExtSlabCounts {
            returned: 0,
            exhausted: 1,
            outstanding: 2
        }
    );
    assert_eq!(
        pool.in_use(),
        before + 2,
        "a refused attachment takes no mbuf"
    );
    let mut back = Vec::new();
    drop(a);
    assert_eq!(slab.counts().returned, 1);
    slab.take_returned(&mut back);
    assert_eq!(back, vec![1], "reaped");
    slab.take_returned(&mut back);
    assert_eq!(back, vec![1], "once");
    let c = attach(&mut slab, 4).unwrap();
    drop(b);
    // No free record: the attachment reaps the one just given back.
    let e = attach(&mut slab, 5).unwrap();
    let mut burst = vec![c, e];
    Mbuf::free_all(&mut burst);
    slab.take_returned(&mut back);
    back.sort_unstable();
    assert_eq!(back, vec![1, 2, 4, 5], "in any order");
    assert_eq!(
        slab.counts(),
        ExtSlabCounts {
            returned: 4,
            exhausted: 1,
            outstanding: 0
        }
    );
    assert_eq!(pool.in_use(), before);
    // Closed with a frame still holding a record: the slab lives until it comes back.
    let d = attach(&mut slab, 6).unwrap();
    drop(slab);
    drop(d);
    assert_eq!(pool.in_use(), before);
}
