//! Helpers of the in-process tests: socket addresses, CM events and completions within
//! 5 s, posting.
#![allow(dead_code)]

use std::os::raw::c_int;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use rdma_dataplane::abi::*;
use rdma_dataplane::cm::events::*;
use rdma_dataplane::cm::id::rdma_create_id;
use rdma_dataplane::verbs::memory::ibv_reg_mr;

/// Writes `text` as this process's configuration (`DATAPLANE_CONFIG`) in a directory of its
/// own, which is returned.
pub fn use_config(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join(format!("{name}.toml"));
    std::fs::write(&cfg, text).unwrap();
    std::env::set_var("DATAPLANE_CONFIG", &cfg);
    dir
}

/// The `sockaddr_in` of `ip` and `port`.
pub fn sockaddr(ip: [u8; 4], port: u16) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_be_bytes(ip).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// The next CM event within 5 s (the channel is non-blocking), with its type and id.
pub fn next_event(ch: *mut rdma_event_channel) -> *mut rdma_cm_event {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut ev = null_mut();
        if unsafe { rdma_get_cm_event(ch, &mut ev) } == 0 {
            return ev;
        }
        let e = std::io::Error::last_os_error().raw_os_error();
        assert_eq!(e, Some(libc::EAGAIN), "rdma_get_cm_event failed");
        assert!(Instant::now() < deadline, "no CM event within 5 s");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The next CM event, which must be `kind` with status 0.
pub fn expect_event(ch: *mut rdma_event_channel, kind: rdma_cm_event_type) -> *mut rdma_cm_event {
    let ev = next_event(ch);
    let (k, status) = unsafe { ((*ev).event, (*ev).status) };
    assert_eq!(
        (k, status),
        (kind, 0),
        "event {k} status {status}, wanted {kind}"
    );
    ev
}

/// Polls `cq` until one completion arrives (5 s at most).
pub fn poll_one(cq: *mut ibv_cq) -> ibv_wc {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut wc = ibv_wc::default();
    loop {
        let ops = unsafe { &(*(*cq).context).ops };
        let n = unsafe { ops.poll_cq.unwrap()(cq, 1, &mut wc) };
        assert!(n >= 0, "poll_cq failed");
        if n == 1 {
            return wc;
        }
        assert!(Instant::now() < deadline, "no completion within 5 s");
        std::thread::yield_now();
    }
}

/// Posts `wr` on `qp`'s send queue.
pub fn post_send(qp: *mut ibv_qp, wr: &mut ibv_send_wr) {
    let mut bad = null_mut();
    let ops = unsafe { &(*(*qp).context).ops };
    assert_eq!(
        unsafe { ops.post_send.unwrap()(qp, wr, &mut bad) },
        0,
        "post_send"
    );
}

/// Posts one receive of `sge` on `qp`.
pub fn post_recv(qp: *mut ibv_qp, sge: &mut ibv_sge, wr_id: u64) {
    let mut wr = ibv_recv_wr {
        wr_id,
        sg_list: sge,
        num_sge: 1,
        ..Default::default()
    };
    let mut bad = null_mut();
    let ops = unsafe { &(*(*qp).context).ops };
    assert_eq!(
        unsafe { ops.post_recv.unwrap()(qp, &mut wr, &mut bad) },
        0,
        "post_recv"
    );
}

/// Makes `fd` non-blocking.
pub fn nonblocking(fd: c_int) {
    unsafe { libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) };
}

/// The `sockaddr_in6` of `ip` (text) and `port`.
pub fn sockaddr6(ip: &str, port: u16) -> libc::sockaddr_in6 {
    let ip: std::net::Ipv6Addr = ip.parse().unwrap();
    libc::sockaddr_in6 {
        sin6_family: libc::AF_INET6 as libc::sa_family_t,
        sin6_port: port.to_be(),
        sin6_flowinfo: 0,
        sin6_addr: libc::in6_addr {
            s6_addr: ip.octets(),
        },
        sin6_scope_id: 0,
    }
}

/// A new id on `ch` with `context`, in the TCP port space.
pub fn new_id(ch: *mut rdma_event_channel, context: *mut std::os::raw::c_void) -> *mut rdma_cm_id {
    let mut id = null_mut();
    assert_eq!(
        unsafe { rdma_create_id(ch, &mut id, context, RDMA_PS_TCP) },
        0
    );
    id
}

/// `buf` registered on `pd` for local writes and remote reads and writes.
pub fn reg(pd: *mut ibv_pd, buf: &mut [u8]) -> *mut ibv_mr {
    let access =
        (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE) as c_int;
    let mr = unsafe { ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), access) };
    assert!(!mr.is_null(), "ibv_reg_mr");
    mr
}

/// The SGE of `len` bytes at `offset` in `buf`, registered as `mr`.
pub fn sge(buf: &[u8], offset: usize, len: u32, mr: *mut ibv_mr) -> ibv_sge {
    ibv_sge {
        addr: buf.as_ptr() as u64 + offset as u64,
        length: len,
        lkey: unsafe { (*mr).lkey },
    }
}

/// A signaled work request of `opcode` over one SGE; for RDMA Write and Read, to `remote`
/// (address and rkey).
pub fn signaled(
    wr_id: u64,
    sge: &mut ibv_sge,
    opcode: ibv_wr_opcode,
    remote: Option<(u64, u32)>,
) -> ibv_send_wr {
    let mut wr = ibv_send_wr {
        wr_id,
        sg_list: sge,
        num_sge: 1,
        opcode,
        send_flags: IBV_SEND_SIGNALED,
        ..Default::default()
    };
    if let Some((addr, rkey)) = remote {
        wr.wr.rdma.remote_addr = addr;
        wr.wr.rdma.rkey = rkey;
    }
    wr
}
