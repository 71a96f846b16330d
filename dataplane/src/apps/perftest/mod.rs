//! perftest's `-R` (rdma_cm) protocol, wire-compatible with linux-rdma perftest 4.5
//! (`ib_{write,read,send}_bw`, `ib_{write,read,send}_lat`), both roles: a control
//! connection carrying Send/Recv records ([`wire`]), then a data connection for the test
//! traffic ([`session`]).

pub mod session;
pub mod wire;

pub use session::{Channel, PerftestError, PerftestParams, PerftestSession, Test};
