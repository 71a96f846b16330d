//! Two RDMA poll loops joined by the in-process software pair (optionally through the
//! fault-injection port).
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use dataplane::clock;

use dataplane::config::Ipv4Cidr;
use dataplane::lcore::{PollLoop, PortAddr};
use dataplane::port::fault::{FaultConfig, FaultPort};
use dataplane::port::soft_pair::{soft_pair, SoftPort};
use dataplane::port::PortInfo;
use dataplane::rdma::{CmEvent, RdmaConfig, RdmaHandler, RdmaStack, StackConfig};
use iwarp::mpa::MpaConfig;
use iwarp::verbs::{QpId, QpInit};
use tcp::ConnId;

pub const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);

pub type Loop = PollLoop<FaultPort<SoftPort>, RdmaHandler>;

/// A stop flag nobody sets, for `run_pair`.
pub static NO_STOP: AtomicBool = AtomicBool::new(false);

/// Polls both loops for `rounds` iterations, at one time per iteration.
pub fn settle(ls: &mut Loop, lc: &mut Loop, rounds: usize) {
    for _ in 0..rounds {
        let now = clock::now();
        ls.poll_once(now);
        lc.poll_once(now);
    }
}

pub fn rdma_config(mpa: MpaConfig, secret: u8) -> RdmaConfig {
    RdmaConfig {
        mpa,
        tcp: tcp::Config {
            isn_secret: [secret; 16],
            rto_min: Duration::from_millis(5),
            verify_checksums: false,
            ..tcp::Config::default()
        },
        rx_window: 1 << 20,
    }
}

/// Server loop, client loop; `faults` applies to frames each side receives.
pub fn pair(mpa: MpaConfig, mem: usize, faults: FaultConfig) -> (Loop, Loop) {
    let info = |n: &str, last| PortInfo {
        name: n.into(),
        mac: [2, 0, 0, 0, 9, last],
        mtu: 1500,
    };
    let (a, b) = soft_pair(info("s", 1), info("c", 2), 4096);
    let mk = |port: SoftPort, ip: Ipv4Addr, secret: u8, seed: u64| {
        let mut f = faults.clone();
        f.seed = f.seed.wrapping_add(seed);
        let cfg = StackConfig {
            rdma: rdma_config(mpa.clone(), secret),
            memory: mem,
            stag_seed: seed,
            ..StackConfig::new(MpaConfig::default(), tcp::Config::default())
        };
        let addr = PortAddr::on_subnet(Ipv4Cidr {
            addr: ip,
            prefix: 24,
        });
        RdmaStack::new(FaultPort::new(port, f), addr, cfg)
            .expect("stack")
            .poll
    };
    (mk(a, SERVER_IP, 1, 11), mk(b, CLIENT_IP, 2, 22))
}

/// The QPs [`connect_qps`] brought up.
pub struct Connected {
    /// The client's QPs in the order they reached RTS: index, connection, QP.
    pub client: Vec<(usize, ConnId, QpId)>,
    /// The index each server QP was requested with.
    pub server: HashMap<QpId, usize>,
}

impl Connected {
    /// The client's QPs ordered by index.
    pub fn client_by_index(&self) -> Vec<QpId> {
        let mut v = self.client.clone();
        v.sort_unstable_by_key(|c| c.0);
        v.into_iter().map(|c| c.2).collect()
    }
}

/// Connects `n` client QPs of `lc` to the listener of `ls` at `addr` (client QP `i` sends
/// `i` as 4 octets of private data) and accepts them, calling `on_request(server, qp, i)`
/// before each accept (to post receives, say). Panics when they are not all up in 30 s.
pub fn connect_qps(
    ls: &mut Loop,
    lc: &mut Loop,
    addr: SocketAddrV4,
    init: QpInit,
    n: usize,
    mut on_request: impl FnMut(&mut RdmaHandler, QpId, usize),
) -> Connected {
    let mut requested = HashMap::new();
    for i in 0..n {
        let (id, qp) = lc
            .handler_mut()
            .connect(CLIENT_IP, addr, init, &(i as u32).to_be_bytes())
            .unwrap();
        requested.insert(id, (i, qp));
    }
    let mut up = Connected {
        client: Vec::with_capacity(n),
        server: HashMap::new(),
    };
    let mut server_up = 0;
    let end = clock::now() + Duration::from_secs(30);
    while up.client.len() < n || server_up < n {
        assert!(
            clock::now() < end,
            "{} of {n} client QPs and {server_up} server QPs up; server {:?}",
            up.client.len(),
            ls.handler().cm_counters()
        );
        let now = clock::now();
        ls.poll_once(now);
        lc.poll_once(now);
        while let Some(e) = ls.handler_mut().poll_cm_event() {
            match e {
                CmEvent::ConnectRequest {
                    id,
                    qp,
                    private_data,
                    ..
                } => {
                    let i = u32::from_be_bytes(private_data[..4].try_into().unwrap()) as usize;
                    assert!(i < n && up.server.insert(qp, i).is_none(), "index {i}");
                    on_request(ls.handler_mut(), qp, i);
                    ls.handler_mut().accept(id, &[]).unwrap();
                }
                CmEvent::Established { .. } => server_up += 1,
                e => panic!("server: {e:?}"),
            }
        }
        while let Some(e) = lc.handler_mut().poll_cm_event() {
            match e {
                CmEvent::Established { id, .. } => {
                    let (i, qp) = requested[&id];
                    up.client.push((i, id, qp));
                }
                e => panic!("client: {e:?}"),
            }
        }
    }
    up
}
