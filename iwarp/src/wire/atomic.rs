//! Wire format: atomic.
