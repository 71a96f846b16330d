//! MPA above the wire format: connection setup, the framer → receiver stream and the
//! SPEC-DIGEST §8 items MPA carries (RFC 5044, RFC 6581).

mod checklist;
mod negotiate;
mod stream;
