//! DDP (RFC 5041): segmentation, tagged and untagged placement, in-order delivery.

pub mod delivery;
pub mod error;
pub mod segmenter;
pub mod tagged;
pub mod untagged;

pub use delivery::{DeliveryOrder, SegmentPos};
pub use error::DdpError;
pub use segmenter::{MsnCounters, OutgoingMessage, SegmentPlan, Segmenter};
