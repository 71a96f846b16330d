//! The whole DDP/RDMAP receive engine (RFC 5041, RFC 5040, RFC 7306) of a connected stream
//! with registered memory, fed arbitrary DDP segments at arbitrary positions interleaved
//! with work requests, transmit polls and lifecycle calls.
//!
//! Checked: no panic; no octet outside the regions the stream may write changes (guard
//! bytes, a read-only region, a region of another PD and a window bound to another stream
//! stay as they were); every segment the engine sends fits MULPDU and parses; at most one
//! Terminate is ever sent (RFC 5040 §5.4).
//!
//! Input: `[config][ops...]`; each op starts with a code byte (`code % 6`, see
//! `iwarp_fuzz::format::engine`).
#![no_main]

use std::time::Duration;

use iwarp::ddp::SegmentPos;
use iwarp::mem::{Access, PdId, RegionSpec, STag, Sge, Sgl, SimpleMemory, StreamId};
use iwarp::rdmap::{Engine, EngineConfig, RecvWr, RemoteBuf, SendOp, SendWr};
use iwarp::wire::atomic::AtomicOp;
use iwarp::wire::ddp::{DdpRepr, Segment};
use iwarp::wire::rdmap::RdmapControl;
use iwarp::wire::terminate::TerminateCause;
use iwarp_fuzz::format::engine::*;
use iwarp_fuzz::Input;
use libfuzzer_sys::fuzz_target;
use tcp::Instant;

const ARENA: usize = 32 * 1024;
const GUARD: u8 = 0xee;

/// A region: arena range, base TO, whether the stream may ever write it, fill.
struct Region {
    offset: usize,
    len: usize,
    base_to: u64,
    writable: bool,
    fill: u8,
    stag: STag,
}

struct World {
    engine: Engine,
    mem: SimpleMemory,
    regions: Vec<Region>,
    next_pos: u64,
    terminates: usize,
    mulpdu: usize,
    now: Instant,
    version: u8,
}

fn all() -> Access {
    Access::LOCAL_READ
        | Access::LOCAL_WRITE
        | Access::REMOTE_READ
        | Access::REMOTE_WRITE
        | Access::REMOTE_ATOMIC
}

impl World {
    fn new(cfg_bits: u8, ird_ord: u8) -> World {
        let mut cfg = EngineConfig::new(
            PdId(1),
            StreamId(7),
            u32::from(ird_ord & 0x0f),
            u32::from(ird_ord >> 4),
        );
        cfg.extensions = cfg_bits & 1 != 0;
        if cfg_bits & 2 != 0 {
            cfg.rdmap_version = 0;
        }
        cfg.max_held_segments = 1 + usize::from(cfg_bits >> 4);
        let mut mem = SimpleMemory::with_heap(ARENA);
        mem.bytes_mut().fill(GUARD);
        let specs = [
            // R0: everything, zero-based.
            (RegionSpec::new(4096, 4096, all(), PdId(1)), true, 0x00),
            // R1: remote read only: never written.
            (
                RegionSpec::new(
                    12288,
                    256,
                    Access::LOCAL_READ | Access::REMOTE_READ,
                    PdId(1),
                ),
                false,
                0x5a,
            ),
            // R2: local buffers (receive, atomic result).
            (
                RegionSpec::new(16384, 64, Access::LOCAL_READ | Access::LOCAL_WRITE, PdId(1)),
                true,
                0x00,
            ),
            // R3: another protection domain: never written.
            (RegionSpec::new(20480, 128, all(), PdId(2)), false, 0x3c),
            // R4: VA-based, its last octet at TO 2^64 - 1.
            (
                RegionSpec {
                    base_to: u64::MAX - 1023,
                    ..RegionSpec::new(24576, 1024, all(), PdId(1))
                },
                true,
                0x00,
            ),
            // R5: a window bound to another stream: never written.
            (
                RegionSpec {
                    stream: Some(StreamId(99)),
                    ..RegionSpec::new(28672, 128, all(), PdId(1))
                },
                false,
                0x77,
            ),
        ];
        let mut regions = Vec::new();
        for (spec, writable, fill) in specs {
            let (o, l) = (spec.offset as usize, spec.len as usize);
            mem.bytes_mut()[o..o + l].fill(fill);
            let stag = mem.register(spec).expect("register");
            regions.push(Region {
                offset: o,
                len: l,
                base_to: spec.base_to,
                writable,
                fill,
                stag,
            });
        }
        World {
            engine: Engine::new(cfg),
            mem,
            regions,
            next_pos: 0,
            terminates: 0,
            mulpdu: 1460,
            now: Instant::from_millis(1_000),
            version: cfg.rdmap_version,
        }
    }

    /// An STag for a remote access: one of the regions, a wrong key, or raw.
    fn stag(&self, input: &mut Input<'_>) -> u32 {
        let i = usize::from(input.u8() % 8);
        match i {
            0..=5 => self.regions[i].stag.0,
            6 => self.regions[0].stag.0 ^ 1,
            _ => input.u32(),
        }
    }

    /// A TO inside or near a region.
    fn to(&self, input: &mut Input<'_>, stag: u32) -> u64 {
        let off = u64::from(input.u16());
        match self.regions.iter().find(|r| r.stag.0 == stag) {
            Some(r) if off < 0xf000 => r.base_to.wrapping_add(off),
            _ => input.u64(),
        }
    }

    /// A local SGE into a region the stream may write (R0, R2, R4).
    fn sge(&self, input: &mut Input<'_>) -> Sge {
        let r = &self.regions[[0, 2, 4][usize::from(input.u8() % 3)]];
        Sge {
            stag: r.stag,
            to: r.base_to.wrapping_add(u64::from(input.u16() % 4200)),
            len: u32::from(input.u16() % 4200),
        }
    }

    fn position(&mut self, input: &mut Input<'_>) -> SegmentPos {
        let b = input.u8();
        let pos = if b >= 0xc0 {
            (self.next_pos + u64::from(b % 16)).saturating_sub(4)
        } else {
            self.next_pos
        };
        if pos == self.next_pos {
            self.next_pos += 1;
        }
        SegmentPos::index(pos)
    }

    fn segment(&mut self, input: &mut Input<'_>) -> Vec<u8> {
        let flags = input.u8();
        let tagged = flags & 0x80 != 0;
        let last = flags & 0x40 != 0;
        let dv = if flags & 0x20 != 0 { flags & 3 } else { 1 };
        let rv = if flags & 0x10 != 0 {
            (flags >> 2) & 3
        } else {
            self.version
        };
        let opcode = input.u8() & 0x0f;
        let mut v = vec![
            (if tagged { 0x80 } else { 0 }) | (if last { 0x40 } else { 0 }) | dv,
            (rv << 6) | opcode,
        ];
        if tagged {
            let stag = self.stag(input);
            let to = self.to(input, stag);
            v.extend_from_slice(&stag.to_be_bytes());
            v.extend_from_slice(&to.to_be_bytes());
        } else {
            let inval = self.stag(input);
            v.extend_from_slice(&inval.to_be_bytes());
            v.extend_from_slice(&u32::from(input.u8() % 6).to_be_bytes());
            v.extend_from_slice(&u32::from(input.u8()).to_be_bytes());
            v.extend_from_slice(&u32::from(input.u16()).to_be_bytes());
        }
        // RDMAP headers that carry STags (Read Request, Atomic Request) get real ones.
        match opcode {
            0x1 => {
                let sink = input.u32();
                let src = self.stag(input);
                v.extend_from_slice(&sink.to_be_bytes());
                v.extend_from_slice(&input.u64().to_be_bytes());
                v.extend_from_slice(&u32::from(input.u16()).to_be_bytes());
                v.extend_from_slice(&src.to_be_bytes());
                let to = self.to(input, src);
                v.extend_from_slice(&to.to_be_bytes());
            }
            0xa => {
                v.extend_from_slice(&[0, 0, 0, input.u8() % 4]);
                v.extend_from_slice(&input.u32().to_be_bytes());
                let stag = self.stag(input);
                v.extend_from_slice(&stag.to_be_bytes());
                let to = self.to(input, stag) & !7;
                v.extend_from_slice(&to.to_be_bytes());
            }
            _ => {}
        }
        v.extend_from_slice(input.chunk(2048));
        v
    }

    fn post_send(&mut self, input: &mut Input<'_>) {
        let kind = input.u8();
        let op = match kind % 5 {
            0 => SendOp::Send {
                sgl: Sgl::one(self.sge(input)),
                solicited: kind & 0x10 != 0,
                invalidate: (kind & 0x20 != 0).then(|| STag(input.u32())),
            },
            1 => SendOp::Write {
                sgl: Sgl::from([self.sge(input), self.sge(input)]),
                remote: RemoteBuf {
                    stag: STag(input.u32()),
                    to: input.u64(),
                },
            },
            2 => {
                let r = &self.regions[if kind & 0x10 != 0 { 4 } else { 0 }];
                SendOp::Read {
                    sink: RemoteBuf {
                        stag: r.stag,
                        to: r.base_to.wrapping_add(u64::from(input.u16() % 4200)),
                    },
                    remote: RemoteBuf {
                        stag: STag(input.u32()),
                        to: input.u64(),
                    },
                    len: u32::from(input.u16()),
                }
            }
            3 => SendOp::Immediate {
                data: input.u64().to_be_bytes(),
                solicited: kind & 0x10 != 0,
            },
            _ => {
                let result = self.sge(input);
                SendOp::Atomic {
                    op: AtomicOp::from_u4(input.u8() % 3).expect("valid opcode"),
                    remote: RemoteBuf {
                        stag: STag(input.u32()),
                        to: input.u64(),
                    },
                    add_swap: input.u64(),
                    add_swap_mask: input.u64(),
                    compare: input.u64(),
                    compare_mask: input.u64(),
                    result: Sge { len: 8, ..result },
                }
            }
        };
        let mut wr = SendWr::new(input.u64(), op);
        wr.signaled = kind & 0x40 != 0;
        wr.read_fence = kind & 0x80 != 0;
        wr.local_fence = kind & 0x08 != 0;
        let _ = self.engine.post_send(wr);
    }

    fn transmit(&mut self) {
        while let Some(seg) = self.engine.poll_segment(self.now, self.mulpdu, &self.mem) {
            let bytes = seg.to_vec();
            assert!(bytes.len() <= self.mulpdu, "segment larger than MULPDU");
            let s = Segment::new_checked(&bytes[..]).expect("sent segment has a whole header");
            DdpRepr::parse(&s).expect("sent DDP header parses");
            let ctl = RdmapControl::parse(bytes[1], self.version).expect("sent RDMAP control");
            if ctl.opcode.to_u4() == 0x7 {
                self.terminates += 1;
                assert!(self.terminates <= 1, "more than one Terminate");
            }
        }
        while self.engine.poll_completion().is_some() {}
        while self.engine.poll_event().is_some() {}
    }

    fn check_memory(&self) {
        let b = self.mem.bytes();
        let mut at = 0;
        for r in &self.regions {
            assert!(
                b[at..r.offset].iter().all(|&x| x == GUARD),
                "guard before {at}"
            );
            if !r.writable {
                assert!(
                    b[r.offset..r.offset + r.len].iter().all(|&x| x == r.fill),
                    "region at {} written without the right",
                    r.offset
                );
            }
            at = r.offset + r.len;
        }
        assert!(
            b[at..].iter().all(|&x| x == GUARD),
            "guard after the last region"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let mut w = World::new(input.u8(), input.u8());
    while !input.is_empty() {
        match input.u8() % COUNT {
            SEGMENT => {
                let pos = w.position(&mut input);
                let seg = w.segment(&mut input);
                w.engine.handle_ddp_segment(w.now, pos, &seg, &mut w.mem);
            }
            RAW_SEGMENT => {
                let pos = w.position(&mut input);
                let seg = input.chunk(4096);
                w.engine.handle_ddp_segment(w.now, pos, seg, &mut w.mem);
            }
            POST_RECV => {
                let sgl = (0..1 + input.u8() % 3).map(|_| w.sge(&mut input)).collect();
                let _ = w.engine.post_recv(RecvWr {
                    wr_id: u64::from(input.u16()),
                    sgl,
                });
            }
            POST_SEND => w.post_send(&mut input),
            TRANSMIT => {
                w.mulpdu = 128 + usize::from(input.u16() % 4000);
                w.now = w.now + Duration::from_millis(u64::from(input.u8()));
                w.transmit();
            }
            _ => match input.u8() % 4 {
                0 => w.engine.close(),
                1 => w.engine.handle_llp_closed(true),
                2 => w.engine.handle_llp_closed(false),
                _ => w.engine.abort(TerminateCause::MPA_CRC_ERROR),
            },
        }
    }
    w.transmit();
    w.check_memory();
});
