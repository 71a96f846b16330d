//! The data plane: ports, the poll loop, TCP and iWARP wired together.

pub mod port;
