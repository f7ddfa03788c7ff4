//! Audit: what the commands that answer questions about a compiled table
//! (`explain`, `query`, `diff`, `plot`, `export`, `verify`, in [`crate::cmd`])
//! share. They all read a table through `dyncc-tables`' validating reader
//! and, where they need "what does the plugin do over a whole region",
//! resolve it the way the plugin does: first matching context per (nodes,
//! ranks per node), then the rule of the size bucket ([`plane`]).

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Context;
use dyncc_tables::{
    bucket_is_empty, bucket_lower_bound, bucket_upper_bound, Coll, ContextSpec, Decision, Lookup,
    Table, NUM_BUCKETS,
};

use crate::units::fmt_bytes;

/// Reads a table file; the error says what to do next.
pub fn read_table(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| {
        format!(
            "cannot read the table {} (does it exist? `dyncc compile SWEEPS -o {}` writes one)",
            path.display(),
            path.display()
        )
    })
}

/// Validates a table image; the error names the file and the problem.
pub fn open<'a>(path: &Path, bytes: &'a [u8]) -> anyhow::Result<Table<'a>> {
    Table::from_bytes(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{} is not a valid dyncc table: {e}. Run `dyncc verify {}` for details; \
             re-create it with `dyncc compile`",
            path.display(),
            path.display()
        )
    })
}

/// Lower-case NCCL example-CSV algorithm name, `default` when NCCL chooses.
pub fn algo_name(d: Decision) -> &'static str {
    match d {
        Decision::Default => "default",
        Decision::Force { algo, .. } => algo.name(),
    }
}

/// Lower-case NCCL example-CSV protocol name, `default` when NCCL chooses.
pub fn proto_name(d: Decision) -> &'static str {
    match d {
        Decision::Default => "default",
        Decision::Force { proto, .. } => proto.name(),
    }
}

/// Channel count of a decision, 0 = NCCL's choice.
pub fn channels(d: Decision) -> u8 {
    match d {
        Decision::Default => 0,
        Decision::Force { channels, .. } => channels,
    }
}

/// `tree/ll128`, `ring/simple/8ch`, or `default (NCCL's choice)`.
pub fn fmt_decision(d: Decision) -> String {
    match d {
        Decision::Default => "NCCL's choice".to_string(),
        d => d.to_string(),
    }
}

/// A forced setting from the fields the JSON reports carry: `tree/ll128`,
/// `ring/simple/8ch` (channels 0 = NCCL's count), as [`Decision`]'s
/// `Display` writes it.
pub fn fmt_forced(algorithm: &str, protocol: &str, channels: u8) -> String {
    if channels > 0 {
        format!("{algorithm}/{protocol}/{channels}ch")
    } else {
        format!("{algorithm}/{protocol}")
    }
}

/// `4`, `4-7`, `9+`, `any`.
pub fn fmt_span(lo: u32, hi: u32) -> String {
    if lo <= 1 && hi == u32::MAX {
        "any".into()
    } else if lo == hi {
        lo.to_string()
    } else if hi == u32::MAX {
        format!("{lo}+")
    } else {
        format!("{lo}-{hi}")
    }
}

/// Inclusive byte bounds as `8 B .. <80 KiB`, `256 KiB and up`, `any size`
/// (bucket edges are powers of two and quarter steps, so the exclusive
/// upper edge prints exactly).
pub fn fmt_sizes(lo: u64, hi: u64) -> String {
    if lo == 0 && hi == u64::MAX {
        "any size".into()
    } else if hi == u64::MAX {
        format!("{} and up", fmt_bytes(lo))
    } else {
        format!("{} .. <{}", fmt_bytes(lo), fmt_bytes(hi + 1))
    }
}

/// The buckets a size can fall in (0..=3 and 8..=255).
pub fn live_buckets() -> impl Iterator<Item = u8> {
    (0..=255u8).filter(|b| !bucket_is_empty(*b))
}

/// A numPipeOps / regBuff pair the plugin can be asked with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub pipe_ops: i32,
    pub reg_buff: i32,
}

impl Probe {
    /// What NCCL passes for a plain collective: one op, unregistered buffer.
    pub const PLAIN: Probe = Probe {
        pipe_ops: 1,
        reg_buff: 0,
    };
}

/// The probes under which `tables` can answer differently: the plain call,
/// plus a registered buffer and a large pipeline when some context gates
/// on them.
pub fn probes(tables: &[&Table]) -> Vec<Probe> {
    let mut v = vec![Probe::PLAIN];
    let specs: Vec<ContextSpec> = tables
        .iter()
        .flat_map(|t| t.contexts().map(|c| c.spec()))
        .collect();
    if specs
        .iter()
        .any(|s| s.reg_buff != dyncc_tables::RegBuff::Any)
    {
        v.push(Probe {
            pipe_ops: 1,
            reg_buff: 1,
        });
    }
    if let Some(m) = specs
        .iter()
        .map(|s| s.max_pipe_ops)
        .max()
        .filter(|m| *m > 0)
    {
        v.push(Probe {
            pipe_ops: i32::try_from(m).unwrap_or(i32::MAX - 1).saturating_add(1),
            reg_buff: 0,
        });
    }
    v
}

/// A rectangle of the (nodes, ranks per node) plane of one collective in
/// which every given table resolves to the same context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Patch {
    pub coll: Coll,
    pub nodes: (u32, u32),
    pub ppn: (u32, u32),
}

/// Splits `[1, u32::MAX]` at every context edge of `coll` in `tables`.
fn spans(
    tables: &[&Table],
    coll: Coll,
    axis: impl Fn(&ContextSpec) -> (u32, u32),
) -> Vec<(u32, u32)> {
    let mut cuts: BTreeSet<u64> = BTreeSet::new();
    cuts.insert(1);
    cuts.insert(u32::MAX as u64 + 1);
    for t in tables {
        for c in t.contexts().filter(|c| c.spec().coll == coll) {
            let (lo, hi) = axis(&c.spec());
            if lo <= hi {
                cuts.insert((lo as u64).max(1));
                cuts.insert(hi as u64 + 1);
            }
        }
    }
    let cuts: Vec<u64> = cuts
        .into_iter()
        .filter(|c| (1..=u32::MAX as u64 + 1).contains(c))
        .collect();
    cuts.windows(2)
        .map(|w| (w[0] as u32, (w[1] - 1) as u32))
        .collect()
}

/// Every patch of `coll` that some table has a context in, in (ppn, nodes)
/// order. Patches no table covers are left out: every table says "NCCL's
/// choice" there.
pub fn patches(tables: &[&Table], coll: Coll) -> Vec<Patch> {
    let nodes = spans(tables, coll, |s| s.nodes);
    let ppns = spans(tables, coll, |s| s.ppn);
    let mut out = Vec::new();
    for &ppn in &ppns {
        for &n in &nodes {
            let covered = tables.iter().any(|t| {
                t.find_context(coll, n.0 as u64 * ppn.0 as u64, n.0 as u64)
                    .is_some()
            });
            if covered {
                out.push(Patch {
                    coll,
                    nodes: n,
                    ppn,
                });
            }
        }
    }
    out
}

/// What one table answers in one patch, per size bucket.
pub fn plane(table: &Table, p: &Patch, probe: Probe) -> Box<[Lookup; NUM_BUCKETS]> {
    let (n, ppn) = (p.nodes.0 as u64, p.ppn.0 as u64);
    let mut row = Box::new(
        [Lookup {
            decision: Decision::Default,
            basis: None,
            gain: 1.0,
            context: None,
            rule: None,
        }; NUM_BUCKETS],
    );
    for b in 0..=255u8 {
        // Empty buckets (4..=7) take the answer of bucket 8, the next live one.
        let size = if bucket_is_empty(b) {
            4
        } else {
            bucket_lower_bound(b)
        };
        row[b as usize] = table.lookup(
            p.coll as u32,
            n * ppn,
            n,
            size,
            probe.pipe_ops,
            probe.reg_buff,
        );
    }
    row
}

/// A run of live buckets `[first, last]` over which `same` holds between
/// neighbours, as inclusive byte bounds.
pub fn runs<T>(row: &[T; NUM_BUCKETS], same: impl Fn(&T, &T) -> bool) -> Vec<(u8, u8)> {
    let live: Vec<u8> = live_buckets().collect();
    let mut out = Vec::new();
    let mut start = 0usize;
    for i in 1..=live.len() {
        if i == live.len() || !same(&row[live[i - 1] as usize], &row[live[i] as usize]) {
            out.push((live[start], live[i - 1]));
            start = i;
        }
    }
    out
}

/// Inclusive byte bounds of a bucket run.
pub fn run_bytes(r: (u8, u8)) -> (u64, u64) {
    (bucket_lower_bound(r.0), bucket_upper_bound(r.1))
}

/// Writes `bytes` to `path` atomically with mode `mode` (the temporary file
/// `write_atomic` renames is created 0600, too tight for a map or a rule
/// file other users read, or a script).
pub fn write_output(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    crate::atomic::write_atomic(path, bytes)
        .with_context(|| format!("writing {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("setting the permissions of {}", path.display()))?;
    }
    #[cfg(not(unix))]
    let _ = mode;
    Ok(())
}

/// Whether stdout is a terminal (for colour and progress decisions).
pub fn is_tty() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal()
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Small tables for the audit unit tests.
    use dyncc_tables::*;

    pub fn force(algo: Algo, proto: Proto, channels: u8) -> Decision {
        Decision::Force {
            algo,
            proto,
            channels,
        }
    }

    /// allreduce: 2 nodes x 8 ppn forces tree/ll up to 64 KiB; 4 nodes
    /// forces ring/ll128 from 1 MiB; nodes 3 interpolated tree/ll below 64 KiB.
    pub fn sample() -> Vec<u8> {
        let spec = |nodes| ContextSpec {
            coll: Coll::AllReduce,
            nodes,
            ppn: (8, 8),
            max_pipe_ops: 0,
            reg_buff: RegBuff::Any,
        };
        let mut b = TableBuilder::new();
        b.meta("platform", "test-rig").meta("gpus_per_node", "8");
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
        b.build().unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_split_at_every_context_edge() {
        let bytes = testutil::sample();
        let t = Table::from_bytes(&bytes).unwrap();
        let p = patches(&[&t], Coll::AllReduce);
        let nodes: Vec<(u32, u32)> = p.iter().map(|p| p.nodes).collect();
        assert_eq!(nodes, vec![(2, 2), (3, 3), (4, 4)]);
        assert!(p.iter().all(|p| p.ppn == (8, 8)));
        assert!(patches(&[&t], Coll::AllGather).is_empty());
    }

    #[test]
    fn runs_cover_every_live_bucket_once() {
        let bytes = testutil::sample();
        let t = Table::from_bytes(&bytes).unwrap();
        let p = patches(&[&t], Coll::AllReduce)[0];
        let row = plane(&t, &p, Probe::PLAIN);
        let r = runs(&row, |a, b| a.decision == b.decision);
        assert_eq!(r.len(), 2);
        assert_eq!(run_bytes(r[0]), (0, 65536 + 16383));
        assert_eq!(run_bytes(r[1]).1, u64::MAX);
    }
}
