//! librdmacm: event channels, ids, address and route resolution, listening, connecting,
//! accepting and rejecting, disconnecting, QPs on ids, and the synchronous endpoint calls,
//! over the data plane's connection manager (MPA over its TCP engine).

pub mod addr;
pub mod connect;
pub mod endpoint;
pub mod events;
pub mod id;
pub mod objects;
pub mod qp;
