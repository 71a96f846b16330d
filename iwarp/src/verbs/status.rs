//! Result types of the verbs: Immediate status codes (VERBS-00 §9.5.1, Figs. 28–35) and
//! Completion status codes (VERBS-00 §9.5.2, Fig. 36).

/// An Immediate Error returned by a verb (VERBS-00 §8.3.1, §9.5.1). The object the verb was
/// about is left unchanged (except for RI-Reregister, §7.3.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum VerbError {
    /// Insufficient resources to complete request.
    #[error("insufficient resources to complete request")]
    InsufficientResources,
    /// Invalid Modifier: one of the parameters was invalid or not allowed here.
    #[error("invalid modifier")]
    InvalidModifier,
    /// Block List mode was requested but is not supported.
    #[error("block list mode not supported")]
    BlockModeUnsupported,
    /// The RNIC was already open.
    #[error("RNIC in use")]
    RnicInUse,
    /// Invalid RNIC handle (the RNIC was closed).
    #[error("invalid RNIC handle")]
    InvalidRnicHandle,
    /// Invalid PD ID.
    #[error("invalid PD ID")]
    InvalidPdId,
    /// Protection Domain is in use by a QP, S-RQ, MR or MW.
    #[error("protection domain is in use")]
    PdInUse,
    /// Number of CQEs requested exceeds RNIC capability.
    #[error("number of CQEs requested exceeds RNIC capability")]
    CqeExceedsCapability,
    /// Invalid CQ handle.
    #[error("invalid CQ handle")]
    InvalidCqHandle,
    /// One or more work queues are still tied to the CQ.
    #[error("CQ in use")]
    CqInUse,
    /// There were no Work Completions available to be retrieved.
    #[error("CQ empty")]
    CqEmpty,
    /// Invalid Completion Event Handler Identifier.
    #[error("invalid completion event handler identifier")]
    InvalidCompletionHandlerId,
    /// An attempt to shrink a queue failed because too many elements were still present.
    #[error("queue cannot shrink below its current occupancy")]
    ShrinkBelowOccupancy,
    /// Maximum number of Work Requests requested exceeds RNIC capability.
    #[error("maximum number of work requests exceeds RNIC capability")]
    WrsExceedCapability,
    /// Maximum number of scatter/gather elements requested exceeds RNIC capability.
    #[error("maximum number of SGEs exceeds RNIC capability")]
    SgesExceedCapability,
    /// S-RQ Limit out of range.
    #[error("S-RQ limit out of range")]
    SrqLimitOutOfRange,
    /// Invalid S-RQ handle.
    #[error("invalid S-RQ handle")]
    InvalidSrqHandle,
    /// QPs are still associated with the S-RQ.
    #[error("QPs still associated with the S-RQ")]
    SrqHasQps,
    /// Value requested for ORD exceeds RNIC capability.
    #[error("ORD exceeds RNIC capability")]
    OrdExceedsCapability,
    /// Value requested for IRD exceeds RNIC capability.
    #[error("IRD exceeds RNIC capability")]
    IrdExceedsCapability,
    /// Invalid QP handle.
    #[error("invalid QP handle")]
    InvalidQpHandle,
    /// The RI does not allow the attribute to be modified.
    #[error("cannot change QP attribute")]
    CannotChangeAttribute,
    /// Invalid state: the requested QP state transition is not legal.
    #[error("invalid QP state transition")]
    InvalidStateChange,
    /// Invalid LLP Stream handle (missing, or the stream is not Established).
    #[error("invalid LLP stream handle")]
    InvalidLlpStreamHandle,
    /// The QP is in Error and the RI is still flushing WQEs.
    #[error("RI still flushing WQEs")]
    StillFlushing,
    /// QP RQ Limit out of range.
    #[error("QP RQ limit out of range")]
    RqLimitOutOfRange,
    /// Memory Windows are still bound to the QP.
    #[error("memory windows still bound to QP")]
    WindowsBoundToQp,
    /// Invalid Virtual Address: an invalid memory address or offset was specified.
    #[error("invalid virtual address")]
    InvalidVirtualAddress,
    /// Invalid Length: too many pages or the MR length was too long.
    #[error("invalid length")]
    InvalidLength,
    /// Invalid Access Rights requested.
    #[error("invalid access rights requested")]
    InvalidAccessRights,
    /// Invalid Physical Buffer List entry.
    #[error("invalid physical buffer list entry")]
    InvalidPblEntry,
    /// Invalid Physical Buffer size: the page/block size is not supported.
    #[error("invalid physical buffer size")]
    InvalidPhysicalBufferSize,
    /// Invalid STag Index.
    #[error("invalid STag index")]
    InvalidStagIndex,
    /// Invalid FBO: the FBO is larger than the physical buffer size.
    #[error("invalid FBO")]
    InvalidFbo,
    /// One or more Memory Windows is still bound to the region.
    #[error("one or more memory windows is still bound to the region")]
    WindowsBoundToRegion,
    /// Too many Work Requests posted (the work queue is full).
    #[error("too many work requests posted")]
    TooManyWorkRequests,
    /// Invalid Operation type.
    #[error("invalid operation type")]
    InvalidOperationType,
    /// Invalid QP state for posting.
    #[error("invalid QP state")]
    InvalidQpState,
    /// Invalid Scatter/Gather list format.
    #[error("invalid scatter/gather list format")]
    InvalidSglFormat,
    /// The WR has more SGEs than the QP supports.
    #[error("invalid scatter/gather list length")]
    InvalidSglLength,
    /// The QP uses an S-RQ; receives must be posted to the S-RQ.
    #[error("RQ associated with S-RQ")]
    RqAssociatedWithSrq,
    /// Invalid Notify Type.
    #[error("invalid notify type")]
    InvalidNotifyType,
}

/// Completion Status of a Work Completion (VERBS-00 §9.5.2, Fig. 36).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompletionStatus {
    /// The operation was successful.
    Success,
    /// The WR was incomplete when the QP entered the Error state.
    Flushed,
    /// The WQE contained a format error.
    InvalidWqe,
    /// An error related to the QP occurred while processing the WR.
    LocalQpCatastrophic,
    /// A Terminate message related to this WR was received (read it via Query QP).
    RemoteTermination,
    /// Invalid STag in the local SGL (unknown, Invalid, STag 0 without privilege, Shared MR
    /// where not allowed, or a type of STag not allowed for the operation).
    InvalidStag,
    /// Base & Bounds violation (for a Bind: the MW is not wholly inside the MR).
    BaseBoundsViolation,
    /// Access violation (for a Bind: MW rights not compatible with the MR rights).
    AccessViolation,
    /// PD of the STag differs from the QP's, or an MW is bound to another QP.
    InvalidPdId,
    /// TO/MO plus length wraps.
    WrapError,
    /// Receive: the STag to invalidate had an invalid PD/QP or no remote rights.
    InvalidateStagMismatch,
    /// RDMA Read on a QP whose ORD is 0.
    ZeroReadResources,
    /// Fast-Register on a QP without Fast-Register enabled.
    QpNotPrivileged,
    /// Bind or Fast-Register of an STag that is not in the Invalid state.
    StagNotInvalid,
    /// Fast-Register: page size not supported.
    InvalidPageSize,
    /// Fast-Register: physical buffer size not supported.
    InvalidPhysicalBufferSize,
    /// Fast-Register: a PBL entry is not page aligned.
    InvalidPblEntry,
    /// Fast-Register: FBO larger than the physical buffer size.
    InvalidFbo,
    /// Fast-Register: length larger than the buffer list covers.
    InvalidFastRegLength,
    /// Fast-Register: invalid access rights.
    InvalidAccessRights,
    /// Fast-Register: PBL longer than allocated.
    PblTooLong,
    /// Fast-Register: VA and FBO are not consistent.
    InvalidVirtualAddress,
    /// Bind: the MR STag is invalid.
    InvalidRegion,
    /// Bind: the MW STag is invalid.
    InvalidWindow,
    /// The SGL total is larger than supported.
    InvalidLength,
}

impl CompletionStatus {
    /// True for [`CompletionStatus::Success`].
    pub fn is_success(self) -> bool {
        self == CompletionStatus::Success
    }

    /// True for an error status: neither Success nor Flushed.
    pub fn is_error(self) -> bool {
        !self.is_success() && self != CompletionStatus::Flushed
    }
}

impl std::fmt::Display for CompletionStatus {
    /// The status's short name (VERBS-00 §9.5.2, Fig. 36).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CompletionStatus::Success => "success",
            CompletionStatus::Flushed => "flushed",
            CompletionStatus::InvalidWqe => "invalid WQE",
            CompletionStatus::LocalQpCatastrophic => "local QP catastrophic error",
            CompletionStatus::RemoteTermination => "remote termination error",
            CompletionStatus::InvalidStag => "invalid STag",
            CompletionStatus::BaseBoundsViolation => "base and bounds violation",
            CompletionStatus::AccessViolation => "access violation",
            CompletionStatus::InvalidPdId => "invalid PD ID",
            CompletionStatus::WrapError => "wrap error",
            CompletionStatus::InvalidateStagMismatch => "invalidate STag mismatch",
            CompletionStatus::ZeroReadResources => "zero ORD",
            CompletionStatus::QpNotPrivileged => "QP not privileged",
            CompletionStatus::StagNotInvalid => "STag not in the invalid state",
            CompletionStatus::InvalidPageSize => "invalid page size",
            CompletionStatus::InvalidPhysicalBufferSize => "invalid physical buffer size",
            CompletionStatus::InvalidPblEntry => "invalid physical buffer list entry",
            CompletionStatus::InvalidFbo => "invalid FBO",
            CompletionStatus::InvalidFastRegLength => "invalid fast-register length",
            CompletionStatus::InvalidAccessRights => "invalid access rights",
            CompletionStatus::PblTooLong => "physical buffer list too long",
            CompletionStatus::InvalidVirtualAddress => "invalid virtual address",
            CompletionStatus::InvalidRegion => "invalid region",
            CompletionStatus::InvalidWindow => "invalid window",
            CompletionStatus::InvalidLength => "invalid length",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_for_messages() {
        assert_eq!(CompletionStatus::Flushed.to_string(), "flushed");
        assert_eq!(
            CompletionStatus::RemoteTermination.to_string(),
            "remote termination error"
        );
        assert_eq!(VerbError::InvalidQpState.to_string(), "invalid QP state");
    }
}
