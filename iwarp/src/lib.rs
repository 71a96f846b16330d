//! Sans-IO iWARP protocol core: MPA (RFC 5044/6581), DDP (RFC 5041), RDMAP (RFC 5040),
//! RDMAP extensions (RFC 7306) and a verbs interface.
#![deny(unsafe_code)]

pub mod conn;
pub mod ddp;
pub mod mem;
pub mod mpa;
pub mod rdmap;
pub mod verbs;
pub mod wire;
