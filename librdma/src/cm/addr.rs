//! Socket addresses between C (`struct sockaddr*`) and Rust: IPv4 (`sockaddr_in`) and IPv6
//! (`sockaddr_in6`); any other family is EAFNOSUPPORT.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// The IPv4 or IPv6 address at `p`: EINVAL for NULL, EAFNOSUPPORT for another family.
///
/// # Safety
/// `p` must be NULL or point to a readable socket address of the size its family implies.
pub unsafe fn read(p: *const libc::sockaddr) -> Result<SocketAddr, i32> {
    // SAFETY: by the contract, a readable sockaddr (NULL refused).
    let family = unsafe { p.as_ref() }.ok_or(libc::EINVAL)?.sa_family;
    match i32::from(family) {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let sin = unsafe { p.cast::<libc::sockaddr_in>().read_unaligned() };
            Ok(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let sin6 = unsafe { p.cast::<libc::sockaddr_in6>().read_unaligned() };
            Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        }
        _ => Err(libc::EAFNOSUPPORT),
    }
}

/// The `sockaddr_in` of `a`.
pub fn sockaddr_in(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// The `sockaddr_in6` of `a`.
pub fn sockaddr_in6(a: SocketAddrV6) -> libc::sockaddr_in6 {
    libc::sockaddr_in6 {
        sin6_family: libc::AF_INET6 as libc::sa_family_t,
        sin6_port: a.port().to_be(),
        sin6_flowinfo: a.flowinfo().to_be(),
        sin6_addr: libc::in6_addr {
            s6_addr: a.ip().octets(),
        },
        sin6_scope_id: a.scope_id(),
    }
}

/// Writes `a` at `dst` (a `sockaddr_storage`-sized slot) as a `sockaddr_in` or a
/// `sockaddr_in6`.
///
/// # Safety
/// `dst` must be writable for `size_of::<sockaddr_storage>()` bytes.
pub unsafe fn write<T>(dst: *mut T, a: SocketAddr) {
    // SAFETY: by the contract; the slot is zeroed first, then the address written (both
    // forms are smaller than a sockaddr_storage).
    unsafe {
        std::ptr::write_bytes(
            dst.cast::<u8>(),
            0,
            std::mem::size_of::<libc::sockaddr_storage>(),
        );
        match a {
            SocketAddr::V4(a) => dst
                .cast::<libc::sockaddr_in>()
                .write_unaligned(sockaddr_in(a)),
            SocketAddr::V6(a) => dst
                .cast::<libc::sockaddr_in6>()
                .write_unaligned(sockaddr_in6(a)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(a: SocketAddr) -> Result<SocketAddr, i32> {
        let mut st = unsafe_zeroed();
        // SAFETY: `st` is a live sockaddr_storage.
        unsafe { write(&mut st, a) };
        // SAFETY: as above.
        unsafe { read((&st as *const libc::sockaddr_storage).cast()) }
    }

    #[test]
    fn both_families_round_trip_and_others_are_refused() {
        let a = SocketAddr::from((Ipv4Addr::new(10, 1, 2, 3), 7174));
        assert_eq!(round_trip(a), Ok(a));
        let b = SocketAddr::V6(SocketAddrV6::new(
            "fd00:99::1".parse().unwrap(),
            7174,
            0x12345,
            3,
        ));
        assert_eq!(round_trip(b), Ok(b));
        // The C layout: family, port in network order, the address's 16 octets.
        let s = sockaddr_in6(SocketAddrV6::new("fd00::2".parse().unwrap(), 0x1234, 0, 0));
        assert_eq!(i32::from(s.sin6_family), libc::AF_INET6);
        assert_eq!(s.sin6_port.to_ne_bytes(), [0x12, 0x34]);
        assert_eq!(s.sin6_addr.s6_addr[..2], [0xfd, 0]);
        assert_eq!(s.sin6_addr.s6_addr[15], 2);
        let mut st = unsafe_zeroed();
        st.ss_family = libc::AF_IB as libc::sa_family_t;
        // SAFETY: `st` is a live sockaddr_storage.
        let r = unsafe { read((&st as *const libc::sockaddr_storage).cast()) };
        assert_eq!(r, Err(libc::EAFNOSUPPORT));
        // SAFETY: NULL is refused before any read.
        assert_eq!(unsafe { read(std::ptr::null()) }, Err(libc::EINVAL));
    }

    fn unsafe_zeroed() -> libc::sockaddr_storage {
        // SAFETY: all-zero bytes are a valid sockaddr_storage.
        unsafe { std::mem::zeroed() }
    }
}
