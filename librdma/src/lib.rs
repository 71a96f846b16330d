//! `libibverbs.so.1` and `librdmacm.so.1` for unmodified rdma-core applications.
//!
//! This crate is a C ABI boundary, like `ffi/`: applications hand it raw pointers to their
//! own structs and memory, so `unsafe` is allowed here, and every block says why it is sound.

#![allow(unsafe_code)]

pub mod abi;
pub mod appmem;
pub mod entry;
pub mod fixed;
pub mod marshall;
pub mod strings;
pub mod symver;
pub mod sysfs;
pub mod unsupported;
