//! Shared fixtures for the DDP/RDMAP engine tests: two engines back to back, each with its
//! own heap-backed memory table.

use tcp::Instant;

use iwarp::ddp::SegmentPos;
use iwarp::mem::{Access, PdId, RegionSpec, STag, Sge, SimpleMemory, StreamId};
use iwarp::rdmap::{
    Completion, CompletionStatus, Engine, EngineConfig, Event, Handled, RecvWr, RemoteBuf, SendOp,
    SendWr,
};
use iwarp::wire::terminate::{Terminate, TerminateCause, TerminateRepr};
use rand::seq::SliceRandom;
use rand::SeedableRng;

/// Arena size of each side.
pub const ARENA: usize = 1 << 20;
/// Guard octets pattern around regions.
pub const GUARD: u8 = 0xEE;

/// One side: an engine, its memory and the position counter of segments it received.
pub struct Side {
    pub engine: Engine,
    pub mem: SimpleMemory,
    pub rx_pos: u64,
    pub pd: PdId,
}

impl Side {
    pub fn new(cfg: EngineConfig) -> Self {
        let mut mem = SimpleMemory::with_heap(ARENA);
        mem.bytes_mut().fill(GUARD);
        Side {
            engine: Engine::new(cfg),
            mem,
            rx_pos: 0,
            pd: cfg.pd,
        }
    }

    /// Registers `len` octets at arena offset `offset`, zero-based, filled with `fill`.
    pub fn region(&mut self, offset: u64, len: u64, access: Access, fill: u8) -> STag {
        let o = offset as usize;
        self.mem.bytes_mut()[o..o + len as usize].fill(fill);
        self.mem
            .register(RegionSpec::new(offset, len, access, self.pd))
            .expect("register")
    }

    /// Registers a region with a custom spec.
    pub fn region_spec(&mut self, spec: RegionSpec) -> STag {
        self.mem.register(spec).expect("register")
    }

    pub fn bytes(&self, offset: u64, len: usize) -> &[u8] {
        &self.mem.bytes()[offset as usize..offset as usize + len]
    }

    pub fn write_bytes(&mut self, offset: u64, data: &[u8]) {
        self.mem.bytes_mut()[offset as usize..offset as usize + data.len()].copy_from_slice(data);
    }

    /// Posts a receive buffer made of one SGE.
    pub fn post_recv(&mut self, wr_id: u64, stag: STag, to: u64, len: u32) {
        self.engine
            .post_recv(RecvWr {
                wr_id,
                sgl: vec![Sge { stag, to, len }],
            })
            .expect("post_recv");
    }

    /// Every segment the engine wants to send now.
    pub fn drain_tx(&mut self, mulpdu: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            // `has_segment` tells the connection's `pending` what `poll_segment` would do
            // (the connection reads nothing ahead of TCP); `has_tx_work` is false only when
            // there is nothing to send at all.
            let predicted = self.engine.has_segment(mulpdu);
            let work = self.engine.has_tx_work();
            let Some(s) = self.engine.poll_segment(now(), mulpdu, &self.mem) else {
                assert!(
                    !self.engine.has_segment(mulpdu),
                    "has_segment after poll_segment produced nothing"
                );
                return out;
            };
            assert!(
                predicted,
                "poll_segment produced a segment has_segment denied"
            );
            assert!(work, "a segment although has_tx_work() said none");
            assert!(s.len() <= mulpdu, "segment larger than MULPDU");
            out.push(s.to_vec());
        }
    }

    /// Hands one segment in order.
    pub fn receive(&mut self, seg: &[u8]) -> Handled {
        let pos = SegmentPos::index(self.rx_pos);
        self.rx_pos += 1;
        self.engine
            .handle_ddp_segment(now(), pos, seg, &mut self.mem)
    }

    pub fn completions(&mut self) -> Vec<Completion> {
        std::iter::from_fn(|| self.engine.poll_completion()).collect()
    }

    pub fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.engine.poll_event()).collect()
    }

    /// The completions so far are `n`, all Flushed.
    pub fn expect_flushed(&mut self, n: usize) {
        let c = self.completions();
        assert_eq!(c.len(), n);
        assert!(c.iter().all(|c| c.status == CompletionStatus::Flushed));
    }
}

pub fn now() -> Instant {
    Instant::from_millis(1_000)
}

/// A default configuration: PD 1, stream `id`, IRD = ORD = 4.
pub fn cfg(id: u32) -> EngineConfig {
    EngineConfig::new(PdId(1), StreamId(id), 4, 4)
}

/// Config with the RFC 7306 extensions enabled.
pub fn cfg_ext(id: u32) -> EngineConfig {
    let mut c = cfg(id);
    c.extensions = true;
    c
}

/// Two engines back to back.
pub struct Pair {
    pub a: Side,
    pub b: Side,
    pub mulpdu: usize,
}

impl Pair {
    pub fn new(ca: EngineConfig, cb: EngineConfig, mulpdu: usize) -> Self {
        Pair {
            a: Side::new(ca),
            b: Side::new(cb),
            mulpdu,
        }
    }

    /// A pair (streams 1 and 2, MULPDU 1500), each side with an all-rights region over its
    /// first 8 KiB filled with `fill_a` and `fill_b`; returns the pair and both STags.
    pub fn with_regions(fill_a: u8, fill_b: u8) -> (Self, STag, STag) {
        let mut p = Pair::new(cfg(1), cfg(2), 1500);
        let a = p.a.region(0, 8192, all(), fill_a);
        let b = p.b.region(0, 8192, all(), fill_b);
        (p, a, b)
    }

    /// Moves segments both ways, in order, until both sides are quiet.
    pub fn pump(&mut self) -> usize {
        self.pump_with(|side, segs| {
            for s in &segs {
                side.receive(s);
            }
        })
    }

    /// Like `pump`, but each batch is handed over in a shuffled order, every segment with its
    /// true in-order position.
    pub fn pump_shuffled(&mut self, seed: u64) -> usize {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        self.pump_with(|side, segs| deliver_shuffled(side, segs, &mut rng))
    }

    /// Moves segments both ways until both sides are quiet, `hand` giving each batch to its
    /// side (A's to B first); returns how many segments moved.
    fn pump_with(&mut self, mut hand: impl FnMut(&mut Side, Vec<Vec<u8>>)) -> usize {
        let mut moved = 0;
        loop {
            let ab = self.a.drain_tx(self.mulpdu);
            let ba = self.b.drain_tx(self.mulpdu);
            if ab.is_empty() && ba.is_empty() {
                return moved;
            }
            moved += ab.len() + ba.len();
            hand(&mut self.b, ab);
            hand(&mut self.a, ba);
        }
    }
}

fn deliver_shuffled(side: &mut Side, segs: Vec<Vec<u8>>, rng: &mut rand::rngs::StdRng) {
    let base = side.rx_pos;
    let mut indexed: Vec<(u64, Vec<u8>)> = segs
        .into_iter()
        .enumerate()
        .map(|(i, s)| (base + i as u64, s))
        .collect();
    side.rx_pos += indexed.len() as u64;
    indexed.shuffle(rng);
    for (pos, s) in indexed {
        let h = side
            .engine
            .handle_ddp_segment(now(), SegmentPos::index(pos), &s, &mut side.mem);
        assert_ne!(h, Handled::Deferred);
    }
}

/// Parses a Terminate segment (18-octet DDP header + Terminate header).
pub fn parse_terminate(seg: &[u8]) -> TerminateRepr {
    assert_eq!(seg[1] & 0x0F, 0x7, "opcode must be Terminate");
    let t = Terminate::new_checked(&seg[18..]).expect("terminate header");
    TerminateRepr::parse(&t).expect("terminate repr")
}

/// The single Terminate a side emits (and asserts nothing follows it).
pub fn expect_terminate(side: &mut Side) -> TerminateRepr {
    let segs = side.drain_tx(1 << 16);
    let last = segs.last().expect("a Terminate segment");
    let t = parse_terminate(last);
    assert!(side.drain_tx(1 << 16).is_empty(), "nothing after Terminate");
    t
}

/// The single Terminate a side emits, which must carry `cause`.
pub fn expect_terminate_cause(side: &mut Side, cause: TerminateCause) -> TerminateRepr {
    let t = expect_terminate(side);
    assert_eq!(t.cause, cause);
    t
}

/// Hands `seg` to `side` in order; the single Terminate it answers with carries `cause`
/// and a copy of `seg`'s DDP header (`assert_copy_d`). Returns that Terminate.
pub fn expect_refused(side: &mut Side, seg: &[u8], cause: TerminateCause) -> TerminateRepr {
    side.receive(seg);
    let t = expect_terminate_cause(side, cause);
    assert_copy_d(&t, seg);
    t
}

/// The Terminate reports the length of `seg` and copies its DDP header.
pub fn assert_copy_d(t: &TerminateRepr, seg: &[u8]) {
    let hlen = if seg[0] & 0x80 != 0 { 14 } else { 18 };
    assert_eq!(t.segment_len, Some(seg.len() as u16));
    assert_eq!(t.ddp_header.expect("D=1").as_bytes(), &seg[..hlen]);
}

/// Every local and remote read and write right.
pub fn all() -> Access {
    Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE
}

/// A Send of `len` octets at `to` of `local`.
pub fn send_wr(id: u64, local: STag, to: u64, len: u32) -> SendWr {
    SendWr::new(
        id,
        SendOp::Send {
            sgl: iwarp::mem::Sgl::one(Sge {
                stag: local,
                to,
                len,
            }),
            solicited: false,
            invalidate: None,
        },
    )
}

/// An RDMA Read of `len` octets at `src_to` of the peer's `src` into `sink_to` of `sink`.
pub fn read_wr(id: u64, sink: STag, sink_to: u64, src: STag, src_to: u64, len: u32) -> SendWr {
    SendWr::new(
        id,
        SendOp::Read {
            sink: RemoteBuf {
                stag: sink,
                to: sink_to,
            },
            remote: RemoteBuf {
                stag: src,
                to: src_to,
            },
            len,
        },
    )
}

/// Builds a raw tagged segment.
pub fn tagged_seg(opcode: u8, last: bool, stag: u32, to: u64, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0x80 | if last { 0x40 } else { 0 } | 0x01, 0x40 | opcode];
    v.extend_from_slice(&stag.to_be_bytes());
    v.extend_from_slice(&to.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// Builds a raw untagged segment.
pub fn untagged_seg(
    opcode: u8,
    last: bool,
    inval: u32,
    qn: u32,
    msn: u32,
    mo: u32,
    payload: &[u8],
) -> Vec<u8> {
    let mut v = vec![if last { 0x40 } else { 0 } | 0x01, 0x40 | opcode];
    v.extend_from_slice(&inval.to_be_bytes());
    v.extend_from_slice(&qn.to_be_bytes());
    v.extend_from_slice(&msn.to_be_bytes());
    v.extend_from_slice(&mo.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// Deterministic test pattern.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}
