//! The handle of one connection: its slot in the engine's table and the slot's generation.

/// Handle of one connection. Stale handles (of closed connections) are detected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl ConnId {
    /// The connection's slot in the engine's table (reused after the connection is gone;
    /// the id as a whole is not).
    pub fn index(self) -> u32 {
        self.index
    }

    /// The id of slot `index`, first generation (unit tests outside the engine).
    #[cfg(test)]
    pub(crate) fn for_tests(index: u32) -> ConnId {
        ConnId {
            index,
            generation: 0,
        }
    }
}
