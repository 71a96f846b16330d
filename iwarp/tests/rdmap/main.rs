//! The DDP/RDMAP engine (RFC 5040, RFC 5041, RFC 7306): DDP framing and receive checks,
//! RDMAP semantics, atomics, Terminate, security, siw interoperability and engines back
//! to back, directly or over MPA.

mod common;

mod atomic;
mod ddp_framing;
mod ddp_receive;
mod ddp_siw_interop;
mod engine_backtoback;
mod engine_fuzz;
mod engine_mpa;
mod fast_write;
mod security;
mod semantics;
mod terminate;
