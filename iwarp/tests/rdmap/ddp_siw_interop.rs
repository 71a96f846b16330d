//! Interoperability with Linux soft-iWARP (`siw`): the DDP/RDMAP segments of a real
//! `rping` session (MPA rev 2 with CRC, no markers; captured as
//! siw-rping-mpa2-crc.pcap, one FPDU per TCP segment) are parsed and re-emitted
//! byte-exact, and replayed against our engine playing the server: it accepts every
//! client segment and transmits, for the same work, byte-identical segments. RDMA Writes of
//! an `ib_write_lat` run (siw-ib_write_lat-first400.pcap) are placed as siw meant them.

use std::collections::HashMap;

use crate::common::now;
use iwarp::ddp::SegmentPos;
use iwarp::mem::{Access, PdId, RegionSpec, STag, Sge, SimpleMemory, StreamId};
use iwarp::rdmap::{
    CompletionStatus, Engine, EngineConfig, RecvWr, RemoteBuf, SendOp, SendWr, WorkQueue,
};
use iwarp::wire::ddp::{DdpRepr, Segment};
use iwarp::wire::rdmap::{Opcode, RdmapControl, ReadRequest, ReadRequestRepr};

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Dir {
    /// rping client (TCP port 35699) → server.
    C,
    /// rping server (TCP port 7174) → client.
    S,
}
use Dir::{C, S};

/// TCP payloads after the MPA Request/Reply, in capture order.
const RPING: &[(Dir, &str)] = &[
    (C, "0022414300000000000000000000000100000000000055aa6ed633701f5abd000000004014e7e4df"),
    (S, "002e414100000000000000010000000100000000b07e9d00000055c41b3db550000000401f5abd00000055aa6ed6337059b40b10"),
    (C, "004ec142b07e9d00000055c41b3db55072646d612d70696e672d303a204142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f70717200b1ba0149"),
    (S, "00224143000000000000000000000001000000000000000000000000000000000000000084609a12"),
    (C, "0022414300000000000000000000000200000000000055aa6ed635502bb9d7000000004030565600"),
    (S, "004ec1402bb9d700000055aa6ed6355072646d612d70696e672d303a204142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f70717200ac829c2d"),
    (S, "002241430000000000000000000000020000000000000000000000000000000000000000b3e68405"),
    (C, "0022414300000000000000000000000300000000000055aa6ed633701f5abd0000000040ce1cf0c5"),
    (S, "002e414100000000000000010000000200000000b07e9d00000055c41b3db550000000401f5abd00000055aa6ed6337028c940fe"),
    (C, "004ec142b07e9d00000055c41b3db55072646d612d70696e672d313a2042434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f7071727300daec83ca"),
    (S, "0022414300000000000000000000000300000000000000000000000000000000000000005e9b8e08"),
    (C, "0022414300000000000000000000000400000000000055aa6ed635502bb9d700000000405e5a6b2e"),
    (S, "004ec1402bb9d700000055aa6ed6355072646d612d70696e672d313a2042434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f7071727300c7d41eae"),
    (S, "002241430000000000000000000000040000000000000000000000000000000000000000ddeab92b"),
    (C, "0022414300000000000000000000000500000000000055aa6ed633701f5abd0000000040a010cdeb"),
    (S, "002e414100000000000000010000000300000000b07e9d00000055c41b3db550000000401f5abd00000055aa6ed6337007e279a4"),
    (C, "004ec142b07e9d00000055c41b3db55072646d612d70696e672d323a20434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f707172737400b8acb864"),
    (S, "0022414300000000000000000000000500000000000000000000000000000000000000003097b326"),
    (C, "0022414300000000000000000000000600000000000055aa6ed635502bb9d7000000004084a17f34"),
    (S, "004ec1402bb9d700000055aa6ed6355072646d612d70696e672d323a20434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f707172737400a5942500"),
    (S, "0022414300000000000000000000000600000000000000000000000000000000000000000711ad31"),
    (C, "0022414300000000000000000000000700000000000055aa6ed633701f5abd00000000407aebd9f1"),
    (S, "002e414100000000000000010000000400000000b07e9d00000055c41b3db550000000401f5abd00000055aa6ed633703b453a27"),
    (C, "004ec142b07e9d00000055c41b3db55072646d612d70696e672d333a204445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f707172737475008c5c3233"),
    (S, "002241430000000000000000000000070000000000000000000000000000000000000000ea6ca73c"),
    (C, "0022414300000000000000000000000800000000000055aa6ed635502bb9d7000000004082421172"),
    (S, "004ec1402bb9d700000055aa6ed6355072646d612d70696e672d333a204445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f707172737475009164af57"),
    (S, "00224143000000000000000000000008000000000000000000000000000000000000000001f2c377"),
    (C, "0022414300000000000000000000000900000000000055aa6ed633701f5abd00000000407c08b7b7"),
    (S, "002e414100000000000000010000000500000000b07e9d00000055c41b3db550000000401f5abd00000055aa6ed63370146e037d"),
    (C, "004ec142b07e9d00000055c41b3db55072646d612d70696e672d343a2045464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f70717273747576008d76b46d"),
    (S, "002241430000000000000000000000090000000000000000000000000000000000000000ec8fc97a"),
    (C, "0022414300000000000000000000000a00000000000055aa6ed635502bb9d7000000004058b90568"),
    (S, "004ec1402bb9d700000055aa6ed6355072646d612d70696e672d343a2045464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f7071727374757600904e2909"),
    (S, "0022414300000000000000000000000a0000000000000000000000000000000000000000db09d76d"),
    (C, "0022414300000000000000000000000b00000000000055aa6ed633701f5abd0000000040a6f3a3ad"),
    (S, "002e414100000000000000010000000600000000b07e9d00000055c41b3db550000000401f5abd00000055aa6ed6337065134893"),
    (C, "004ec142b07e9d00000055c41b3db55072646d612d70696e672d353a20464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f70717273747576770026cfa22d"),
    (S, "0022414300000000000000000000000b00000000000000000000000000000000000000003674dd60"),
    (C, "0022414300000000000000000000000c00000000000055aa6ed635502bb9d7000000004036b53846"),
    (S, "004ec1402bb9d700000055aa6ed6355072646d612d70696e672d353a20464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f7071727374757677003bf73f49"),
    (S, "0022414300000000000000000000000c0000000000000000000000000000000000000000b505ea43"),
    (C, "0022414300000000000000000000000d00000000000055aa6ed633701f5abd0000000040c8ff9e83"),
    (S, "002e414100000000000000010000000700000000b07e9d00000055c41b3db550000000401f5abd00000055aa6ed633704a3871c9"),
    (C, "004ec142b07e9d00000055c41b3db55072646d612d70696e672d363a204748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f70717273747576777800d7fec3dd"),
    (S, "0022414300000000000000000000000d00000000000000000000000000000000000000005878e04e"),
    (C, "0022414300000000000000000000000e00000000000055aa6ed635502bb9d70000000040ec4e2c5c"),
    (S, "004ec1402bb9d700000055aa6ed6355072646d612d70696e672d363a204748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f70717273747576777800cac65eb9"),
    (S, "0022414300000000000000000000000e00000000000000000000000000000000000000006ffefe59"),
    (C, "0022414300000000000000000000000f00000000000055aa6ed633701f5abd000000004012048a99"),
    (S, "002e414100000000000000010000000800000000b07e9d00000055c41b3db550000000401f5abd00000055aa6ed63370ec2b2390"),
    (C, "004ec142b07e9d00000055c41b3db55072646d612d70696e672d373a2048494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f7071727374757677787900715bef0b"),
    (S, "0022414300000000000000000000000f00000000000000000000000000000000000000008283f454"),
    (C, "0022414300000000000000000000001000000000000055aa6ed635502bb9d700000000403a73e5ca"),
    (S, "004ec1402bb9d700000055aa6ed6355072646d612d70696e672d373a2048494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f70717273747576777879006c63726f"),
    (S, "002241430000000000000000000000100000000000000000000000000000000000000000b9c337cf"),
    (C, "0022414300000000000000000000001100000000000055aa6ed633701f5abd0000000040c439430f"),
    (S, "002e414100000000000000010000000900000000b07e9d00000055c41b3db550000000401f5abd00000055aa6ed63370c3001aca"),
    (C, "004ec142b07e9d00000055c41b3db55072646d612d70696e672d383a20494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f707172737475767778797a00e8e63c40"),
    (S, "00224143000000000000000000000011000000000000000000000000000000000000000054be3dc2"),
    (C, "0022414300000000000000000000001200000000000055aa6ed635502bb9d70000000040e088f1d0"),
    (S, "004ec1402bb9d700000055aa6ed6355072646d612d70696e672d383a20494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f707172737475767778797a00f5dea124"),
    (S, "002241430000000000000000000000120000000000000000000000000000000000000000633823d5"),
    (C, "0022414300000000000000000000001300000000000055aa6ed633701f5abd00000000401ec25715"),
    (S, "002e414100000000000000010000000a00000000b07e9d00000055c41b3db550000000401f5abd00000055aa6ed63370b27d5124"),
    (C, "004ec142b07e9d00000055c41b3db55072646d612d70696e672d393a204a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f707172737475767778797a41001f67a429"),
    (S, "0022414300000000000000000000001300000000000000000000000000000000000000008e4529d8"),
    (C, "0022414300000000000000000000001400000000000055aa6ed635502bb9d700000000408e84ccfe"),
    (S, "004ec1402bb9d700000055aa6ed6355072646d612d70696e672d393a204a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f707172737475767778797a4100025f394d"),
    (S, "0022414300000000000000000000001400000000000000000000000000000000000000000d341efb"),
];

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The ULPDU (DDP segment) of an FPDU: strip ULPDU_Length, pad and CRC (MPA's job).
fn ulpdu(fpdu: &[u8]) -> Vec<u8> {
    let len = u16::from_be_bytes([fpdu[0], fpdu[1]]) as usize;
    let padded = (2 + len).div_ceil(4) * 4;
    assert_eq!(fpdu.len(), padded + 4, "one FPDU per segment");
    fpdu[2..2 + len].to_vec()
}

#[test]
fn siw_segments_parse_and_reemit_byte_exact() {
    // RFC 5041 §4, RFC 5040 §4: every header of the capture round-trips.
    let mut msn: HashMap<(Dir, u32), u32> = HashMap::new();
    let mut opcodes = Vec::new();
    for &(dir, h) in RPING {
        let seg = ulpdu(&hex(h));
        let view = Segment::new_checked(&seg[..]).unwrap();
        let repr = DdpRepr::parse(&view).unwrap();
        let mut again = vec![0u8; repr.buffer_len()];
        repr.emit(&mut again).unwrap();
        assert_eq!(&again[..], &seg[..repr.buffer_len()]);
        let ctrl = RdmapControl::parse(repr.rsvd_ulp(), 1).unwrap();
        opcodes.push(ctrl.opcode);
        if let DdpRepr::Untagged(u) = repr {
            // RFC 5041 §4.3: MSN per queue and direction starts at 1, +1 per message.
            let next = msn.entry((dir, u.qn)).or_insert(1);
            assert_eq!(u.msn, *next);
            *next += 1;
            assert_eq!(Some(u.qn), ctrl.opcode.queue());
        }
        if ctrl.opcode == Opcode::ReadRequest {
            let r =
                ReadRequestRepr::parse(&ReadRequest::new_checked(view.payload()).unwrap()).unwrap();
            assert_eq!(&r.to_bytes()[..], view.payload());
        }
    }
    for op in [
        Opcode::Send,
        Opcode::ReadRequest,
        Opcode::ReadResponse,
        Opcode::Write,
    ] {
        assert!(opcodes.contains(&op), "{op:?} in capture");
    }
}

/// A 64 KiB memory holding, at offset 0, the `len`-octet buffer of `pd` a siw capture
/// names: STag `stag`, VA-based at `va`, Local Read and Remote Write.
fn memory_with_siw_buffer(pd: PdId, len: u64, stag: STag, va: u64) -> SimpleMemory {
    let mut mem = SimpleMemory::with_heap(1 << 16);
    let mut spec = RegionSpec::new(0, len, Access::LOCAL_READ | Access::REMOTE_WRITE, pd);
    spec.base_to = va;
    mem.register_with_stag(spec, stag).unwrap();
    mem
}

#[test]
fn engine_replays_rping_server() {
    // Our engine as the rping server: same work → the same segments on the wire.
    let pd = PdId(1);
    // The server's RDMA buffer (Read sink, Write source), VA-based like siw's.
    let mut mem = memory_with_siw_buffer(pd, 64, STag(0xb07e_9d00), 0x0000_55c4_1b3d_b550);
    // Send buffer (16 zero octets) and receive buffers.
    let local = mem
        .register(RegionSpec::new(
            4096,
            8192,
            Access::LOCAL_READ | Access::LOCAL_WRITE,
            pd,
        ))
        .unwrap();
    let mut eng = Engine::new(EngineConfig::new(pd, StreamId(1), 8, 8));
    let mut rx_pos = 0u64;
    let mut recv_id = 0u64;
    let post_recv = |eng: &mut Engine, id: u64| {
        eng.post_recv(RecvWr {
            wr_id: id,
            sgl: vec![Sge {
                stag: local,
                to: 1024 + 64 * (id % 32),
                len: 64,
            }],
        })
        .unwrap();
    };
    for _ in 0..4 {
        post_recv(&mut eng, recv_id);
        recv_id += 1;
    }
    let mut wr_id = 0;
    for &(dir, h) in RPING {
        let seg = ulpdu(&hex(h));
        match dir {
            C => {
                eng.handle_ddp_segment(now(), SegmentPos::index(rx_pos), &seg, &mut mem);
                rx_pos += 1;
                assert!(eng.local_terminate().is_none(), "siw segment rejected");
                while let Some(c) = eng.poll_completion() {
                    assert_eq!(c.status, CompletionStatus::Success);
                    if c.queue == WorkQueue::Recv {
                        post_recv(&mut eng, recv_id);
                        recv_id += 1;
                    }
                }
            }
            S => {
                let view = Segment::new_checked(&seg[..]).unwrap();
                let op = match RdmapControl::parse(view.rsvd_ulp(), 1).unwrap().opcode {
                    Opcode::ReadRequest => {
                        let r = ReadRequestRepr::parse(
                            &ReadRequest::new_checked(view.payload()).unwrap(),
                        )
                        .unwrap();
                        SendOp::Read {
                            sink: RemoteBuf {
                                stag: STag(r.sink_stag),
                                to: r.sink_to,
                            },
                            remote: RemoteBuf {
                                stag: STag(r.src_stag),
                                to: r.src_to,
                            },
                            len: r.size,
                        }
                    }
                    // The Write sends back what the Read brought in: its payload comes from
                    // our placement of siw's Read Response.
                    Opcode::Write => SendOp::Write {
                        sgl: iwarp::mem::Sgl::one(Sge {
                            stag: STag(0xb07e_9d00),
                            to: 0x0000_55c4_1b3d_b550,
                            len: view.payload().len() as u32,
                        }),
                        remote: RemoteBuf {
                            stag: STag(view.stag()),
                            to: view.to(),
                        },
                    },
                    Opcode::Send => SendOp::Send {
                        sgl: iwarp::mem::Sgl::one(Sge {
                            stag: local,
                            to: 0,
                            len: view.payload().len() as u32,
                        }),
                        solicited: false,
                        invalidate: None,
                    },
                    other => panic!("unexpected server opcode {other:?}"),
                };
                eng.post_send(SendWr::new(wr_id, op)).unwrap();
                wr_id += 1;
                let out = eng.poll_segment(now(), 1460, &mem).expect("a segment");
                assert_eq!(out.to_vec(), seg, "byte-identical to siw");
                assert!(eng.poll_segment(now(), 1460, &mem).is_none());
            }
        }
    }
    // Every Read completed (its Response was delivered), in order.
    let mut done = Vec::new();
    while let Some(c) = eng.poll_completion() {
        if c.queue == WorkQueue::Send {
            done.push(c.wr_id);
        }
    }
    assert!(eng.outstanding_requests() == 0);
    assert!(done.windows(2).all(|w| w[0] < w[1]));
}

/// RDMA Writes of a real `ib_write_lat` run over siw (MPA without CRC; 2-octet messages).
const WRITE_LAT: &[&str] = &[
    "0010c1407e56bc000000562189f190000001000000000000",
    "0010c1407e56bc000000562189f190000002000000000000",
    "0010c1407e56bc000000562189f190000003000000000000",
    "0010c1407e56bc000000562189f190000004000000000000",
    "0010c1407e56bc000000562189f190000005000000000000",
    "0010c1407e56bc000000562189f190000006000000000000",
    "0010c1407e56bc000000562189f190000007000000000000",
    "0010c1407e56bc000000562189f190000008000000000000",
    "0010c1407e56bc000000562189f190000009000000000000",
    "0010c1407e56bc000000562189f19000000a000000000000",
    "0010c1407e56bc000000562189f19000000b000000000000",
    "0010c1407e56bc000000562189f19000000c000000000000",
];

#[test]
fn engine_accepts_siw_writes() {
    // RFC 5040 §5.1: placed, never delivered; the last Write's payload is in memory.
    let pd = PdId(1);
    let mut mem = memory_with_siw_buffer(pd, 4096, STag(0x7e56_bc00), 0x0000_5621_89f1_9000);
    let mut eng = Engine::new(EngineConfig::new(pd, StreamId(1), 1, 1));
    let mut last = Vec::new();
    for (i, h) in WRITE_LAT.iter().enumerate() {
        let seg = ulpdu(&hex(h));
        let repr = DdpRepr::parse(&Segment::new_checked(&seg[..]).unwrap()).unwrap();
        let mut again = vec![0u8; repr.buffer_len()];
        repr.emit(&mut again).unwrap();
        assert_eq!(&again[..], &seg[..14]);
        eng.handle_ddp_segment(now(), SegmentPos::index(i as u64), &seg, &mut mem);
        last = seg[14..].to_vec();
    }
    assert!(eng.local_terminate().is_none());
    assert!(eng.poll_completion().is_none());
    assert_eq!(&mem.bytes()[..last.len()], &last[..]);
}
