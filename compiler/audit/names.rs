//! The names the audit commands print and parse: collectives,
//! algorithms, protocols and tree features, as NCCL's example CSV and the
//! JSON reports spell them.

use dyncc_tables::{Coll, Decision, Feature, Setting};

/// Lower-case NCCL example-CSV algorithm name, `default` when NCCL chooses.
pub fn algo_name(d: Decision) -> &'static str {
    match d {
        Decision::Default => "default",
        Decision::Force(Setting { algo, .. }) => algo.name(),
    }
}

/// Lower-case NCCL example-CSV protocol name, `default` when NCCL chooses.
pub fn proto_name(d: Decision) -> &'static str {
    match d {
        Decision::Default => "default",
        Decision::Force(Setting { proto, .. }) => proto.name(),
    }
}

/// Channel count of a decision, 0 = NCCL's choice.
pub fn channels(d: Decision) -> u8 {
    match d {
        Decision::Default => 0,
        Decision::Force(Setting { channels, .. }) => channels,
    }
}

/// Short name of a tree feature, as conditions print it (`bytes < 1 MiB`,
/// `ranks/node = 8`).
pub fn feature_label(f: Feature) -> &'static str {
    match f {
        Feature::Log2Bytes => "bytes",
        Feature::Nodes => "nodes",
        Feature::Ranks => "ranks",
        Feature::Ppn => "ranks/node",
        Feature::Log2BytesPerRank => "bytes/rank",
    }
}

/// Parses `--coll`; the error lists the names.
pub fn parse_coll(s: &str) -> anyhow::Result<Coll> {
    Coll::parse(s).ok_or_else(|| {
        anyhow::anyhow!(
            "`{s}` is not a collective a tuner decides: use allreduce, allgather, reducescatter, broadcast or reduce \
             (any spelling: all_reduce, AllReduce, all_reduce_perf)"
        )
    })
}

/// The collectives an optional `--coll` selects: that one, or all of them
/// in the order the reports list them.
pub fn parse_colls(s: Option<&str>) -> anyhow::Result<Vec<Coll>> {
    Ok(match s {
        Some(c) => vec![parse_coll(c)?],
        None => Coll::ALL.iter().rev().copied().collect(),
    })
}
