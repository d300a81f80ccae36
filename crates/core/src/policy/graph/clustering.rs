//! Clustering by network proximity (spec 05 §2): groups of nodes that communicate well, in which a
//! program's balancing messages stay.
//!
//! a) minimum cluster size m = ⌊0.3·N⌋ (at least 1; the spec states it for N ≤ 50 and we keep the
//! same rule above); b) a node broadcasts and the first m − 1 nodes to reply, with it, form S1;
//! c)–d) two more broadcasts from members give S2 and S3; e) Sc = S1 ∪ S2 ∪ S3; f)–g) repeat from a
//! node not yet covered until every node is in a cluster. Clusters may overlap.
//!
//! "Reply order" is round-trip latency order, ties broken by node name. Where the spec says "pick
//! any node" we pick deterministically: n0 is the first uncovered node (by id); n1 is the last of
//! S1 to reply to n0; n2 is the member of S2 farthest from n0 (round trip, ties by name) other than
//! n0 and n1 — each broadcast starts at the far edge of what is covered, so a cluster grows
//! outwards from n0.

use super::ClusterId;
use crate::model::NodeId;
use crate::model::latency::LatencyMatrix;

/// One proximity cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProximityCluster {
    /// `Sc1` is `ClusterId(0)`, `Sc2` is `ClusterId(1)`, …
    pub id: ClusterId,
    /// Members, by node id.
    pub members: Vec<NodeId>,
    /// The three broadcasting nodes n0, n1, n2 (fewer when the cluster is tiny).
    pub broadcasters: Vec<NodeId>,
}

/// Spec 05 §2 a): m = ⌊0.3·N⌋, at least 1.
pub fn min_cluster_size(n: usize) -> usize {
    (n * 3 / 10).max(1)
}

/// The other nodes in the order they answer a broadcast from `from`: by round-trip time, then
/// by name.
pub fn reply_order(latency: &LatencyMatrix, names: &[String], from: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..latency.len()).filter(|&i| i != from).collect();
    // Each node's round trip read once, not at every comparison (a lookup in the matrix's
    // pairs): the runtime clusters its live nodes again whenever they change.
    order.sort_by_cached_key(|&i| (latency.round_trip(from, i), &names[i]));
    order
}

/// b) The broadcaster and the first m − 1 nodes to reply, in reply order (broadcaster first).
pub fn broadcast(latency: &LatencyMatrix, names: &[String], from: usize, m: usize) -> Vec<usize> {
    std::iter::once(from)
        .chain(
            reply_order(latency, names, from)
                .into_iter()
                .take(m.saturating_sub(1)),
        )
        .collect()
}

/// Every proximity cluster of the nodes (names index like the matrix), with minimum size `m`.
pub fn proximity_clusters(
    latency: &LatencyMatrix,
    names: &[String],
    m: usize,
) -> Vec<ProximityCluster> {
    let n = latency.len();
    let mut covered = vec![false; n];
    let mut clusters = Vec::new();
    while let Some(n0) = covered.iter().position(|&c| !c) {
        let s1 = broadcast(latency, names, n0, m);
        let mut members = s1.clone();
        let mut broadcasters = vec![n0];
        if let Some(&n1) = s1.last().filter(|&&x| x != n0) {
            broadcasters.push(n1);
            let s2 = broadcast(latency, names, n1, m);
            let n2 = s2
                .iter()
                .copied()
                .filter(|&x| x != n0 && x != n1)
                .max_by(|&a, &b| {
                    latency
                        .round_trip(n0, a)
                        .cmp(&latency.round_trip(n0, b))
                        .then_with(|| names[b].cmp(&names[a]))
                });
            if let Some(n2) = n2 {
                broadcasters.push(n2);
                members.extend(broadcast(latency, names, n2, m));
            }
            members.extend(s2);
        }
        members.sort_unstable();
        members.dedup();
        for &x in &members {
            covered[x] = true;
        }
        clusters.push(ProximityCluster {
            id: ClusterId(clusters.len() as u32),
            members: members.into_iter().map(|i| NodeId(i as u32)).collect(),
            broadcasters: broadcasters.into_iter().map(|i| NodeId(i as u32)).collect(),
        });
    }
    clusters
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten nodes on a line, 1 ms per step: node i is |i − j| ms from node j.
    fn line(n: usize) -> (LatencyMatrix, Vec<String>) {
        let mut m = LatencyMatrix::uniform(n, 0);
        for a in 0..n {
            for b in 0..n {
                m.set(a, b, (a.abs_diff(b) as u64) * 1_000_000);
            }
        }
        (m, (0..n).map(|i| format!("n{i:02}")).collect())
    }

    #[test]
    fn replies_come_in_latency_order_with_ties_by_name() {
        let (m, names) = line(10);
        assert_eq!(reply_order(&m, &names, 5)[..4], [4, 6, 3, 7]);
        assert_eq!(min_cluster_size(36), 10);
        assert_eq!(min_cluster_size(2), 1);
    }

    #[test]
    fn clusters_grow_outwards_and_cover_every_node() {
        let (m, names) = line(20);
        // m = 6. S1 from n00 = {0,1,2,3,4,5}; n1 = 5 (last to reply). Replies to 5 come from
        // 4, 6, 3, 7, 2 → S2 = {5,4,6,3,7,2}; n2 = 7 (farthest from n00); S3 = {7,6,8,5,9,4}.
        let clusters = proximity_clusters(&m, &names, min_cluster_size(20));
        let all: std::collections::BTreeSet<_> =
            clusters.iter().flat_map(|c| c.members.clone()).collect();
        assert_eq!(all.len(), 20, "every node is in a cluster");
        assert_eq!(
            clusters[0].broadcasters,
            vec![NodeId(0), NodeId(5), NodeId(7)]
        );
        assert_eq!(
            clusters[0].members,
            (0..=9).map(NodeId).collect::<Vec<_>>(),
            "S1 ∪ S2 ∪ S3 = n00..n09"
        );
        assert_eq!(
            clusters[1].broadcasters[0],
            NodeId(10),
            "Sc2 starts at the first uncovered node"
        );
    }
}
