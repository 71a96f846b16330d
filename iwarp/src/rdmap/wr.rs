//! Work requests the ULP (verbs layer) posts to an RDMAP stream.

use crate::mem::{Resolved, STag, Sge, Sgl};
use crate::wire::atomic::AtomicOp;

/// A remote tagged buffer: STag and TO advertised by the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteBuf {
    /// Remote STag.
    pub stag: STag,
    /// Remote tagged offset.
    pub to: u64,
}

/// The operation of a send-queue work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOp {
    /// Send family (RFC 5040 §5.3): `invalidate` selects the with-Invalidate variants,
    /// `solicited` the with-SE variants.
    Send {
        /// Gather list.
        sgl: Sgl,
        /// Solicited Event.
        solicited: bool,
        /// STag to invalidate at the peer.
        invalidate: Option<STag>,
    },
    /// RDMA Write (RFC 5040 §5.1).
    Write {
        /// Gather list.
        sgl: Sgl,
        /// Sink buffer at the peer.
        remote: RemoteBuf,
    },
    /// RDMA Read (RFC 5040 §5.2): `len` octets from `remote` into the local `sink`
    /// (a tagged buffer with remote-write rights, the Read Response's target).
    Read {
        /// Local sink STag and TO.
        sink: RemoteBuf,
        /// Source at the peer.
        remote: RemoteBuf,
        /// Octets to read.
        len: u32,
    },
    /// Immediate Data (EXT-01 §6): 8 octets delivered in the peer's receive completion.
    Immediate {
        /// The data.
        data: [u8; 8],
        /// Immediate Data with Solicited Event.
        solicited: bool,
    },
    /// Atomic operation (EXT-01 §5) on the 8 octets at `remote`; the original value is
    /// written (host byte order) to `result` and reported in the completion.
    Atomic {
        /// FetchAdd, Swap or CmpSwap.
        op: AtomicOp,
        /// Target at the peer (8-octet aligned).
        remote: RemoteBuf,
        /// Add Data or Swap Data.
        add_swap: u64,
        /// Add Mask or Swap Mask.
        add_swap_mask: u64,
        /// Compare Data (CmpSwap).
        compare: u64,
        /// Compare Mask (CmpSwap).
        compare_mask: u64,
        /// Local 8-octet buffer for the original value.
        result: Sge,
    },
}

impl SendOp {
    /// This operation with its gather list moved out (an empty list is left behind), for
    /// handing it on from a layer that afterwards needs only the operation's kind. An
    /// operation without a gather list is copied (no allocation either way).
    pub fn hand_over(&mut self) -> SendOp {
        match self {
            SendOp::Send {
                sgl,
                solicited,
                invalidate,
            } => SendOp::Send {
                sgl: core::mem::take(sgl),
                solicited: *solicited,
                invalidate: *invalidate,
            },
            SendOp::Write { sgl, remote } => SendOp::Write {
                sgl: core::mem::take(sgl),
                remote: *remote,
            },
            other => other.clone(),
        }
    }
}

/// A send-queue work request carrying the operation `Op`: the engine's [`SendOp`], or
/// the verbs layer's own operations (`verbs::SendWr`). The ID and the flags come first
/// (`repr(C)`): an engine's completion reads them, and the operation's kind, from the
/// first line of its send-queue entry.
#[derive(Debug, Clone, PartialEq, Eq)]
#[repr(C)]
pub struct SendWr<Op = SendOp> {
    /// Consumer's id, echoed in the completion.
    pub wr_id: u64,
    /// Produce a completion on success (errors always complete, VERBS-00 §8.1.3.1).
    pub signaled: bool,
    /// Read fence: start only when every earlier Read / Atomic has completed (the verbs
    /// layer takes it on Send-type and Write WRs only, VERBS-00 §8.2.2.2).
    pub read_fence: bool,
    /// Local fence: start only when every earlier WR has completed (the verbs layer takes
    /// it on Invalidate Local STag only, VERBS-00 §8.2.2.2).
    pub local_fence: bool,
    /// The operation.
    pub op: Op,
}

/// A one-SGE source SGL checked for local read (VERBS-00 §8.1.3.2) at a memory table's
/// generation ([`crate::mem::MemoryTable::table_generation`]), handed to the engine with
/// its WR ([`crate::verbs::Rnic::next_checked_send_wr`],
/// [`super::Engine::post_checked_send`]): the engine takes it instead of checking the SGE
/// again while the generation is the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckedSource {
    /// The table's generation at the check.
    pub generation: u64,
    /// What the check found.
    pub piece: Resolved,
    /// The backend address of the range's first octet when it is one backend range (a
    /// [`crate::mem::ReadGrant`] at `generation` for the message's reads); `None`: the
    /// reads take the checked path.
    pub start: Option<u64>,
}

impl<Op> SendWr<Op> {
    /// A signaled, unfenced work request.
    pub fn new(wr_id: u64, op: Op) -> Self {
        SendWr {
            wr_id,
            op,
            signaled: true,
            read_fence: false,
            local_fence: false,
        }
    }

    /// Marks the work request unsignaled.
    pub fn unsignaled(mut self) -> Self {
        self.signaled = false;
        self
    }
}
