//! The verbs layer (VERBS-00): resources and memory, QP states, work requests and
//! completions, security requirements, the bounded event queues, and verbs over two RDMAP
//! engines.

mod common;

mod engine;
mod limits;
mod memory;
mod memory_model;
mod qp_state;
mod security;
mod work;
