//! Nodes noted since the last take, each once: how a reader that keeps something per node finds
//! the few nodes to look at again instead of visiting every node at every event.
//!
//! Noting is O(1) and taking is O(the nodes listed); a list nobody takes holds at most every
//! node once. Each list has one reader: taking it empties it, so a second reader of the same
//! changes needs a list of its own.

use super::NodeId;

/// Nodes listed at most once each until [`NodeList::take`].
#[derive(Clone, Debug, Default)]
pub struct NodeList {
    list: Vec<NodeId>,
    /// `listed[i]`: node i is in `list`.
    listed: Vec<bool>,
}

impl NodeList {
    /// Lists `node`, unless it already is.
    pub fn note(&mut self, node: NodeId) {
        let i = node.index();
        if self.listed.len() <= i {
            self.listed.resize(i + 1, false);
        }
        if !self.listed[i] {
            self.listed[i] = true;
            self.list.push(node);
        }
    }

    /// Moves into `into` (emptied first) the nodes listed since the last call, each once, in
    /// the order first noted, and starts a new list.
    pub fn take(&mut self, into: &mut Vec<NodeId>) {
        into.clear();
        std::mem::swap(into, &mut self.list);
        for n in into.iter() {
            self.listed[n.index()] = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node noted twice is taken once; a taken list starts afresh.
    #[test]
    fn each_node_is_taken_once_per_noting_round() {
        let mut l = NodeList::default();
        let mut got = vec![NodeId(9)];
        l.note(NodeId(3));
        l.note(NodeId(1));
        l.note(NodeId(3));
        l.take(&mut got);
        assert_eq!(got, vec![NodeId(3), NodeId(1)]);
        l.take(&mut got);
        assert!(got.is_empty());
        l.note(NodeId(3));
        l.take(&mut got);
        assert_eq!(got, vec![NodeId(3)]);
    }
}
