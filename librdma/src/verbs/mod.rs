//! libibverbs: devices, contexts, protection domains, memory regions, completion channels
//! and queues, queue pairs, shared receive queues, async events.

pub mod cq;
pub mod device;
pub mod events;
pub mod memory;
pub mod objects;
pub mod qp;
pub mod srq;
