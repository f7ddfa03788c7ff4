//! The sweep behind `dyncc plan`: which nccl-tests runs measure what
//! `dyncc compile` needs, how long they take, and the script that runs
//! them. A [`Plan`] holds validated choices (the command turns its
//! arguments into one); [`Plan::runs`] lists NCCL's default and every
//! algorithm x protocol (x channel count) NCCL can run for each collective
//! at each node count ([`dyncc_tables::Machine`] says which), repeats
//! interleaved; [`script`] writes them out for a [`Launcher`].

mod estimate;
mod launcher;
mod script;

use std::path::PathBuf;

use dyncc_tables::{Algo, Coll, Machine, Proto, Refusal};
use serde::Serialize;

pub use estimate::fmt_duration;
pub use launcher::{split_launcher_args, Launcher};
pub use script::{script, shell_quote};

/// A validated plan.
#[derive(Clone, Debug)]
pub struct Plan {
    pub launcher: Launcher,
    pub nodes: Vec<u32>,
    pub gpus_per_node: u32,
    pub colls: Vec<Coll>,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub step_factor: u32,
    pub repeats: u32,
    pub iters: u32,
    pub warmup: u32,
    pub algos: Vec<Algo>,
    pub explicit_algos: bool,
    pub protos: Vec<Proto>,
    pub channels: Vec<u32>,
    /// `--chunks`, in bytes: each forced setting also runs once per chunk
    /// with the dyncc plugin answering `getChunkSize` with it.
    pub chunks: Vec<u64>,
    /// Where the plugin is on the cluster, for chunk runs (`--plugin-dir`,
    /// else this dyncc's `plugin-path`); empty: the script asks
    /// `dyncc plugin-path` there, or `DYNCC_PLUGIN_DIR`.
    pub plugin_dir: String,
    /// `--nvls`: the machines have NVLink SHARP.
    pub nvls: bool,
    /// `--collnet`: the network has CollNet (SHARP).
    pub collnet: bool,
    pub nccl_tests: PathBuf,
    pub out_dir: String,
    pub platform: Option<String>,
    pub launcher_args: Vec<String>,
    /// `--max-hours`: the longest estimated sweep written.
    pub max_hours: u32,
    /// Where the script is written (named in its own instructions).
    pub output: PathBuf,
    pub command: String,
}

/// One nccl-tests invocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Run {
    #[serde(serialize_with = "ser_coll")]
    pub coll: Coll,
    pub nodes: u32,
    /// None = NCCL's choice.
    #[serde(serialize_with = "ser_algo")]
    pub algo: Option<Algo>,
    #[serde(serialize_with = "ser_proto")]
    pub proto: Option<Proto>,
    /// 0 = NCCL's choice.
    pub channels: u32,
    /// The chunk the plugin answers (`DYNCC_SWEEP_CHUNK`), bytes; 0 = NCCL's.
    pub chunk: u64,
    pub repeat: u32,
}

fn ser_coll<S: serde::Serializer>(c: &Coll, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.name())
}
fn ser_algo<S: serde::Serializer>(a: &Option<Algo>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(a.map_or("default", Algo::env_name))
}
fn ser_proto<S: serde::Serializer>(p: &Option<Proto>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(p.map_or("default", Proto::env_name))
}

/// One forced setting of a (collective, nodes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    pub algo: Algo,
    pub proto: Proto,
    /// 0 = NCCL's choice.
    pub channels: u32,
}

impl Plan {
    /// The machines at `nodes` nodes as far as the plan knows them:
    /// `--nvls` and `--collnet` say what NVSwitch and the network offer
    /// (`--algos` naming NVLS or CollNet without them is refused); what
    /// the plan is not told (NVSwitch for CollNetDirect, PAT, LL128) is
    /// assumed, and a run NCCL refuses anyway lands in failed/.
    pub fn machine(&self, nodes: u32) -> Machine {
        Machine {
            nvls: self.nvls,
            collnet: self.collnet,
            ..Machine::new(nodes, self.gpus_per_node)
        }
    }

    /// The forced settings of one (collective, nodes). With `--algos`, what
    /// NCCL cannot run is named in `skipped` (once); the default algorithms
    /// are filtered silently.
    pub fn settings(&self, coll: Coll, nodes: u32, skipped: &mut Vec<String>) -> Vec<Setting> {
        let mut out = Vec::new();
        let machine = self.machine(nodes);
        for &algo in &self.algos {
            for &proto in &self.protos {
                if let Some(why) = machine.refusal(coll, algo, proto).map(Refusal::why) {
                    if self.explicit_algos {
                        let s = format!(
                            "{} {}/{} at {nodes} node(s): {why}",
                            coll.name(),
                            algo.env_name(),
                            proto.env_name()
                        );
                        if !skipped.contains(&s) {
                            skipped.push(s);
                        }
                    }
                    continue;
                }
                for &channels in &self.channels {
                    out.push(Setting {
                        algo,
                        proto,
                        channels,
                    });
                }
            }
        }
        out
    }

    /// Every run, repeats outermost (interleaved), then nodes, collective,
    /// NCCL's default first, then the forced settings, then each forced
    /// setting again per `--chunks` chunk (where the protocol runs it).
    pub fn runs(&self, skipped: &mut Vec<String>) -> Vec<Run> {
        let mut out = Vec::new();
        for repeat in 1..=self.repeats {
            for &nodes in &self.nodes {
                for &coll in &self.colls {
                    out.push(Run {
                        coll,
                        nodes,
                        algo: None,
                        proto: None,
                        channels: 0,
                        chunk: 0,
                        repeat,
                    });
                    let settings = self.settings(coll, nodes, skipped);
                    for s in &settings {
                        out.push(Run {
                            coll,
                            nodes,
                            algo: Some(s.algo),
                            proto: Some(s.proto),
                            channels: s.channels,
                            chunk: 0,
                            repeat,
                        });
                    }
                    // Then each chunk under each forced setting: a chunk is
                    // learnt per decision, and a decision forces a setting.
                    for &chunk in &self.chunks {
                        for s in &settings {
                            if s.proto.chunk_at_most(chunk).is_nccl() {
                                let why = format!(
                                    "chunk {chunk} with {}: below the protocol's {}-byte grain, \
                                     so NCCL's chunk would run",
                                    s.proto.env_name(),
                                    s.proto.chunk_grain()
                                );
                                if !skipped.contains(&why) {
                                    skipped.push(why);
                                }
                                continue;
                            }
                            out.push(Run {
                                coll,
                                nodes,
                                algo: Some(s.algo),
                                proto: Some(s.proto),
                                channels: s.channels,
                                chunk,
                                repeat,
                            });
                        }
                    }
                }
            }
        }
        out
    }

    /// Sizes nccl-tests will run.
    pub fn sizes(&self) -> Vec<u64> {
        let mut v = vec![];
        let mut s = self.min_bytes;
        while s <= self.max_bytes {
            v.push(s);
            match s.checked_mul(self.step_factor as u64) {
                Some(n) => s = n,
                None => break,
            }
        }
        v
    }
}
