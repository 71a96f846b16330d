//! Model-based test of the verbs memory model: random sequences of registrations,
//! deregistrations, window binds, local and remote invalidations and peer Writes are run
//! against the RNIC and against a small reference model of VERBS-00 §7; every status,
//! every Terminate cause and every octet of the backend must agree (a Write never touches
//! memory outside the range it was allowed into).

use crate::common::*;
use iwarp::verbs::*;
use iwarp::wire::terminate::TerminateCause as T;
use proptest::prelude::*;

const SLOTS: usize = 3;
/// Region length: less than a page, so one octet past the end is still mapped memory.
const LEN: u64 = 3000;
/// MR slot `i` covers the first `LEN` octets of backend page `2 * i`, TOs `[VA(i), VA(i) + LEN)`.
fn va(i: usize) -> u64 {
    0x10_0000 * (i as u64 + 1)
}

/// An offset: anywhere, or so that the access ends `d` octets past the end of the range.
#[derive(Debug, Clone, Copy)]
enum Off {
    Any(u16),
    Edge(i8),
}

impl Off {
    fn at(self, len: u16, limit: u64) -> u64 {
        match self {
            Off::Any(o) => u64::from(o),
            Off::Edge(d) => (limit as i64 - i64::from(len) + i64::from(d)).max(0) as u64,
        }
    }
}

fn off() -> impl Strategy<Value = Off> {
    prop_oneof![
        (0u16..4200).prop_map(Off::Any),
        (-2i8..=2).prop_map(Off::Edge)
    ]
}

#[derive(Debug, Clone)]
enum Op {
    Register {
        slot: usize,
        rights: u8,
        key: u8,
    },
    Dealloc {
        slot: usize,
    },
    Invalidate {
        slot: usize,
    },
    Bind {
        mw: usize,
        mr: usize,
        off: Off,
        len: u16,
        write: bool,
        key: u8,
    },
    UnbindWindow {
        mw: usize,
    },
    SendInv {
        slot: usize,
    },
    WriteMr {
        slot: usize,
        off: Off,
        len: u16,
        other_qp: bool,
        stale_key: bool,
    },
    WriteMw {
        mw: usize,
        off: Off,
        len: u16,
        other_qp: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let s = 0..SLOTS;
    prop_oneof![
        3 => (s.clone(), 0u8..16, any::<u8>()).prop_map(|(slot, rights, key)| Op::Register { slot, rights, key }),
        1 => s.clone().prop_map(|slot| Op::Dealloc { slot }),
        1 => s.clone().prop_map(|slot| Op::Invalidate { slot }),
        2 => (s.clone(), s.clone(), off(), 0u16..300, any::<bool>(), any::<u8>())
            .prop_map(|(mw, mr, off, len, write, key)| Op::Bind { mw, mr, off, len, write, key }),
        1 => s.clone().prop_map(|mw| Op::UnbindWindow { mw }),
        1 => s.clone().prop_map(|slot| Op::SendInv { slot }),
        4 => (s.clone(), off(), 1u16..300, any::<bool>(), any::<bool>())
            .prop_map(|(slot, off, len, other_qp, stale_key)| Op::WriteMr { slot, off, len, other_qp, stale_key }),
        3 => (s, off(), 1u16..300, any::<bool>())
            .prop_map(|(mw, off, len, other_qp)| Op::WriteMw { mw, off, len, other_qp }),
    ]
}

fn access_of(bits: u8) -> Access {
    let mut a = Access::NONE;
    for (bit, right) in [
        (1, Access::LOCAL_READ),
        (2, Access::LOCAL_WRITE),
        (4, Access::REMOTE_READ),
        (8, Access::REMOTE_WRITE),
    ] {
        if bits & bit != 0 {
            a |= right;
        }
    }
    a | Access::BIND
}

/// Fig. 18: a local right, RR needs LR, RW needs LW.
fn valid_rights(a: Access) -> bool {
    (a.contains(Access::LOCAL_READ) || a.contains(Access::LOCAL_WRITE))
        && (!a.contains(Access::REMOTE_READ) || a.contains(Access::LOCAL_READ))
        && (!a.contains(Access::REMOTE_WRITE) || a.contains(Access::LOCAL_WRITE))
}

#[derive(Debug, Clone, Copy)]
struct MrModel {
    stag: STag,
    valid: bool,
    access: Access,
    windows: u32,
}

#[derive(Debug, Clone, Copy)]
struct MwModel {
    mr: usize,
    key: u8,
    off: u64,
    len: u64,
    write: bool,
}

struct World {
    fx: Fx,
    other: QpId,
    mws: Vec<STag>,
    shadow: Vec<u8>,
    mrs: [Option<MrModel>; SLOTS],
    bound: [Option<MwModel>; SLOTS],
}

impl World {
    fn new() -> World {
        let mut fx = fixture_with(|i| i.sq_depth = 1024);
        to_rts(&mut fx.rnic, fx.qp);
        let (other, _) = fx.rnic.create_qp(QpInit::new(fx.pd, fx.cq, fx.cq)).unwrap();
        let mws = (0..SLOTS)
            .map(|_| fx.rnic.alloc_mw(fx.pd).unwrap())
            .collect();
        let shadow = fx.rnic.memory().bytes().to_vec();
        World {
            fx,
            other,
            mws,
            shadow,
            mrs: [None; SLOTS],
            bound: [None; SLOTS],
        }
    }

    /// Runs one SQ WR on the main QP and returns its completion status.
    fn wr(&mut self, op: SqOp) -> CompletionStatus {
        run_sq(&mut self.fx.rnic, self.fx.qp, SendWr::new(1, op));
        let wcs = drain(&mut self.fx.rnic, self.fx.cq);
        assert_eq!(wcs.len(), 1);
        // Completion errors stop the QP; bring it back for the next step.
        if !wcs[0].status.is_success() {
            self.fx
                .rnic
                .handle_llp_event(self.fx.qp, LlpEvent::Reset)
                .unwrap();
            drain(&mut self.fx.rnic, self.fx.cq);
            self.fx
                .rnic
                .modify_qp(self.fx.qp, ModifyQp::to(QpState::Idle))
                .unwrap();
            to_rts(&mut self.fx.rnic, self.fx.qp);
        }
        wcs[0].status
    }

    fn write(&mut self, qp: QpId, stag: STag, to: u64, len: usize) -> Result<(), T> {
        let data: Vec<u8> = (0..len).map(|i| (i as u8) ^ 0x5A).collect();
        peer_write(&mut self.fx.rnic, self.fx.pd, qp, stag, to, &data)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn model_random_memory_operations_match_reference(ops in prop::collection::vec(op(), 1..60)) {
        let mut w = World::new();
        for op in ops {
            match op {
                Op::Register { slot, rights, key } => {
                    let access = access_of(rights);
                    let mut spec = mr_spec(w.fx.pd, 2 * slot as u64 * PAGE, LEN, va(slot), access);
                    spec.key = key;
                    let busy = w.mrs[slot].is_some();
                    if busy {
                        continue;
                    }
                    let got = w.fx.rnic.register_mr(&spec);
                    if valid_rights(access) {
                        let stag = got.unwrap();
                        prop_assert_eq!(stag.key(), key);
                        w.mrs[slot] = Some(MrModel { stag, valid: true, access, windows: 0 });
                    } else {
                        prop_assert_eq!(got, Err(VerbError::InvalidAccessRights));
                    }
                }
                Op::Dealloc { slot } => {
                    let Some(m) = w.mrs[slot] else { continue };
                    let got = w.fx.rnic.dealloc_stag(m.stag);
                    if m.windows > 0 {
                        prop_assert_eq!(got, Err(VerbError::WindowsBoundToRegion));
                    } else {
                        prop_assert_eq!(got, Ok(()));
                        w.mrs[slot] = None;
                    }
                }
                Op::Invalidate { slot } => {
                    let Some(m) = w.mrs[slot] else { continue };
                    let got = w.wr(SqOp::LocalInvalidate { stag: m.stag });
                    if m.windows > 0 {
                        prop_assert_eq!(got, CompletionStatus::AccessViolation);
                    } else {
                        prop_assert_eq!(got, CompletionStatus::Success);
                        w.mrs[slot].as_mut().unwrap().valid = false;
                    }
                }
                Op::Bind { mw, mr, off, len, write, key } => {
                    let off = off.at(len, LEN);
                    let Some(m) = w.mrs[mr] else { continue };
                    let access = if write { Access::REMOTE_WRITE } else { Access::REMOTE_READ };
                    let spec = BindSpec {
                        mw: STag::new(w.mws[mw].index(), key),
                        mr: m.stag,
                        mr_to: va(mr) + off,
                        len: u64::from(len),
                        zero_based: false,
                        access,
                    };
                    let expect = if w.bound[mw].is_some() {
                        CompletionStatus::StagNotInvalid
                    } else if !m.valid {
                        CompletionStatus::InvalidRegion
                    } else if (write && !m.access.contains(Access::LOCAL_WRITE))
                        || (!write && !m.access.contains(Access::LOCAL_READ))
                    {
                        CompletionStatus::AccessViolation
                    } else if off + u64::from(len) > LEN {
                        CompletionStatus::BaseBoundsViolation
                    } else {
                        CompletionStatus::Success
                    };
                    prop_assert_eq!(w.wr(SqOp::Bind(spec)), expect);
                    if expect.is_success() {
                        w.bound[mw] = Some(MwModel { mr, key, off, len: u64::from(len), write });
                        w.mrs[mr].as_mut().unwrap().windows += 1;
                    }
                }
                Op::UnbindWindow { mw } => {
                    let Some(b) = w.bound[mw] else { continue };
                    let got = w.wr(SqOp::LocalInvalidate { stag: STag::new(w.mws[mw].index(), b.key) });
                    prop_assert_eq!(got, CompletionStatus::Success);
                    w.bound[mw] = None;
                    w.mrs[b.mr].as_mut().unwrap().windows -= 1;
                }
                Op::SendInv { slot } => {
                    let Some(m) = w.mrs[slot] else { continue };
                    let got = peer_send_inv(&mut w.fx.rnic, w.fx.pd, w.fx.qp, m.stag);
                    let expect = if m.windows > 0 {
                        Err(T::RDMAP_PROT_CANNOT_INVALIDATE)
                    } else if !m.access.any_remote() {
                        Err(T::RDMAP_ACCESS_RIGHTS)
                    } else {
                        Ok(())
                    };
                    prop_assert_eq!(got, expect);
                    if expect.is_ok() {
                        w.mrs[slot].as_mut().unwrap().valid = false;
                    }
                }
                Op::WriteMr { slot, off, len, other_qp, stale_key } => {
                    let off = off.at(len, LEN);
                    let qp = if other_qp { w.other } else { w.fx.qp };
                    let (stag, expect, land) = match w.mrs[slot] {
                        None => (STag::new(0x00AB_CD00 + slot as u32, 1), Err(T::DDP_INVALID_STAG), None),
                        Some(m) => {
                            let stag = if stale_key { STag::new(m.stag.index(), m.stag.key().wrapping_add(1)) } else { m.stag };
                            let end = off + u64::from(len);
                            if stale_key || !m.valid || !m.access.contains(Access::REMOTE_WRITE) {
                                (stag, Err(T::DDP_INVALID_STAG), None)
                            } else if end > LEN {
                                (stag, Err(T::DDP_BASE_BOUNDS), None)
                            } else {
                                (stag, Ok(()), Some(2 * slot as u64 * PAGE + off))
                            }
                        }
                    };
                    let got = w.write(qp, stag, va(slot) + off, usize::from(len));
                    prop_assert_eq!(got, expect);
                    if let Some(at) = land {
                        for i in 0..usize::from(len) {
                            w.shadow[at as usize + i] = (i as u8) ^ 0x5A;
                        }
                    }
                }
                Op::WriteMw { mw, off, len, other_qp } => {
                    let off = off.at(len, w.bound[mw].map_or(LEN, |b| b.len));
                    let qp = if other_qp { w.other } else { w.fx.qp };
                    let (stag, expect, land) = match w.bound[mw] {
                        None => (w.mws[mw], Err(T::DDP_INVALID_STAG), None),
                        Some(b) => {
                            let stag = STag::new(w.mws[mw].index(), b.key);
                            let end = off + u64::from(len);
                            if other_qp {
                                (stag, Err(T::DDP_STAG_NOT_ASSOCIATED), None)
                            } else if !b.write {
                                (stag, Err(T::DDP_INVALID_STAG), None)
                            } else if end > b.len {
                                (stag, Err(T::DDP_BASE_BOUNDS), None)
                            } else {
                                (stag, Ok(()), Some(2 * b.mr as u64 * PAGE + b.off + off))
                            }
                        }
                    };
                    let to = w.bound[mw].map_or(0, |b| va(b.mr) + b.off) + off;
                    let got = w.write(qp, stag, to, usize::from(len));
                    prop_assert_eq!(got, expect);
                    if let Some(at) = land {
                        for i in 0..usize::from(len) {
                            w.shadow[at as usize + i] = (i as u8) ^ 0x5A;
                        }
                    }
                }
            }
            prop_assert!(w.fx.rnic.memory().bytes() == &w.shadow[..], "backend differs from the model");
        }
    }
}
