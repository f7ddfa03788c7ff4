//! Small tables for the audit tests: the unit tests' `crate::audit::testutil`
//! and, included by path, the integration tests' `support::sample_table`.

use dyncc_tables::*;

pub fn force(algo: Algo, proto: Proto, channels: u8) -> Decision {
    Decision::Force(Setting::new(algo, proto).with_channels(channels))
}

/// allreduce: 2 nodes x 8 ppn forces tree/ll up to 64 KiB; 4 nodes
/// forces ring/ll128 from 1 MiB; nodes 3 interpolated tree/ll below 64 KiB.
pub fn sample() -> Vec<u8> {
    let mut b = TableBuilder::new();
    b.meta("platform", "test-rig").meta("gpus_per_node", "8");
    sample_contexts(&mut b);
    sample_tree(&mut b);
    b.build().unwrap()
}

/// The allreduce contexts of [`sample`], at 8 ranks per node.
pub fn sample_contexts(b: &mut TableBuilder) {
    let spec = |nodes| ContextSpec {
        coll: Coll::AllReduce,
        nodes,
        ppn: (8, 8),
        max_pipe_ops: 0,
        reg_buff: RegBuff::Any,
    };
    b.context(
        spec((2, 2)),
        &[
            Rule {
                last_bucket: size_bucket(65536),
                decision: force(Algo::Tree, Proto::LL, 0),
                basis: Basis::Measured,
                gain: 1.3,
            },
            Rule {
                last_bucket: 255,
                decision: Decision::Default,
                basis: Basis::Measured,
                gain: 1.0,
            },
        ],
    )
    .unwrap();
    b.context(
        spec((4, 4)),
        &[
            Rule {
                last_bucket: size_bucket(1 << 20) - 1,
                decision: Decision::Default,
                basis: Basis::Measured,
                gain: 1.0,
            },
            Rule {
                last_bucket: 255,
                decision: force(Algo::Ring, Proto::LL128, 16),
                basis: Basis::Measured,
                gain: 1.12,
            },
        ],
    )
    .unwrap();
    b.context(
        spec((3, 3)),
        &[
            Rule {
                last_bucket: size_bucket(65536),
                decision: force(Algo::Tree, Proto::LL, 0),
                basis: Basis::Interpolated,
                gain: 1.2,
            },
            Rule {
                last_bucket: 255,
                decision: Decision::Default,
                basis: Basis::Interpolated,
                gain: 1.0,
            },
        ],
    )
    .unwrap();
}

/// The allreduce tree of [`sample`].
pub fn sample_tree(b: &mut TableBuilder) {
    b.tree(
        Coll::AllReduce,
        &[
            TreeNode::Split {
                feature: Feature::Log2Bytes,
                threshold: 17.0,
                left: 1,
                right: 2,
            },
            TreeNode::Split {
                feature: Feature::Nodes,
                threshold: 4.0,
                left: 3,
                right: 4,
            },
            TreeNode::Split {
                feature: Feature::Nodes,
                threshold: 4.0,
                left: 5,
                right: 6,
            },
            TreeNode::Leaf {
                decision: force(Algo::Tree, Proto::LL, 0),
                basis: Basis::Measured,
                gain: 1.3,
            },
            TreeNode::Leaf {
                decision: Decision::Default,
                basis: Basis::Measured,
                gain: 1.0,
            },
            TreeNode::Leaf {
                decision: Decision::Default,
                basis: Basis::Measured,
                gain: 1.0,
            },
            TreeNode::Leaf {
                decision: force(Algo::Ring, Proto::LL128, 16),
                basis: Basis::Measured,
                gain: 1.12,
            },
        ],
    )
    .unwrap();
}
