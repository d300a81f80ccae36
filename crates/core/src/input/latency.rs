//! Latency files (TOML): the one-way message latency between nodes of a cluster, for the graph
//! simulator and proximity clustering (spec 05 §2). See `examples/latency-pcddb-paper.toml`.
//!
//! ```toml
//! default = "200us"          # optional: every pair not listed below
//! [[group]]                  # every pair of nodes inside the group
//! nodes = ["dual-1", "dual-2", "dual-3"]
//! latency = "50us"
//! [[pair]]                   # one pair (both directions)
//! between = ["dual-1", "eight-1"]
//! latency = "120us"
//! ```
//!
//! A pair names two different nodes (a node's latency to itself is 0); a group names at least two,
//! each once; a file sets at most [`MAX_LATENCY_PAIRS`] pairs (a group of `n` nodes sets
//! `n(n−1)/2`). Entries apply in file order, so a later `group` or `pair` overrides an earlier one. Without
//! `default`, unlisted pairs keep the cluster's own figures ([`LatencyMatrix::from_cluster`]:
//! same rack = mean of the two nodes' `latency`, different racks = their sum).

use super::cluster::at;
use super::units::Duration;
use super::{InputError, Source};
use crate::model::Cluster;
use crate::model::latency::LatencyMatrix;
use serde::Deserialize;
use serde_spanned::Spanned;
use std::collections::{HashMap, HashSet};

/// Most pairs of nodes one latency file may set, its groups' pairs and its `pair`s together: the
/// matrix keeps every pair set explicitly (a cluster's own figures and `default` cost nothing per
/// pair), and a group of `n` nodes sets `n(n−1)/2`, so a group of a 100,000-node cluster's nodes
/// would have set five billion (hundreds of GB) before anything was said. At this bound (a
/// group of about 2,900 nodes) the pairs take about 150 MB; a latency most pairs share is a
/// `default`.
pub const MAX_LATENCY_PAIRS: u64 = 1 << 22;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LatencyFile {
    default: Option<Duration>,
    #[serde(default)]
    group: Vec<GroupSpec>,
    #[serde(default)]
    pair: Vec<PairSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupSpec {
    nodes: Spanned<Vec<Spanned<String>>>,
    latency: Duration,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PairSpec {
    between: Spanned<Vec<Spanned<String>>>,
    latency: Duration,
}

/// Parses a latency file for `cluster` (node names must be the cluster's).
pub fn parse_latency(
    origin: &str,
    text: &str,
    cluster: &Cluster,
) -> Result<LatencyMatrix, InputError> {
    let src = Source::new(origin, text);
    let file: LatencyFile = src.parse_toml()?;
    let index: HashMap<&str, usize> = cluster
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n.id.index()))
        .collect();
    let lookup = |name: &Spanned<String>, field: String| {
        index.get(name.get_ref().as_str()).copied().ok_or_else(|| {
            src.error(
                at(name),
                Some(field),
                format!(
                    "unknown node `{}`: not in the cluster file",
                    super::units::name_shown(name.get_ref())
                ),
            )
        })
    };
    let mut m = match file.default {
        Some(d) => LatencyMatrix::uniform(cluster.nodes.len(), d.0),
        None => LatencyMatrix::from_cluster(cluster),
    };
    // Pairs set so far (a pair set twice counted twice: a bound, not a count).
    let mut pairs = 0u64;
    for (g, group) in file.group.iter().enumerate() {
        let names = group.nodes.get_ref();
        // A group of fewer than two nodes sets nothing: a typo, not a latency.
        if names.len() < 2 {
            return Err(src.error(
                at(&group.nodes),
                Some(format!("group[{g}].nodes")),
                format!(
                    "a group sets the latency between its nodes: name at least two, found {}",
                    names.len()
                ),
            ));
        }
        let n = names.len() as u64;
        pairs += n * (n - 1) / 2;
        if pairs > MAX_LATENCY_PAIRS {
            return Err(src.error(
                at(&group.nodes),
                Some(format!("group[{g}].nodes")),
                format!(
                    "a group of {n} nodes sets {} pairs, which brings the file to {pairs}; at \
                     most {MAX_LATENCY_PAIRS} pairs in all (give the latency most pairs share as \
                     `default`)",
                    n * (n - 1) / 2
                ),
            ));
        }
        let mut members: Vec<usize> = Vec::with_capacity(names.len());
        let mut seen = HashSet::with_capacity(names.len());
        for (k, n) in names.iter().enumerate() {
            let field = format!("group[{g}].nodes[{k}]");
            let node = lookup(n, field.clone())?;
            if !seen.insert(node) {
                return Err(src.error(
                    at(n),
                    Some(field),
                    format!(
                        "node `{}` is listed twice in this group: name each node once",
                        n.get_ref()
                    ),
                ));
            }
            members.push(node);
        }
        for &a in &members {
            for &b in &members {
                m.set(a, b, group.latency.0);
            }
        }
    }
    for (p, pair) in file.pair.iter().enumerate() {
        let names = pair.between.get_ref();
        if names.len() != 2 {
            return Err(src.error(
                at(&pair.between),
                Some(format!("pair[{p}].between")),
                format!("expected two node names, found {}", names.len()),
            ));
        }
        pairs += 1;
        if pairs > MAX_LATENCY_PAIRS {
            return Err(src.error(
                at(&pair.between),
                Some(format!("pair[{p}].between")),
                format!("the file sets more than {MAX_LATENCY_PAIRS} pairs of nodes"),
            ));
        }
        let a = lookup(&names[0], format!("pair[{p}].between[0]"))?;
        let b = lookup(&names[1], format!("pair[{p}].between[1]"))?;
        if a == b {
            return Err(src.error(
                at(&names[1]),
                Some(format!("pair[{p}].between[1]")),
                format!(
                    "pairs node `{}` with itself: a node's latency to itself is 0; name two \
                     different nodes",
                    names[1].get_ref()
                ),
            ));
        }
        m.set(a, b, pair.latency.0);
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::cluster::parse_cluster;

    fn cluster() -> Cluster {
        parse_cluster(
            "c.toml",
            "[[node]]\nname = \"a\"\ncount = 3\ncores = 2\nlatency = \"100us\"\n",
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn groups_and_pairs_override_the_default_in_order() {
        let m = parse_latency(
            "l.toml",
            "default = \"1ms\"\n[[group]]\nnodes = [\"a-1\", \"a-2\", \"a-3\"]\nlatency = \"50us\"\n[[pair]]\nbetween = [\"a-1\", \"a-3\"]\nlatency = \"80us\"\n",
            &cluster(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(m.get(0, 1), 50_000);
        assert_eq!(m.get(2, 0), 80_000);
        assert_eq!(m.get(1, 1), 0);
        let d = parse_latency("l.toml", "", &cluster()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.get(0, 2), 100_000, "same rack: mean of the two");
    }

    #[test]
    fn unknown_nodes_are_located() {
        let e = parse_latency(
            "l.toml",
            "[[pair]]\nbetween = [\"a-1\", \"b-9\"]\nlatency = \"1ms\"\n",
            &cluster(),
        )
        .err()
        .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("l.toml:2:19: pair[0].between[1]: unknown node `b-9`: not in the cluster file")
        );
    }

    #[test]
    fn a_pair_of_a_node_with_itself_is_refused_not_ignored() {
        let e = parse_latency(
            "l.toml",
            "[[pair]]\nbetween = [\"a-1\", \"a-2\"]\nlatency = \"1ms\"\n\
             [[pair]]\nbetween = [\"a-2\", \"a-2\"]\nlatency = \"1ms\"\n",
            &cluster(),
        )
        .err()
        .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some(
                "l.toml:5:19: pair[1].between[1]: pairs node `a-2` with itself: a node's latency \
                 to itself is 0; name two different nodes"
            )
        );
    }
}
