//! Work Completions (VERBS-00 §8.2.3, §9.3.2.1).

use super::handle::QpId;
use super::status::CompletionStatus;
use crate::mem::STag;

/// Operation type of a Work Completion (VERBS-00 §9.3.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// Send.
    Send,
    /// Send with Solicited Event.
    SendSe,
    /// Send with Invalidate.
    SendInv,
    /// Send with Solicited Event and Invalidate.
    SendSeInv,
    /// RDMA Write.
    RdmaWrite,
    /// RDMA Read.
    RdmaRead,
    /// RDMA Read with Invalidate Local STag.
    RdmaReadInvalidate,
    /// Immediate Data (RFC 7306 §6).
    ImmediateData,
    /// Atomic Fetch and Add (RFC 7306 §5).
    FetchAdd,
    /// Atomic Compare and Swap (RFC 7306 §5).
    CmpSwap,
    /// Atomic Swap (draft EXT-01 only, digest D3).
    Swap,
    /// Bind Memory Window.
    Bind,
    /// Fast-Register Non-Shared MR.
    FastRegister,
    /// Invalidate Local STag.
    LocalInvalidate,
    /// Receive.
    Receive,
}

impl std::fmt::Display for WcOpcode {
    /// The operation's short name.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WcOpcode::Send => "send",
            WcOpcode::SendSe => "send with solicited event",
            WcOpcode::SendInv => "send with invalidate",
            WcOpcode::SendSeInv => "send with solicited event and invalidate",
            WcOpcode::RdmaWrite => "RDMA write",
            WcOpcode::RdmaRead => "RDMA read",
            WcOpcode::RdmaReadInvalidate => "RDMA read with invalidate local STag",
            WcOpcode::ImmediateData => "immediate data",
            WcOpcode::FetchAdd => "fetch and add",
            WcOpcode::CmpSwap => "compare and swap",
            WcOpcode::Swap => "swap",
            WcOpcode::Bind => "bind memory window",
            WcOpcode::FastRegister => "fast-register",
            WcOpcode::LocalInvalidate => "invalidate local STag",
            WcOpcode::Receive => "receive",
        })
    }
}

/// One Work Completion as returned by Poll CQ. On a non-success status only `wr_id`,
/// `status` and `qp` are meaningful (VERBS-00 §9.3.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The consumer's 64-bit WR ID.
    pub wr_id: u64,
    /// Operation type.
    pub opcode: WcOpcode,
    /// Completion status.
    pub status: CompletionStatus,
    /// Bytes transferred (Receive only).
    pub byte_len: u32,
    /// The STag an incoming Send with Invalidate invalidated (Receive only).
    pub invalidated: Option<STag>,
    /// The incoming message carried a Solicited Event (Receive only).
    pub solicited: bool,
    /// Immediate data carried by an incoming Immediate Data message (Receive only).
    pub immediate: Option<[u8; 8]>,
    /// Original remote value of an atomic operation.
    pub atomic_original: Option<u64>,
    /// The QP this completion belongs to.
    pub qp: QpId,
}

impl WorkCompletion {
    /// A completion with only the fields valid for every status.
    pub fn new(qp: QpId, wr_id: u64, opcode: WcOpcode, status: CompletionStatus) -> Self {
        WorkCompletion {
            wr_id,
            opcode,
            status,
            byte_len: 0,
            invalidated: None,
            solicited: false,
            immediate: None,
            atomic_original: None,
            qp,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcode_names_for_messages() {
        assert_eq!(WcOpcode::RdmaRead.to_string(), "RDMA read");
        assert_eq!(WcOpcode::Receive.to_string(), "receive");
    }
}
