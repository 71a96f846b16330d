//! RDMAP (RFC 5040, RFC 7306): operations, ordering, Terminate.
