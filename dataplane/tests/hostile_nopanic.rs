//! Nothing panics on network input: the whole receive engine (`RdmaHandler` behind the poll
//! loop over the software port, and `tcp::Engine<iwarp::conn::Connection>` driven directly)
//! gets arbitrary frames and arbitrary TCP payloads on an iWARP connection in each phase
//! (MPA negotiation, FPDU mode with raw bytes, FPDU mode with CRC-valid FPDUs of random
//! DDP/RDMAP content, after a Terminate), under `catch_unwind`. Afterwards the well-behaved
//! connection of the harness still moves data byte-exact.

mod hostile_common;

use std::cell::RefCell;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use hostile_common::*;
use iwarp::conn::{ConnConfig, ConnEvent, Connection};
use iwarp::mem::{Access, PdId, RegionSpec, SimpleMemory};
use iwarp::mpa::MpaConfig;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use smoltcp::wire::TcpControl;

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// Where on an attacker connection the random octets go.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Right after the TCP handshake: parsed as an MPA Request.
    Negotiation,
    /// After a valid MPA exchange: raw octets parsed as FPDUs.
    FpduRaw,
    /// After a valid MPA exchange: random ULPDUs in CRC-valid FPDUs (reach DDP/RDMAP).
    FpduValidCrc,
    /// After the attacker sent a Terminate.
    AfterTerminate,
}

fn phase() -> impl Strategy<Value = Phase> {
    prop_oneof![
        Just(Phase::Negotiation),
        Just(Phase::FpduRaw),
        Just(Phase::FpduValidCrc),
        Just(Phase::AfterTerminate),
    ]
}

/// Random ULPDUs that look like DDP segments often enough to pass the first checks.
fn ulpdu() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<bool>(),
        0u8..16,
        0u32..6,
        0u32..4,
        prop::collection::vec(any::<u8>(), 0..300),
        any::<bool>(),
    )
        .prop_map(|(t, op, qn, msn, payload, raw)| {
            if raw {
                payload
            } else if t {
                tagged(op, u32::from(op) << 8, u64::from(qn) << 4, &payload)
            } else {
                untagged(op, qn, msn, 0, &payload)
            }
        })
}

// RFC 5044 §7 / RFC 5040 §7 / RFC 5041 §7: malformed input maps to errors, never panics.
#[test]
fn rdma_handler_survives_random_streams_in_each_phase() {
    let net = RefCell::new(Net::with_good_client());
    let next_port = RefCell::new(41_000u16);
    let strategy = (
        phase(),
        prop::collection::vec(any::<u8>(), 0..3000),
        prop::collection::vec(ulpdu(), 1..8),
    );
    runner(96)
        .run(&strategy, |(phase, raw, ulpdus)| {
            let sport = {
                let mut p = next_port.borrow_mut();
                *p += 1;
                *p
            };
            let r = catch_unwind(AssertUnwindSafe(|| {
                let mut n = net.borrow_mut();
                match phase {
                    Phase::Negotiation => {
                        n.evil_connect(sport);
                        n.evil_send(sport, &raw);
                    }
                    Phase::FpduRaw => {
                        n.evil_establish(sport);
                        n.evil_send(sport, &raw);
                    }
                    Phase::FpduValidCrc => {
                        n.evil_establish(sport);
                        let s: Vec<u8> = ulpdus.iter().flat_map(|u| fpdu(u)).collect();
                        n.evil_send(sport, &s);
                    }
                    Phase::AfterTerminate => {
                        n.evil_establish(sport);
                        let mut s = fpdu(&untagged(7, 2, 1, 0, &[0, 0, 0, 0]));
                        s.extend(ulpdus.iter().flat_map(|u| fpdu(u)));
                        s.extend_from_slice(&raw);
                        n.evil_send(sport, &s);
                    }
                }
                n.run_for(Duration::from_millis(3));
            }));
            prop_assert!(r.is_ok(), "panic in phase {:?}", phase);
            Ok(())
        })
        .expect("no panic");
    let mut n = net.into_inner();
    n.good_write_read(9, 0, 5000);
}

// Arbitrary Ethernet frames, well-formed Ethernet/IPv4/TCP frames with random flags,
// numbers and payloads, to the listener and to established connections, and such frames
// with one header octet (Ethernet, VLAN tag, IP) changed.
#[test]
fn rdma_handler_survives_random_frames() {
    random_frames_on(Lan::IPV4);
}

// The same over IPv6 on a VLAN: the changed header octets make extension headers,
// jumbograms, other VLANs, other groups and neighbour discovery out of valid segments.
#[test]
fn rdma_handler_survives_random_frames_over_ipv6_vlan() {
    random_frames_on(Lan::IPV6_VLAN);
}

fn random_frames_on(lan: Lan) {
    let mut n = Net::with_good_client_on(lan);
    n.evil_establish(EVIL_PORT_BASE);
    let net = RefCell::new(n);
    let strategy = (
        (any::<bool>(), any::<bool>(), 0usize..80, any::<u8>()),
        prop::collection::vec(any::<u8>(), 0..1514),
        (
            any::<u16>(),
            0u8..6,
            any::<u32>(),
            any::<u32>(),
            any::<bool>(),
        ),
    );
    runner(1000)
        .run(
            &strategy,
            |((raw, mutate, at, val), bytes, (sport, ctl, seq, ack, near))| {
                let r = catch_unwind(AssertUnwindSafe(|| {
                    let mut n = net.borrow_mut();
                    if raw {
                        let mut f = bytes.clone();
                        if f.len() >= 14 {
                            f[0..6].copy_from_slice(&SERVER_MAC);
                        }
                        n.inject(&f);
                    } else {
                        let control = [
                            TcpControl::None,
                            TcpControl::Psh,
                            TcpControl::Syn,
                            TcpControl::Fin,
                            TcpControl::Rst,
                            TcpControl::None,
                        ][usize::from(ctl)];
                        // Half the time aimed at the established attacker connection, with
                        // numbers near the real ones.
                        let (sport, seq, ack) = if near {
                            let c = &n.evil[&EVIL_PORT_BASE];
                            (
                                EVIL_PORT_BASE,
                                c.snd_nxt.wrapping_add(seq % 4096),
                                Some(c.rcv_nxt.wrapping_sub(ack % 64)),
                            )
                        } else {
                            (sport, seq, (ctl != 2).then_some(ack))
                        };
                        let mut f = tcp_frame_on(
                            lan,
                            sport,
                            control,
                            seq,
                            ack,
                            &bytes[..bytes.len().min(1400)],
                        );
                        if mutate {
                            let i = at % f.len();
                            f[i] = val;
                        }
                        n.inject(&f);
                    }
                    n.step();
                }));
                prop_assert!(r.is_ok(), "panic");
                Ok(())
            },
        )
        .expect("no panic");
    let mut n = net.into_inner();
    n.run_for(Duration::from_millis(10));
    n.good_write_read(3, 0, 3000);
}

const EVIL_PORT_BASE: u16 = 45_000;

const A: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);

type Eng = tcp::Engine<Connection, SimpleMemory>;

/// The memory every connection of the bare engine places into: one region over it all.
fn memory() -> SimpleMemory {
    let mut m = SimpleMemory::with_heap(1 << 16);
    let rights = Access::LOCAL_READ
        | Access::LOCAL_WRITE
        | Access::REMOTE_READ
        | Access::REMOTE_WRITE
        | Access::REMOTE_ATOMIC;
    let _ = m.register(RegionSpec::new(0, 1 << 16, rights, PdId(1)));
    m
}

/// Drives a bare `tcp::Engine<Connection>` responder: accepts, answers MPA Requests,
/// drains output. Returns the packets it sent.
fn drive(
    e: &mut Eng,
    mem: &mut SimpleMemory,
    ids: &mut Vec<tcp::ConnId>,
    now: tcp::Instant,
) -> Vec<Vec<u8>> {
    while let Some(ev) = e.poll_event() {
        if let tcp::Event::Accepted { conn, .. } = ev {
            let cfg = ConnConfig {
                pd: PdId(1),
                ..ConnConfig::new(MpaConfig::default())
            };
            let c = Connection::responder(cfg, now).expect("responder");
            if e.attach(now, mem, conn, c).is_ok() {
                ids.push(conn);
            }
        }
    }
    for &id in ids.iter() {
        if let Some(c) = e.ulp_mut(id) {
            while let Some(ev) = c.poll_event() {
                if matches!(ev, ConnEvent::ConnectRequest(_)) {
                    let _ = c.accept(now, mem, &[]);
                }
            }
            let _ = c.poll_llp_request();
        }
    }
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1600];
    while let Some(tx) = e.poll_transmit(now, mem, &mut buf) {
        out.push(buf[..tx.len].to_vec());
    }
    out
}

// The sans-IO stack without the data plane: random TCP segments to a listener, and random
// payloads after a handshake and a valid MPA Request.
#[test]
fn tcp_engine_with_connections_survives_random_segments() {
    let strategy = (
        any::<bool>(),
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..1400), 1..6),
        any::<u32>(),
    );
    runner(300)
        .run(&strategy, |(mpa_first, payloads, isn)| {
            let r = catch_unwind(AssertUnwindSafe(|| {
                let mut e: Eng = tcp::Engine::new(tcp::Config {
                    verify_checksums: false,
                    ..tcp::Config::default()
                });
                e.listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 7174), 8)
                    .expect("listen");
                let mut now = tcp::Instant::from_millis(1);
                let mut mem = memory();
                let seg = |ctl, seq: u32, ack: Option<u32>, p: &[u8]| {
                    let f = tcp_frame_on(Lan::IPV4, 9999, ctl, seq, ack, p);
                    // Strip Ethernet and IPv4 (20 octets, no options).
                    f[34..].to_vec()
                };
                let _ = e.handle_tcp(now, &mut mem, A, B, &seg(TcpControl::Syn, isn, None, &[]));
                let mut ids = Vec::new();
                let out = drive(&mut e, &mut mem, &mut ids, now);
                let synack = out.first().expect("SYN-ACK");
                // IPv4 header (20) then TCP: sequence number at 4..8.
                let s = u32::from_be_bytes(synack[24..28].try_into().expect("seq"));
                let ack = s.wrapping_add(1);
                let mut seq = isn.wrapping_add(1);
                let _ = e.handle_tcp(
                    now,
                    &mut mem,
                    A,
                    B,
                    &seg(TcpControl::None, seq, Some(ack), &[]),
                );
                drive(&mut e, &mut mem, &mut ids, now);
                if mpa_first {
                    let req = mpa_request(0x4000 | 1, &[]);
                    let _ = e.handle_tcp(
                        now,
                        &mut mem,
                        A,
                        B,
                        &seg(TcpControl::Psh, seq, Some(ack), &req),
                    );
                    seq = seq.wrapping_add(req.len() as u32);
                    drive(&mut e, &mut mem, &mut ids, now);
                }
                for p in &payloads {
                    // Random bytes are also tried as a whole TCP segment.
                    let _ = e.handle_tcp(now, &mut mem, A, B, p);
                    let _ = e.handle_tcp(
                        now,
                        &mut mem,
                        A,
                        B,
                        &seg(TcpControl::Psh, seq, Some(ack), p),
                    );
                    seq = seq.wrapping_add(p.len() as u32);
                    now = now + Duration::from_millis(50);
                    if e.poll_timeout().is_some_and(|d| d <= now) {
                        e.handle_timeout(now);
                    }
                    drive(&mut e, &mut mem, &mut ids, now);
                }
            }));
            prop_assert!(r.is_ok(), "panic");
            Ok(())
        })
        .expect("no panic");
}
