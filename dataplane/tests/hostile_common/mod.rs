//! Hostile-peer harness: a server poll loop running `RdmaHandler`, a well-behaved client
//! poll loop (its own `RdmaHandler`), and a scripted attacker that speaks raw Ethernet/IP/
//! TCP built with smoltcp's wire Reprs (its own minimal handshake and ACKing, its own ARP or
//! neighbour discovery), all joined by a small software switch over two soft pairs. The
//! three hosts share one [`Lan`]: IPv4, or IPv6 on an 802.1Q VLAN.
//!
//! ```text
//!  server loop ══ soft pair ══ switch ══ soft pair ══ client loop
//!                                 ║
//!                          scripted attacker (frames for EVIL_MAC / EVIL_IP)
//! ```
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use dataplane::clock::{self};

use dataplane::apps::{all_rights, Resources};
use dataplane::config::{Ipv4Cidr, Ipv6Cidr};
use dataplane::frame::{parse_l2, Ends, Vlan};
use dataplane::lcore::{PollLoop, PortAddr};
use dataplane::ndp;
use dataplane::port::soft_pair::{soft_pair, SoftPort};
use dataplane::port::{Port, PortInfo};
use dataplane::rdma::{CmEvent, RdmaConfig, RdmaHandler, RdmaStack, Region, StackConfig};
use iwarp::mpa::crc::{crc32c, to_wire};
use iwarp::mpa::MpaConfig;
use iwarp::verbs::{CompletionStatus, QpId, SendOp, SendWr, WorkCompletion};
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetProtocol, Icmpv6Packet, Icmpv6Repr,
    IpAddress, IpProtocol, Ipv4Packet, Ipv6Packet, NdiscRepr, TcpControl, TcpPacket, TcpRepr,
    TcpSeqNumber,
};
use tcp::ConnId;

pub mod mix;

pub const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 1);
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 2);
pub const EVIL_IP: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 66);
pub const SERVER_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x88, 0, 0, 0, 0, 0, 1);
pub const CLIENT_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x88, 0, 0, 0, 0, 0, 2);
pub const EVIL_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x88, 0, 0, 0, 0, 0, 0x66);

/// The network of the three hosts: the address family, and the VLAN every frame is tagged
/// with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lan {
    pub ipv6: bool,
    pub vlan: Option<Vlan>,
}

impl Lan {
    /// IPv4, untagged.
    pub const IPV4: Lan = Lan {
        ipv6: false,
        vlan: None,
    };
    /// IPv6 on VLAN 100 (priority 2).
    pub const IPV6_VLAN: Lan = Lan {
        ipv6: true,
        vlan: Some(Vlan {
            id: 100,
            priority: 2,
        }),
    };

    fn pick(&self, v4: Ipv4Addr, v6: Ipv6Addr) -> IpAddr {
        if self.ipv6 {
            v6.into()
        } else {
            v4.into()
        }
    }

    pub fn server_ip(&self) -> IpAddr {
        self.pick(SERVER_IP, SERVER_IP6)
    }

    pub fn client_ip(&self) -> IpAddr {
        self.pick(CLIENT_IP, CLIENT_IP6)
    }

    pub fn evil_ip(&self) -> IpAddr {
        self.pick(EVIL_IP, EVIL_IP6)
    }

    /// The attacker's frames to `dst_mac` / `dst_ip`.
    pub fn evil_ends(&self, dst_mac: [u8; 6], dst_ip: IpAddr) -> Ends {
        Ends {
            src_mac: EVIL_MAC,
            dst_mac,
            src_ip: self.evil_ip(),
            dst_ip,
            vlan: self.vlan,
        }
    }

    fn port_addr(&self, ip: IpAddr) -> PortAddr {
        let mut a = match ip {
            IpAddr::V4(addr) => PortAddr::on_subnet(Ipv4Cidr { addr, prefix: 24 }),
            IpAddr::V6(addr) => PortAddr::on_prefix(Ipv6Cidr { addr, prefix: 64 }),
        };
        a.vlan = self.vlan;
        a
    }
}
pub const SERVER_MAC: [u8; 6] = [2, 0, 0, 0, 8, 1];
pub const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 8, 2];
pub const EVIL_MAC: [u8; 6] = [2, 0, 0, 0, 8, 66];
pub const LISTEN_PORT: u16 = 7000;
/// Server IRD (and MPA IRD): Read Requests the server holds at once.
pub const SERVER_IRD: u32 = 4;
/// Receives the server posts on every accepted QP.
pub const SERVER_RECVS: u64 = 8;
/// Size of the server's target region (one per server).
pub const REGION_LEN: usize = 64 * 1024;
const RECV_LEN: usize = 4096;

pub type Loop = PollLoop<SoftPort, RdmaHandler>;

pub fn rdma_config() -> RdmaConfig {
    RdmaConfig {
        mpa: MpaConfig {
            ird: SERVER_IRD as u16,
            ord: SERVER_IRD as u16,
            timeout: Duration::from_secs(2),
            ..MpaConfig::default()
        },
        tcp: tcp::Config {
            rto_min: Duration::from_millis(5),
            ..tcp::Config::default()
        },
        rx_window: 256 * 1024,
    }
}

fn new_loop(port: SoftPort, addr: PortAddr, seed: u64, mut cfg: RdmaConfig) -> Loop {
    cfg.tcp.isn_secret = [seed as u8; 16];
    let cfg = StackConfig {
        rdma: cfg,
        memory: 4 << 20,
        stag_seed: seed,
        burst: 64,
        ..StackConfig::new(MpaConfig::default(), tcp::Config::default())
    };
    RdmaStack::new(port, addr, cfg).expect("stack").poll
}

/// The attacker's view of one of its TCP connections.
#[derive(Debug, Default, Clone)]
pub struct EvilConn {
    pub snd_nxt: u32,
    pub rcv_nxt: u32,
    pub established: bool,
    /// In-order stream octets received from the server.
    pub rx: Vec<u8>,
    pub rst: bool,
    pub fin: bool,
    /// The attacker sent its own FIN.
    pub fin_sent: bool,
    /// Whether this connection answers SYN-ACKs (false: stays half-open).
    pub complete_handshake: bool,
}

/// A server-side connection (accepted by the harness).
#[derive(Debug, Clone, Copy)]
pub struct ServerConn {
    pub id: ConnId,
    pub qp: QpId,
    pub remote: SocketAddr,
}

pub struct Net {
    /// Family and VLAN of the three hosts.
    pub lan: Lan,
    pub server: Loop,
    pub client: Loop,
    sw_server: SoftPort,
    sw_client: SoftPort,
    pub evil: HashMap<u16, EvilConn>,
    /// Frames for the attacker that were not TCP for a known connection.
    pub evil_stray: usize,
    /// The attacker answers the server's FIN with its own (a kernel TCP would); when
    /// false it never closes, leaving the server in FIN-WAIT-2.
    pub evil_closes: bool,
    pub srv: Resources,
    /// The server's target region (Write/Read target of the good client).
    pub srv_region: Region,
    /// Receive buffers of the server (Send targets).
    pub srv_recv: Region,
    pub cli: Resources,
    pub cli_region: Region,
    pub accepted: Vec<ServerConn>,
    pub server_events: Vec<CmEvent>,
    pub client_events: Vec<CmEvent>,
    pub server_wcs: Vec<WorkCompletion>,
    /// The good client's connection (client id, client qp).
    pub good: Option<(ConnId, QpId)>,
    wr_id: u64,
}

fn info(name: &str, mac: [u8; 6]) -> PortInfo {
    PortInfo {
        name: name.into(),
        mac,
        mtu: 1500,
    }
}

impl Net {
    /// Server listening on LISTEN_PORT, client loop idle, over IPv4.
    pub fn new() -> Net {
        Net::on(Lan::IPV4)
    }

    /// As [`Net::new`] on `lan`.
    pub fn on(lan: Lan) -> Net {
        Net::with_config_on(rdma_config(), lan)
    }

    /// As [`Net::new`], with the attacker known to the server (by ARP) and the good client
    /// connected.
    pub fn with_good_client() -> Net {
        Net::with_good_client_on(Lan::IPV4)
    }

    /// As [`Net::with_good_client`] on `lan` (the attacker made known by ARP or a
    /// neighbour solicitation).
    pub fn with_good_client_on(lan: Lan) -> Net {
        let mut net = Net::on(lan);
        net.evil_arp();
        net.connect_good();
        net
    }

    /// As [`Net::new`] with `cfg` on both loops.
    pub fn with_config(cfg: RdmaConfig) -> Net {
        Net::with_config_on(cfg, Lan::IPV4)
    }

    /// As [`Net::with_config`] on `lan`.
    pub fn with_config_on(cfg: RdmaConfig, lan: Lan) -> Net {
        let (srv_port, sw_server) = soft_pair(info("srv", SERVER_MAC), info("sw0", EVIL_MAC), 8192);
        let (cli_port, sw_client) = soft_pair(info("cli", CLIENT_MAC), info("sw1", EVIL_MAC), 8192);
        let mut server = new_loop(srv_port, lan.port_addr(lan.server_ip()), 1, cfg.clone());
        let mut client = new_loop(cli_port, lan.port_addr(lan.client_ip()), 2, cfg);
        let mut srv =
            Resources::new(server.handler_mut(), 1024, 64, 64, SERVER_IRD).expect("srv res");
        let srv_region = srv
            .buffer(server.handler_mut(), REGION_LEN, all_rights())
            .expect("srv region");
        let srv_recv = srv
            .buffer(server.handler_mut(), RECV_LEN * 64, all_rights())
            .expect("srv recv");
        server
            .handler_mut()
            .listen(SocketAddr::new(lan.server_ip(), LISTEN_PORT), srv.init)
            .expect("listen");
        let mut cli =
            Resources::new(client.handler_mut(), 1024, 64, 64, SERVER_IRD).expect("cli res");
        let cli_region = cli
            .buffer(client.handler_mut(), REGION_LEN, all_rights())
            .expect("cli region");
        Net {
            lan,
            server,
            client,
            sw_server,
            sw_client,
            evil: HashMap::new(),
            evil_stray: 0,
            evil_closes: true,
            srv,
            srv_region,
            srv_recv,
            cli,
            cli_region,
            accepted: Vec::new(),
            server_events: Vec::new(),
            client_events: Vec::new(),
            server_wcs: Vec::new(),
            good: None,
            wr_id: 1,
        }
    }

    /// One round: both loops, the switch, the attacker's TCP, CM events, completions.
    pub fn step(&mut self) {
        let now = clock::now();
        self.server.poll_once(now);
        self.client.poll_once(now);
        self.switch();
        self.server_cm();
        while let Some(e) = self.client.handler_mut().poll_cm_event() {
            self.client_events.push(e);
        }
        while let Some(wc) = self.srv.poll_cq(self.server.handler_mut()) {
            self.server_wcs.push(wc);
        }
    }

    /// Steps until `done` holds or `limit` passes; returns whether it held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Net) -> bool) -> bool {
        let end = clock::now() + limit;
        while clock::now() < end {
            self.step();
            if done(self) {
                return true;
            }
        }
        false
    }

    /// Steps for `d`.
    pub fn run_for(&mut self, d: Duration) {
        self.run_until(d, |_| false);
    }

    fn server_cm(&mut self) {
        while let Some(e) = self.server.handler_mut().poll_cm_event() {
            if let CmEvent::ConnectRequest { id, qp, remote, .. } = &e {
                let wrs = (0..SERVER_RECVS)
                    .map(|i| {
                        self.srv_recv
                            .recv_wr(1000 + i, (i as usize % 64) * RECV_LEN, RECV_LEN)
                    })
                    .collect();
                let h = self.server.handler_mut();
                h.rnic_mut().post_rq(*qp, wrs).expect("post rq");
                h.accept(*id, &[]).expect("accept");
                self.accepted.push(ServerConn {
                    id: *id,
                    qp: *qp,
                    remote: *remote,
                });
            }
            self.server_events.push(e);
        }
    }

    fn switch(&mut self) {
        let mut frames = Vec::new();
        self.sw_server.rx_burst(&mut frames, 1 << 16);
        for f in frames.drain(..) {
            let b = f.as_ref();
            let dst: [u8; 6] = b[0..6].try_into().expect("eth");
            let group = dst == [0xff; 6] || ndp::is_ipv6_multicast_mac(dst);
            if dst == CLIENT_MAC || group {
                forward(&mut self.sw_client, b);
            }
            if dst == EVIL_MAC || group {
                let v = b.to_vec();
                self.evil_rx(&v);
            }
        }
        self.sw_client.rx_burst(&mut frames, 1 << 16);
        for f in frames.drain(..) {
            forward(&mut self.sw_server, f.as_ref());
        }
    }

    // ------------------------------------------------------------- attacker: frames

    /// Sends a raw Ethernet frame from the attacker to the server.
    pub fn inject(&mut self, frame: &[u8]) {
        forward(&mut self.sw_server, frame);
    }

    /// A TCP frame from the attacker (port `sport`) to the server's listening port, over
    /// the harness's [`Lan`].
    pub fn tcp_frame(
        &self,
        sport: u16,
        control: TcpControl,
        seq: u32,
        ack: Option<u32>,
        payload: &[u8],
    ) -> Vec<u8> {
        tcp_frame_on(self.lan, sport, control, seq, ack, payload)
    }

    /// Announces the attacker's address to the server: an ARP request for the server, or a
    /// neighbour solicitation with the attacker's MAC, which the server learns.
    pub fn evil_arp(&mut self) {
        let lan = self.lan;
        let f = match (lan.server_ip(), lan.evil_ip()) {
            (IpAddr::V4(server), IpAddr::V4(evil)) => arp_frame(
                lan,
                ArpRepr::EthernetIpv4 {
                    operation: ArpOperation::Request,
                    source_hardware_addr: EthernetAddress(EVIL_MAC),
                    source_protocol_addr: evil,
                    target_hardware_addr: EthernetAddress([0; 6]),
                    target_protocol_addr: server,
                },
                [0xff; 6],
            ),
            (IpAddr::V6(server), IpAddr::V6(evil)) => {
                nd_frame(&ndp::solicitation(EVIL_MAC, Some(evil), server, lan.vlan))
            }
            _ => unreachable!("one family"),
        };
        self.inject(&f);
        self.run_for(Duration::from_millis(5));
    }

    /// The attacker's answer to address resolution: an ARP request or a neighbour
    /// solicitation for its address gets a reply.
    fn evil_resolution(&mut self, ethertype: EthernetProtocol, l3: &[u8]) {
        let lan = self.lan;
        if ethertype == EthernetProtocol::Arp {
            let Ok(p) = ArpPacket::new_checked(l3) else {
                return;
            };
            if let Ok(ArpRepr::EthernetIpv4 {
                operation: ArpOperation::Request,
                source_hardware_addr,
                source_protocol_addr,
                target_protocol_addr,
                ..
            }) = ArpRepr::parse(&p)
            {
                if IpAddr::V4(target_protocol_addr) == lan.evil_ip() {
                    let reply = ArpRepr::EthernetIpv4 {
                        operation: ArpOperation::Reply,
                        source_hardware_addr: EthernetAddress(EVIL_MAC),
                        source_protocol_addr: target_protocol_addr,
                        target_hardware_addr: source_hardware_addr,
                        target_protocol_addr: source_protocol_addr,
                    };
                    self.inject(&arp_frame(lan, reply, source_hardware_addr.0));
                }
            }
            return;
        }
        let Ok(ip) = Ipv6Packet::new_checked(l3) else {
            return;
        };
        if ip.next_header() != IpProtocol::Icmpv6 {
            return;
        }
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        let Ok(icmp) = Icmpv6Packet::new_checked(ip.payload()) else {
            return;
        };
        let caps = ChecksumCapabilities::default();
        if let Ok(Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
            target_addr,
            lladdr: Some(l),
        })) = Icmpv6Repr::parse(&src, &dst, &icmp, &caps)
        {
            if IpAddr::V6(target_addr) == lan.evil_ip() && !src.is_unspecified() {
                let mut mac = [0u8; 6];
                mac.copy_from_slice(l.as_bytes());
                let na = ndp::advertisement(EVIL_MAC, src, mac, target_addr, true, lan.vlan);
                self.inject(&nd_frame(&na));
            }
        }
    }

    fn evil_rx(&mut self, frame: &[u8]) {
        let Some(l2) = parse_l2(frame, None) else {
            return;
        };
        if l2.tci != self.lan.vlan.map(|v| v.tci()) {
            return;
        }
        let l3 = &frame[l2.l3_offset..];
        let (dst_ip, segment) = match l2.ethertype {
            EthernetProtocol::Ipv4 => {
                let Ok(ip) = Ipv4Packet::new_checked(l3) else {
                    return;
                };
                if ip.next_header() != IpProtocol::Tcp {
                    return;
                }
                (IpAddr::V4(ip.dst_addr()), ip.payload())
            }
            EthernetProtocol::Ipv6 => {
                let Ok(ip) = Ipv6Packet::new_checked(l3) else {
                    return;
                };
                if ip.next_header() != IpProtocol::Tcp {
                    self.evil_resolution(l2.ethertype, l3);
                    return;
                }
                (IpAddr::V6(ip.dst_addr()), ip.payload())
            }
            other => {
                self.evil_resolution(other, l3);
                return;
            }
        };
        if dst_ip != self.lan.evil_ip() {
            return;
        }
        let Ok(t) = TcpPacket::new_checked(segment) else {
            return;
        };
        let Some(c) = self.evil.get_mut(&t.dst_port()) else {
            self.evil_stray += 1;
            return;
        };
        let seq = t.seq_number().0 as u32;
        if t.rst() {
            c.rst = true;
            return;
        }
        let mut ack_needed = false;
        if t.syn() && t.ack() {
            if !c.complete_handshake {
                return;
            }
            c.rcv_nxt = seq.wrapping_add(1);
            c.established = true;
            ack_needed = true;
        } else if c.established {
            let payload = t.payload();
            if seq == c.rcv_nxt {
                c.rx.extend_from_slice(payload);
                c.rcv_nxt = c.rcv_nxt.wrapping_add(payload.len() as u32);
                if t.fin() {
                    c.fin = true;
                    c.rcv_nxt = c.rcv_nxt.wrapping_add(1);
                }
            }
            ack_needed = !payload.is_empty() || t.fin();
        }
        if ack_needed {
            // The attacker's stack closes its side once the server closed (FIN answered
            // with FIN), as a kernel TCP does when the application exits.
            let fin_now = c.fin && !c.fin_sent && self.evil_closes;
            let (snd, rcv) = (c.snd_nxt, c.rcv_nxt);
            let control = if fin_now {
                c.fin_sent = true;
                c.snd_nxt = c.snd_nxt.wrapping_add(1);
                TcpControl::Fin
            } else {
                TcpControl::None
            };
            let sport = t.dst_port();
            let f = self.tcp_frame(sport, control, snd, Some(rcv), &[]);
            self.inject(&f);
        }
    }

    // ------------------------------------------------------------- attacker: TCP

    /// Starts a connection from `sport` (SYN only).
    pub fn evil_syn(&mut self, sport: u16, complete_handshake: bool) {
        let isn = 0x1000_0000u32.wrapping_mul(u32::from(sport));
        self.evil.insert(
            sport,
            EvilConn {
                snd_nxt: isn.wrapping_add(1),
                complete_handshake,
                ..EvilConn::default()
            },
        );
        let f = self.tcp_frame(sport, TcpControl::Syn, isn, None, &[]);
        self.inject(&f);
    }

    /// A full TCP handshake from `sport`.
    pub fn evil_connect(&mut self, sport: u16) {
        self.evil_syn(sport, true);
        let ok = self.run_until(Duration::from_secs(3), |n| n.evil[&sport].established);
        assert!(ok, "attacker handshake on port {sport}");
    }

    /// Sends stream octets on `sport` (segmented at 1400 octets).
    pub fn evil_send(&mut self, sport: u16, data: &[u8]) {
        for chunk in data.chunks(1400) {
            let c = self.evil.get_mut(&sport).expect("evil conn");
            let (seq, ack) = (c.snd_nxt, c.rcv_nxt);
            c.snd_nxt = c.snd_nxt.wrapping_add(chunk.len() as u32);
            let f = self.tcp_frame(sport, TcpControl::Psh, seq, Some(ack), chunk);
            self.inject(&f);
        }
    }

    /// Handshake plus an MPA Request revision 1 with CRC; waits for the Reply and the
    /// server's accept. Returns the server-side connection.
    pub fn evil_establish(&mut self, sport: u16) -> ServerConn {
        self.evil_connect(sport);
        self.evil_send(sport, &mpa_request(0x4000 | 1, &[]));
        let ok = self.run_until(Duration::from_secs(3), |n| n.evil[&sport].rx.len() >= 20);
        assert!(ok, "MPA Reply for port {sport}");
        let rx = self.evil[&sport].rx.clone();
        assert_eq!(&rx[..16], b"MPA ID Rep Frame");
        assert_eq!(rx[16] & 0x20, 0, "reply must not reject");
        let pd = usize::from(u16::from_be_bytes([rx[18], rx[19]]));
        self.evil.get_mut(&sport).expect("conn").rx.drain(..20 + pd);
        self.accepted
            .iter()
            .find(|c| c.remote.port() == sport)
            .copied()
            .expect("server accepted the attacker")
    }

    /// Waits for the server to send a Terminate on `sport`; returns (layer, etype, code)
    /// and the octets after the 4-octet Terminate control word.
    pub fn await_terminate(&mut self, sport: u16) -> Option<(u8, u8, u8, Vec<u8>)> {
        let mut found = None;
        self.run_until(Duration::from_secs(3), |n| {
            found = find_terminate(&n.evil[&sport].rx);
            found.is_some() || n.evil[&sport].rst
        });
        found.or_else(|| find_terminate(&self.evil[&sport].rx))
    }

    // ------------------------------------------------------------- good client

    /// Connects the well-behaved client and waits for both sides to be established.
    pub fn connect_good(&mut self) {
        let init = self.cli.init;
        let (id, qp) = self
            .client
            .handler_mut()
            .connect(
                self.lan.client_ip(),
                SocketAddr::new(self.lan.server_ip(), LISTEN_PORT),
                init,
                b"good",
            )
            .expect("connect");
        self.good = Some((id, qp));
        let ok = self.run_until(Duration::from_secs(5), |n| {
            n.client_events
                .iter()
                .any(|e| matches!(e, CmEvent::Established { id: i, .. } if *i == id))
        });
        assert!(ok, "good client established: {:?}", self.client_events);
    }

    /// The good client writes `len` octets of a pattern seeded by `seed` into the server's
    /// region at `off`, reads them back into its own region and compares both byte for byte.
    /// Panics on any mismatch or failed completion.
    pub fn good_write_read(&mut self, seed: u8, off: usize, len: usize) {
        let (_, qp) = self.good.expect("good client");
        let data: Vec<u8> = (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect();
        {
            let h = self.client.handler_mut();
            let rnic = h.rnic_mut();
            let b = self.cli_region.bytes_mut(rnic);
            b[..len].copy_from_slice(&data);
            b[len..2 * len].fill(0);
        }
        let write = SendWr::message(
            self.next_wr(),
            SendOp::Write {
                sgl: iwarp::mem::Sgl::one(self.cli_region.sge(0, len)),
                remote: self.srv_region.remote(off),
            },
        );
        let read = SendWr::message(
            self.next_wr(),
            SendOp::Read {
                sink: self.cli_region.remote(len),
                remote: self.srv_region.remote(off),
                len: len as u32,
            },
        );
        self.client
            .handler_mut()
            .rnic_mut()
            .post_sq(qp, vec![write, read])
            .expect("post");
        let mut wcs = Vec::new();
        let ok = self.run_until(Duration::from_secs(10), |n| {
            while let Some(wc) = n.cli.poll_cq(n.client.handler_mut()) {
                wcs.push(wc);
            }
            wcs.len() >= 2
        });
        assert!(ok, "good Write+Read completions: {wcs:?}");
        for wc in &wcs {
            assert_eq!(wc.status, CompletionStatus::Success, "{wc:?}");
        }
        let h = self.client.handler();
        let rnic = h.rnic();
        assert!(
            self.cli_region.bytes(rnic)[len..2 * len] == data[..],
            "Read returned different bytes"
        );
        let hs = self.server.handler();
        let srnic = hs.rnic();
        assert!(
            self.srv_region.bytes(srnic)[off..off + len] == data[..],
            "server region differs from what was written"
        );
    }

    fn next_wr(&mut self) -> u64 {
        self.wr_id += 1;
        self.wr_id
    }

    /// A copy of the server's target region.
    pub fn server_region(&self) -> Vec<u8> {
        let h = self.server.handler();
        let rnic = h.rnic();
        self.srv_region.bytes(rnic).to_vec()
    }
}

impl Default for Net {
    fn default() -> Self {
        Net::new()
    }
}

fn forward(to: &mut SoftPort, bytes: &[u8]) {
    let Some(mut b) = to.alloc_tx(bytes.len()) else {
        return;
    };
    b.as_mut().copy_from_slice(bytes);
    let mut v = vec![b];
    to.tx_burst(&mut v);
}

/// An ARP frame from the attacker to `dst`, tagged for `lan`.
fn arp_frame(lan: Lan, repr: ArpRepr, dst: [u8; 6]) -> Vec<u8> {
    let tag_len = if lan.vlan.is_some() { 4 } else { 0 };
    let mut buf = vec![0u8; 14 + tag_len + repr.buffer_len()];
    let at = dataplane::frame::write_l2(&mut buf, dst, EVIL_MAC, lan.vlan, EthernetProtocol::Arp);
    repr.emit(&mut ArpPacket::new_unchecked(&mut buf[at..]));
    buf
}

/// The frame of a neighbour discovery message.
pub fn nd_frame(m: &ndp::NdMessage) -> Vec<u8> {
    let mut b = vec![0u8; m.frame_len()];
    assert!(m.emit(&mut b));
    b
}

/// A TCP frame from the attacker (port `sport`) to the server's listening port on `lan`.
pub fn tcp_frame_on(
    lan: Lan,
    sport: u16,
    control: TcpControl,
    seq: u32,
    ack: Option<u32>,
    payload: &[u8],
) -> Vec<u8> {
    let tcp = TcpRepr {
        src_port: sport,
        dst_port: LISTEN_PORT,
        control,
        seq_number: TcpSeqNumber(seq as i32),
        ack_number: ack.map(|a| TcpSeqNumber(a as i32)),
        window_len: 65535,
        window_scale: None,
        max_seg_size: (control == TcpControl::Syn).then_some(if lan.ipv6 { 1440 } else { 1460 }),
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload,
    };
    let ends = lan.evil_ends(SERVER_MAC, lan.server_ip());
    let mut buf = vec![0u8; ends.frame_len(tcp.buffer_len())];
    let body = ends.emit_headers(&mut buf, IpProtocol::Tcp, tcp.buffer_len());
    tcp.emit(
        &mut TcpPacket::new_unchecked(body),
        &IpAddress::from(ends.src_ip),
        &IpAddress::from(ends.dst_ip),
        &ChecksumCapabilities::default(),
    );
    buf
}

// ----------------------------------------------------------------- iWARP wire builders

/// An MPA Request frame with raw `bits` (flags and revision) and private data.
pub fn mpa_request(bits: u16, pd: &[u8]) -> Vec<u8> {
    let mut v = b"MPA ID Req Frame".to_vec();
    v.extend_from_slice(&bits.to_be_bytes());
    v.extend_from_slice(&(pd.len() as u16).to_be_bytes());
    v.extend_from_slice(pd);
    v
}

/// An FPDU carrying `ulpdu` with a valid CRC32c (RFC 5044 §4.2).
pub fn fpdu(ulpdu: &[u8]) -> Vec<u8> {
    let mut v = (ulpdu.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(ulpdu);
    while !v.len().is_multiple_of(4) {
        v.push(0);
    }
    let crc = crc32c(&v);
    v.extend_from_slice(&to_wire(crc));
    v
}

/// RDMAP control octet: RV = 1, `opcode`.
pub fn rdmap_ctrl(opcode: u8) -> u8 {
    0x40 | (opcode & 0x0f)
}

/// An untagged DDP segment (RFC 5041 §4.3): L set, DV 1.
pub fn untagged(opcode: u8, qn: u32, msn: u32, mo: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0x41, rdmap_ctrl(opcode), 0, 0, 0, 0];
    v.extend_from_slice(&qn.to_be_bytes());
    v.extend_from_slice(&msn.to_be_bytes());
    v.extend_from_slice(&mo.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// A tagged DDP segment (RFC 5041 §4.2): T and L set, DV 1.
pub fn tagged(opcode: u8, stag: u32, to: u64, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0xc1, rdmap_ctrl(opcode)];
    v.extend_from_slice(&stag.to_be_bytes());
    v.extend_from_slice(&to.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// An RDMA Read Request (RFC 5040 §4.4) on QN 1 with `msn`.
pub fn read_request(msn: u32, sink: (u32, u64), len: u32, src: (u32, u64)) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&sink.0.to_be_bytes());
    p.extend_from_slice(&sink.1.to_be_bytes());
    p.extend_from_slice(&len.to_be_bytes());
    p.extend_from_slice(&src.0.to_be_bytes());
    p.extend_from_slice(&src.1.to_be_bytes());
    untagged(1, 1, msn, 0, &p)
}

/// The first Terminate (RDMAP opcode 0x7) among the FPDUs of `stream` (no markers):
/// (layer, etype, code, octets after the control word).
pub fn find_terminate(stream: &[u8]) -> Option<(u8, u8, u8, Vec<u8>)> {
    let mut at = 0;
    while at + 2 <= stream.len() {
        let len = usize::from(u16::from_be_bytes([stream[at], stream[at + 1]]));
        let total = iwarp::wire::mpa::fpdu_len(len);
        let ulpdu = stream.get(at + 2..at + 2 + len)?;
        if stream.len() < at + total {
            return None;
        }
        if ulpdu.len() >= 22 && ulpdu[0] & 0x80 == 0 && ulpdu[1] & 0x0f == 7 {
            let t = &ulpdu[18..];
            return Some((t[0] >> 4, t[0] & 0x0f, t[1], t[4..].to_vec()));
        }
        at += total;
    }
    None
}
