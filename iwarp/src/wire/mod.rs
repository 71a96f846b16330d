//! Zero-copy wire views and `Repr` types for every iWARP header.

pub mod atomic;
mod be;
pub mod crc;
pub mod crcsum;
pub mod ddp;
pub mod mpa;
pub mod rdmap;
pub mod terminate;
