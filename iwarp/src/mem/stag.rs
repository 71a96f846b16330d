//! STags, access rights and the identifiers of protection domains and streams.

use core::fmt;
use core::ops::{BitOr, BitOrAssign};

/// Steering Tag: 24-bit index and 8-bit consumer key (VERBS-00 §7.2).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct STag(pub u32);

impl STag {
    /// Builds an STag from index (low 24 bits used) and key.
    pub const fn new(index: u32, key: u8) -> Self {
        STag(((index & 0x00FF_FFFF) << 8) | key as u32)
    }

    /// The 24-bit index.
    pub const fn index(self) -> u32 {
        self.0 >> 8
    }

    /// The 8-bit key.
    pub const fn key(self) -> u8 {
        (self.0 & 0xFF) as u8
    }
}

impl fmt::Debug for STag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "STag({:#010x})", self.0)
    }
}

/// Access rights of a region or window, and the rights an access needs.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// No rights.
    pub const NONE: Access = Access(0);
    /// Local read.
    pub const LOCAL_READ: Access = Access(0x01);
    /// Local write.
    pub const LOCAL_WRITE: Access = Access(0x02);
    /// Remote read (RDMA Read source).
    pub const REMOTE_READ: Access = Access(0x04);
    /// Remote write (RDMA Write / Read Response sink).
    pub const REMOTE_WRITE: Access = Access(0x08);
    /// Remote atomic.
    pub const REMOTE_ATOMIC: Access = Access(0x10);
    /// Memory-window bind.
    pub const BIND: Access = Access(0x20);

    /// Whether every right of `other` is present in `self`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any remote right is present.
    pub const fn any_remote(self) -> bool {
        self.0 & (Self::REMOTE_READ.0 | Self::REMOTE_WRITE.0 | Self::REMOTE_ATOMIC.0) != 0
    }

    /// Raw bits.
    pub const fn bits(self) -> u8 {
        self.0
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

impl BitOrAssign for Access {
    fn bitor_assign(&mut self, rhs: Access) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 6] = ["LR", "LW", "RR", "RW", "RA", "BIND"];
        let mut first = true;
        write!(f, "Access(")?;
        for (i, n) in NAMES.iter().enumerate() {
            if self.0 & (1 << i) != 0 {
                if !first {
                    write!(f, "|")?;
                }
                write!(f, "{n}")?;
                first = false;
            }
        }
        write!(f, ")")
    }
}

/// Protection domain identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdId(pub u32);

/// RDMAP/DDP stream (queue pair) identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId(pub u32);

/// A local scatter/gather element: `len` octets at `to` of a locally registered `stag`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    /// Local STag.
    pub stag: STag,
    /// Tagged offset of the first octet.
    pub to: u64,
    /// Length in octets.
    pub len: u32,
}
