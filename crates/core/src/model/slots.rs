//! Records by dense id where an id can be *retired*: its record is dropped and the id stays
//! taken, at the cost of one null pointer.
//!
//! A long-lived server numbers its applications densely (ids index its vectors and never come
//! back), and purges the jobs that ended long ago. Holding each retired id's record, even emptied,
//! costs its fixed size for the server's life — hundreds of bytes per purged job, a gigabyte per
//! million. Each slot here is a `Option<Box<T>>`: 8 bytes, null once retired.

/// Records of type `T` by dense id (`0..len()`); a retired id has none.
#[derive(Clone, Debug)]
pub struct Slots<T> {
    items: Vec<Option<Box<T>>>,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots { items: Vec::new() }
    }
}

impl<T> Slots<T> {
    /// How many ids were given, retired ones included: the next id.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether no id was ever given.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The record of id `i`: `None` if the id was never given or is retired.
    pub fn get(&self, i: usize) -> Option<&T> {
        self.items.get(i).and_then(|s| s.as_deref())
    }

    /// The record of id `i`, to change.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.items.get_mut(i).and_then(|s| s.as_deref_mut())
    }

    /// Gives the next id to `record`; returns the id.
    pub fn push(&mut self, record: T) -> usize {
        self.items.push(Some(Box::new(record)));
        self.items.len() - 1
    }

    /// Takes the next id retired at once (a record dropped before, e.g. by a restart that does
    /// not rebuild it); returns the id.
    pub fn push_retired(&mut self) -> usize {
        self.items.push(None);
        self.items.len() - 1
    }

    /// Drops id `i`'s record; the id stays taken. Returns the record, if it had one.
    pub fn retire(&mut self, i: usize) -> Option<T> {
        self.items.get_mut(i).and_then(Option::take).map(|b| *b)
    }

    /// Whether id `i` was given and retired.
    pub fn is_retired(&self, i: usize) -> bool {
        self.items.get(i).is_some_and(Option::is_none)
    }

    /// Makes room for `more` ids at once.
    pub fn reserve_exact(&mut self, more: usize) {
        self.items.reserve_exact(more);
    }

    /// Every record not retired, with its id, in id order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (usize, &T)> {
        self.items
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_deref().map(|r| (i, r)))
    }

    /// The records of ids `from..` not retired, with their ids.
    pub fn iter_from(&self, from: usize) -> impl Iterator<Item = (usize, &T)> {
        self.items
            .iter()
            .enumerate()
            .skip(from)
            .filter_map(|(i, s)| s.as_deref().map(|r| (i, r)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retired_id_stays_taken_and_has_no_record() {
        let mut s = Slots::default();
        assert_eq!(s.push("a".to_string()), 0);
        assert_eq!(s.push("b".to_string()), 1);
        assert_eq!(s.retire(0).as_deref(), Some("a"));
        assert_eq!(s.retire(0), None, "retired twice");
        assert_eq!(s.get(0), None);
        assert!(s.is_retired(0));
        assert!(!s.is_retired(1) && !s.is_retired(7));
        assert_eq!(s.push_retired(), 2);
        assert_eq!(s.push("d".to_string()), 3, "ids go on after retired ones");
        assert_eq!(s.len(), 4);
        let live: Vec<(usize, &str)> = s.iter().map(|(i, r)| (i, r.as_str())).collect();
        assert_eq!(live, [(1, "b"), (3, "d")]);
        let from: Vec<usize> = s.iter_from(2).map(|(i, _)| i).collect();
        assert_eq!(from, [3]);
        s.get_mut(1).expect("not retired").push('!');
        assert_eq!(s.get(1).map(String::as_str), Some("b!"));
    }

    #[test]
    fn a_slot_costs_one_pointer() {
        assert_eq!(
            std::mem::size_of::<Option<Box<[u8; 600]>>>(),
            std::mem::size_of::<usize>()
        );
    }
}
