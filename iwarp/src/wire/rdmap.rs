//! Wire format: rdmap.
