//! Asynchronous events (VERBS-00 §8.3.3, §9.4.2, §9.5.3 Fig. 37).
//!
//! Events are queued on the RNIC and retrieved with
//! [`Rnic::poll_async_event`](super::Rnic::poll_async_event); this replaces the draft's
//! single asynchronous event handler in a sans-IO design. Events raised while no consumer
//! polls are kept up to [`RnicAttributes::max_async_events`](super::RnicAttributes), then
//! lost and counted ([`Rnic::event_queue_stats`](super::Rnic::event_queue_stats)).

use super::handle::{CqHandle, QpId, SrqHandle};

/// The resource an asynchronous event is about (the draft's Resource Indicator).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventResource {
    /// An affiliated event of a QP.
    Qp(QpId),
    /// An unaffiliated event of a CQ.
    Cq(CqHandle),
    /// An event of an S-RQ.
    Srq(SrqHandle),
    /// An event of the RNIC itself.
    Rnic,
}

/// Asynchronous Event Identifiers (Fig. 37, plus "Error State Entered", digest ⚑D18).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncEventKind {
    /// The stream completed Closing and the QP reached Idle (digest ⚑D17).
    LlpCloseComplete,
    /// A Terminate message was received.
    TerminateMessageReceived,
    /// An incoming LLP Reset (TCP RST) was received.
    LlpConnectionReset,
    /// The LLP connection was lost (timeouts, retries).
    LlpConnectionLost,
    /// LLP integrity error: segment size invalid.
    LlpSegmentSizeInvalid,
    /// LLP integrity error: invalid CRC.
    LlpInvalidCrc,
    /// LLP integrity error: MPA marker and length disagree.
    LlpBadFpdu,
    /// Remote operation error: invalid DDP version.
    InvalidDdpVersion,
    /// Remote operation error: invalid RDMA version.
    InvalidRdmaVersion,
    /// Remote operation error: unexpected opcode.
    UnexpectedOpcode,
    /// Remote operation error: invalid DDP queue number.
    InvalidDdpQueueNumber,
    /// Remote operation error: RDMA Read Request while inbound Read is disabled.
    ReadNotEnabled,
    /// Remote operation error: RDMA Write / Read Response while inbound Write is disabled.
    WriteNotEnabled,
    /// Remote operation error: Read Request too small or MO non-zero.
    InvalidReadRequest,
    /// Remote operation error: no L bit when expected.
    NoLastBit,
    /// Protection error: invalid STag (incl. STag 0, STag not associated, Invalid state).
    InvalidStag,
    /// Protection error: tagged base and bounds violation.
    BaseBoundsViolation,
    /// Protection error: tagged access rights violation.
    AccessRightsViolation,
    /// Protection error: tagged invalid PD (or MW bound to another QP).
    InvalidPd,
    /// Protection error: wrap.
    WrapError,
    /// A segment arrived while the QP was Closing.
    BadClose,
    /// The stream was closed with work in progress.
    BadLlpClose,
    /// RQ protection error: MSN range not valid (possibly RQ empty).
    RqInvalidMsnRange,
    /// RQ protection error: gap in MSN.
    RqMsnGap,
    /// IRRQ protection error: too many Read Requests in progress.
    IrrqTooManyReads,
    /// IRRQ protection error: gap in MSN.
    IrrqMsnGap,
    /// IRRQ protection error: MSN range not valid.
    IrrqMsnRange,
    /// IRRQ protection error: Data Source STag invalid.
    IrrqInvalidStag,
    /// IRRQ protection error: base and bounds.
    IrrqBaseBounds,
    /// IRRQ protection error: access rights.
    IrrqAccessRights,
    /// IRRQ protection error: invalid PD.
    IrrqInvalidPd,
    /// IRRQ protection error: wrap.
    IrrqWrap,
    /// CQ/SQ error: the CQ overflowed during an SQ completion.
    CqSqError,
    /// CQ/RQ error: the CQ overflowed or failed during an RQ completion.
    CqRqError,
    /// An error occurred while pulling a WQE from the QP's S-RQ.
    SrqErrorOnQp,
    /// Local QP catastrophic error.
    LocalQpCatastrophic,
    /// The QP entered the Error state (used by §6.2.3/§6.6.2.2, digest ⚑D18).
    ErrorStateEntered,
    /// CQ overflow detected (unaffiliated).
    CqOverflow,
    /// CQ operation error (unaffiliated).
    CqOperationError,
    /// The S-RQ limit was reached.
    SrqLimitReached,
    /// The QP's RQ limit was reached.
    QpRqLimitReached,
    /// S-RQ catastrophic failure.
    SrqCatastrophic,
    /// RNIC catastrophic failure.
    RnicCatastrophic,
}

/// One asynchronous event record: resource and event identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AsyncEvent {
    /// Resource the event is about.
    pub resource: EventResource,
    /// Event identifier.
    pub kind: AsyncEventKind,
}
