//! Modular (RFC 9293 §3.4) comparisons of 32-bit sequence numbers.

/// Signed distance `a - b` in sequence space.
pub(crate) fn diff(a: u32, b: u32) -> i32 {
    a.wrapping_sub(b) as i32
}

/// `a < b` in sequence space.
pub(crate) fn lt(a: u32, b: u32) -> bool {
    diff(a, b) < 0
}

/// `a <= b` in sequence space.
pub(crate) fn le(a: u32, b: u32) -> bool {
    diff(a, b) <= 0
}

/// `a > b` in sequence space.
pub(crate) fn gt(a: u32, b: u32) -> bool {
    diff(a, b) > 0
}

/// `a >= b` in sequence space.
pub(crate) fn ge(a: u32, b: u32) -> bool {
    diff(a, b) >= 0
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 9293 §3.4: comparisons are modulo 2^32.
    #[test]
    fn comparisons_wrap() {
        assert!(lt(0xffff_fff0, 0x10));
        assert!(gt(0x10, 0xffff_fff0));
        assert!(le(5, 5) && ge(5, 5));
        assert_eq!(diff(3, 0xffff_fffe), 5);
    }
}
