//! Between rdma-core's work requests and completions and the verbs layer's.

use iwarp::rdmap::{RemoteBuf, SendOp};
use iwarp::verbs::Sgl;
use iwarp::verbs::{
    CompletionStatus, RecvWr, STag, SendWr, Sge, SqOp, VerbError, WcOpcode, WorkCompletion,
};
use iwarp::wire::atomic::AtomicOp;

use crate::abi::*;
use crate::shared::verbs::Wc;

/// The SGEs of a work request.
///
/// # Safety
/// `list` must point to `n` readable `ibv_sge` (or `n` is 0).
unsafe fn sges<L: FromIterator<Sge>>(list: *const ibv_sge, n: i32) -> L {
    if n <= 0 || list.is_null() {
        return core::iter::empty().collect();
    }
    // SAFETY: by the contract, `list[..n]` is readable.
    let s = unsafe { std::slice::from_raw_parts(list, n as usize) };
    s.iter()
        .map(|g| Sge {
            stag: STag(g.lkey),
            to: g.addr,
            len: g.length,
        })
        .collect()
}

/// A send WR in the verbs layer's terms; `Err(EINVAL)` for what iWARP or this RNIC does not
/// carry (immediate data on Sends and Writes, memory windows, TSO, more SGEs than `max_sge`,
/// inline data longer than `max_inline`).
///
/// # Safety
/// `wr` must be a readable `ibv_send_wr` whose SGE list is readable, and inline SGEs must
/// point to readable memory.
pub unsafe fn send_wr(
    wr: &ibv_send_wr,
    sig_all: bool,
    max_sge: u32,
    max_inline: u32,
) -> Result<SendWr, i32> {
    if wr.num_sge < 0 || wr.num_sge as u32 > max_sge {
        return Err(libc::EINVAL);
    }
    // SAFETY: by the contract.
    let sgl: Sgl = unsafe { sges(wr.sg_list, wr.num_sge) };
    let flags = wr.send_flags;
    let solicited = flags & IBV_SEND_SOLICITED != 0;
    // SAFETY: reading plain-old-data union members of a readable struct.
    let (rdma, atomic, inv) = unsafe {
        (
            wr.wr.rdma,
            wr.wr.atomic,
            wr.__bindgen_anon_1.invalidate_rkey,
        )
    };
    let op = match wr.opcode {
        IBV_WR_SEND => SendOp::Send {
            sgl,
            solicited,
            invalidate: None,
        },
        IBV_WR_SEND_WITH_INV => SendOp::Send {
            sgl,
            solicited,
            invalidate: Some(STag(inv)),
        },
        IBV_WR_RDMA_WRITE => SendOp::Write {
            sgl,
            remote: RemoteBuf {
                stag: STag(rdma.rkey),
                to: rdma.remote_addr,
            },
        },
        IBV_WR_RDMA_READ => {
            // An RDMA Read lands in one local buffer (max_sge_rd = 1).
            let (sink, len) = match sgl.as_slice() {
                [] => (
                    RemoteBuf {
                        stag: STag(0),
                        to: 0,
                    },
                    0,
                ),
                [s] => (
                    RemoteBuf {
                        stag: s.stag,
                        to: s.to,
                    },
                    s.len,
                ),
                _ => return Err(libc::EINVAL),
            };
            SendOp::Read {
                sink,
                remote: RemoteBuf {
                    stag: STag(rdma.rkey),
                    to: rdma.remote_addr,
                },
                len,
            }
        }
        IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => {
            let [result] = sgl.as_slice() else {
                return Err(libc::EINVAL);
            };
            let cmp = wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
            SendOp::Atomic {
                op: if cmp {
                    AtomicOp::CmpSwap
                } else {
                    AtomicOp::FetchAdd
                },
                remote: RemoteBuf {
                    stag: STag(atomic.rkey),
                    to: atomic.remote_addr,
                },
                add_swap: if cmp { atomic.swap } else { atomic.compare_add },
                add_swap_mask: u64::MAX,
                compare: if cmp { atomic.compare_add } else { 0 },
                compare_mask: u64::MAX,
                result: *result,
            }
        }
        _ => return Err(libc::EINVAL),
    };
    let op = if flags & IBV_SEND_INLINE != 0 {
        inline(op, max_inline)?
    } else {
        SqOp::Message(op)
    };
    Ok(SendWr {
        wr_id: wr.wr_id,
        op,
        signaled: sig_all || flags & IBV_SEND_SIGNALED != 0,
        read_fence: flags & IBV_SEND_FENCE != 0
            && matches!(
                wr.opcode,
                IBV_WR_SEND | IBV_WR_SEND_WITH_INV | IBV_WR_RDMA_WRITE
            ),
        local_fence: false,
    })
}

/// A Send or Write whose payload is copied now (the SGEs' lkeys are not looked at, as with
/// rdma-core's providers).
fn inline(op: SendOp, max_inline: u32) -> Result<SqOp, i32> {
    let (sgl, empty) = match op {
        SendOp::Send {
            sgl,
            solicited,
            invalidate,
        } => (
            sgl,
            SendOp::Send {
                sgl: Sgl::new(),
                solicited,
                invalidate,
            },
        ),
        SendOp::Write { sgl, remote } => (
            sgl,
            SendOp::Write {
                sgl: Sgl::new(),
                remote,
            },
        ),
        _ => return Err(libc::EINVAL),
    };
    let total: u64 = sgl.iter().map(|s| u64::from(s.len)).sum();
    if total > u64::from(max_inline) {
        return Err(libc::EINVAL);
    }
    let mut data = Vec::with_capacity(total as usize);
    for s in &sgl {
        if s.len == 0 {
            continue;
        }
        // SAFETY: an inline SGE names application memory it wants copied now; the caller
        // of `send_wr` guarantees it is readable (rdma-core's contract for IBV_SEND_INLINE).
        let bytes =
            unsafe { std::slice::from_raw_parts(s.to as usize as *const u8, s.len as usize) };
        data.extend_from_slice(bytes);
    }
    Ok(SqOp::Inline { op: empty, data })
}

/// A receive WR.
///
/// # Safety
/// `wr` must be readable with a readable SGE list.
pub unsafe fn recv_wr(wr: &ibv_recv_wr, max_sge: u32) -> Result<RecvWr, i32> {
    if wr.num_sge < 0 || wr.num_sge as u32 > max_sge {
        return Err(libc::EINVAL);
    }
    Ok(RecvWr {
        wr_id: wr.wr_id,
        // SAFETY: by the contract.
        sgl: unsafe { sges(wr.sg_list, wr.num_sge) },
    })
}

/// The completion opcode of a send WR (for a completion the library makes itself).
pub fn send_opcode(op: &SqOp) -> ibv_wc_opcode {
    let msg = match op {
        SqOp::Message(m) | SqOp::Inline { op: m, .. } | SqOp::ReadInvalidate(m) => m,
        SqOp::Bind(_) => return IBV_WC_BIND_MW,
        SqOp::FastRegister(_) | SqOp::LocalInvalidate { .. } => return IBV_WC_LOCAL_INV,
    };
    match msg {
        SendOp::Send { .. } | SendOp::Immediate { .. } => IBV_WC_SEND,
        SendOp::Write { .. } => IBV_WC_RDMA_WRITE,
        SendOp::Read { .. } => IBV_WC_RDMA_READ,
        SendOp::Atomic {
            op: AtomicOp::FetchAdd,
            ..
        } => IBV_WC_FETCH_ADD,
        SendOp::Atomic { .. } => IBV_WC_COMP_SWAP,
    }
}

/// The errno a failed verb reports.
pub fn errno_of(e: VerbError) -> i32 {
    use VerbError as E;
    match e {
        E::InsufficientResources => libc::ENOMEM,
        E::PdInUse | E::CqInUse | E::SrqHasQps | E::RnicInUse => libc::EBUSY,
        E::StillFlushing => libc::EAGAIN,
        _ => libc::EINVAL,
    }
}

/// The completion status rdma-core applications know.
pub fn status(s: CompletionStatus) -> ibv_wc_status {
    use CompletionStatus as C;
    match s {
        C::Success => IBV_WC_SUCCESS,
        C::Flushed => IBV_WC_WR_FLUSH_ERR,
        C::InvalidWqe => IBV_WC_LOC_QP_OP_ERR,
        C::LocalQpCatastrophic => IBV_WC_FATAL_ERR,
        C::RemoteTermination => IBV_WC_REM_ABORT_ERR,
        C::InvalidStag
        | C::BaseBoundsViolation
        | C::AccessViolation
        | C::InvalidPdId
        | C::WrapError => IBV_WC_LOC_PROT_ERR,
        C::InvalidLength => IBV_WC_LOC_LEN_ERR,
        _ => IBV_WC_GENERAL_ERR,
    }
}

/// A completion as `ibv_poll_cq` reports it.
pub fn completion(wc: &WorkCompletion) -> Wc {
    use WcOpcode as O;
    let opcode = match wc.opcode {
        O::Send | O::SendSe | O::SendInv | O::SendSeInv => IBV_WC_SEND,
        O::RdmaWrite => IBV_WC_RDMA_WRITE,
        O::RdmaRead | O::RdmaReadInvalidate => IBV_WC_RDMA_READ,
        O::FetchAdd => IBV_WC_FETCH_ADD,
        O::CmpSwap | O::Swap => IBV_WC_COMP_SWAP,
        O::Bind => IBV_WC_BIND_MW,
        O::LocalInvalidate | O::FastRegister => IBV_WC_LOCAL_INV,
        O::Receive | O::ImmediateData => IBV_WC_RECV,
    };
    let (wc_flags, ex) = match (wc.invalidated, wc.immediate) {
        (Some(stag), _) => (IBV_WC_WITH_INV, stag.0),
        (None, Some(imm)) => (
            IBV_WC_WITH_IMM,
            u32::from_ne_bytes([imm[0], imm[1], imm[2], imm[3]]),
        ),
        _ => (0, 0),
    };
    Wc {
        wr_id: wc.wr_id,
        status: status(wc.status),
        opcode,
        byte_len: wc.byte_len,
        ex,
        qp_num: wc.qp.0,
        wc_flags,
        solicited: wc.solicited,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iwarp::verbs::QpId;

    #[test]
    fn rdma_write_and_read_map_to_the_verbs_ops() {
        let sge = ibv_sge {
            addr: 0x1000,
            length: 64,
            lkey: 7,
        };
        let mut wr = ibv_send_wr {
            wr_id: 42,
            sg_list: &sge as *const ibv_sge as *mut ibv_sge,
            num_sge: 1,
            opcode: IBV_WR_RDMA_WRITE,
            send_flags: IBV_SEND_SIGNALED,
            ..Default::default()
        };
        wr.wr.rdma.remote_addr = 0x2000;
        wr.wr.rdma.rkey = 9;
        // SAFETY: `wr` and `sge` are live locals.
        let w = unsafe { send_wr(&wr, false, 4, 64) }.unwrap();
        assert!(w.signaled);
        match w.op {
            SqOp::Message(SendOp::Write { sgl, remote }) => {
                assert_eq!(
                    sgl,
                    vec![Sge {
                        stag: STag(7),
                        to: 0x1000,
                        len: 64
                    }]
                );
                assert_eq!(
                    remote,
                    RemoteBuf {
                        stag: STag(9),
                        to: 0x2000
                    }
                );
            }
            o => panic!("{o:?}"),
        }
        wr.opcode = IBV_WR_RDMA_READ;
        wr.send_flags = 0;
        // SAFETY: as above.
        let r = unsafe { send_wr(&wr, true, 4, 64) }.unwrap();
        assert!(r.signaled, "sq_sig_all");
        assert!(matches!(r.op, SqOp::Message(SendOp::Read { len: 64, .. })));
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        // SAFETY: as above.
        let e = unsafe { send_wr(&wr, false, 4, 64) };
        assert_eq!(e.unwrap_err(), libc::EINVAL);
        wr.num_sge = 5;
        wr.opcode = IBV_WR_SEND;
        // SAFETY: as above (num_sge is refused before the list is read).
        let e = unsafe { send_wr(&wr, false, 4, 64) };
        assert_eq!(e.unwrap_err(), libc::EINVAL);
    }

    #[test]
    fn inline_sends_copy_the_payload_at_post_time() {
        let payload = *b"inline!";
        let sge = ibv_sge {
            addr: payload.as_ptr() as u64,
            length: payload.len() as u32,
            lkey: 0,
        };
        let wr = ibv_send_wr {
            sg_list: &sge as *const ibv_sge as *mut ibv_sge,
            num_sge: 1,
            opcode: IBV_WR_SEND,
            send_flags: IBV_SEND_INLINE,
            ..Default::default()
        };
        // SAFETY: `wr`, `sge` and `payload` are live locals.
        match unsafe { send_wr(&wr, false, 4, 64) }.unwrap().op {
            SqOp::Inline { data, .. } => assert_eq!(data, payload),
            o => panic!("{o:?}"),
        }
        // SAFETY: as above.
        let e = unsafe { send_wr(&wr, false, 4, 4) };
        assert_eq!(e.unwrap_err(), libc::EINVAL);
    }

    #[test]
    fn completions_carry_opcode_status_and_length() {
        let mut wc = WorkCompletion::new(QpId(5), 3, WcOpcode::Receive, CompletionStatus::Flushed);
        wc.byte_len = 16;
        let c = completion(&wc).to_c();
        assert_eq!(
            (c.wr_id, c.status, c.opcode, c.byte_len, c.qp_num),
            (3, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 16, 5)
        );
    }
}
