//! DDP-layer errors (RFC 5041 §7.2) and their Terminate causes.

use thiserror::Error;

use crate::mem::AccessError;
use crate::wire::terminate::TerminateCause;

/// An error detected while validating or placing a received DDP segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DdpError {
    /// Local catastrophic error (1/0/00).
    #[error("DDP local catastrophic error")]
    LocalCatastrophic,
    /// Tagged segment with DV ≠ 01b (1/1/04).
    #[error("invalid DDP version on a tagged segment")]
    TaggedVersion,
    /// Tagged buffer error from the memory table (1/1/00..03).
    #[error("tagged buffer error: {0}")]
    Tagged(AccessError),
    /// Untagged segment with DV ≠ 01b (1/2/06).
    #[error("invalid DDP version on an untagged segment")]
    UntaggedVersion,
    /// QN not defined for this stream (1/2/01).
    #[error("invalid QN")]
    InvalidQn,
    /// No buffer for the (QN, MSN) (1/2/02).
    #[error("no buffer available for the MSN")]
    NoBuffer,
    /// MSN outside the legal window (1/2/03).
    #[error("MSN out of range")]
    MsnRange,
    /// MO outside the buffer (1/2/04).
    #[error("invalid MO")]
    InvalidMo,
    /// MO + length beyond the buffer (1/2/05).
    #[error("message too long for the buffer")]
    TooLong,
}

impl DdpError {
    /// The Terminate layer/type/code for this error (RFC 5040 Fig. 9, RFC 5041 §7.2).
    pub fn cause(self) -> TerminateCause {
        match self {
            DdpError::LocalCatastrophic => TerminateCause::DDP_LOCAL_CATASTROPHIC,
            DdpError::TaggedVersion => TerminateCause::DDP_TAGGED_INVALID_VERSION,
            DdpError::Tagged(e) => e.ddp_cause(),
            DdpError::UntaggedVersion => TerminateCause::DDP_UNTAGGED_INVALID_VERSION,
            DdpError::InvalidQn => TerminateCause::DDP_INVALID_QN,
            DdpError::NoBuffer => TerminateCause::DDP_NO_BUFFER,
            DdpError::MsnRange => TerminateCause::DDP_MSN_RANGE,
            DdpError::InvalidMo => TerminateCause::DDP_INVALID_MO,
            DdpError::TooLong => TerminateCause::DDP_MESSAGE_TOO_LONG,
        }
    }
}
