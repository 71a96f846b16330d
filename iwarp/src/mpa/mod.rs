//! MPA (RFC 5044, RFC 6581): negotiation, FPDU framing, markers, CRC, receiver.
