//! Wire format: mpa.
