//! The connection manager's per-connection entries, kept by the TCP engine's slot index
//! ([`ConnId::index`]): a lookup on the per-visit path is one indexed load (no hashing, no
//! probe of a control group), and the entries of the engine's slots lie side by side.

use tcp::ConnId;

/// Values of type `T` by connection; an id of a slot's earlier connection finds nothing.
#[derive(Debug)]
pub(super) struct ConnTable<T> {
    slots: Vec<Option<(ConnId, T)>>,
    len: usize,
}

impl<T> Default for ConnTable<T> {
    fn default() -> Self {
        ConnTable {
            slots: Vec::new(),
            len: 0,
        }
    }
}

impl<T> ConnTable<T> {
    /// The value of `id`.
    #[inline]
    pub(super) fn get(&self, id: &ConnId) -> Option<&T> {
        match self.slots.get(id.index() as usize) {
            Some(Some((k, v))) if k == id => Some(v),
            _ => None,
        }
    }

    /// The value of `id`, mutably.
    #[inline]
    pub(super) fn get_mut(&mut self, id: &ConnId) -> Option<&mut T> {
        match self.slots.get_mut(id.index() as usize) {
            Some(Some((k, v))) if k == id => Some(v),
            _ => None,
        }
    }

    /// Whether `id` has a value.
    pub(super) fn contains_key(&self, id: &ConnId) -> bool {
        self.get(id).is_some()
    }

    /// Sets the value of `id`'s slot; returns what the slot held (for `id` or an earlier
    /// connection of the slot).
    pub(super) fn insert(&mut self, id: ConnId, value: T) -> Option<T> {
        let i = id.index() as usize;
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        let old = self.slots[i].replace((id, value)).map(|(_, v)| v);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Takes `id`'s value out.
    pub(super) fn remove(&mut self, id: &ConnId) -> Option<T> {
        let slot = self.slots.get_mut(id.index() as usize)?;
        if slot.as_ref().is_some_and(|(k, _)| k == id) {
            self.len -= 1;
            return slot.take().map(|(_, v)| v);
        }
        None
    }

    /// Connections with a value.
    pub(super) fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use tcp::{Config, Engine, Instant, StreamSocket};

    use super::*;

    /// Ids as the engine hands them out: `c` in the slot `a` had.
    fn ids() -> (ConnId, ConnId, ConnId) {
        let mut e: Engine<StreamSocket> = Engine::new(Config::default());
        let open = |e: &mut Engine<StreamSocket>, port: u16| {
            let local: SocketAddr = "10.0.0.1:0".parse().unwrap();
            let remote = SocketAddr::from(([10, 0, 0, 2], port));
            e.connect(
                Instant::from_millis(1),
                local,
                remote,
                StreamSocket::new(64, 64),
            )
            .unwrap()
        };
        let (a, b) = (open(&mut e, 1), open(&mut e, 2));
        e.abort(a).unwrap();
        (a, b, open(&mut e, 3))
    }

    #[test]
    fn a_reused_slot_does_not_find_the_earlier_connection() {
        let (a, b, c) = ids();
        assert_eq!(a.index(), c.index(), "the engine reused the slot");
        assert_ne!(a, c);
        let mut t = ConnTable::default();
        assert_eq!(t.insert(a, "a"), None);
        assert_eq!(t.insert(b, "b"), None);
        assert_eq!(t.len(), 2);
        assert_eq!(t.get(&a), Some(&"a"));
        assert_eq!(t.get(&c), None, "the slot's later connection");
        assert!(!t.contains_key(&c));
        assert_eq!(t.remove(&c), None);
        assert_eq!(t.len(), 2);
        assert_eq!(t.remove(&a), Some("a"));
        assert_eq!(t.remove(&a), None);
        assert_eq!(t.len(), 1);
        assert_eq!(t.insert(c, "c"), None);
        *t.get_mut(&c).unwrap() = "c2";
        assert_eq!(t.get(&c), Some(&"c2"));
        assert_eq!(t.get(&a), None);
        assert_eq!(t.insert(c, "c3"), Some("c2"));
        assert_eq!(t.len(), 2);
        assert_eq!(t.get(&b), Some(&"b"));
    }
}
