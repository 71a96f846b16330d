//! DPDK with the `net_null` PMD, in this test binary's own process: EAL start-up, port
//! setup and counters, mbuf ownership, and the errors of bad device names and double init.

#[path = "dpdk_common/mod.rs"]
mod dpdk_common;

use dataplane::dpdk::{Eal, EalError, Mbuf, MbufError, Mempool};
use dataplane::port::dpdk::{available_devices, DpdkPort, DpdkPortConfig};
use dataplane::port::{Port, PortError};
use dpdk_common::*;

fn eal() -> &'static Eal {
    shared_eal(
        "null",
        &[
            "-l",
            "0",
            "--vdev",
            "net_null0",
            "--vdev",
            "net_null1",
            "--vdev",
            "net_null2,size=128",
            "--vdev",
            "net_null3",
            "--vdev",
            "net_null4",
            "--vdev",
            "net_null5",
            "--vdev",
            "net_null6",
        ],
    )
}

#[test]
fn probed_vdevs_are_listed() {
    // net_null4 is never opened; the others may be closed (and released) by other tests.
    let devices = available_devices(eal());
    assert!(devices.iter().any(|d| d == "net_null4"), "{devices:?}");
}

#[test]
fn a_dropped_port_is_closed_and_released() {
    let port = DpdkPort::open(eal(), &DpdkPortConfig::new("once", "net_null5")).unwrap();
    assert!(available_devices(eal()).iter().any(|d| d == "net_null5"));
    drop(port);
    // rte_eth_dev_close releases a virtual device's ethdev.
    assert!(!available_devices(eal()).iter().any(|d| d == "net_null5"));
    let err = DpdkPort::open(eal(), &DpdkPortConfig::new("again", "net_null5")).unwrap_err();
    assert!(
        err.to_string()
            .contains("no DPDK ethdev named \"net_null5\""),
        "{err}"
    );
}

#[test]
fn null_port_counts_transmitted_frames() {
    let mut port = DpdkPort::open(eal(), &DpdkPortConfig::new("null-tx", "net_null0")).unwrap();
    assert_eq!(port.info().name, "null-tx");
    let mut sent = 0u32;
    let mut bufs = Vec::new();
    while sent < 1000 {
        for seq in sent..sent + 50 {
            let mut m = port.alloc_tx(frame_len(seq)).expect("pool has mbufs");
            assert_eq!(m.len(), frame_len(seq));
            fill_frame(seq, m.as_mut());
            bufs.push(m);
        }
        // net_null accepts (and frees) every frame it is given.
        assert_eq!(port.tx_burst(&mut bufs), 50);
        assert!(bufs.is_empty());
        sent += 50;
    }
    let sw = port.stats();
    assert_eq!(sw.tx_packets, 1000);
    assert_eq!(sw.tx_bytes, total_bytes(1000));
    let hw = port.hw_stats().unwrap();
    assert_eq!(hw.tx_packets, 1000);
    assert_eq!(port.pool().in_use(), 0, "the PMD freed every sent mbuf");
}

#[test]
fn null_port_counts_received_frames() {
    let mut cfg = DpdkPortConfig::new("null-rx", "net_null2");
    cfg.promiscuous = false;
    let mut port = DpdkPort::open(eal(), &cfg).unwrap();
    let mut frames = Vec::new();
    let mut total = 0;
    for _ in 0..10 {
        // net_null fills every burst completely with frames of `size` bytes.
        let n = port.rx_burst(&mut frames, 64);
        assert_eq!(n, 64);
        total += n;
    }
    assert_eq!(frames.len(), total);
    assert!(frames.iter().all(|f| f.len() == 128 && f.segments() == 1));
    let stats = port.stats();
    assert_eq!(stats.rx_packets, 640);
    assert_eq!(stats.rx_bytes, 640 * 128);
    assert_eq!(port.hw_stats().unwrap().rx_packets, 640);
    assert_eq!(port.pool().in_use(), 640);
    assert_eq!(hugepage_files_of_this_process(), Vec::<String>::new());
    drop(frames);
    assert_eq!(
        port.pool().in_use(),
        0,
        "dropping received mbufs returns them"
    );
    // A burst larger than one DPDK call is split and still filled completely.
    let mut frames = Vec::new();
    assert_eq!(port.rx_burst(&mut frames, 1500), 1500);
}

/// Files of this process's hugepage memory (prefix `dataplane-<pid>`) in hugetlbfs mounts:
/// `Eal::init` unlinks them right after mapping (`--huge-unlink`), so a crash leaves none.
fn hugepage_files_of_this_process() -> Vec<String> {
    let prefix = format!("dataplane-{}", std::process::id());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let mut found = Vec::new();
    for line in mounts.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(2) != Some(&"hugetlbfs") {
            continue;
        }
        for entry in std::fs::read_dir(fields[1]).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(&prefix) {
                found.push(name);
            }
        }
    }
    found
}

#[test]
fn unknown_device_is_a_setup_error() {
    let err = DpdkPort::open(eal(), &DpdkPortConfig::new("ghost", "net_nosuch0")).unwrap_err();
    match &err {
        PortError::Setup { port, reason } => {
            assert_eq!(port, "ghost");
            assert!(reason.contains("net_nosuch0"), "{reason}");
            assert!(
                reason.contains("net_null4"),
                "lists probed devices: {reason}"
            );
        }
        other => panic!("expected PortError::Setup, got {other:?}"),
    }
}

#[test]
fn a_device_can_be_opened_once() {
    let first = DpdkPort::open(eal(), &DpdkPortConfig::new("a", "net_null1")).unwrap();
    let err = DpdkPort::open(eal(), &DpdkPortConfig::new("b", "net_null1")).unwrap_err();
    assert!(
        matches!(&err, PortError::Setup { port, reason } if port == "b" && reason.contains("already opened")),
        "{err}"
    );
    assert_eq!(first.device(), "net_null1");
}

#[test]
fn jumbo_mtu_sizes_mbufs_even_when_the_pmd_cannot_set_it() {
    let mut cfg = DpdkPortConfig::new("jumbo", "net_null3");
    cfg.mtu = 9000;
    cfg.mac = Some([0x02, 0xaa, 0, 0, 0, 1]);
    let mut port = DpdkPort::open(eal(), &cfg).unwrap();
    assert_eq!(port.info().mtu, 9000);
    assert_eq!(port.info().mac, [0x02, 0xaa, 0, 0, 0, 1]);
    let m = port
        .alloc_tx(9014)
        .expect("a 9014-byte frame fits one mbuf");
    assert_eq!(m.len(), 9014);
    assert_eq!(m.segments(), 1);
}

#[test]
fn second_eal_init_is_an_error() {
    eal();
    let err = Eal::init(&eal_args("null-again", &["--vdev", "net_null9"])).unwrap_err();
    assert!(matches!(err, EalError::AlreadyInitialised), "{err}");
}

#[test]
#[allow(unsafe_code)] // passes an mbuf through `Mbuf::into_raw` / `Mbuf::from_raw`
fn dropping_mbufs_returns_them_to_the_pool() {
    eal();
    let pool = Mempool::new("t_ownership", 255, 0, Mempool::DEFAULT_DATA_ROOM, -1).unwrap();
    assert_eq!(pool.size(), 255);
    assert_eq!(pool.available(), 255);
    let mut held: Vec<Mbuf> = (0..255).map(|_| Mbuf::alloc(&pool, 100).unwrap()).collect();
    assert_eq!(pool.available(), 0);
    assert!(
        Mbuf::alloc(&pool, 100).is_none(),
        "an empty pool allocates nothing"
    );
    // into_raw/from_raw pass ownership through a raw pointer without freeing.
    let raw = held.pop().unwrap().into_raw();
    assert_eq!(pool.available(), 0);
    // SAFETY: raw came from into_raw just above and nothing else owns it.
    let back = unsafe { Mbuf::from_raw(raw) }.unwrap();
    drop(back);
    assert_eq!(pool.available(), 1);
    held.truncate(100);
    assert_eq!(pool.available(), 155);
    drop(held);
    assert_eq!(pool.available(), 255);
    assert_eq!(pool.in_use(), 0);
}

#[test]
fn bulk_allocation_is_all_or_nothing() {
    eal();
    let pool = Mempool::new("t_bulk", 100, 0, Mempool::DEFAULT_DATA_ROOM, -1).unwrap();
    let mut held = Vec::new();
    assert!(Mbuf::alloc_bulk(&pool, &mut held, 64, 1514));
    assert_eq!(held.len(), 64);
    assert!(held.iter().all(|m| m.len() == 1514 && m.pkt_len() == 1514));
    assert!(held.iter().all(|m| m.segments() == 1));
    assert_eq!(pool.in_use(), 64);
    // 36 left: asking for 40 takes none.
    assert!(!Mbuf::alloc_bulk(&pool, &mut held, 40, 60));
    assert_eq!((held.len(), pool.in_use()), (64, 64));
    // Too long for the data room: none taken either.
    assert!(!Mbuf::alloc_bulk(&pool, &mut held, 8, 2049));
    assert_eq!((held.len(), pool.in_use()), (64, 64));
    assert!(Mbuf::alloc_bulk(&pool, &mut held, 36, 60));
    assert_eq!(pool.available(), 0);
    // Every buffer is distinct memory.
    for (i, m) in held.iter_mut().enumerate() {
        m.as_mut().fill(i as u8);
    }
    assert!(held
        .iter()
        .enumerate()
        .all(|(i, m)| m.as_ref().iter().all(|&b| b == i as u8)));
    drop(held);
    assert_eq!(pool.in_use(), 0);
}

#[test]
fn mbuf_headroom_and_tailroom_operations() {
    eal();
    let pool = Mempool::new("t_room", 63, 0, Mempool::DEFAULT_DATA_ROOM, -1).unwrap();
    assert!(
        Mbuf::alloc(&pool, 2049).is_none(),
        "larger than the data room"
    );
    let mut m = Mbuf::alloc(&pool, 0).unwrap();
    assert!(m.is_empty());
    let headroom = usize::from(Mempool::headroom());
    assert_eq!(m.headroom(), headroom);
    assert_eq!(m.tailroom(), 2048);
    m.append(10).unwrap().copy_from_slice(b"0123456789");
    m.prepend(4).unwrap().copy_from_slice(b"hdr:");
    assert_eq!(m.as_ref(), b"hdr:0123456789");
    assert_eq!(m.headroom(), headroom - 4);
    m.adj(4).unwrap();
    assert_eq!(m.as_ref(), b"0123456789");
    m.trim(3).unwrap();
    assert_eq!(m.as_ref(), b"0123456");
    m.truncate(2);
    assert_eq!(m.as_ref(), b"01");
    m.truncate(100);
    assert_eq!(m.len(), 2);
    assert_eq!(m.pkt_len(), 2);
    assert_eq!(
        m.adj(3),
        Err(MbufError::NoRoom {
            op: "adj",
            need: 3,
            have: 2
        })
    );
    assert!(m.prepend(headroom + 1).is_err());
    assert!(m.append(2049).is_err());
    assert_eq!(m.as_ref(), b"01", "failed operations leave the data alone");
    drop(m);
    assert_eq!(pool.in_use(), 0);
}

#[test]
fn mbufs_and_ports_can_move_between_threads() {
    fn assert_send<T: Send>() {}
    assert_send::<Mbuf>();
    assert_send::<DpdkPort>();
    assert_send::<Mempool>();
    eal();
    let pool = Mempool::new("t_threads", 63, 0, Mempool::DEFAULT_DATA_ROOM, -1).unwrap();
    let mut m = Mbuf::alloc(&pool, frame_len(7)).unwrap();
    fill_frame(7, m.as_mut());
    let m = std::thread::spawn(move || {
        check_frame(7, m.as_ref()).unwrap();
        m
    })
    .join()
    .unwrap();
    drop(m);
    assert_eq!(pool.in_use(), 0);
}

// Issue #17: a device with RSS (net_null reports every hash type and a 128-entry table) is
// configured with the symmetric key and its redirection table spread as the steering
// function assumes, so the queue of a flow is its lane.
#[test]
fn rss_device_gets_the_redirection_table_of_the_lanes() {
    use dataplane::steer::{flow_hash, lane_of, reta_entry};
    let cfg = DpdkPortConfig {
        queues: 2,
        ..DpdkPortConfig::new("rss", "net_null6")
    };
    let ports = DpdkPort::open_queues(eal(), &cfg).unwrap();
    assert_eq!(ports.len(), 2);
    assert_eq!(ports[1].info().name, "rss.q1");
    let (rss, reta) = ports[0].rss().unwrap();
    assert!(rss, "net_null offers RSS");
    assert!(reta.len() >= 64 && reta.len().is_power_of_two(), "{reta:?}");
    for (i, &q) in reta.iter().enumerate() {
        assert_eq!(q, reta_entry(i as u32, 2), "entry {i}");
    }
    let server: std::net::SocketAddr = "10.99.4.1:18515".parse().unwrap();
    for port in 49152..49152 + 256 {
        let client = std::net::SocketAddr::new("10.99.4.2".parse().unwrap(), port);
        let h = flow_hash(client, server);
        assert_eq!(reta[h as usize & (reta.len() - 1)], lane_of(h, 2));
    }
}
