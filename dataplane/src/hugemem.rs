//! Hugepage memory for registered regions: a file on a hugetlbfs mount, mapped shared, that
//! the verbs layer uses as its [`MemoryBackend`](iwarp::verbs::MemoryBackend), so DDP placement writes land in pinned
//! memory a NIC could DMA to; [`SharedMemory`] is one mapping that several lanes' RNICs
//! place into. The mapping and the shared views' copies are the only unsafe code here.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use iwarp::mem::Arena;

/// Why hugepage memory could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum HugeMemError {
    /// No hugetlbfs file system is mounted.
    #[error("no hugetlbfs mount found in {0}")]
    NoMount(PathBuf),
    /// Creating or sizing the backing file failed.
    #[error("hugepage file {path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// mmap failed (e.g. not enough free hugepages).
    #[error("mapping {len} octets failed: {source}")]
    Map {
        /// Requested length.
        len: usize,
        /// The error.
        source: io::Error,
    },
}

/// A hugetlbfs mount point and its page size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HugetlbfsMount {
    /// Mount point.
    pub path: PathBuf,
    /// Page size in octets (`pagesize=` option; 2 MiB when absent).
    pub page_size: usize,
}

/// Finds the first hugetlbfs mount in a `/proc/mounts`-format text.
pub fn find_hugetlbfs(mounts: &str) -> Option<HugetlbfsMount> {
    mounts.lines().find_map(|line| {
        let mut f = line.split_whitespace();
        let (_, dir, fstype, opts) = (f.next()?, f.next()?, f.next()?, f.next()?);
        if fstype != "hugetlbfs" {
            return None;
        }
        let page_size = opts
            .split(',')
            .find_map(|o| o.strip_prefix("pagesize="))
            .and_then(parse_size)
            .unwrap_or(2 << 20);
        Some(HugetlbfsMount {
            path: PathBuf::from(dir),
            page_size,
        })
    })
}

fn parse_size(s: &str) -> Option<usize> {
    let (num, mult) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mult)
}

/// A shared mapping of a (hugetlbfs) file, owned exclusively; unmapped on drop. The file is
/// unlinked right after mapping, so nothing is left behind.
#[derive(Debug)]
pub struct HugepageMemory {
    ptr: NonNull<u8>,
    len: usize,
    page_size: usize,
}

// SAFETY: the mapping is private to this value (its file was unlinked before anyone else
// could open it) and only reachable through `&self`/`&mut self`, so moving it to another
// thread is as safe as moving a `Vec<u8>`.
unsafe impl Send for HugepageMemory {}

static NEXT_FILE: AtomicU32 = AtomicU32::new(0);

impl HugepageMemory {
    /// Maps at least `len` octets of hugepage memory from the first hugetlbfs mount listed
    /// in `/proc/mounts`.
    pub fn new(len: usize) -> Result<Self, HugeMemError> {
        let mounts = Path::new("/proc/mounts");
        let text = fs::read_to_string(mounts).unwrap_or_default();
        let mount = find_hugetlbfs(&text).ok_or_else(|| HugeMemError::NoMount(mounts.into()))?;
        Self::create_in(&mount.path, len, mount.page_size)
    }

    /// Maps at least `len` octets (rounded up to `page_size`) backed by a new file in `dir`.
    pub fn create_in(dir: &Path, len: usize, page_size: usize) -> Result<Self, HugeMemError> {
        let page_size = page_size.max(1);
        let len = len.max(1).div_ceil(page_size) * page_size;
        let path = dir.join(format!(
            "iwarp-mem-{}-{}",
            std::process::id(),
            NEXT_FILE.fetch_add(1, Ordering::Relaxed)
        ));
        let file_err = |source| HugeMemError::File {
            path: path.clone(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(file_err)?;
        let sized = file.set_len(len as u64).map_err(file_err);
        let mapped = sized.and_then(|()| {
            // SAFETY: a fresh shared read/write mapping of `len` octets of a file we just
            // created and sized to `len`; the kernel picks the address. No Rust reference
            // aliases it yet.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_POPULATE,
                    file.as_raw_fd(),
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                Err(HugeMemError::Map {
                    len,
                    source: io::Error::last_os_error(),
                })
            } else {
                Ok(p)
            }
        });
        // The mapping keeps the memory; the name is not needed any more.
        let _ = fs::remove_file(&path);
        let p = mapped?;
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(HugeMemError::Map {
            len,
            source: io::Error::other("null mapping"),
        })?;
        log::debug!(
            "mapped {len} octets of hugepage memory in {}",
            dir.display()
        );
        Ok(HugepageMemory {
            ptr,
            len,
            page_size,
        })
    }

    /// Page size of the mapping.
    pub fn page_size(&self) -> usize {
        self.page_size
    }
}

impl Arena for HugepageMemory {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` is a live mapping of `len` readable octets owned by `self`; the
        // returned slice borrows `self`, so it cannot outlive the mapping or alias a
        // mutable borrow.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes this the only borrow.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

/// One mapping of registered memory that several lanes' RNICs place into: the lanes share
/// registrations (`crate::rdma::LaneRegistrations`), so a region must be the same octets on
/// every lane. Each lane's RNIC gets a [`SharedMemory::view`].
///
/// Like a NIC's DMA target, the memory is written by several agents: two lanes placing into
/// the same octets at once race, and what the buffer holds then is undefined (as RFC 5040
/// §5.5 leaves overlapping placements by several streams); an application registers a
/// buffer per stream or orders the streams' writes itself, as on any RNIC. No view hands
/// out references into the mapping (it is not an arena: `MemoryModel::bytes` is empty);
/// the owner's own CPU access copies in and out with [`iwarp::verbs::MemoryBackend::write`] and
/// [`iwarp::verbs::MemoryBackend::read`] on a view of its own.
#[derive(Debug, Clone)]
pub struct SharedMemory(std::sync::Arc<HugepageMemory>);

// SAFETY: through `&HugepageMemory` the mapping is only read (`bytes`), like a shared
// `&[u8]`; the shared views write through raw pointers, range by range, as a device writing
// by DMA does, and the mapping lives as long as the last view (the `Arc`).
unsafe impl Sync for HugepageMemory {}

impl SharedMemory {
    /// Maps `len` octets: hugepages when `hugepages` is set and hugetlbfs has room, else a
    /// file in the temporary directory (4 KiB pages).
    pub fn new(len: usize, hugepages: bool) -> Result<SharedMemory, HugeMemError> {
        let mem = match hugepages.then(|| HugepageMemory::new(len)) {
            Some(Ok(m)) => m,
            Some(Err(e)) => {
                log::info!("shared registered memory not in hugepages: {e}");
                HugepageMemory::create_in(&std::env::temp_dir(), len, 4096)?
            }
            None => HugepageMemory::create_in(&std::env::temp_dir(), len, 4096)?,
        };
        Ok(SharedMemory(std::sync::Arc::new(mem)))
    }

    /// True when the mapping is hugepage memory (its page size above 4 KiB).
    pub fn is_hugepages(&self) -> bool {
        self.0.page_size > 4096
    }

    /// A backend over the whole mapping for one lane's RNIC.
    pub fn view(&self) -> SharedMemory {
        self.clone()
    }

    /// The mapping's start for `[addr, addr + len)`, when the range lies inside it.
    fn at(&self, addr: u64, len: usize) -> Option<*mut u8> {
        let a = usize::try_from(addr).ok()?;
        (a.checked_add(len)? <= self.0.len).then(|| self.0.ptr.as_ptr().wrapping_add(a))
    }
}

impl iwarp::verbs::MemoryBackend for SharedMemory {
    fn contains(&self, addr: u64, len: u64) -> bool {
        usize::try_from(len).is_ok_and(|l| self.at(addr, l).is_some())
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> bool {
        match self.at(addr, data.len()) {
            Some(dst) => {
                // SAFETY: `dst..dst + data.len()` lies inside the live mapping (`at`), and
                // `data` is a Rust slice, so it cannot overlap it mutably; other lanes may
                // copy into the same octets at once (see the type's comment), never through
                // a reference.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
                true
            }
            None => false,
        }
    }

    fn read(&self, addr: u64, out: &mut [u8]) -> bool {
        match self.at(addr, out.len()) {
            Some(src) => {
                // SAFETY: as in `write`, reading `out.len()` octets inside the mapping into a
                // slice of our own.
                unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
                true
            }
            None => false,
        }
    }
}

impl Drop for HugepageMemory {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping created in `create_in`; no borrow of it can
        // outlive `self`.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iwarp::mem::MemoryTable;
    use iwarp::verbs::*;

    #[test]
    fn finds_hugetlbfs_and_page_size() {
        let text = "proc /proc proc rw 0 0\n\
                    nodev /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n\
                    nodev /mnt/huge1g hugetlbfs rw,pagesize=1024M 0 0\n";
        assert_eq!(
            find_hugetlbfs(text),
            Some(HugetlbfsMount {
                path: "/dev/hugepages".into(),
                page_size: 2 << 20
            })
        );
        assert_eq!(find_hugetlbfs("tmpfs /tmp tmpfs rw 0 0\n"), None);
        assert_eq!(parse_size("1024M"), Some(1 << 30));
    }

    /// Registers the backend with a verbs RNIC and places a peer Write into it.
    fn place_through_verbs(mem: HugepageMemory) {
        let page = mem.page_size() as u64;
        let mut attrs = RnicAttributes::default();
        attrs.page_sizes.push(page);
        let dev = RnicDevice::new("huge0", attrs);
        let mut rnic = dev.open(AddressingMode::Page, Box::new(mem), 7).unwrap();
        let ulp = UlpId(1);
        let pd = rnic.alloc_pd(ulp).unwrap();
        let (cq, _) = rnic.create_cq(ulp, 4).unwrap();
        let (qp, _) = rnic.create_qp(QpInit::new(pd, cq, cq)).unwrap();
        let access = Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        let mr = rnic
            .register_mr(&MrSpec {
                pbl: PageList::contiguous(0, page, page),
                base: TaggedBase::ZeroBased,
                pd,
                key: 1,
                remote_access: true,
                access,
            })
            .unwrap();
        let m = rnic.memory_mut();
        let r = m
            .resolve(mr, pd, qp.stream(), 100, 5, Access::REMOTE_WRITE)
            .unwrap();
        m.write(&r, 0, b"hello").unwrap();
        assert_eq!(&rnic.memory().bytes()[100..105], b"hello");
        assert!(rnic.memory().bytes()[..100].iter().all(|&b| b == 0));
    }

    #[test]
    fn file_mapping_backs_verbs_regions() {
        let dir = std::env::temp_dir();
        let mem = HugepageMemory::create_in(&dir, 5000, 4096).unwrap();
        assert_eq!(mem.bytes().len(), 8192);
        place_through_verbs(mem);
    }

    #[test]
    fn a_shared_mapping_is_the_same_octets_in_every_view() {
        use iwarp::verbs::MemoryBackend;
        let mem = SharedMemory::new(8192, false).unwrap();
        let (mut a, b) = (mem.view(), mem.view());
        assert!(a.contains(0, 8192) && !a.contains(8191, 2) && !a.contains(u64::MAX, 1));
        assert!(a.write(4096, b"lanes"));
        assert!(!a.write(8190, b"abc"), "nothing written past the end");
        let mut out = [0u8; 5];
        assert!(b.read(4096, &mut out));
        assert_eq!(&out, b"lanes");
        assert!(b.arena().is_none(), "no references into shared memory");
        let b2 = std::thread::spawn(move || {
            let mut b = b;
            assert!(b.write(0, b"other"));
            b
        })
        .join()
        .unwrap();
        assert!(a.read(0, &mut out));
        assert_eq!(&out, b"other");
        drop(mem);
        drop(a);
        assert!(b2.read(0, &mut out), "the mapping outlives the views");
        assert_eq!(&out, b"other");
    }

    #[test]
    fn hugetlbfs_mapping_backs_verbs_regions() {
        // testbed/setup reserves hugepages and mounts hugetlbfs.
        let mem = HugepageMemory::new(1).expect("hugetlbfs with a free hugepage");
        assert_eq!(mem.bytes().len(), mem.page_size());
        place_through_verbs(mem);
    }
}
