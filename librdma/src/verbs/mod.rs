//! libibverbs: devices, contexts, protection domains, memory regions, completion channels
//! and queues, queue pairs, shared receive queues, async events.

pub mod convert;
pub mod objects;
