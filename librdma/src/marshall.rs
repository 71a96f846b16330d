//! libibverbs' marshalling helpers (`infiniband/marshall.h`): field-by-field copies between
//! the kernel's uverbs / SA structs and the `ibv_*` ones, for programs that talk to the kernel
//! ABI themselves (librdmacm builds on them for its route and QP attribute replies).

use crate::abi::{
    ib_user_path_rec, ib_uverbs_ah_attr, ib_uverbs_qp_attr, ibv_ah_attr, ibv_qp_attr,
    ibv_sa_path_rec,
};
use crate::symver::symver;

/// Assigns each listed field of `$src` to the same field of `$dst` (same type on both sides).
macro_rules! copy_fields {
    ($dst:expr, $src:expr; $($field:ident),+ $(,)?) => {
        $($dst.$field = $src.$field;)+
    };
}

/// Copies the fields of a path record that have the same type in `ibv_sa_path_rec` and in
/// the kernel's `ib_user_path_rec`.
macro_rules! copy_common_path_fields {
    ($dst:expr, $src:expr) => {
        copy_fields!($dst, $src; dlid, slid, flow_label, hop_limit, traffic_class, numb_path,
            pkey, sl, mtu_selector, rate_selector, rate, packet_life_time_selector,
            packet_life_time, preference)
    };
}

/// The address vector of `src` in `dst` (all of `ibv_ah_attr`).
fn ah_attr_from_kern(dst: &mut ibv_ah_attr, src: &ib_uverbs_ah_attr) {
    dst.grh.dgid.raw = src.grh.dgid;
    copy_fields!(dst.grh, src.grh; flow_label, sgid_index, hop_limit, traffic_class);
    copy_fields!(dst, src; dlid, sl, src_path_bits, static_rate, is_global, port_num);
}

/// The attributes of `src` in `dst`; like libibverbs, `qp_state` and `rate_limit` are left as
/// they were.
fn qp_attr_from_kern(dst: &mut ibv_qp_attr, src: &ib_uverbs_qp_attr) {
    copy_fields!(dst, src; cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn,
        dest_qp_num, qp_access_flags);
    copy_fields!(dst.cap, src; max_send_wr, max_recv_wr, max_send_sge, max_recv_sge,
        max_inline_data);
    ah_attr_from_kern(&mut dst.ah_attr, &src.ah_attr);
    ah_attr_from_kern(&mut dst.alt_ah_attr, &src.alt_ah_attr);
    copy_fields!(dst, src; pkey_index, alt_pkey_index, en_sqd_async_notify, sq_draining,
        max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt,
        rnr_retry, alt_port_num, alt_timeout);
}

/// The kernel's path record `src` in `dst` (all of `ibv_sa_path_rec`; the kernel's `u32`
/// flags become the C `int`s bit for bit).
fn path_rec_from_kern(dst: &mut ibv_sa_path_rec, src: &ib_user_path_rec) {
    dst.dgid.raw = src.dgid;
    dst.sgid.raw = src.sgid;
    dst.raw_traffic = src.raw_traffic as i32;
    dst.reversible = src.reversible as i32;
    // The kernel's field is wider; the values (enum ib_mtu) fit a byte, and C truncates too.
    dst.mtu = src.mtu as u8;
    copy_common_path_fields!(dst, src);
}

/// The path record `src` in the kernel's `dst` (every field the kernel's record has but its
/// padding).
fn path_rec_to_kern(dst: &mut ib_user_path_rec, src: &ibv_sa_path_rec) {
    // SAFETY: `raw` is the byte view of the 16-byte `ibv_gid` union, valid for any contents.
    let (dgid, sgid) = unsafe { (src.dgid.raw, src.sgid.raw) };
    dst.dgid = dgid;
    dst.sgid = sgid;
    dst.raw_traffic = src.raw_traffic as u32;
    dst.reversible = src.reversible as u32;
    dst.mtu = src.mtu.into();
    copy_common_path_fields!(dst, src);
}

/// Copies the kernel's QP attributes `src` into `dst` (all but `qp_state` and `rate_limit`).
///
/// # Safety
/// `dst` and `src` are NULL or valid, aligned and not overlapping; NULL makes it a no-op.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_qp_attr_from_kern(
    dst: *mut ibv_qp_attr,
    src: *mut ib_uverbs_qp_attr,
) {
    // SAFETY: the caller passes valid, distinct structs (or NULL, turned into `None`).
    if let (Some(dst), Some(src)) = unsafe { (dst.as_mut(), src.as_ref()) } {
        qp_attr_from_kern(dst, src);
    }
}

/// Copies the kernel's address vector `src` into `dst`.
///
/// # Safety
/// `dst` and `src` are NULL or valid, aligned and not overlapping; NULL makes it a no-op.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_ah_attr_from_kern(
    dst: *mut ibv_ah_attr,
    src: *mut ib_uverbs_ah_attr,
) {
    // SAFETY: the caller passes valid, distinct structs (or NULL, turned into `None`).
    if let (Some(dst), Some(src)) = unsafe { (dst.as_mut(), src.as_ref()) } {
        ah_attr_from_kern(dst, src);
    }
}

/// Copies the kernel's path record `src` into `dst`.
///
/// # Safety
/// `dst` and `src` are NULL or valid, aligned and not overlapping; NULL makes it a no-op.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_path_rec_from_kern(
    dst: *mut ibv_sa_path_rec,
    src: *mut ib_user_path_rec,
) {
    // SAFETY: the caller passes valid, distinct structs (or NULL, turned into `None`).
    if let (Some(dst), Some(src)) = unsafe { (dst.as_mut(), src.as_ref()) } {
        path_rec_from_kern(dst, src);
    }
}

/// Copies the path record `src` into the kernel's `dst`.
///
/// # Safety
/// `dst` and `src` are NULL or valid, aligned and not overlapping; NULL makes it a no-op.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_path_rec_to_kern(
    dst: *mut ib_user_path_rec,
    src: *mut ibv_sa_path_rec,
) {
    // SAFETY: the caller passes valid, distinct structs (or NULL, turned into `None`).
    if let (Some(dst), Some(src)) = unsafe { (dst.as_mut(), src.as_ref()) } {
        path_rec_to_kern(dst, src);
    }
}

symver! {
    "IBVERBS_1.0": ibv_copy_qp_attr_from_kern, ibv_copy_path_rec_from_kern,
        ibv_copy_path_rec_to_kern;
    "IBVERBS_1.1": ibv_copy_ah_attr_from_kern;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{ib_uverbs_global_route, IBV_MIG_ARMED, IBV_MTU_1024, IBV_QPS_RTS};

    fn kern_ah(seed: u8) -> ib_uverbs_ah_attr {
        ib_uverbs_ah_attr {
            grh: ib_uverbs_global_route {
                dgid: std::array::from_fn(|i| seed + i as u8),
                flow_label: 0x000a_bcde + u32::from(seed),
                sgid_index: seed + 1,
                hop_limit: seed + 2,
                traffic_class: seed + 3,
                reserved: 0xee,
            },
            dlid: 0x1234 + u16::from(seed),
            sl: seed + 4,
            src_path_bits: seed + 5,
            static_rate: seed + 6,
            is_global: 1,
            port_num: seed + 7,
            reserved: 0xee,
        }
    }

    fn assert_ah_eq(dst: &ibv_ah_attr, src: &ib_uverbs_ah_attr) {
        // SAFETY: `raw` is the byte view of the GID union.
        assert_eq!(unsafe { dst.grh.dgid.raw }, src.grh.dgid);
        assert_eq!(dst.grh.flow_label, src.grh.flow_label);
        assert_eq!(dst.grh.sgid_index, src.grh.sgid_index);
        assert_eq!(dst.grh.hop_limit, src.grh.hop_limit);
        assert_eq!(dst.grh.traffic_class, src.grh.traffic_class);
        assert_eq!(dst.dlid, src.dlid);
        assert_eq!(dst.sl, src.sl);
        assert_eq!(dst.src_path_bits, src.src_path_bits);
        assert_eq!(dst.static_rate, src.static_rate);
        assert_eq!(dst.is_global, src.is_global);
        assert_eq!(dst.port_num, src.port_num);
    }

    #[test]
    fn ah_attr_copies_every_field() {
        let src = kern_ah(10);
        let mut dst = ibv_ah_attr::default();
        // SAFETY: both are live locals.
        unsafe { ibv_copy_ah_attr_from_kern(&mut dst, &src as *const _ as *mut _) };
        assert_ah_eq(&dst, &src);
    }

    #[test]
    fn qp_attr_copies_every_field_but_the_state() {
        let src = ib_uverbs_qp_attr {
            qp_attr_mask: 0xffff_ffff,
            qp_state: IBV_QPS_RTS,
            cur_qp_state: IBV_QPS_RTS,
            path_mtu: IBV_MTU_1024,
            path_mig_state: IBV_MIG_ARMED,
            qkey: 0x1111_2222,
            rq_psn: 0x33_4455,
            sq_psn: 0x66_7788,
            dest_qp_num: 0x99_aabb,
            qp_access_flags: 0x7,
            ah_attr: kern_ah(20),
            alt_ah_attr: kern_ah(40),
            max_send_wr: 101,
            max_recv_wr: 102,
            max_send_sge: 103,
            max_recv_sge: 104,
            max_inline_data: 105,
            pkey_index: 106,
            alt_pkey_index: 107,
            en_sqd_async_notify: 1,
            sq_draining: 1,
            max_rd_atomic: 108,
            max_dest_rd_atomic: 109,
            min_rnr_timer: 110,
            port_num: 111,
            timeout: 112,
            retry_cnt: 113,
            rnr_retry: 114,
            alt_port_num: 115,
            alt_timeout: 116,
            reserved: [0xee; 5],
        };
        let mut dst = ibv_qp_attr {
            rate_limit: 77,
            ..Default::default()
        };
        // SAFETY: both are live locals.
        unsafe { ibv_copy_qp_attr_from_kern(&mut dst, &src as *const _ as *mut _) };
        assert_eq!(dst.qp_state, 0, "libibverbs leaves qp_state alone");
        assert_eq!(dst.rate_limit, 77);
        assert_eq!(dst.cur_qp_state, IBV_QPS_RTS);
        assert_eq!(dst.path_mtu, IBV_MTU_1024);
        assert_eq!(dst.path_mig_state, IBV_MIG_ARMED);
        assert_eq!(
            (dst.qkey, dst.rq_psn, dst.sq_psn, dst.dest_qp_num),
            (0x1111_2222, 0x33_4455, 0x66_7788, 0x99_aabb)
        );
        assert_eq!(dst.qp_access_flags, 0x7);
        assert_eq!(
            (
                dst.cap.max_send_wr,
                dst.cap.max_recv_wr,
                dst.cap.max_send_sge,
                dst.cap.max_recv_sge,
                dst.cap.max_inline_data
            ),
            (101, 102, 103, 104, 105)
        );
        assert_ah_eq(&dst.ah_attr, &src.ah_attr);
        assert_ah_eq(&dst.alt_ah_attr, &src.alt_ah_attr);
        assert_eq!((dst.pkey_index, dst.alt_pkey_index), (106, 107));
        assert_eq!((dst.en_sqd_async_notify, dst.sq_draining), (1, 1));
        assert_eq!(
            [
                dst.max_rd_atomic,
                dst.max_dest_rd_atomic,
                dst.min_rnr_timer,
                dst.port_num,
                dst.timeout,
                dst.retry_cnt,
                dst.rnr_retry,
                dst.alt_port_num,
                dst.alt_timeout
            ],
            [108, 109, 110, 111, 112, 113, 114, 115, 116]
        );
    }

    fn kern_path() -> ib_user_path_rec {
        ib_user_path_rec {
            dgid: std::array::from_fn(|i| 0xd0 + i as u8),
            sgid: std::array::from_fn(|i| 0x50 + i as u8),
            dlid: 0x0102_u16.to_be(),
            slid: 0x0304_u16.to_be(),
            raw_traffic: 1,
            flow_label: 0x0005_6789_u32.to_be(),
            reversible: 1,
            mtu: 5,
            pkey: 0xffff,
            hop_limit: 64,
            traffic_class: 3,
            numb_path: 1,
            sl: 2,
            mtu_selector: 2,
            rate_selector: 2,
            rate: 16,
            packet_life_time_selector: 2,
            packet_life_time: 18,
            preference: 9,
        }
    }

    /// Every field of a kernel path record (it has no padding).
    fn kern_fields(r: &ib_user_path_rec) -> Vec<u32> {
        let mut v: Vec<u32> = r.dgid.iter().chain(&r.sgid).map(|&b| b.into()).collect();
        v.extend([
            r.dlid.into(),
            r.slid.into(),
            r.raw_traffic,
            r.flow_label,
            r.reversible,
            r.mtu,
            r.pkey.into(),
        ]);
        v.extend(
            [
                r.hop_limit,
                r.traffic_class,
                r.numb_path,
                r.sl,
                r.mtu_selector,
                r.rate_selector,
                r.rate,
                r.packet_life_time_selector,
                r.packet_life_time,
                r.preference,
            ]
            .map(u32::from),
        );
        v
    }

    #[test]
    fn path_rec_round_trips_through_the_kernel_layout() {
        let kern = kern_path();
        let mut rec = ibv_sa_path_rec::default();
        // SAFETY: both are live locals.
        unsafe { ibv_copy_path_rec_from_kern(&mut rec, &kern as *const _ as *mut _) };
        // SAFETY: byte views of the GID unions.
        let gids = unsafe { (rec.dgid.raw, rec.sgid.raw) };
        assert_eq!(gids, (kern.dgid, kern.sgid));
        assert_eq!((rec.dlid, rec.slid), (kern.dlid, kern.slid));
        assert_eq!((rec.raw_traffic, rec.reversible), (1, 1));
        assert_eq!(rec.flow_label, kern.flow_label);
        assert_eq!((rec.hop_limit, rec.traffic_class), (64, 3));
        assert_eq!((rec.numb_path, rec.pkey, rec.sl), (1, 0xffff, 2));
        assert_eq!((rec.mtu_selector, rec.mtu), (2, 5));
        assert_eq!((rec.rate_selector, rec.rate), (2, 16));
        assert_eq!(
            (
                rec.packet_life_time_selector,
                rec.packet_life_time,
                rec.preference
            ),
            (2, 18, 9)
        );

        let mut back = ib_user_path_rec::default();
        // SAFETY: both are live locals.
        unsafe { ibv_copy_path_rec_to_kern(&mut back, &mut rec) };
        assert_eq!(kern_fields(&back), kern_fields(&kern));
    }

    #[test]
    fn null_pointers_are_ignored() {
        let mut attr = ibv_ah_attr::default();
        // SAFETY: NULL is documented as a no-op.
        unsafe {
            ibv_copy_ah_attr_from_kern(&mut attr, std::ptr::null_mut());
            ibv_copy_qp_attr_from_kern(std::ptr::null_mut(), std::ptr::null_mut());
            ibv_copy_path_rec_from_kern(std::ptr::null_mut(), std::ptr::null_mut());
            ibv_copy_path_rec_to_kern(std::ptr::null_mut(), std::ptr::null_mut());
        }
        assert_eq!(attr.dlid, 0);
    }
}
