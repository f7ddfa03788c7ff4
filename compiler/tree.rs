//! dyncc's own flat tree IR. Every learner (forust-ml's boosted trees, the
//! distilling CART) converts into it, so prediction, printing and the table
//! never depend on a library's internals.

/// One node. `Split` sends `x[feature] < threshold` left, everything else
/// right (forust-ml's and the table's convention).
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

    /// Converts a fitted forust-ml booster. Nodes are renumbered in
    /// breadth-first order so children always follow their parent.
    pub fn from_forust(b: &forust_ml::GradientBooster) -> Forest {
        let trees = b
            .trees
            .iter()
            .map(|t| {
                let find = |num: usize| t.nodes.iter().find(|n| n.num == num);
                let mut out: Vec<Node<f64>> = Vec::with_capacity(t.nodes.len());
                // (forust node num, slot in `out`)
                let mut queue = std::collections::VecDeque::new();
                if let Some(root) = t.nodes.first() {
                    out.push(Node::Leaf(0.0));
                    queue.push_back((root.num, 0usize));
                }
                while let Some((num, slot)) = queue.pop_front() {
                    let Some(n) = find(num) else { continue };
                    if n.is_leaf {
                        out[slot] = Node::Leaf(n.weight_value as f64);
                    } else {
                        let l = out.len();
                        out.push(Node::Leaf(0.0));
                        let r = out.len();
                        out.push(Node::Leaf(0.0));
                        queue.push_back((n.left_child, l));
                        queue.push_back((n.right_child, r));
                        out[slot] = Node::Split {
                            feature: n.split_feature,
                            threshold: n.split_value,
                            left: l as u32,
                            right: r as u32,
                        };
                    }
                }
                FlatTree { nodes: out }
            })
            .collect();
        Forest {
            base: b.base_score,
            trees,
        }
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

    #[test]
    fn forust_conversion_reproduces_predictions() {
        // y = step in x0 plus a slope in x1; 200 rows.
        let n = 200;
        let mut cols = vec![0.0f64; n * 2];
        let mut y = vec![0.0f64; n];
        for i in 0..n {
            let x0 = (i % 20) as f64;
            let x1 = (i / 20) as f64;
            cols[i] = x0;
            cols[n + i] = x1;
            y[i] = if x0 < 7.0 { 1.0 } else { 3.0 } + 0.2 * x1;
        }
        let m = forust_ml::Matrix::new(&cols, n, 2);
        let mut b = forust_ml::GradientBooster::default()
            .set_objective_type(forust_ml::objective::ObjectiveType::SquaredLoss)
            .set_iterations(30)
            .set_max_depth(3)
            .set_parallel(false);
        b.fit(&m, &y, &vec![1.0; n], None).unwrap();
        let want = b.predict(&m, false);
        let f = Forest::from_forust(&b);
        for i in 0..n {
            let got = f.predict(&[cols[i], cols[n + i]]);
            assert!(
                (got - want[i]).abs() < 1e-9,
                "row {i}: {got} vs {}",
                want[i]
            );
        }
    }
}
