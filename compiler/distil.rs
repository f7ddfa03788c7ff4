//! Distil: one readable decision tree per collective that reproduces the
//! decision grid, for `dyncc explain`. dyncc's own weighted CART: the
//! weight of a grid point is what choosing wrong there costs (its expected
//! gain), so the tree spends its depth where decisions matter.

use dyncc_tables::{Basis, Decision, Feature, NUM_FEATURES};

use crate::tree::{FlatTree, Node};

/// Length of the tree feature vector (`dyncc_tables::tree_features`).
pub const N_TREE_FEATURES: usize = NUM_FEATURES;

/// Features a split may use: sizes, node counts and ranks per node read
/// naturally; the derived ones only blur the explanation.
const SPLIT_FEATURES: [usize; 3] = [
    Feature::Log2Bytes as usize,
    Feature::Nodes as usize,
    Feature::Ppn as usize,
];

/// The features of one shape, as the table's readers compute them (f32
/// values, so a threshold taken from them compares the same in the plugin,
/// `query` and `explain`).
pub fn tree_features(nbytes: u64, nodes: u32, ppn: u32) -> [f64; N_TREE_FEATURES] {
    dyncc_tables::tree_features(nbytes, nodes as u64, nodes as u64 * ppn as u64).map(f64::from)
}

/// One point of the decision grid.
#[derive(Clone, Debug)]
pub struct Sample {
    pub x: [f64; N_TREE_FEATURES],
    pub decision: Decision,
    pub basis: Basis,
    pub gain: f64,
    /// How many shapes the point stands for (a node range's end stands for
    /// half the range).
    pub count: f64,
}

/// What a leaf says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Leaf {
    pub decision: Decision,
    pub basis: Basis,
    pub gain: f64,
}

/// How well the tree reproduces the grid.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Fidelity {
    pub points: usize,
    pub disagree: usize,
    /// Share of the total weight (expected gain at stake) misclassified.
    pub weighted_disagree: f64,
    pub leaves: usize,
    pub depth: usize,
}

fn weight(s: &Sample) -> f64 {
    s.count * weight_of(s.gain)
}

/// What choosing wrong at a point costs: its expected gain (log), plus a
/// little so that points left to NCCL still count.
pub fn weight_of(gain: f64) -> f64 {
    gain.max(1e-9).ln().abs() + 0.01
}

/// Fits a tree of at most `max_depth` levels to the samples.
pub fn distil(samples: &[Sample], max_depth: usize) -> (FlatTree<Leaf>, Fidelity) {
    let mut classes: Vec<Decision> = Vec::new();
    let labels: Vec<usize> = samples
        .iter()
        .map(|s| match classes.iter().position(|d| *d == s.decision) {
            Some(i) => i,
            None => {
                classes.push(s.decision);
                classes.len() - 1
            }
        })
        .collect();
    let mut nodes: Vec<Node<Leaf>> = Vec::new();
    let idx: Vec<usize> = (0..samples.len()).collect();
    // Breadth-first so children always follow their parent.
    let mut queue = std::collections::VecDeque::new();
    nodes.push(Node::Leaf(leaf_of(samples, &idx)));
    queue.push_back((idx, 0usize, 0usize));
    while let Some((idx, slot, depth)) = queue.pop_front() {
        if depth >= max_depth {
            continue;
        }
        let Some((f, thr)) = best_split(samples, &labels, classes.len(), &idx) else {
            continue;
        };
        let (l, r): (Vec<usize>, Vec<usize>) = idx.iter().partition(|&&i| samples[i].x[f] < thr);
        let li = nodes.len();
        nodes.push(Node::Leaf(leaf_of(samples, &l)));
        let ri = nodes.len();
        nodes.push(Node::Leaf(leaf_of(samples, &r)));
        nodes[slot] = Node::Split {
            feature: f,
            threshold: thr,
            left: li as u32,
            right: ri as u32,
        };
        queue.push_back((l, li, depth + 1));
        queue.push_back((r, ri, depth + 1));
    }
    let tree = FlatTree { nodes };
    let mut fid = Fidelity {
        points: samples.len(),
        leaves: tree.leaves(),
        depth: tree.depth(),
        ..Default::default()
    };
    let (mut wrong, mut total) = (0.0, 0.0);
    for s in samples {
        let w = weight(s);
        total += w;
        if tree.leaf(&s.x).decision != s.decision {
            fid.disagree += 1;
            wrong += w;
        }
    }
    fid.weighted_disagree = if total > 0.0 { wrong / total } else { 0.0 };
    (tree, fid)
}

fn leaf_of(samples: &[Sample], idx: &[usize]) -> Leaf {
    let mut by: Vec<(Decision, f64)> = Vec::new();
    for &i in idx {
        let s = &samples[i];
        match by.iter_mut().find(|(d, _)| *d == s.decision) {
            Some(e) => e.1 += weight(s),
            None => by.push((s.decision, weight(s))),
        }
    }
    let decision = by
        .iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|e| e.0)
        .unwrap_or(Decision::Default);
    let mine: Vec<&Sample> = idx
        .iter()
        .map(|&i| &samples[i])
        .filter(|s| s.decision == decision)
        .collect();
    let gain = if mine.is_empty() || decision == Decision::Default {
        1.0
    } else {
        (mine.iter().map(|s| s.gain.max(1e-9).ln()).sum::<f64>() / mine.len() as f64).exp()
    };
    let count = |b: Basis| mine.iter().filter(|s| s.basis == b).count();
    let basis = [Basis::Measured, Basis::Interpolated, Basis::Extrapolated]
        .into_iter()
        .max_by_key(|b| count(*b))
        .unwrap_or(Basis::Measured);
    Leaf {
        decision,
        basis,
        gain,
    }
}

/// The split with the largest weighted Gini decrease, or `None` when the
/// node is pure or no split helps.
fn best_split(
    samples: &[Sample],
    labels: &[usize],
    k: usize,
    idx: &[usize],
) -> Option<(usize, f64)> {
    let gini = |c: &[f64], t: f64| {
        if t <= 0.0 {
            0.0
        } else {
            t - c.iter().map(|v| v * v).sum::<f64>() / t
        }
    };
    let mut total = vec![0.0; k];
    for &i in idx {
        total[labels[i]] += weight(&samples[i]);
    }
    let tw: f64 = total.iter().sum();
    let parent = gini(&total, tw);
    if parent <= 1e-12 {
        return None;
    }
    let mut best: Option<(f64, usize, f64)> = None;
    for f in SPLIT_FEATURES {
        let mut order: Vec<usize> = idx.to_vec();
        order.sort_by(|&a, &b| samples[a].x[f].total_cmp(&samples[b].x[f]));
        let mut left = vec![0.0; k];
        let mut lw = 0.0;
        for j in 0..order.len().saturating_sub(1) {
            let i = order[j];
            let w = weight(&samples[i]);
            left[labels[i]] += w;
            lw += w;
            let (v, next) = (samples[i].x[f], samples[order[j + 1]].x[f]);
            if next <= v {
                continue;
            }
            let right: Vec<f64> = total.iter().zip(&left).map(|(t, l)| t - l).collect();
            let child = gini(&left, lw) + gini(&right, tw - lw);
            let gain = parent - child;
            // The threshold is the next value itself, so printed rules read
            // "bytes < 256 KiB", "nodes < 4".
            if gain > 1e-9 && best.is_none_or(|b| gain > b.0 + 1e-12) {
                best = Some((gain, f, next));
            }
        }
    }
    best.map(|(_, f, t)| (f, t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dyncc_tables::{Algo, Proto, Setting};

    #[test]
    fn reproduces_a_two_region_grid_exactly() {
        let tree_ll = Decision::Force(Setting::new(Algo::Tree, Proto::LL));
        let mut s = Vec::new();
        for nodes in [1u32, 2, 4, 8] {
            for k in 3..30 {
                let d = if nodes >= 2 && k < 16 {
                    tree_ll
                } else {
                    Decision::Default
                };
                let gain = if d == Decision::Default { 1.0 } else { 1.2 };
                s.push(Sample {
                    count: 1.0,
                    x: tree_features(1 << k, nodes, 8),
                    decision: d,
                    basis: Basis::Measured,
                    gain,
                });
            }
        }
        let (t, fid) = distil(&s, 6);
        assert_eq!(fid.disagree, 0);
        assert_eq!(t.leaves(), 3);
        let leaf = t.leaf(&tree_features(1024, 4, 8));
        assert_eq!(leaf.decision, tree_ll);
        assert!((leaf.gain - 1.2).abs() < 1e-9);
        assert_eq!(
            t.leaf(&tree_features(1 << 20, 4, 8)).decision,
            Decision::Default
        );
    }
}
