//! Sans-IO TCP engine built on smoltcp's wire layer.
#![forbid(unsafe_code)]
