//! A gather list held inline when it has one element, the common case of the verbs' WRs
//! (a Write or Send from one registered buffer), and on the heap beyond: posting such a
//! WR allocates nothing.

use core::ops::Deref;

use super::stag::Sge;

/// A scatter/gather list: a sequence of [`Sge`]s that stores a single element inline.
/// It reads as a slice (`Deref<Target = [Sge]>`); build it from one [`Sge`], an array, a
/// `Vec` or an iterator.
#[derive(Debug, Clone, Default)]
pub struct Sgl(Repr);

#[derive(Debug, Clone, Default)]
enum Repr {
    #[default]
    Empty,
    One(Sge),
    Many(Vec<Sge>),
}

impl Sgl {
    /// The empty list.
    pub const fn new() -> Self {
        Sgl(Repr::Empty)
    }

    /// A list of the one element `sge` (no allocation).
    pub const fn one(sge: Sge) -> Self {
        Sgl(Repr::One(sge))
    }

    /// The elements as a slice.
    pub fn as_slice(&self) -> &[Sge] {
        match &self.0 {
            Repr::Empty => &[],
            Repr::One(s) => core::slice::from_ref(s),
            Repr::Many(v) => v,
        }
    }

    /// Appends `sge` (the list moves to the heap at its second element).
    pub fn push(&mut self, sge: Sge) {
        self.0 = match core::mem::take(&mut self.0) {
            Repr::Empty => Repr::One(sge),
            Repr::One(first) => Repr::Many(vec![first, sge]),
            Repr::Many(mut v) => {
                v.push(sge);
                Repr::Many(v)
            }
        };
    }
}

impl Deref for Sgl {
    type Target = [Sge];

    fn deref(&self) -> &[Sge] {
        self.as_slice()
    }
}

impl PartialEq for Sgl {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Sgl {}

impl PartialEq<Vec<Sge>> for Sgl {
    fn eq(&self, other: &Vec<Sge>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl PartialEq<[Sge]> for Sgl {
    fn eq(&self, other: &[Sge]) -> bool {
        self.as_slice() == other
    }
}

impl From<Sge> for Sgl {
    fn from(sge: Sge) -> Self {
        Sgl::one(sge)
    }
}

impl From<Vec<Sge>> for Sgl {
    fn from(v: Vec<Sge>) -> Self {
        match v.as_slice() {
            [] => Sgl::new(),
            [s] => Sgl::one(*s),
            _ => Sgl(Repr::Many(v)),
        }
    }
}

impl From<&[Sge]> for Sgl {
    fn from(s: &[Sge]) -> Self {
        match s {
            [] => Sgl::new(),
            [one] => Sgl::one(*one),
            _ => Sgl(Repr::Many(s.to_vec())),
        }
    }
}

impl<const N: usize> From<[Sge; N]> for Sgl {
    fn from(a: [Sge; N]) -> Self {
        Sgl::from(&a[..])
    }
}

impl From<Sgl> for Vec<Sge> {
    fn from(s: Sgl) -> Self {
        match s.0 {
            Repr::Empty => Vec::new(),
            Repr::One(one) => vec![one],
            Repr::Many(v) => v,
        }
    }
}

impl FromIterator<Sge> for Sgl {
    fn from_iter<I: IntoIterator<Item = Sge>>(iter: I) -> Self {
        let mut sgl = Sgl::new();
        for s in iter {
            sgl.push(s);
        }
        sgl
    }
}

impl<'a> IntoIterator for &'a Sgl {
    type Item = &'a Sge;
    type IntoIter = core::slice::Iter<'a, Sge>;

    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::STag;

    fn sge(i: u32) -> Sge {
        Sge {
            stag: STag(0x100 + i),
            to: u64::from(i) * 4096,
            len: 64 + i,
        }
    }

    #[test]
    fn one_element_stays_inline_and_more_go_to_the_heap() {
        let mut l = Sgl::new();
        assert!(l.is_empty());
        l.push(sge(0));
        assert!(matches!(l.0, Repr::One(_)));
        assert_eq!(l.as_slice(), &[sge(0)]);
        l.push(sge(1));
        l.push(sge(2));
        assert!(matches!(l.0, Repr::Many(_)));
        assert_eq!(l, vec![sge(0), sge(1), sge(2)]);
        assert_eq!(Vec::from(l), vec![sge(0), sge(1), sge(2)]);
    }

    #[test]
    fn the_inline_element_costs_no_room_over_a_vec() {
        // A WR carrying an `Sgl` is no larger than one carrying a `Vec` (every WR is
        // moved through several queues).
        assert!(core::mem::size_of::<Sgl>() <= core::mem::size_of::<Vec<Sge>>());
    }

    #[test]
    fn conversions_keep_the_elements_in_order() {
        for n in 0..4 {
            let v: Vec<Sge> = (0..n).map(sge).collect();
            let from_vec = Sgl::from(v.clone());
            assert_eq!(from_vec, v);
            assert_eq!(Sgl::from(v.as_slice()), v);
            assert_eq!(v.iter().copied().collect::<Sgl>(), v);
            assert_eq!((&from_vec).into_iter().count(), n as usize);
            assert_eq!(matches!(from_vec.0, Repr::One(_)), n == 1);
        }
        assert_eq!(Sgl::from([sge(5), sge(6)]), vec![sge(5), sge(6)]);
        assert_eq!(Sgl::from(sge(7)), Sgl::one(sge(7)));
        assert_ne!(Sgl::one(sge(7)), Sgl::one(sge(8)));
    }
}
