//! `libibverbs.so.1` and `librdmacm.so.1` for unmodified rdma-core applications.
//!
//! This crate is a C ABI boundary, like `ffi/`: applications hand it raw pointers to their
//! own structs and memory, so `unsafe` is allowed here, and every block says why it is sound.

#![allow(unsafe_code)]
// The exported functions' safety contract is rdma-core's C API (valid objects this library
// returned, buffers of the documented sizes); it is stated once here rather than on each.
#![allow(clippy::missing_safety_doc)]

pub mod abi;
pub mod appmem;
pub mod backoff;
pub mod bridge;
pub mod cm;
pub mod convert;
pub mod core;
pub mod device;
pub mod entry;
pub mod fixed;
pub mod marshall;
pub mod runtime;
pub mod shared;
pub mod strings;
pub mod symver;
pub mod sysfs;
pub mod unsupported;
pub mod verbs;
