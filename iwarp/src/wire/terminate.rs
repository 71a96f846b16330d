//! Wire format: terminate.
