//! Socket addresses between C (`struct sockaddr*`) and Rust. iWARP runs over TCP/IPv4 on
//! this data plane: an IPv6 address is EAFNOSUPPORT.

use std::net::{Ipv4Addr, SocketAddrV4};

/// The IPv4 address at `p`: EINVAL for NULL, EAFNOSUPPORT for another family.
///
/// # Safety
/// `p` must be NULL or point to a readable socket address of the size its family implies.
pub unsafe fn read(p: *const libc::sockaddr) -> Result<SocketAddrV4, i32> {
    // SAFETY: by the contract, a readable sockaddr (NULL refused).
    let family = unsafe { p.as_ref() }.ok_or(libc::EINVAL)?.sa_family;
    if i32::from(family) != libc::AF_INET {
        return Err(libc::EAFNOSUPPORT);
    }
    // SAFETY: an AF_INET address is a sockaddr_in.
    let sin = unsafe { &*p.cast::<libc::sockaddr_in>() };
    Ok(SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
        u16::from_be(sin.sin_port),
    ))
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

/// Writes `a` at `dst` (a `sockaddr_storage`-sized slot).
///
/// # Safety
/// `dst` must be writable for `size_of::<sockaddr_storage>()` bytes.
pub unsafe fn write<T>(dst: *mut T, a: SocketAddrV4) {
    // SAFETY: by the contract; the slot is zeroed first, then the sockaddr_in written.
    unsafe {
        std::ptr::write_bytes(
            dst.cast::<u8>(),
            0,
            std::mem::size_of::<libc::sockaddr_storage>(),
        );
        dst.cast::<libc::sockaddr_in>()
            .write_unaligned(sockaddr_in(a));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_round_trips_and_ipv6_is_refused() {
        let mut st: libc::sockaddr_storage = unsafe_zeroed();
        let a = SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 3), 7174);
        // SAFETY: `st` is a live sockaddr_storage.
        unsafe { write(&mut st, a) };
        // SAFETY: as above.
        let back = unsafe { read((&st as *const libc::sockaddr_storage).cast()) };
        assert_eq!(back, Ok(a));
        st.ss_family = libc::AF_INET6 as libc::sa_family_t;
        // SAFETY: as above.
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
