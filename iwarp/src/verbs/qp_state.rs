//! The QP state machine (VERBS-00 §6.2, Figs. 6–11) as pure functions: which Modify QP
//! requests are legal, and where the automatic (RI-initiated) transitions lead.

use super::status::VerbError;

/// The five QP states (VERBS-00 §6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Created, not associated with an LLP stream; WRs are queued, not processed.
    Idle,
    /// Ready to Send: WRs are processed and incoming messages placed.
    Rts,
    /// Graceful LLP close in progress.
    Closing,
    /// A Terminate is being sent or was received; the LLP is being closed.
    Terminate,
    /// No LLP stream; WQEs are flushed.
    Error,
}

impl QpState {
    /// All states, for exhaustive tests.
    pub const ALL: [QpState; 5] = [
        QpState::Idle,
        QpState::Rts,
        QpState::Closing,
        QpState::Terminate,
        QpState::Error,
    ];
}

/// Which optional attributes a Modify QP transition may carry (VERBS-00 §6.1.3, Figs. 4
/// and 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllowedAttributes {
    /// ORD may be changed.
    pub ord: bool,
    /// IRD and SQ/RQ depths may be changed.
    pub sizes: bool,
    /// RQ limit and its arming may be changed.
    pub rq_limit: bool,
    /// An LLP stream handle (and stream message buffer) must be supplied.
    pub llp: bool,
}

const NONE: AllowedAttributes = AllowedAttributes {
    ord: false,
    sizes: false,
    rq_limit: false,
    llp: false,
};

/// Checks a Modify QP state change requested by the consumer (VERBS-00 §6.2, Fig. 6) and
/// returns the attributes that transition may carry. `flushing` is true while the RI still
/// has WQEs to flush in Error.
pub fn modify_transition(
    from: QpState,
    to: QpState,
    flushing: bool,
) -> Result<AllowedAttributes, VerbError> {
    use QpState::*;
    match (from, to) {
        // §6.2.1.1 Idle to Idle, §6.2.1.2 Idle to RTS.
        (Idle, Idle) => Ok(AllowedAttributes {
            ord: true,
            sizes: true,
            rq_limit: true,
            llp: false,
        }),
        (Idle, Rts) => Ok(AllowedAttributes {
            ord: true,
            sizes: true,
            rq_limit: true,
            llp: true,
        }),
        // §6.2.1.3 Idle to Error.
        (Idle, Error) => Ok(NONE),
        // §6.2.2.1 RTS to RTS.
        (Rts, Rts) => Ok(AllowedAttributes {
            ord: true,
            sizes: true,
            rq_limit: false,
            llp: false,
        }),
        // §6.2.2.2–§6.2.2.4.
        (Rts, Closing) | (Rts, Terminate) | (Rts, Error) => Ok(NONE),
        // §6.2.4: Error to Idle only once flushing finished.
        (Error, Idle) if flushing => Err(VerbError::StillFlushing),
        (Error, Idle) => Ok(NONE),
        // Everything else, notably Idle→Terminate/Closing (§6.2.1), RTS→Idle (§6.2.2),
        // any Modify in Terminate (§6.2.3) or Closing (§6.2.5), Error→RTS/Terminate/Closing
        // (§6.2.4).
        _ => Err(VerbError::InvalidStateChange),
    }
}
