//! The application's own memory as the RNIC's backend: addresses are the application's
//! virtual addresses, and only what it registered is backed (page by page: a region's page
//! list names whole pages). DDP places straight into these buffers; nothing is copied
//! through a private arena.
//!
//! Only the poll thread touches the backend (placement, and registration as a control job
//! run between iterations), so a deregistration can never race a placement.

use std::collections::BTreeMap;

use iwarp::mem::MemoryBackend;

/// Page granularity of backed ranges.
pub const PAGE: u64 = 4096;

/// The application's registered memory.
#[derive(Debug, Default)]
pub struct AppMemory {
    /// Backed page ranges `[start, end)` with how many registrations hold each.
    holds: BTreeMap<(u64, u64), u32>,
    /// The union of `holds`, as disjoint sorted intervals `start -> end`.
    merged: BTreeMap<u64, u64>,
}

/// `[addr, addr + len)` rounded out to whole pages; `None` when it wraps.
pub fn page_span(addr: u64, len: u64) -> Option<(u64, u64)> {
    let start = addr - addr % PAGE;
    let end = addr.checked_add(len.max(1))?.checked_add(PAGE - 1)? / PAGE * PAGE;
    Some((start, end))
}

impl AppMemory {
    /// An empty address space.
    pub fn new() -> AppMemory {
        AppMemory::default()
    }

    fn remerge(&mut self) {
        self.merged.clear();
        let mut cur: Option<(u64, u64)> = None;
        for &(s, e) in self.holds.keys() {
            cur = match cur {
                Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
                Some((cs, ce)) => {
                    self.merged.insert(cs, ce);
                    Some((s, e))
                }
                None => Some((s, e)),
            };
        }
        if let Some((cs, ce)) = cur {
            self.merged.insert(cs, ce);
        }
    }

    /// A pointer to `addr` when `[addr, addr + len)` is backed.
    fn backed(&self, addr: u64, len: u64) -> Option<*mut u8> {
        let end = addr.checked_add(len)?;
        let (_, &e) = self.merged.range(..=addr).next_back()?;
        (end <= e).then_some(addr as usize as *mut u8)
    }
}

impl MemoryBackend for AppMemory {
    fn contains(&self, addr: u64, len: u64) -> bool {
        self.backed(addr, len).is_some()
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> bool {
        let Some(dst) = self.backed(addr, data.len() as u64) else {
            return false;
        };
        // SAFETY: `dst..dst + data.len()` lies in pages of a buffer the application
        // registered and must keep allocated until it deregisters it (the verbs contract);
        // deregistration runs on this same thread, so the range cannot be released during the
        // copy. The application may read the buffer concurrently, as it may read a buffer a
        // NIC writes by DMA; no Rust reference to its memory is created.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        true
    }

    fn read(&self, addr: u64, out: &mut [u8]) -> bool {
        let Some(src) = self.backed(addr, out.len() as u64) else {
            return false;
        };
        // SAFETY: as in `write`: a registered, live range of the application's memory,
        // copied with raw pointers into our own buffer.
        unsafe { std::ptr::copy_nonoverlapping(src.cast_const(), out.as_mut_ptr(), out.len()) };
        true
    }

    fn back(&mut self, addr: u64, len: u64) -> bool {
        let Some(span) = page_span(addr, len) else {
            return false;
        };
        *self.holds.entry(span).or_insert(0) += 1;
        self.remerge();
        true
    }

    fn unback(&mut self, addr: u64, len: u64) -> bool {
        let Some(span) = page_span(addr, len) else {
            return false;
        };
        match self.holds.get_mut(&span) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                self.holds.remove(&span);
            }
            None => return false,
        }
        self.remerge();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_pages_are_backed_until_their_last_registration_goes() {
        let mut buf = vec![0u8; 3 * PAGE as usize];
        let base = buf.as_mut_ptr() as u64;
        let mut m = AppMemory::new();
        assert!(!m.contains(base, 1));
        assert!(m.back(base + 10, 20));
        assert!(
            m.back(base + 10, 20),
            "a second registration of the same buffer"
        );
        let (s, e) = page_span(base + 10, 20).unwrap();
        assert!(m.contains(s, e - s));
        assert!(!m.contains(s, e - s + 1));
        assert!(m.write(base + 10, b"hello"));
        assert_eq!(&buf[10..15], b"hello");
        let mut out = [0u8; 5];
        assert!(m.read(base + 10, &mut out));
        assert_eq!(&out, b"hello");
        assert!(m.unback(base + 10, 20));
        assert!(
            m.contains(base + 10, 20),
            "still held by the other registration"
        );
        assert!(m.unback(base + 10, 20));
        assert!(!m.contains(base + 10, 20));
        assert!(!m.write(base + 10, b"x"));
        assert!(!m.unback(base + 10, 20));
    }

    #[test]
    fn adjacent_registrations_merge_and_wrapping_ones_are_refused() {
        let mut m = AppMemory::new();
        assert!(m.back(0x10000, PAGE));
        assert!(m.back(0x11000, PAGE));
        assert!(m.contains(0x10800, PAGE), "across the two pages");
        assert!(!m.back(u64::MAX - 10, 100));
    }
}
