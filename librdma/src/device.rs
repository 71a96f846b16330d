//! The devices: one iWARP RNIC per configured port with an IPv4 address, named after the
//! port, described the way Linux soft-iWARP (siw) describes itself (node type RNIC,
//! transport iWARP, Ethernet link layer, the MAC in GID 0), with the limits of this RNIC.

use std::ffi::CStr;
use std::net::Ipv4Addr;
use std::sync::OnceLock;

use dataplane::config::{Config, Ipv4Cidr};
use iwarp::verbs::RnicAttributes;

use crate::abi::*;

/// Vendor id reported by `ibv_query_device`: siw's ("bmt"). perftest treats any vendor it
/// does not know as generic (plain `ibv_post_send`, no inline data), which is what this
/// RNIC wants; Chelsio's and Intel's ids would switch it to their quirks.
pub const VENDOR_ID: u32 = 0x0062_6d74;

/// Largest IRD/ORD a QP gets (`max_qp_rd_atom`, `max_qp_init_rd_atom`).
pub const MAX_RD_ATOM: u32 = 64;

/// Largest inline payload of a Send or Write (`max_inline_data`).
pub const MAX_INLINE: u32 = 64;

/// What a device is: its port's name and addresses.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// The port name, also the device name (`ibv_get_device_name`).
    pub name: String,
    /// The port's MAC address.
    pub mac: [u8; 6],
    /// The port's IPv4 address and prefix.
    pub ipv4: Ipv4Cidr,
    /// Next hop for other subnets.
    pub gateway: Option<Ipv4Addr>,
    /// IP MTU.
    pub mtu: usize,
}

impl DeviceInfo {
    /// The devices of `cfg`: its ports with an IPv4 address, in order.
    pub fn from_config(cfg: &Config) -> Vec<DeviceInfo> {
        cfg.ports
            .iter()
            .enumerate()
            .filter_map(|(i, pc)| {
                Some(DeviceInfo {
                    name: pc.name().to_string(),
                    mac: pc
                        .mac
                        .unwrap_or_else(|| dataplane::port::open::default_mac(i)),
                    ipv4: pc.ipv4?,
                    gateway: pc.gateway.as_ref().map(|g| *g.get_ref()),
                    mtu: pc.mtu,
                })
            })
            .collect()
    }

    /// The node GUID: the EUI-64 of the MAC, as siw derives it.
    pub fn guid(&self) -> u64 {
        let m = self.mac;
        u64::from_be_bytes([m[0] ^ 0x02, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]])
    }

    /// Whether `dst` is reachable through this device (on its subnet, or via its gateway).
    pub fn reaches(&self, dst: Ipv4Addr) -> bool {
        self.ipv4.contains(dst) || self.gateway.is_some()
    }

    /// The IB MTU enum for the port MTU (siw's mapping: 1500 gives 1024).
    pub fn ib_mtu(&self) -> ibv_mtu {
        match self.mtu {
            m if m >= 4096 => IBV_MTU_4096,
            m if m >= 2048 => IBV_MTU_2048,
            m if m >= 1024 => IBV_MTU_1024,
            m if m >= 512 => IBV_MTU_512,
            _ => IBV_MTU_256,
        }
    }
}

/// The RNIC's capabilities, as every device's RNIC is opened with and as
/// `ibv_query_device` reports them.
pub fn device_attributes() -> RnicAttributes {
    RnicAttributes {
        vendor: "iwarp-dataplane".into(),
        max_qps: 16384,
        max_wrs_per_wq: 16384,
        max_srq_wrs: 16384,
        max_send_recv_sges: 8,
        max_write_sges: 8,
        max_cqs: 16384,
        max_cqes_per_cq: 1 << 20,
        max_mrs: 1 << 20,
        max_ird_per_qp: MAX_RD_ATOM,
        max_ord_per_qp: MAX_RD_ATOM,
        max_inline: MAX_INLINE,
        ..RnicAttributes::default()
    }
}

/// The C device object: `struct ibv_device` first, so the pointer applications hold is ours.
#[repr(C)]
pub struct Device {
    /// What applications read.
    pub dev: ibv_device,
    /// Index in the device list.
    pub index: usize,
}

// SAFETY: the device objects are written once, before any pointer to them is handed out,
// and only read afterwards.
unsafe impl Send for Device {}
// SAFETY: as above: immutable once published.
unsafe impl Sync for Device {}

fn copy_name(dst: &mut [std::os::raw::c_char], s: &str) {
    let room = dst.len().saturating_sub(1);
    for (d, b) in dst.iter_mut().zip(s.bytes().take(room)) {
        *d = b as std::os::raw::c_char;
    }
}

impl Device {
    fn new(index: usize, info: &DeviceInfo) -> Device {
        let mut dev = ibv_device {
            node_type: IBV_NODE_RNIC,
            transport_type: IBV_TRANSPORT_IWARP,
            ..Default::default()
        };
        copy_name(&mut dev.name, &info.name);
        copy_name(&mut dev.dev_name, &format!("uverbs{index}"));
        copy_name(
            &mut dev.dev_path,
            &format!("/sys/class/infiniband_verbs/uverbs{index}"),
        );
        // No sysfs entry exists: `ibv_read_sysfs_file(ibdev_path, "board_id")` finds nothing.
        copy_name(
            &mut dev.ibdev_path,
            &format!("/sys/class/infiniband/{}", info.name),
        );
        Device { dev, index }
    }

    /// The device's name.
    pub fn name(&self) -> &CStr {
        // SAFETY: `name` was filled by `copy_name`, which leaves its last byte NUL.
        unsafe { CStr::from_ptr(self.dev.name.as_ptr()) }
    }
}

/// The device objects of the process, made once from the configuration.
pub fn device_objects(infos: &[DeviceInfo]) -> &'static [Device] {
    static DEVICES: OnceLock<Vec<Device>> = OnceLock::new();
    DEVICES.get_or_init(|| {
        infos
            .iter()
            .enumerate()
            .map(|(i, d)| Device::new(i, d))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_is_the_eui64_of_the_mac() {
        let d = DeviceInfo {
            name: "p0".into(),
            mac: [0x74, 0x86, 0xe2, 0x28, 0x63, 0xfc],
            ipv4: Ipv4Cidr {
                addr: Ipv4Addr::new(10, 0, 0, 1),
                prefix: 24,
            },
            gateway: None,
            mtu: 1500,
        };
        // siw's example: node_guid 7686:e2ff:fe28:63fc for 74:86:e2:28:63:fc.
        assert_eq!(d.guid(), 0x7686_e2ff_fe28_63fc);
        assert_eq!(d.ib_mtu(), IBV_MTU_1024);
        assert!(d.reaches(Ipv4Addr::new(10, 0, 0, 9)));
        assert!(!d.reaches(Ipv4Addr::new(10, 0, 1, 9)));
    }
}
