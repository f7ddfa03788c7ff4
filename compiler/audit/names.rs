//! The names the audit commands print and parse: collectives,
//! algorithms, protocols and tree features, as NCCL's example CSV and the
//! JSON reports spell them.

use dyncc_tables::{Algo, Chunk, Coll, Decision, Feature, Proto, Setting};
use serde::Serialize;

/// A decision as every JSON report spells it: `algorithm` and `protocol`
/// by their lower-case NCCL example-CSV names (`default` when NCCL
/// chooses), `channels` (0 = NCCL's count) and `chunk_bytes` (NCCL's
/// chunk size's setting; absent when NCCL's own). Each report struct holds
/// one, `#[serde(flatten)]`ed, so a new knob is a field here and in
/// [`SettingJson::of`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct SettingJson {
    pub algorithm: &'static str,
    pub protocol: &'static str,
    /// 0 = NCCL's count.
    pub channels: u8,
    /// The chunk size in bytes; 0 (not written) = NCCL's.
    #[serde(skip_serializing_if = "is_zero")]
    pub chunk_bytes: u32,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl SettingJson {
    /// How the reports spell `d`.
    pub fn of(d: Decision) -> SettingJson {
        match d {
            Decision::Default => SettingJson {
                algorithm: "default",
                protocol: "default",
                channels: 0,
                chunk_bytes: 0,
            },
            Decision::Force(Setting {
                algo,
                proto,
                channels,
                chunk,
            }) => SettingJson {
                algorithm: algo.name(),
                protocol: proto.name(),
                channels,
                chunk_bytes: chunk.bytes(),
            },
        }
    }

    /// The decision this spells (what [`SettingJson::of`] was given).
    pub fn decision(&self) -> Decision {
        match (Algo::parse(self.algorithm), Proto::parse(self.protocol)) {
            (Some(algo), Some(proto)) => {
                let s = Setting::new(algo, proto).with_channels(self.channels);
                let chunk = Chunk::from_bytes(self.chunk_bytes.into()).unwrap_or(Chunk::NCCL);
                Decision::Force(s.with_chunk(chunk).unwrap_or(s))
            }
            _ => Decision::Default,
        }
    }

    /// Whether NCCL chooses (nothing forced).
    pub fn is_default(&self) -> bool {
        self.decision() == Decision::Default
    }
}

impl std::fmt::Display for SettingJson {
    /// As [`Decision`]'s `Display`: `default`, `tree/ll128`, `ring/simple/8ch`,
    /// `ring/simple/8ch/512K`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.decision().fmt(f)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setting_json_spells_every_decision_and_reads_it_back() {
        assert_eq!(
            SettingJson::of(Decision::Default),
            SettingJson {
                algorithm: "default",
                protocol: "default",
                channels: 0,
                chunk_bytes: 0,
            }
        );
        assert!(SettingJson::of(Decision::Default).is_default());
        for a in 0..8 {
            for p in 0..3 {
                let (Some(algo), Some(proto)) = (Algo::from_u8(a), Proto::from_u8(p)) else {
                    continue;
                };
                for ch in [0, 1, 16, dyncc_tables::MAX_CHANNELS] {
                    let d = Decision::Force(Setting::new(algo, proto).with_channels(ch));
                    let j = SettingJson::of(d);
                    assert_eq!(
                        (j.algorithm, j.protocol, j.channels),
                        (algo.name(), proto.name(), ch)
                    );
                    assert_eq!(j.decision(), d, "{j}");
                    assert_eq!(j.to_string(), d.to_string());
                    let k = dyncc_tables::Chunk::from_bytes(1920 << 11).unwrap(); // on every grain
                    let c = Decision::Force(
                        Setting::new(algo, proto)
                            .with_channels(ch)
                            .with_chunk(k)
                            .unwrap(),
                    );
                    let j = SettingJson::of(c);
                    assert_eq!((j.chunk_bytes, j.decision()), (1920 << 11, c));
                    assert!(serde_json::to_string(&j)
                        .unwrap()
                        .contains("\"chunk_bytes\":3932160"));
                }
            }
        }
    }

    #[test]
    fn setting_json_flattens_into_the_keys_the_reports_always_wrote() {
        #[derive(Serialize)]
        struct Report {
            index: u32,
            #[serde(flatten)]
            setting: SettingJson,
            gain: f32,
        }
        let d = Decision::Force(Setting::new(Algo::Ring, Proto::Simple).with_channels(8));
        let s = serde_json::to_string(&Report {
            index: 1,
            setting: SettingJson::of(d),
            gain: 1.5,
        })
        .unwrap();
        assert_eq!(
            s,
            r#"{"index":1,"algorithm":"ring","protocol":"simple","channels":8,"gain":1.5}"#
        );
    }
}
