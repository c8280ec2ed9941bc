//! The profile's stack table, stored as a trie: a node is (parent node, frame) and stands for the
//! stack from the root down to it, so a new stack costs only the frames where it leaves a known
//! one. A long recording makes new distinct stacks for as long as it runs (the JIT compiler
//! threads' deep C++ paths above all), and those differ from known ones in their last few frames.
//! Past a limit, a stack that would need new nodes is cut after its longest known prefix, which
//! bounds memory for any duration.

use super::{FrameId, StackId};
use hashbrown::HashTable;
use std::hash::BuildHasher;

/// The parent of top-level nodes, and the "node" of the empty stack.
const ROOT: u32 = u32::MAX;
/// No stack ends at this node.
const NONE: StackId = StackId::MAX;

#[derive(Clone)]
pub struct Stacks {
    /// (parent, frame) of every node.
    nodes: Vec<(u32, FrameId)>,
    /// Node ids, hashed by (parent, frame).
    children: HashTable<u32>,
    /// The stack that ends at each node, or `NONE`.
    stack_at: Vec<StackId>,
    /// The stack that has no frames, or `NONE`.
    empty: StackId,
    /// The last node of each stack (`ROOT` for the empty stack).
    leaves: Vec<u32>,
    hasher: foldhash::fast::RandomState,
}

impl Default for Stacks {
    fn default() -> Self {
        Stacks {
            nodes: Vec::new(),
            children: HashTable::new(),
            stack_at: Vec::new(),
            empty: NONE,
            leaves: Vec::new(),
            hasher: Default::default(),
        }
    }
}

impl Stacks {
    pub fn len(&self) -> usize {
        self.leaves.len()
    }

    pub fn is_empty(&self) -> bool {
        self.leaves.is_empty()
    }

    /// Stack `id`'s frames from the leaf up to the root; `id` must be known.
    pub fn leaf_to_root(&self, id: StackId) -> impl Iterator<Item = FrameId> + '_ {
        let mut node = self.leaves[id as usize];
        std::iter::from_fn(move || {
            let &(parent, frame) = self.nodes.get(node as usize)?;
            node = parent;
            Some(frame)
        })
    }

    /// Stack `id`'s frames, root first; `id` must be known.
    pub fn frames(&self, id: StackId) -> Vec<FrameId> {
        let mut frames: Vec<FrameId> = self.leaf_to_root(id).collect();
        frames.reverse();
        frames
    }

    /// Every stack in id order, root first.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Vec<FrameId>> + '_ {
        (0..self.leaves.len() as StackId).map(|id| self.frames(id))
    }

    /// Every node of the trie in id order as (parent, frame), a parent always before its
    /// children; top-level nodes have no parent.
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = (Option<u32>, FrameId)> + '_ {
        self.nodes
            .iter()
            .map(|&(parent, frame)| ((parent != ROOT).then_some(parent), frame))
    }

    /// The node stack `id` ends at (`None` for the empty stack); `id` must be known.
    pub fn leaf_node(&self, id: StackId) -> Option<u32> {
        let node = self.leaves[id as usize];
        (node != ROOT).then_some(node)
    }

    /// The id of the stack `root_to_leaf`, added if new.
    pub fn intern(&mut self, root_to_leaf: &[FrameId]) -> StackId {
        self.intern_within(root_to_leaf, usize::MAX, 0).0
    }

    /// The id of the stack `root_to_leaf`, added if new while there are fewer than `limit`
    /// stacks. Past that, a new stack is cut after its longest known prefix (its path through the
    /// known nodes) and ends in `marker` instead; the flag says it was cut. A cut stack adds at
    /// most one node to the known ones, so memory stays bounded however long a recording runs.
    pub fn intern_within(
        &mut self,
        root_to_leaf: &[FrameId],
        limit: usize,
        marker: FrameId,
    ) -> (StackId, bool) {
        let full = self.leaves.len() >= limit;
        let mut node = ROOT;
        for &frame in root_to_leaf {
            node = match self.child(node, frame) {
                Some(child) => child,
                None if full => return (self.cut_at(node, marker), true),
                None => self.add_child(node, frame),
            };
        }
        match self.stack_at(node) {
            NONE if full => (self.cut_at(node, marker), true),
            _ => (self.stack_ending_at(node), false),
        }
    }

    /// The stack of `node`'s path followed by `marker`.
    fn cut_at(&mut self, node: u32, marker: FrameId) -> StackId {
        let cut = match self.child(node, marker) {
            Some(child) => child,
            None => self.add_child(node, marker),
        };
        self.stack_ending_at(cut)
    }

    fn stack_at(&self, node: u32) -> StackId {
        self.stack_at
            .get(node as usize)
            .copied()
            .unwrap_or(self.empty)
    }

    fn child(&self, parent: u32, frame: FrameId) -> Option<u32> {
        let hash = self.hasher.hash_one((parent, frame));
        let nodes = &self.nodes;
        self.children
            .find(hash, |&n| nodes[n as usize] == (parent, frame))
            .copied()
    }

    fn add_child(&mut self, parent: u32, frame: FrameId) -> u32 {
        let id = self.nodes.len() as u32;
        self.nodes.push((parent, frame));
        self.stack_at.push(NONE);
        let (nodes, hasher) = (&self.nodes, &self.hasher);
        self.children
            .insert_unique(hasher.hash_one((parent, frame)), id, |&n| {
                hasher.hash_one(nodes[n as usize])
            });
        id
    }

    fn stack_ending_at(&mut self, node: u32) -> StackId {
        let slot = match self.stack_at.get_mut(node as usize) {
            Some(slot) => slot,
            None => &mut self.empty,
        };
        if *slot == NONE {
            *slot = self.leaves.len() as StackId;
            self.leaves.push(node);
        }
        *slot
    }
}

impl PartialEq for Stacks {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
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
        assert_eq!(s.frames(0), [1, 2, 3]);
        assert_eq!(s.frames(1), [1, 2]);
        assert!(s.frames(2).is_empty());
        assert_eq!(s.leaf_to_root(0).collect::<Vec<_>>(), [3, 2, 1]);
        let all: Vec<Vec<FrameId>> = s.iter().collect();
        assert_eq!(all, vec![vec![1, 2, 3], vec![1, 2], vec![]]);
        assert_eq!(s.nodes.len(), 3, "[1, 2] is a prefix of [1, 2, 3]");
        let nodes: Vec<_> = s.nodes().collect();
        assert_eq!(nodes, [(None, 1), (Some(0), 2), (Some(1), 3)]);
        assert_eq!(
            (s.leaf_node(a), s.leaf_node(b), s.leaf_node(e)),
            (Some(2), Some(1), None)
        );
        for i in 0..1000u32 {
            assert_eq!(s.intern(&[1, 2, 7, i]), 3 + i);
        }
        assert_eq!(s.intern(&[1, 2, 7, 500]), 503);
        assert_eq!(
            s.nodes.len(),
            3 + 1 + 1000,
            "only the new frames are stored"
        );
    }

    #[test]
    fn past_the_limit_new_stacks_are_cut_after_their_known_prefix() {
        const CUT: FrameId = 99;
        let mut s = Stacks::default();
        assert_eq!(s.intern_within(&[1, 2, 3], 2, CUT), (0, false));
        assert_eq!(s.intern_within(&[1, 4], 2, CUT), (1, false));
        // Full: known stacks are still found; a new one is cut where it leaves the known paths,
        // and all that leave at the same place share the cut.
        assert_eq!(s.intern_within(&[1, 2, 3], 2, CUT), (0, false));
        let (a, cut) = s.intern_within(&[1, 2, 5, 6], 2, CUT);
        assert!(cut);
        assert_eq!(s.frames(a), [1, 2, CUT]);
        assert_eq!(s.intern_within(&[1, 2, 8], 2, CUT), (a, true));
        assert_eq!(
            s.intern_within(&[1, 2], 2, CUT),
            (a, true),
            "new, though known nodes"
        );
        let (b, _) = s.intern_within(&[7], 2, CUT);
        assert_eq!(s.frames(b), [CUT]);
        let nodes = s.nodes.len();
        for i in 100..1100 {
            s.intern_within(&[1, 2, 3, i, i], 2, CUT);
        }
        assert_eq!(s.nodes.len(), nodes + 1, "one cut node below [1, 2, 3]");
    }
}
