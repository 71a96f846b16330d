//! Wire formats: encode → parse round trips and malformed-input handling of the MPA,
//! DDP, RDMAP, Terminate and atomic headers.

mod ddp;
mod mpa;
