//! Work Requests posted by the consumer (VERBS-00 §8.1, §9.3.1, Fig. 27). Message
//! operations are the RDMAP engine's own [`rdmap::SendOp`]; the verbs layer adds the
//! memory operations it executes itself and inline payloads.

use super::memory::{BindSpec, FastRegSpec};
use super::wc::WcOpcode;
use crate::mem::{STag, Sge};
use crate::rdmap;
use crate::wire::atomic::AtomicOp;

/// A Send Queue operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqOp {
    /// A message operation carried out by the RDMAP engine: Send variants, RDMA Write,
    /// RDMA Read, Immediate Data, atomics.
    Message(rdmap::SendOp),
    /// A Send-type or RDMA Write whose payload is copied into the WQE when posted (inline
    /// data). The `op` must be `Send` or `Write` with an empty SGL.
    Inline {
        /// The operation (its SGL is replaced by the inline data).
        op: rdmap::SendOp,
        /// The payload, at most `RnicAttributes::max_inline` octets.
        data: Vec<u8>,
    },
    /// RDMA Read whose local sink STag is invalidated once the response landed (RDMA
    /// Read with Invalidate Local STag, VERBS-00 §8.1.2.2).
    ReadInvalidate(rdmap::SendOp),
    /// Bind Memory Window (VERBS-00 §7.10.2).
    Bind(BindSpec),
    /// Fast-Register Non-Shared MR (VERBS-00 §7.3.2.5).
    FastRegister(FastRegSpec),
    /// Invalidate Local STag (VERBS-00 §7.8).
    LocalInvalidate {
        /// The STag to invalidate.
        stag: STag,
    },
}

/// A Send Queue Work Request: the engine's work request envelope around an [`SqOp`].
pub type SendWr = rdmap::SendWr<SqOp>;

impl SendWr {
    /// A signaled, unfenced message WR.
    pub fn message(wr_id: u64, op: rdmap::SendOp) -> Self {
        Self::new(wr_id, SqOp::Message(op))
    }

    /// The WC opcode this WR completes with.
    pub fn opcode(&self) -> WcOpcode {
        match &self.op {
            SqOp::Message(op) | SqOp::Inline { op, .. } => message_opcode(op),
            SqOp::ReadInvalidate(_) => WcOpcode::RdmaReadInvalidate,
            SqOp::Bind(_) => WcOpcode::Bind,
            SqOp::FastRegister(_) => WcOpcode::FastRegister,
            SqOp::LocalInvalidate { .. } => WcOpcode::LocalInvalidate,
        }
    }

    /// The local SGL the RI gathers from (Send-type and Write), if any.
    pub(super) fn source_sgl(&self) -> Option<&[Sge]> {
        match &self.op {
            SqOp::Message(rdmap::SendOp::Send { sgl, .. })
            | SqOp::Message(rdmap::SendOp::Write { sgl, .. }) => Some(sgl),
            _ => None,
        }
    }

    /// The SGL of an inline Send or Write: once `Rnic::post_sq` posted it, the one SGE
    /// naming the RI's copy of its data.
    pub(super) fn inline_sgl(&self) -> Option<&[Sge]> {
        match &self.op {
            SqOp::Inline {
                op: rdmap::SendOp::Send { sgl, .. } | rdmap::SendOp::Write { sgl, .. },
                ..
            } => Some(sgl),
            _ => None,
        }
    }
}

fn message_opcode(op: &rdmap::SendOp) -> WcOpcode {
    match op {
        rdmap::SendOp::Send {
            solicited,
            invalidate,
            ..
        } => match (solicited, invalidate.is_some()) {
            (false, false) => WcOpcode::Send,
            (true, false) => WcOpcode::SendSe,
            (false, true) => WcOpcode::SendInv,
            (true, true) => WcOpcode::SendSeInv,
        },
        rdmap::SendOp::Write { .. } => WcOpcode::RdmaWrite,
        rdmap::SendOp::Read { .. } => WcOpcode::RdmaRead,
        rdmap::SendOp::Immediate { .. } => WcOpcode::ImmediateData,
        rdmap::SendOp::Atomic {
            op: AtomicOp::CmpSwap,
            ..
        } => WcOpcode::CmpSwap,
        rdmap::SendOp::Atomic {
            op: AtomicOp::Swap, ..
        } => WcOpcode::Swap,
        rdmap::SendOp::Atomic { .. } => WcOpcode::FetchAdd,
    }
}

/// A Receive Work Request (VERBS-00 §8.1.2.1): the engine's receive buffer type.
pub type RecvWr = rdmap::RecvWr;
