//! Two RDMA poll loops joined by the in-process software pair (optionally through the
//! fault-injection port).
#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::time::Duration;

use dataplane::config::Ipv4Cidr;
use dataplane::lcore::{PollLoop, PortAddr};
use dataplane::port::fault::{FaultConfig, FaultPort};
use dataplane::port::soft_pair::{soft_pair, SoftPort};
use dataplane::port::PortInfo;
use dataplane::rdma::{RdmaConfig, RdmaHandler, RdmaStack, StackConfig};
use iwarp::mpa::MpaConfig;

pub const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);

pub type Loop = PollLoop<FaultPort<SoftPort>, RdmaHandler>;

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
