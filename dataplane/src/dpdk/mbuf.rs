//! One owned packet buffer (`rte_mbuf`).

use std::ffi::c_void;
use std::ptr::NonNull;

use super::mempool::Mempool;

/// The slab's release callback: a token given back goes on the slab's list
/// ([`ExtSlab::take_returned`]).
unsafe extern "C" fn collect_token(ctx: *mut c_void, token: u64) {
    // SAFETY: `ctx` is the list `ExtSlab::new` allocated, freed only after the slab was
    // closed (no release runs then); the slab's calls run on its owning thread, where no
    // reference to the list is held across them.
    unsafe { (*ctx.cast::<Vec<u64>>()).push(token) };
}

/// The shared-info records of the payloads a port lends to its mbufs as external buffers
/// ([`ExtSlab::attach`]): a fixed number, reused (no allocation per frame), each given back
/// by DPDK's free callback with the token of the payload it held. Not thread-safe: the
/// mbufs attached from a slab must be freed on the thread that owns it (a port's transmit
/// burst frees them there).
pub struct ExtSlab {
    raw: NonNull<dpdk_sys::dpdk_shim_ext_slab>,
    /// The tokens of the payloads no frame holds any more, not yet taken.
    returned: NonNull<Vec<u64>>,
}

/// What an [`ExtSlab`] counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExtSlabCounts {
    /// Payloads given back by the mbufs that carried them.
    pub returned: u64,
    /// Attachments refused because every record was in use (the caller copied instead).
    pub exhausted: u64,
    /// Records in use now (payloads still held by mbufs, or given back and not yet reaped).
    pub outstanding: u32,
}

// SAFETY: the slab moves with the port that owns it; the mbufs attached from it are freed
// by that port's transmit bursts (or dropped by its poll loop), which run on one thread at
// a time, the one that owns the port.
unsafe impl Send for ExtSlab {}

impl ExtSlab {
    /// A slab of `records` records; `None` when `records` is 0 or no memory is left.
    pub fn new(records: u32) -> Option<ExtSlab> {
        let returned = NonNull::from(Box::leak(Box::new(Vec::<u64>::with_capacity(
            records as usize,
        ))));
        // SAFETY: plain allocation; `collect_token` matches the callback's signature and
        // `returned` stays allocated until the slab is closed.
        let raw = unsafe {
            dpdk_sys::dpdk_shim_ext_slab_new(
                records,
                Some(collect_token),
                returned.as_ptr().cast::<c_void>(),
            )
        };
        match NonNull::new(raw) {
            Some(raw) => Some(ExtSlab { raw, returned }),
            None => {
                // SAFETY: from `Box::leak` above, never shared.
                drop(unsafe { Box::from_raw(returned.as_ptr()) });
                None
            }
        }
    }

    /// An mbuf of `pool` whose data are the payload's octets themselves, not a copy: the
    /// mbuf holds them until DPDK frees it (after the device sent the frame, or with it
    /// when it is dropped), which gives the record back to this slab and, once reaped, the
    /// payload's token to [`ExtSlab::take_returned`]. The buffer's IOVA is its address, so
    /// only for devices that read frames by virtual address. `None` when the pool is
    /// empty, every record is in use, or the payload is empty or longer than an mbuf can
    /// describe: the payload back then.
    pub fn attach<'p>(
        &mut self,
        pool: &Mempool,
        payload: tcp::Lent<'p>,
    ) -> Result<Mbuf, tcp::Lent<'p>> {
        // SAFETY: the engine keeps a lent payload allocated at the same address and
        // unchanged until its token is handed back (`tcp::Lent`), which happens only
        // after `take_returned` gave it out.
        unsafe { self.attach_octets(pool, payload.payload(), payload.token()) }.ok_or(payload)
    }

    /// [`ExtSlab::attach`] of a whole frame: `headers` written into the room in front of
    /// the payload ([`tcp::Lent::with_headers`]), and the mbuf's data the headers and the
    /// payload. The payload back when they do not fit the room (nothing written) or
    /// [`ExtSlab::attach`] would refuse it (the room written, which no frame holds).
    pub fn attach_with_headers<'p>(
        &mut self,
        pool: &Mempool,
        mut payload: tcp::Lent<'p>,
        headers: &[u8],
    ) -> Result<Mbuf, tcp::Lent<'p>> {
        let token = payload.token();
        let Some(frame) = payload.with_headers(headers) else {
            return Err(payload);
        };
        // SAFETY: the engine keeps a lent payload, and the headers written in its room,
        // allocated at the same address and unchanged until its token is handed back
        // (`tcp::Lent::with_headers`), which happens only after `take_returned` gave it out.
        unsafe { self.attach_octets(pool, frame, token) }.ok_or(payload)
    }

    /// [`ExtSlab::attach`] of `payload`'s octets, lent under `token`.
    ///
    /// # Safety
    /// The octets must stay allocated at the same address and unchanged until `token`
    /// comes out of [`ExtSlab::take_returned`] (or forever if it never does).
    pub unsafe fn attach_octets(
        &mut self,
        pool: &Mempool,
        payload: &[u8],
        token: u64,
    ) -> Option<Mbuf> {
        let len = u16::try_from(payload.len()).ok().filter(|&l| l > 0)?;
        let addr = payload.as_ptr().cast_mut().cast::<c_void>();
        // SAFETY: pool is a live pktmbuf pool and the slab live (freed only once its last
        // record came back); `addr` points at `len` octets that stay valid and unchanged
        // until `token` is reaped (the caller's promise), and DPDK only reads them.
        let raw = unsafe {
            dpdk_sys::dpdk_shim_pktmbuf_external(pool.as_ptr(), self.raw.as_ptr(), addr, len, token)
        };
        NonNull::new(raw).map(Mbuf)
    }

    /// Moves the tokens of the payloads no frame holds any more into `out`: the records
    /// DPDK's free callback gave back since the last call are reaped (free for reuse). The
    /// callback only lists them; a port calls this on its own turn, not in the PMD's burst.
    /// An attachment finding no free record reaps too (its tokens wait here).
    pub fn take_returned(&mut self, out: &mut Vec<u64>) {
        // SAFETY: a live slab, on its owning thread; no reference to the list is held
        // across the call.
        unsafe { dpdk_sys::dpdk_shim_ext_slab_reap(self.raw.as_ptr()) };
        // SAFETY: the list lives as long as the slab; the shim writes it only inside the
        // calls above and in `attach_octets`, not while this reference lives.
        out.append(unsafe { &mut *self.returned.as_ptr() });
    }

    /// The slab's counters.
    pub fn counts(&self) -> ExtSlabCounts {
        let mut c = ExtSlabCounts::default();
        // SAFETY: a live slab; the three pointers are valid for writes.
        unsafe {
            dpdk_sys::dpdk_shim_ext_slab_counts(
                self.raw.as_ptr(),
                &mut c.returned,
                &mut c.exhausted,
                &mut c.outstanding,
            )
        };
        c
    }
}

impl Drop for ExtSlab {
    /// Tokens not taken and those of frames still out are lost: the lender keeps their
    /// payloads allocated for good.
    fn drop(&mut self) {
        // SAFETY: a live slab, closed once: freed now, or by the free callback of its last
        // record in use, which releases nothing after the close.
        unsafe { dpdk_sys::dpdk_shim_ext_slab_close(self.raw.as_ptr()) };
        // SAFETY: from `Box::leak` in `new`; the closed slab no longer writes it.
        drop(unsafe { Box::from_raw(self.returned.as_ptr()) });
    }
}

impl std::fmt::Debug for ExtSlab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtSlab")
            .field("counts", &self.counts())
            .finish()
    }
}

/// An mbuf operation that does not fit the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MbufError {
    /// Not enough room in front of / behind the data, or not enough data to remove.
    #[error("mbuf: {op} of {need} bytes, only {have} available")]
    NoRoom {
        /// The operation (`append`, `prepend`, `adj`, `trim`).
        op: &'static str,
        /// Bytes asked for.
        need: usize,
        /// Bytes available.
        have: usize,
    },
}

/// An owned single-segment packet mbuf; freed to its pool on drop.
///
/// `repr(transparent)` over a non-null `rte_mbuf*`: a `[Mbuf]` has the layout of the
/// `struct rte_mbuf **` arrays the burst functions take, so ports pass `Vec<Mbuf>` storage
/// to DPDK directly.
#[repr(transparent)]
pub struct Mbuf(NonNull<dpdk_sys::rte_mbuf>);

// SAFETY: an mbuf is owned by exactly one `Mbuf`; DPDK allows an mbuf to be filled, sent or
// freed from any thread (pools are multi-producer/multi-consumer).
unsafe impl Send for Mbuf {}

impl Mbuf {
    /// Allocates an mbuf from `pool` holding `len` bytes (contents unspecified), or `None`
    /// when the pool is empty or `len` exceeds the buffer's room.
    pub fn alloc(pool: &Mempool, len: usize) -> Option<Mbuf> {
        // SAFETY: pool.as_ptr() is a live pktmbuf pool.
        let raw = unsafe { dpdk_sys::dpdk_shim_pktmbuf_alloc(pool.as_ptr()) };
        let mut m = Mbuf(NonNull::new(raw)?);
        if len > 0 {
            m.append(len).ok()?;
        }
        Some(m)
    }

    /// Appends `n` mbufs of `len` bytes each (contents unspecified) from `pool` to `out`
    /// with one bulk allocation; all or nothing: `false` (and `out` unchanged) when the
    /// pool has fewer than `n` free or `len` exceeds the buffer's room.
    pub fn alloc_bulk(pool: &Mempool, out: &mut Vec<Mbuf>, n: usize, len: usize) -> bool {
        let (Ok(count), Ok(len16)) = (u32::try_from(n), u16::try_from(len)) else {
            return false;
        };
        out.reserve(n);
        let base = out.len();
        // SAFETY: `out` has room for n more elements; Mbuf is repr(transparent) over a
        // non-null rte_mbuf pointer, so on success DPDK fills the spare capacity with n
        // valid, reset mbufs, which we then own.
        let ret = unsafe {
            let slots = out.as_mut_ptr().add(base).cast::<*mut dpdk_sys::rte_mbuf>();
            dpdk_sys::dpdk_shim_pktmbuf_alloc_bulk(pool.as_ptr(), slots, count)
        };
        if ret != 0 {
            return false;
        }
        // SAFETY: DPDK initialised the n slots after `base`.
        unsafe { out.set_len(base + n) };
        if out[base].tailroom() < len {
            out.truncate(base);
            return false;
        }
        for m in &mut out[base..] {
            // SAFETY: a freshly allocated mbuf we own: one empty segment whose tailroom
            // (the same for every mbuf of the pool) holds len bytes.
            unsafe {
                let h = m.0.as_ptr();
                (*h).data_len = len16;
                (*h).pkt_len = u32::from(len16);
            }
        }
        true
    }

    /// Frees the mbufs of `mbufs` with one call from the vector's own storage instead of a
    /// call each, leaving it empty with its capacity: one mempool put when every one of
    /// them is direct, unchained, of reference count 1 and of one pool, else DPDK's
    /// general bulk free (`rte_pktmbuf_free_bulk`: a chain's segments, indirect and
    /// external-buffer mbufs and shared ones freed as `rte_pktmbuf_free` frees them, each
    /// to its own pool).
    pub fn free_vec(mbufs: &mut Vec<Mbuf>) {
        let n = mbufs.len();
        if n == 0 {
            return;
        }
        let raw = mbufs.as_mut_ptr().cast::<*mut dpdk_sys::rte_mbuf>();
        // SAFETY: `Mbuf` is a transparent non-null `rte_mbuf*`, so the first n elements
        // are n live mbuf pointers we own; the length is set to 0 first, so none of them
        // is dropped or used again after DPDK frees it; each call frees at most
        // `u32::MAX` of them, from within the n.
        unsafe {
            mbufs.set_len(0);
            let mut at = 0;
            while at < n {
                let k = (n - at).min(u32::MAX as usize);
                free_raw(raw.add(at), k);
                at += k;
            }
        }
    }

    /// Gives up ownership, returning the raw mbuf (for burst calls).
    pub fn into_raw(self) -> *mut dpdk_sys::rte_mbuf {
        let p = self.0.as_ptr();
        std::mem::forget(self);
        p
    }

    /// Takes ownership of a raw mbuf; `None` for a null pointer.
    ///
    /// # Safety
    /// `raw` must be a valid, single-segment pktmbuf that nothing else owns or frees.
    pub unsafe fn from_raw(raw: *mut dpdk_sys::rte_mbuf) -> Option<Mbuf> {
        NonNull::new(raw).map(Mbuf)
    }

    /// The raw mbuf, still owned by `self`.
    pub fn as_ptr(&self) -> *mut dpdk_sys::rte_mbuf {
        self.0.as_ptr()
    }

    /// Length of the data in bytes (of the first segment: the whole frame of every mbuf
    /// this module hands out).
    pub fn len(&self) -> usize {
        usize::from(self.header().data_len)
    }

    /// True when the mbuf holds no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Shortens the data to `len` bytes (no-op if already shorter).
    pub fn truncate(&mut self, len: usize) {
        let cur = self.len();
        if len < cur {
            // Cannot fail: cur - len <= data_len.
            let _ = self.trim(cur - len);
        }
    }

    /// The 802.1Q TCI kept beside the frame rather than in it: the tag the device stripped
    /// on receive, or the one it is to insert on transmit (DPDK's VLAN offloads).
    pub fn offloaded_vlan(&self) -> Option<u16> {
        const FLAGS: u64 =
            dpdk_sys::RTE_MBUF_F_RX_VLAN_STRIPPED as u64 | dpdk_sys::RTE_MBUF_F_TX_VLAN;
        let h = self.header();
        (h.ol_flags & FLAGS != 0).then_some(h.vlan_tci)
    }

    /// Asks the device to insert an 802.1Q tag with `tci` when this frame is sent (the
    /// port must have the transmit VLAN offload enabled).
    pub fn set_tx_vlan(&mut self, tci: u16) {
        // SAFETY: self.0 is a live mbuf we own exclusively (&mut self); the flags word and
        // the TCI are plain fields of its header.
        unsafe {
            let h = self.0.as_ptr();
            (*h).ol_flags |= dpdk_sys::RTE_MBUF_F_TX_VLAN;
            (*h).vlan_tci = tci;
        }
    }

    /// The offload flags (`RTE_MBUF_F_*`): the device's verdicts on a received frame, the
    /// work asked of the device for one to send.
    pub fn ol_flags(&self) -> u64 {
        self.header().ol_flags
    }

    /// Appends the segments of `tails`, in order, to this mbuf's chain (the frame goes on
    /// with their bytes), walking the chain once. The caller keeps the chain within
    /// `u16::MAX` segments and `u32::MAX` octets.
    pub fn chain_all(&mut self, tails: impl IntoIterator<Item = Mbuf>) {
        let head = self.0.as_ptr();
        // SAFETY: `head` and every tail are live mbufs we own; each tail's segments are
        // linked after the chain's last one and counted in the head's nb_segs and pkt_len,
        // so the chain owns them (freed with this mbuf) and the tail is not freed itself
        // (into_raw).
        unsafe {
            let mut last = head;
            while !(*last).next.is_null() {
                last = (*last).next;
            }
            for tail in tails {
                let t = tail.into_raw();
                (*last).next = t;
                (*head).nb_segs += (*t).nb_segs;
                (*head).pkt_len += (*t).pkt_len;
                last = t;
                while !(*last).next.is_null() {
                    last = (*last).next;
                }
            }
        }
    }

    /// Asks the device for the transmit offloads of `t` (its flags ORed into the mbuf's,
    /// its header lengths) when this frame is sent; the port must have them enabled.
    pub fn set_tx_offload(&mut self, t: &TxOffload) {
        // SAFETY: self.0 is a live mbuf we own exclusively (&mut self); the shim writes
        // plain header fields.
        unsafe {
            dpdk_sys::dpdk_shim_mbuf_set_tx_offload(
                self.0.as_ptr(),
                t.flags,
                t.l2_len,
                t.l3_len,
                t.l4_len,
                t.tso_segsz,
            );
        }
    }

    /// The frame of this chained (multi-segment) mbuf in one mbuf from `pool`: the bytes
    /// of every segment in order, with the device's receive flags, packet type and stripped
    /// VLAN tag. `None` when the pool is empty or the frame exceeds its buffers' room.
    pub fn linearize(&self, pool: &Mempool) -> Option<Mbuf> {
        let total = usize::try_from(self.pkt_len()).ok()?;
        let mut out = Mbuf::alloc(pool, total)?;
        let dst = out.as_mut();
        let mut at = 0;
        let mut seg: *const dpdk_sys::rte_mbuf = self.0.as_ptr();
        while !seg.is_null() && at < total {
            // SAFETY: `seg` is this chain's head or a `next` link of it: live segments we
            // own through `self`; data_off and data_len lie within each segment's buffer.
            let bytes = unsafe {
                let h = &*seg;
                let p = h.buf_addr.cast::<u8>().add(usize::from(h.data_off));
                let n = usize::from(h.data_len).min(total - at);
                seg = h.next;
                std::slice::from_raw_parts(p, n)
            };
            dst[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        }
        if at != total {
            return None;
        }
        let h = self.header();
        // SAFETY: `out` is a fresh single-segment mbuf we own exclusively; these are plain
        // header fields.
        unsafe {
            let o = out.0.as_ptr();
            (*o).ol_flags = h.ol_flags;
            (*o).vlan_tci = h.vlan_tci;
            (*o).__bindgen_anon_1 = h.__bindgen_anon_1;
        }
        Some(out)
    }

    /// Number of segments in the chain (1 for every mbuf this module hands out).
    pub fn segments(&self) -> u16 {
        self.header().nb_segs
    }

    /// Total packet length over all segments.
    pub fn pkt_len(&self) -> u32 {
        self.header().pkt_len
    }

    /// Free bytes in front of the data.
    pub fn headroom(&self) -> usize {
        // SAFETY: self.0 is a live mbuf we own.
        usize::from(unsafe { dpdk_sys::dpdk_shim_pktmbuf_headroom(self.0.as_ptr()) })
    }

    /// Free bytes after the data.
    pub fn tailroom(&self) -> usize {
        // SAFETY: self.0 is a live mbuf we own.
        usize::from(unsafe { dpdk_sys::dpdk_shim_pktmbuf_tailroom(self.0.as_ptr()) })
    }

    /// Extends the data by `len` bytes at the end; returns the new bytes.
    pub fn append(&mut self, len: usize) -> Result<&mut [u8], MbufError> {
        let room = self.tailroom();
        let shim = dpdk_sys::dpdk_shim_pktmbuf_append;
        let p = self.resize("append", len, room, shim, |p| p.is_null())?;
        // SAFETY: DPDK returned a pointer to `len` bytes inside this mbuf's buffer, which
        // we borrow mutably through &mut self.
        Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) })
    }

    /// Extends the data by `len` bytes at the front (into the headroom); returns them.
    pub fn prepend(&mut self, len: usize) -> Result<&mut [u8], MbufError> {
        let room = self.headroom();
        let shim = dpdk_sys::dpdk_shim_pktmbuf_prepend;
        let p = self.resize("prepend", len, room, shim, |p| p.is_null())?;
        // SAFETY: DPDK returned a pointer to the `len` new bytes at the data start.
        Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) })
    }

    /// Removes `len` bytes from the front of the data (e.g. a header).
    pub fn adj(&mut self, len: usize) -> Result<(), MbufError> {
        let have = self.len();
        let shim = dpdk_sys::dpdk_shim_pktmbuf_adj;
        self.resize("adj", len, have, shim, |p| p.is_null())
            .map(|_| ())
    }

    /// Removes `len` bytes from the end of the data.
    pub fn trim(&mut self, len: usize) -> Result<(), MbufError> {
        let have = self.len();
        let shim = dpdk_sys::dpdk_shim_pktmbuf_trim;
        self.resize("trim", len, have, shim, |&ret| ret != 0)
            .map(|_| ())
    }

    /// Runs DPDK's data-length operation `op` (`shim`) for `len` bytes, of which `have`
    /// are there to take (room, or data); [`MbufError::NoRoom`] when `len` exceeds them or
    /// DPDK refuses (`refused` tells from its result).
    fn resize<R>(
        &mut self,
        op: &'static str,
        len: usize,
        have: usize,
        shim: unsafe extern "C" fn(*mut dpdk_sys::rte_mbuf, u16) -> R,
        refused: impl FnOnce(&R) -> bool,
    ) -> Result<R, MbufError> {
        let no_room = MbufError::NoRoom {
            op,
            need: len,
            have,
        };
        let n = u16::try_from(len).map_err(|_| no_room)?;
        if len > have {
            return Err(no_room);
        }
        // SAFETY: self.0 is a live single-segment mbuf we own, and `len` is within what
        // `op` may take of it (its headroom or tailroom, or its data length).
        let ret = unsafe { shim(self.0.as_ptr(), n) };
        if refused(&ret) {
            Err(no_room)
        } else {
            Ok(ret)
        }
    }

    /// The mbuf header. Fast-path fields are read in Rust (bindgen checked the layout
    /// against the C headers at compile time) rather than through a shim call.
    fn header(&self) -> &dpdk_sys::rte_mbuf {
        // SAFETY: self.0 is a live mbuf we own exclusively; nothing else writes its header
        // while we hold it, and the borrow is tied to &self.
        unsafe { self.0.as_ref() }
    }

    /// Start of the frame data (`rte_pktmbuf_mtod`: buffer address plus data offset).
    fn data_ptr(&self) -> *mut u8 {
        let h = self.header();
        // SAFETY: data_off is within the mbuf's buffer (DPDK keeps data_off <= buf_len).
        unsafe { h.buf_addr.cast::<u8>().add(usize::from(h.data_off)) }
    }
}

/// Frees the `n` (at most `u32::MAX`) mbufs at `raw`.
///
/// # Safety
/// Each is a live mbuf the caller owns and nothing uses after this.
unsafe fn free_raw(raw: *mut *mut dpdk_sys::rte_mbuf, n: usize) {
    // SAFETY: the caller's promise; n fits in u32.
    unsafe { dpdk_sys::dpdk_shim_pktmbuf_free_burst(raw, n as u32) };
}

impl AsRef<[u8]> for Mbuf {
    /// The first segment's data (the whole frame: ports only hand out single segments).
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the data start points at data_len initialised bytes inside the mbuf's
        // buffer, which lives as long as we own the mbuf; &self prevents mutation.
        unsafe { std::slice::from_raw_parts(self.data_ptr(), self.len()) }
    }
}

impl AsMut<[u8]> for Mbuf {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_ref`; &mut self gives exclusive access to the bytes.
        unsafe { std::slice::from_raw_parts_mut(self.data_ptr(), self.len()) }
    }
}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // SAFETY: we own the mbuf and nothing uses it after this.
        unsafe { dpdk_sys::dpdk_shim_pktmbuf_free(self.0.as_ptr()) };
    }
}

impl std::fmt::Debug for Mbuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mbuf")
            .field("len", &self.len())
            .field("headroom", &self.headroom())
            .field("tailroom", &self.tailroom())
            .finish()
    }
}

/// What the device is to do for one transmitted TCP frame: `RTE_MBUF_F_TX_*` flags and the
/// header lengths the flags need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxOffload {
    /// `RTE_MBUF_F_TX_*` flags.
    pub flags: u64,
    /// Layer-2 header length (the tag included when it is in the frame).
    pub l2_len: u16,
    /// IP header length.
    pub l3_len: u16,
    /// TCP header length.
    pub l4_len: u16,
    /// Payload octets per segment the device cuts (0: no TSO).
    pub tso_segsz: u16,
}
