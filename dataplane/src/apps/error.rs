//! The failures every application shares: setting up its verbs resources, a refused post, a
//! failed completion, a connection that could not be made, the runner's stop and time
//! limit. Each tool's own failure kinds are in its module and wrap these.

use iwarp::verbs::{CompletionStatus, PostError, VerbError, WcOpcode, WorkCompletion};

use crate::rdma::{ArenaError, CmError};

/// Why an application could not start, or a failure every application can have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppError {
    /// Verbs resources.
    #[error("verbs: {0}")]
    Verbs(#[from] VerbError),
    /// Buffer registration.
    #[error(transparent)]
    Arena(#[from] ArenaError),
    /// Connection manager.
    #[error(transparent)]
    Cm(#[from] CmError),
    /// Post SQ or Post RQ refused a work request.
    #[error("post {what}: {error}")]
    Post {
        /// What was posted (`send`, `recv`, `write`, ...).
        what: &'static str,
        /// The verb's Immediate Error.
        error: VerbError,
    },
    /// A work request completed in error.
    #[error("completion {opcode}: {status}")]
    Completion {
        /// The operation.
        opcode: WcOpcode,
        /// Its completion status.
        status: CompletionStatus,
    },
    /// A completion of an operation the application never posts.
    #[error("unexpected completion {0}")]
    UnexpectedCompletion(WcOpcode),
    /// The connection could not be made.
    #[error(transparent)]
    Connect(ConnectFailure),
    /// Write latency is measured on the last octet: a zero size has none.
    #[error("write latency needs -s 1 or more")]
    WriteLatencyNeedsSize,
    /// The stop flag (Ctrl-C) was set.
    #[error("stopped")]
    Stopped,
    /// The deadline passed before the application was done.
    #[error("time limit reached")]
    TimeLimit,
    /// The other application of an in-process pair failed and this one did not finish
    /// within the grace period after it.
    #[error("stopped: the other end failed")]
    PeerFailed,
}

impl AppError {
    /// A refused post of `what`.
    pub fn post(what: &'static str) -> impl FnOnce(PostError) -> AppError {
        move |e| AppError::Post {
            what,
            error: e.error,
        }
    }

    /// The failed completion `wc`.
    pub fn completion(wc: &WorkCompletion) -> AppError {
        AppError::Completion {
            opcode: wc.opcode,
            status: wc.status,
        }
    }
}

/// Why the connection manager could not make a connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectFailure {
    /// The responder rejected the Request.
    #[error("rejected{}{private_data}", if .private_data.is_empty() { "" } else { ": " })]
    Rejected {
        /// Its private data, as text.
        private_data: String,
    },
    /// TCP or MPA failed; the connection manager's reason.
    #[error("{0}")]
    Failed(String),
}

impl ConnectFailure {
    /// A rejection with the Reply's `private_data` ([`crate::rdma::CmEvent::Rejected`]).
    pub fn rejected(private_data: &[u8]) -> ConnectFailure {
        ConnectFailure::Rejected {
            private_data: String::from_utf8_lossy(private_data).into_owned(),
        }
    }
}

impl From<ConnectFailure> for AppError {
    fn from(f: ConnectFailure) -> AppError {
        AppError::Connect(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages() {
        assert_eq!(AppError::Stopped.to_string(), "stopped");
        assert_eq!(AppError::TimeLimit.to_string(), "time limit reached");
        assert_eq!(
            AppError::Post {
                what: "send",
                error: VerbError::InvalidQpState
            }
            .to_string(),
            "post send: invalid QP state"
        );
        assert_eq!(
            AppError::Completion {
                opcode: WcOpcode::RdmaRead,
                status: CompletionStatus::RemoteTermination
            }
            .to_string(),
            "completion RDMA read: remote termination error"
        );
        assert_eq!(ConnectFailure::rejected(b"").to_string(), "rejected");
        assert_eq!(
            ConnectFailure::rejected(b"busy").to_string(),
            "rejected: busy"
        );
    }
}
