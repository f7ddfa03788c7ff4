//! `NCCL_TESTS_SPLIT` runs: one nccl-tests run split into several
//! communicators (the `Group` column of its `# Rank` lines, `group` in the
//! JSON's device records). Every communicator runs the same sizes at once
//! and the times printed are reduced over all of them, so a row measures a
//! collective of one communicator's shape, not of the whole run's: with
//! communicators all of one shape it is read as that shape; of different
//! shapes the rows cannot be attributed to one, and the run is refused.

use std::collections::{BTreeMap, BTreeSet};

/// The ranks and hosts of each communicator of a run, by group number.
#[derive(Debug, Default)]
pub(crate) struct Groups {
    ranks: BTreeMap<u32, u32>,
    hosts: BTreeMap<u32, BTreeSet<Box<[u8]>>>,
}

/// What the groups say about a run's shape.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Split {
    /// One communicator (or no group shown): the rank lines' count holds.
    One,
    /// Several communicators of one shape: `ranks` on `nodes` each.
    Same {
        comms: usize,
        ranks: u32,
        nodes: u32,
    },
    /// Communicators of different shapes: why, for the report.
    Mixed(String),
}

impl Groups {
    /// Adds `ranks` ranks of group `group` on `host`.
    pub fn add(&mut self, group: u32, ranks: u32, host: Option<&[u8]>) {
        *self.ranks.entry(group).or_default() += ranks;
        let hosts = self.hosts.entry(group).or_default();
        if let Some(h) = host {
            if !hosts.contains(h) {
                hosts.insert(h.into());
            }
        }
    }

    /// The shape the rows measure.
    pub fn split(&self) -> Split {
        if self.ranks.len() <= 1 {
            return Split::One;
        }
        let shape = |g: &u32| {
            (
                self.ranks[g],
                self.hosts.get(g).map_or(0, |h| h.len() as u32).max(1),
            )
        };
        let shapes: BTreeSet<(u32, u32)> = self.ranks.keys().map(shape).collect();
        if let [(ranks, nodes)] = shapes.iter().copied().collect::<Vec<_>>()[..] {
            return Split::Same {
                comms: self.ranks.len(),
                ranks,
                nodes,
            };
        }
        Split::Mixed(format!(
            "NCCL_TESTS_SPLIT made {} communicators of different shapes ({}); nccl-tests \
             reduces their times into one row, which no single shape measured: rerun with \
             communicators of one shape, or without NCCL_TESTS_SPLIT",
            self.ranks.len(),
            self.ranks
                .keys()
                .map(|g| {
                    let (r, n) = shape(g);
                    format!("group {g}: {r} ranks on {n} nodes")
                })
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }
}

impl Split {
    /// The note for a split read as one communicator's shape.
    pub fn note(&self) -> Option<String> {
        match self {
            Split::Same {
                comms,
                ranks,
                nodes,
            } => Some(format!(
                "NCCL_TESTS_SPLIT: {comms} communicators of {ranks} ranks on {nodes} nodes each \
                 ran at once; rows read as {ranks}-rank, {nodes}-node collectives, not as one \
                 {}-rank job",
                *comms as u32 * ranks
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn communicators_of_one_shape_are_read_as_that_shape() {
        let mut g = Groups::default();
        for r in 0..16u32 {
            // NCCL_TESTS_SPLIT=DIV8: a communicator per node.
            let host = if r < 8 { &b"a"[..] } else { b"b" };
            g.add(r / 8, 1, Some(host));
        }
        assert_eq!(
            g.split(),
            Split::Same {
                comms: 2,
                ranks: 8,
                nodes: 1
            }
        );
        let mut g = Groups::default();
        for r in 0..16u32 {
            // MOD8: 8 communicators of 2 ranks across the nodes.
            let host = if r < 8 { &b"a"[..] } else { b"b" };
            g.add(r % 8, 1, Some(host));
        }
        assert_eq!(
            g.split(),
            Split::Same {
                comms: 8,
                ranks: 2,
                nodes: 2
            }
        );
    }

    #[test]
    fn communicators_of_different_shapes_are_refused() {
        let mut g = Groups::default();
        for r in 0..16u32 {
            g.add(u32::from(r >= 12), 1, Some(b"a"));
        }
        let Split::Mixed(why) = g.split() else {
            panic!("{:?}", g.split())
        };
        assert!(why.contains("12 ranks") && why.contains("4 ranks"), "{why}");
        let mut one = Groups::default();
        one.add(0, 8, Some(b"a"));
        assert_eq!(one.split(), Split::One);
    }
}
