//! dyncc's own flat tree IR. Every learner (the boosted trees of
//! [`crate::boost`], the distilling CART) builds it, so prediction, printing and the table
//! never depend on a library's internals.

/// One node. `Split` sends `x[feature] < threshold` left, everything else
/// right (the table's convention too).
#[derive(Clone, Debug, PartialEq)]
pub enum Node<L> {
    Split {
        feature: usize,
        threshold: f64,
        left: u32,
        right: u32,
    },
    Leaf(L),
}

/// A tree stored as a node array; node 0 is the root and every child index
/// is greater than its parent's, so a walk always ends.
#[derive(Clone, Debug, PartialEq)]
pub struct FlatTree<L> {
    pub nodes: Vec<Node<L>>,
}

impl<L> FlatTree<L> {
    /// The leaf `x` falls into. Panics only on a malformed tree, which the
    /// constructors here never build.
    pub fn leaf(&self, x: &[f64]) -> &L {
        let mut i = 0usize;
        loop {
            match &self.nodes[i] {
                Node::Leaf(l) => return l,
                Node::Split {
                    feature,
                    threshold,
                    left,
                    right,
                } => {
                    let v = x.get(*feature).copied().unwrap_or(f64::NAN);
                    i = if v < *threshold {
                        *left as usize
                    } else {
                        *right as usize
                    };
                }
            }
        }
    }

    /// Number of leaves.
    pub fn leaves(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| matches!(n, Node::Leaf(_)))
            .count()
    }

    /// Depth of the deepest leaf (a lone leaf has depth 0).
    pub fn depth(&self) -> usize {
        fn go<L>(t: &FlatTree<L>, i: usize) -> usize {
            match &t.nodes[i] {
                Node::Leaf(_) => 0,
                Node::Split { left, right, .. } => {
                    1 + go(t, *left as usize).max(go(t, *right as usize))
                }
            }
        }
        if self.nodes.is_empty() {
            0
        } else {
            go(self, 0)
        }
    }
}

/// A sum of regression trees plus a base score.
#[derive(Clone, Debug)]
pub struct Forest {
    pub base: f64,
    pub trees: Vec<FlatTree<f64>>,
}

impl Forest {
    pub fn predict(&self, x: &[f64]) -> f64 {
        self.base + self.trees.iter().map(|t| *t.leaf(x)).sum::<f64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walk_goes_left_below_threshold() {
        let t = FlatTree {
            nodes: vec![
                Node::Split {
                    feature: 0,
                    threshold: 1.5,
                    left: 1,
                    right: 2,
                },
                Node::Leaf("low"),
                Node::Leaf("high"),
            ],
        };
        assert_eq!(*t.leaf(&[1.0]), "low");
        assert_eq!(*t.leaf(&[1.5]), "high");
        assert_eq!(t.depth(), 1);
        assert_eq!(t.leaves(), 2);
    }
}
