//! The devices: one iWARP RNIC per configured port with an IP address, named after the
//! port, described the way Linux soft-iWARP (siw) describes itself (node type RNIC,
//! transport iWARP, Ethernet link layer, the MAC in GID 0), with the limits of this RNIC.

use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;

use dataplane::config::{Config, Ipv4Cidr, Ipv6Cidr};
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
    pub ipv4: Option<Ipv4Cidr>,
    /// Next hop for other IPv4 subnets.
    pub gateway: Option<Ipv4Addr>,
    /// The port's IPv6 address and prefix.
    pub ipv6: Option<Ipv6Cidr>,
    /// Next hop for other IPv6 prefixes.
    pub gateway6: Option<Ipv6Addr>,
    /// IP MTU.
    pub mtu: usize,
}

impl DeviceInfo {
    /// The devices of `cfg`: its ports with an IPv4 or an IPv6 address, in order.
    pub fn from_config(cfg: &Config) -> Vec<DeviceInfo> {
        cfg.ports
            .iter()
            .enumerate()
            .filter(|(_, pc)| pc.ipv4.is_some() || pc.ipv6.is_some())
            .map(|(i, pc)| DeviceInfo {
                name: pc.name().to_string(),
                mac: pc
                    .mac
                    .unwrap_or_else(|| dataplane::port::open::default_mac(i)),
                ipv4: pc.ipv4,
                gateway: pc.gateway.as_ref().map(|g| *g.get_ref()),
                ipv6: pc.ipv6,
                gateway6: pc.gateway6.as_ref().map(|g| *g.get_ref()),
                mtu: pc.mtu,
            })
            .collect()
    }

    /// The node GUID: the EUI-64 of the MAC, as siw derives it.
    pub fn guid(&self) -> u64 {
        let m = self.mac;
        u64::from_be_bytes([m[0] ^ 0x02, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]])
    }

    /// Whether `ip` is this device's own address.
    pub fn has(&self, ip: IpAddr) -> bool {
        self.address(ip) == Some(ip)
    }

    /// The device's address of `dst`'s family (the source address towards `dst`).
    pub fn address(&self, dst: IpAddr) -> Option<IpAddr> {
        match dst {
            IpAddr::V4(_) => self.ipv4.map(|c| IpAddr::V4(c.addr)),
            IpAddr::V6(_) => self.ipv6.map(|c| IpAddr::V6(c.addr)),
        }
    }

    /// Whether `dst` is on the device's subnet (or prefix) of its family.
    pub fn on_link(&self, dst: IpAddr) -> bool {
        match dst {
            IpAddr::V4(a) => self.ipv4.is_some_and(|c| c.contains(a)),
            IpAddr::V6(a) => self.ipv6.is_some_and(|c| c.contains(a)),
        }
    }

    /// Whether the device has a gateway of `dst`'s family.
    pub fn routes(&self, dst: IpAddr) -> bool {
        match dst {
            IpAddr::V4(_) => self.ipv4.is_some() && self.gateway.is_some(),
            IpAddr::V6(_) => self.ipv6.is_some() && self.gateway6.is_some(),
        }
    }

    /// Whether `dst` is reachable through this device (on its subnet, or via its gateway).
    pub fn reaches(&self, dst: IpAddr) -> bool {
        self.on_link(dst) || self.routes(dst)
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
            ipv4: Some(Ipv4Cidr {
                addr: Ipv4Addr::new(10, 0, 0, 1),
                prefix: 24,
            }),
            gateway: None,
            ipv6: None,
            gateway6: None,
            mtu: 1500,
        };
        // siw's example: node_guid 7686:e2ff:fe28:63fc for 74:86:e2:28:63:fc.
        assert_eq!(d.guid(), 0x7686_e2ff_fe28_63fc);
        assert_eq!(d.ib_mtu(), IBV_MTU_1024);
        assert!(d.reaches(Ipv4Addr::new(10, 0, 0, 9).into()));
        assert!(!d.reaches(Ipv4Addr::new(10, 0, 1, 9).into()));
    }

    #[test]
    fn each_family_routes_by_its_own_prefix_and_gateway() {
        let v6 = |s: &str| IpAddr::V6(s.parse().unwrap());
        let mut d = DeviceInfo {
            name: "p0".into(),
            mac: [2, 0, 0, 0, 0, 1],
            ipv4: None,
            gateway: Some(Ipv4Addr::new(10, 0, 0, 254)),
            ipv6: Some(Ipv6Cidr {
                addr: "fd00:99::1".parse().unwrap(),
                prefix: 64,
            }),
            gateway6: None,
            mtu: 1500,
        };
        assert!(d.has(v6("fd00:99::1")));
        assert!(!d.has(v6("fd00:99::2")));
        assert_eq!(d.address(v6("fd00:99::2")), Some(v6("fd00:99::1")));
        assert_eq!(d.address(Ipv4Addr::new(10, 0, 0, 9).into()), None);
        assert!(d.reaches(v6("fd00:99::2")));
        assert!(!d.reaches(v6("fd00:98::2")));
        // An IPv4 gateway without an IPv4 address routes nothing.
        assert!(!d.reaches(Ipv4Addr::new(10, 0, 0, 9).into()));
        d.gateway6 = Some("fd00:99::fe".parse().unwrap());
        assert!(d.reaches(v6("fd00:98::2")));
    }
}
