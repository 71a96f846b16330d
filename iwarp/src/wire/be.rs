//! Big-endian field reads shared by the header views (the views check lengths first).

/// The big-endian `u32` in the first four octets of `b`.
pub(super) fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// The big-endian `u64` in the first eight octets of `b`.
pub(super) fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}
