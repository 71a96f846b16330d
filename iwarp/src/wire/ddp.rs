//! Wire format: ddp.
