//! Where registered memory lives: hugepages when hugetlbfs has free pages, else the heap.

use iwarp::mem::HeapBackend;
use iwarp::verbs::{AddressingMode, MemoryBackend, Rnic, RnicAttributes, RnicDevice, VerbError};

use crate::hugemem::{HugepageMemory, SharedMemory};

/// The kind of memory behind an RNIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    /// A hugetlbfs mapping.
    Hugepages,
    /// Ordinary memory (no hugetlbfs mount or no free hugepages): the heap, or a file
    /// mapping when the lanes share it ([`open_shared_rnic`]).
    Heap,
    /// The application's own memory, region by region as it registers it.
    Application,
}

impl std::fmt::Display for MemoryKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MemoryKind::Hugepages => "hugepages",
            MemoryKind::Heap => "heap",
            MemoryKind::Application => "application memory",
        })
    }
}

/// Opens a software RNIC over `len` octets of memory: hugepage memory when `hugepages` is
/// set and a hugetlbfs mapping succeeds, else the heap.
pub fn open_rnic(len: usize, hugepages: bool, seed: u64) -> Result<(Rnic, MemoryKind), VerbError> {
    let (backend, kind): (Box<dyn MemoryBackend + Send>, MemoryKind) = if hugepages {
        match HugepageMemory::new(len) {
            Ok(m) => (Box::new(m), MemoryKind::Hugepages),
            Err(e) => {
                log::info!("registered memory on the heap: {e}");
                (Box::new(HeapBackend::new(len)), MemoryKind::Heap)
            }
        }
    } else {
        (Box::new(HeapBackend::new(len)), MemoryKind::Heap)
    };
    let device = RnicDevice::new("dp-rnic0", rnic_attributes());
    let rnic = device.open(AddressingMode::Page, backend, seed)?;
    Ok((rnic, kind))
}

/// Opens a software RNIC over one lane's view of `memory`, the mapping every lane places
/// into when the lanes share registrations ([`super::LaneRegistrations`]).
pub fn open_shared_rnic(memory: &SharedMemory, seed: u64) -> Result<(Rnic, MemoryKind), VerbError> {
    let kind = if memory.is_hugepages() {
        MemoryKind::Hugepages
    } else {
        MemoryKind::Heap
    };
    let device = RnicDevice::new("dp-rnic0", rnic_attributes());
    let rnic = device.open(AddressingMode::Page, Box::new(memory.view()), seed)?;
    Ok((rnic, kind))
}

/// The data plane RNIC's capabilities: the soft RNIC's defaults with room for many QPs
/// (NVMe-oF targets and MPI jobs run thousands) and CQs deep enough for all their work.
fn rnic_attributes() -> RnicAttributes {
    RnicAttributes {
        max_qps: 16384,
        max_cqes_per_cq: 1 << 20,
        ..RnicAttributes::default()
    }
}
