//! The profile's stack table: every distinct stack stored once, its frames in one shared arena,
//! and found again through a table of ids hashed by their frames. A long recording makes new
//! distinct stacks for as long as it runs (compiler threads above all), so each costs its frames
//! and a few bytes, not two heap-allocated copies.

use super::{FrameId, StackId};
use hashbrown::HashTable;
use std::hash::BuildHasher;

#[derive(Clone, Default)]
pub struct Stacks {
    /// The frames of every stack, root first, one stack after another.
    arena: Vec<FrameId>,
    /// Where each stack ends in `arena`; it starts where the one before ends.
    ends: Vec<usize>,
    index: HashTable<StackId>,
    hasher: foldhash::fast::RandomState,
}

impl Stacks {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Every stack in id order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[FrameId]> + '_ {
        (0..self.ends.len() as StackId).map(|id| stack(&self.arena, &self.ends, id))
    }

    /// The id of the stack `root_to_leaf`, added if new.
    pub fn intern(&mut self, root_to_leaf: &[FrameId]) -> StackId {
        let hash = self.hasher.hash_one(root_to_leaf);
        let Stacks {
            arena,
            ends,
            index,
            hasher,
        } = self;
        if let Some(&id) = index.find(hash, |&id| stack(arena, ends, id) == root_to_leaf) {
            return id;
        }
        let id = ends.len() as StackId;
        arena.extend_from_slice(root_to_leaf);
        ends.push(arena.len());
        index.insert_unique(hash, id, |&id| hasher.hash_one(stack(arena, ends, id)));
        id
    }
}

/// Stack `id` of the arena; `id` must be known.
fn stack<'a>(arena: &'a [FrameId], ends: &[usize], id: StackId) -> &'a [FrameId] {
    let i = id as usize;
    let start = if i == 0 { 0 } else { ends[i - 1] };
    &arena[start..ends[i]]
}

impl std::ops::Index<usize> for Stacks {
    type Output = [FrameId];

    fn index(&self, i: usize) -> &[FrameId] {
        stack(&self.arena, &self.ends, i as StackId)
    }
}

impl PartialEq for Stacks {
    fn eq(&self, other: &Self) -> bool {
        self.arena == other.arena && self.ends == other.ends
    }
}

impl std::fmt::Debug for Stacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stack_is_stored_once_and_found_again() {
        let mut s = Stacks::default();
        let a = s.intern(&[1, 2, 3]);
        let b = s.intern(&[1, 2]);
        let e = s.intern(&[]);
        assert_eq!(
            (s.intern(&[1, 2, 3]), s.intern(&[1, 2]), s.intern(&[])),
            (a, b, e)
        );
        assert_eq!((a, b, e), (0, 1, 2));
        assert_eq!(s.len(), 3);
        assert_eq!(&s[0], &[1, 2, 3]);
        assert_eq!(&s[1], &[1, 2]);
        assert!(s[2].is_empty());
        let all: Vec<&[FrameId]> = s.iter().collect();
        assert_eq!(all, vec![&[1, 2, 3][..], &[1, 2], &[]]);
        assert_eq!(s.arena.len(), 5);
        for i in 0..1000u32 {
            assert_eq!(s.intern(&[7, i]), 3 + i);
        }
        assert_eq!(s.intern(&[7, 500]), 503);
    }
}
