//! Tagged buffer model receive side: validation (RFC 5041 §7.1 checks, §8.1–§8.2) and
//! placement through the memory table.

use super::error::DdpError;
use crate::mem::{Access, MemoryTable, PdId, STag, StreamId};
use crate::wire::ddp::TaggedRepr;

/// Validates a tagged segment and places its payload. A zero-length segment is accepted
/// without looking at STag or TO and without touching memory (RFC 5041 §5.2).
/// Nothing is written unless the whole payload range is valid (RFC 5041 §8.1).
pub fn place<M: MemoryTable + ?Sized>(
    mem: &mut M,
    pd: PdId,
    stream: StreamId,
    hdr: &TaggedRepr,
    payload: &[u8],
    need: Access,
) -> Result<(), DdpError> {
    if payload.is_empty() {
        return Ok(());
    }
    mem.place(STag(hdr.stag), pd, stream, hdr.to, payload, need)
        .map_err(DdpError::Tagged)
}
