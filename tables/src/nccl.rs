//! NCCL's numbering of collectives, algorithms and protocols, as the tuner
//! ABI passes them (NCCL 2.23+; PAT = 6 was appended, nothing renumbered),
//! and NCCL's rules about which of them can run on a machine ([`Machine`]);
//! the plugin ABI versions are one table per plugin kind ([`abi`]).

pub mod abi;
pub use abi::{ProfilerAbi, TunerAbi, PROFILER_ABIS, TUNER_ABIS};

/// A collective NCCL asks a tuner about (`ncclFunc_t` 0..=4).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(u8)]
#[allow(missing_docs)] // variants are NCCL's own names
pub enum Coll {
    Broadcast = 0,
    Reduce = 1,
    AllGather = 2,
    ReduceScatter = 3,
    AllReduce = 4,
}

/// Number of tunable collectives (`NCCL_NUM_FUNCTIONS`).
pub const NUM_COLLS: usize = 5;

impl Coll {
    /// All collectives, in NCCL numbering order.
    pub const ALL: [Coll; NUM_COLLS] = [
        Coll::Broadcast,
        Coll::Reduce,
        Coll::AllGather,
        Coll::ReduceScatter,
        Coll::AllReduce,
    ];

    /// From NCCL's `ncclFunc_t` value; `None` for anything a tuner never decides.
    pub const fn from_nccl(v: u32) -> Option<Coll> {
        match v {
            0 => Some(Coll::Broadcast),
            1 => Some(Coll::Reduce),
            2 => Some(Coll::AllGather),
            3 => Some(Coll::ReduceScatter),
            4 => Some(Coll::AllReduce),
            _ => None,
        }
    }

    /// Lower-case name as in NCCL's example tuner CSV (`allreduce`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Coll::Broadcast => "broadcast",
            Coll::Reduce => "reduce",
            Coll::AllGather => "allgather",
            Coll::ReduceScatter => "reducescatter",
            Coll::AllReduce => "allreduce",
        }
    }

    /// Parses `allreduce`, `AllReduce`, `all_reduce`, `all_reduce_perf`, ...
    pub fn parse(s: &str) -> Option<Coll> {
        let mut buf = [0u8; 32];
        let n = normalise(s, &mut buf)?;
        let k = &buf[..n];
        let k = k.strip_suffix(b"perf").unwrap_or(k);
        Some(match k {
            b"broadcast" | b"bcast" => Coll::Broadcast,
            b"reduce" => Coll::Reduce,
            b"allgather" => Coll::AllGather,
            b"reducescatter" => Coll::ReduceScatter,
            b"allreduce" => Coll::AllReduce,
            _ => return None,
        })
    }
}

/// An algorithm (`NCCL_ALGO_*`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(u8)]
#[allow(missing_docs)] // variants are NCCL's own names
pub enum Algo {
    Tree = 0,
    Ring = 1,
    CollNetDirect = 2,
    CollNetChain = 3,
    Nvls = 4,
    NvlsTree = 5,
    Pat = 6,
}

/// Number of algorithms in NCCL 2.23+ (`NCCL_NUM_ALGORITHMS`).
pub const NUM_ALGOS: usize = 7;

/// NCCL's `MAXCHANNELS` (64 in every release the tuner ABI exists for):
/// the most channels a decision may ask for. The format rejects more.
pub const MAX_CHANNELS: u8 = 64;

impl Algo {
    /// All algorithms, in NCCL numbering order.
    pub const ALL: [Algo; NUM_ALGOS] = [
        Algo::Tree,
        Algo::Ring,
        Algo::CollNetDirect,
        Algo::CollNetChain,
        Algo::Nvls,
        Algo::NvlsTree,
        Algo::Pat,
    ];

    /// From NCCL's `NCCL_ALGO_*` value; `None` if out of range.
    pub const fn from_u8(v: u8) -> Option<Algo> {
        match v {
            0 => Some(Algo::Tree),
            1 => Some(Algo::Ring),
            2 => Some(Algo::CollNetDirect),
            3 => Some(Algo::CollNetChain),
            4 => Some(Algo::Nvls),
            5 => Some(Algo::NvlsTree),
            6 => Some(Algo::Pat),
            _ => None,
        }
    }

    /// Lower-case name as in NCCL's example tuner CSV (`tree`, `collnet_direct`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Algo::Tree => "tree",
            Algo::Ring => "ring",
            Algo::CollNetDirect => "collnet_direct",
            Algo::CollNetChain => "collnet_chain",
            Algo::Nvls => "nvls",
            Algo::NvlsTree => "nvls_tree",
            Algo::Pat => "pat",
        }
    }

    /// The spelling `NCCL_ALGO` takes (`ncclAlgoStr`): `Tree`, `CollNetDirect`, `NVLSTree`, ...
    pub const fn env_name(self) -> &'static str {
        match self {
            Algo::Tree => "Tree",
            Algo::Ring => "Ring",
            Algo::CollNetDirect => "CollNetDirect",
            Algo::CollNetChain => "CollNetChain",
            Algo::Nvls => "NVLS",
            Algo::NvlsTree => "NVLSTree",
            Algo::Pat => "PAT",
        }
    }

    /// Parses every spelling NCCL and its tools use: `Tree`, `TREE`, `tree`,
    /// `CollNetDirect`, `COLLNET_DIRECT`, `collnet_direct`, `NVLSTree`, `nvls_tree`, ...
    pub fn parse(s: &str) -> Option<Algo> {
        let mut buf = [0u8; 32];
        let n = normalise(s, &mut buf)?;
        Some(match &buf[..n] {
            b"tree" => Algo::Tree,
            b"ring" => Algo::Ring,
            b"collnetdirect" | b"collnet" => Algo::CollNetDirect,
            b"collnetchain" => Algo::CollNetChain,
            b"nvls" => Algo::Nvls,
            b"nvlstree" => Algo::NvlsTree,
            b"pat" => Algo::Pat,
            _ => return None,
        })
    }
}

/// A protocol (`NCCL_PROTO_*`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(u8)]
#[allow(missing_docs)] // variants are NCCL's own names
pub enum Proto {
    LL = 0,
    LL128 = 1,
    Simple = 2,
}

/// Number of protocols (`NCCL_NUM_PROTOCOLS`).
pub const NUM_PROTOS: usize = 3;

impl Proto {
    /// All protocols, in NCCL numbering order.
    pub const ALL: [Proto; NUM_PROTOS] = [Proto::LL, Proto::LL128, Proto::Simple];

    /// From NCCL's `NCCL_PROTO_*` value; `None` if out of range.
    pub const fn from_u8(v: u8) -> Option<Proto> {
        match v {
            0 => Some(Proto::LL),
            1 => Some(Proto::LL128),
            2 => Some(Proto::Simple),
            _ => None,
        }
    }

    /// Lower-case name as in NCCL's example tuner CSV (`ll`, `ll128`, `simple`).
    pub const fn name(self) -> &'static str {
        match self {
            Proto::LL => "ll",
            Proto::LL128 => "ll128",
            Proto::Simple => "simple",
        }
    }

    /// The spelling `NCCL_PROTO` takes (`ncclProtoStr`): `LL`, `LL128`, `Simple`.
    pub const fn env_name(self) -> &'static str {
        match self {
            Proto::LL => "LL",
            Proto::LL128 => "LL128",
            Proto::Simple => "Simple",
        }
    }

    /// Parses `LL`, `ll`, `LL128`, `Simple`, `SIMPLE`, ...
    pub fn parse(s: &str) -> Option<Proto> {
        let mut buf = [0u8; 32];
        let n = normalise(s, &mut buf)?;
        Some(match &buf[..n] {
            b"ll" => Proto::LL,
            b"ll128" => Proto::LL128,
            b"simple" => Proto::Simple,
            _ => return None,
        })
    }
}

/// What NCCL knows about a communicator and its machines that decides
/// which (algorithm, protocol) it can run: the shape, and the facts NCCL
/// finds at init (NVLS and CollNet support, NVSwitch, PAT, LL128).
///
/// The one statement of NCCL's rules (see [`Machine::refusal`]): `dyncc
/// plan` uses it to sweep only what runs, the simulator for what it models
/// and runs, and the runtime before it answers a v2 `getCollInfo` (which
/// NCCL 2.21 does not check). A caller that does not know a fact says
/// `true` ([`Machine::new`]): the rule then refuses only what the shape
/// rules out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Machine {
    /// Nodes in the communicator (`nNodes`).
    pub nodes: u32,
    /// Ranks (GPUs) per node (`nRanks / nNodes`; NCCL's `localRanks`).
    pub ranks_per_node: u32,
    /// NVLink SHARP works (`nvlsSupport`: NVSwitch with multicast, H100/B200 SXM).
    pub nvls: bool,
    /// A CollNet (SHARP) network plugin is in use (`collNetSupport`, `collnetEnable`).
    pub collnet: bool,
    /// A node's GPUs hang off an NVSwitch (CollNetDirect needs one).
    pub nvswitch: bool,
    /// PAT is enabled (NCCL 2.23+, `NCCL_PAT_ENABLE`, a host-side network).
    pub pat: bool,
    /// LL128 is enabled (NCCL's platform check when `NCCL_PROTO` leaves it on "auto").
    pub ll128: bool,
}

/// Why NCCL cannot run an (algorithm, protocol) for a collective on a
/// [`Machine`]: [`Machine::refusal`]'s answer, [`Refusal::why`] in words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// NCCL has no model of the algorithm for this collective (tuning.cc:
    /// Broadcast/Reduce run Ring; AllGather/ReduceScatter Ring, PAT, NVLS,
    /// CollNetDirect; AllReduce all but PAT).
    NotForCollective(Coll),
    /// NVLS, NVLSTree and PAT have only a Simple implementation.
    SimpleOnly,
    /// PAT runs with one rank per node.
    PatNeedsOneRankPerNode,
    /// NVLSTree is NVLS inside nodes and a tree across them.
    NvlsTreeNeedsNodes,
    /// NVLS multicasts between the GPUs of a node (`ncclNvlsInit`: `gpuCount < 2`).
    NvlsNeedsRanksPerNode,
    /// CollNet has only a Simple implementation.
    CollNetSimpleOnly,
    /// CollNet reduces in the network switches.
    CollNetNeedsNodes,
    /// NCCL runs NVLS across nodes only together with CollNet
    /// (`updateCollCostTable`); without it NVLSTree spans the nodes.
    NvlsAcrossNodesNeedsCollNet,
    /// NVLS AllGather/ReduceScatter reach at most `NCCL_MAX_NVLS_ARITY` (32) ranks per node.
    NvlsTooManyRanksPerNode,
    /// CollNet serves at most `NCCL_MAX_DIRECT_ARITY + 1` (8) ranks per node.
    CollNetTooManyRanksPerNode,
    /// The machine has no NVLink SHARP.
    NoNvls,
    /// The machine has no CollNet network.
    NoCollNet,
    /// CollNetDirect needs an NVSwitch in the node.
    NoNvSwitch,
    /// PAT is not enabled.
    NoPat,
    /// LL128 is disabled on this platform.
    NoLl128,
}

impl Refusal {
    /// The reason in words, for a user (`dyncc plan` prints it).
    pub const fn why(self) -> &'static str {
        match self {
            Refusal::NotForCollective(Coll::Broadcast | Coll::Reduce) => {
                "broadcast and reduce run Ring only"
            }
            Refusal::NotForCollective(Coll::AllGather | Coll::ReduceScatter) => {
                "allgather/reducescatter run Ring, PAT, NVLS or CollNetDirect only"
            }
            Refusal::NotForCollective(Coll::AllReduce) => "PAT does not run allreduce",
            Refusal::SimpleOnly => "NVLS, NVLSTree and PAT run the Simple protocol only",
            Refusal::PatNeedsOneRankPerNode => "PAT runs only with 1 GPU per node",
            Refusal::NvlsTreeNeedsNodes => "NVLSTree needs more than one node",
            Refusal::NvlsNeedsRanksPerNode => "NVLS needs several GPUs on an NVSwitch in each node",
            Refusal::CollNetSimpleOnly => "CollNet runs the Simple protocol only",
            Refusal::CollNetNeedsNodes => {
                "CollNet needs more than one node (it runs over the network)"
            }
            Refusal::NvlsAcrossNodesNeedsCollNet => {
                "NVLS runs across nodes only with CollNet (NVLSTree spans nodes without it)"
            }
            Refusal::NvlsTooManyRanksPerNode => {
                "NVLS runs allgather/reducescatter with at most 32 GPUs per node"
            }
            Refusal::CollNetTooManyRanksPerNode => "CollNet runs with at most 8 GPUs per node",
            Refusal::NoNvls => "NVLS needs NVSwitch with NVLink SHARP",
            Refusal::NoCollNet => "CollNet needs a CollNet (SHARP) network",
            Refusal::NoNvSwitch => "CollNetDirect needs an NVSwitch in each node",
            Refusal::NoPat => "PAT is not enabled",
            Refusal::NoLl128 => "LL128 is disabled on this platform",
        }
    }
}

impl Machine {
    /// A machine of this shape where every feature is assumed present: only
    /// the shape and NCCL's algorithm rules limit what runs.
    pub const fn new(nodes: u32, ranks_per_node: u32) -> Machine {
        Machine {
            nodes,
            ranks_per_node,
            nvls: true,
            collnet: true,
            nvswitch: true,
            pat: true,
            ll128: true,
        }
    }

    /// Why NCCL cannot run `algo` with `proto` for `coll` here, or `None`
    /// if it can (reference: tuning.cc's model table and enable pass,
    /// `updateCollCostTable`'s skips; ABI reference §3.5, §5.4, §5.5). The
    /// first reason that applies, in a fixed order.
    pub const fn refusal(&self, coll: Coll, algo: Algo, proto: Proto) -> Option<Refusal> {
        let simple = matches!(proto, Proto::Simple);
        let nvls_family = matches!(algo, Algo::Nvls | Algo::NvlsTree);
        let collnet_family = matches!(algo, Algo::CollNetDirect | Algo::CollNetChain);
        let modelled = match coll {
            Coll::Broadcast | Coll::Reduce => matches!(algo, Algo::Ring),
            Coll::AllGather | Coll::ReduceScatter => matches!(
                algo,
                Algo::Ring | Algo::Pat | Algo::Nvls | Algo::CollNetDirect
            ),
            Coll::AllReduce => !matches!(algo, Algo::Pat),
        };
        let r = if !modelled {
            Refusal::NotForCollective(coll)
        } else if (nvls_family || matches!(algo, Algo::Pat)) && !simple {
            Refusal::SimpleOnly
        } else if matches!(algo, Algo::Pat) && self.ranks_per_node != 1 {
            Refusal::PatNeedsOneRankPerNode
        } else if matches!(algo, Algo::NvlsTree) && self.nodes < 2 {
            Refusal::NvlsTreeNeedsNodes
        } else if nvls_family && self.ranks_per_node < 2 {
            Refusal::NvlsNeedsRanksPerNode
        } else if collnet_family && !simple {
            Refusal::CollNetSimpleOnly
        } else if collnet_family && self.nodes < 2 {
            Refusal::CollNetNeedsNodes
        } else if matches!(algo, Algo::Nvls) && self.nodes > 1 && !self.collnet {
            Refusal::NvlsAcrossNodesNeedsCollNet
        } else if nvls_family && !matches!(coll, Coll::AllReduce) && self.ranks_per_node > 32 {
            Refusal::NvlsTooManyRanksPerNode
        } else if collnet_family && self.ranks_per_node > 8 {
            Refusal::CollNetTooManyRanksPerNode
        } else if nvls_family && !self.nvls {
            Refusal::NoNvls
        } else if collnet_family && !self.collnet {
            Refusal::NoCollNet
        } else if matches!(algo, Algo::CollNetDirect) && !self.nvswitch {
            Refusal::NoNvSwitch
        } else if matches!(algo, Algo::Pat) && !self.pat {
            Refusal::NoPat
        } else if matches!(proto, Proto::LL128) && !self.ll128 {
            Refusal::NoLl128
        } else {
            return None;
        };
        Some(r)
    }

    /// Whether NCCL can run `algo` with `proto` for `coll` here.
    pub const fn runs(&self, coll: Coll, algo: Algo, proto: Proto) -> bool {
        self.refusal(coll, algo, proto).is_none()
    }
}

/// Bytes per element of a datatype as NCCL names it (`ncclDataTypeToString`
/// in the profiler's `Coll` events: `ncclFloat16`, `ncclBfloat16`, ...);
/// `None` for a name this crate does not know.
pub fn datatype_size(name: &[u8]) -> Option<u64> {
    Some(match name {
        b"ncclInt8" | b"ncclUint8" | b"ncclFloat8e4m3" | b"ncclFloat8e5m2" => 1,
        b"ncclFloat16" | b"ncclBfloat16" => 2,
        b"ncclInt32" | b"ncclUint32" | b"ncclFloat32" => 4,
        b"ncclInt64" | b"ncclUint64" | b"ncclFloat64" => 8,
        _ => return None,
    })
}

/// Lower-cases ASCII letters and digits into `buf`, dropping `_`, `-` and
/// spaces, so every spelling of a name compares equal. `None` if too long
/// or not ASCII.
fn normalise(s: &str, buf: &mut [u8; 32]) -> Option<usize> {
    let mut n = 0;
    for &b in s.trim().as_bytes() {
        match b {
            b'_' | b'-' | b' ' => {}
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => {
                *buf.get_mut(n)? = b.to_ascii_lowercase();
                n += 1;
            }
            _ => return None,
        }
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The profiler's `Coll` events name what ran as NCCL's own strings
    /// (`ncclFuncToString`, `ncclAlgoToString`, `ncclProtoToString`,
    /// `ncclDatatypeToString`): these parsers are the only place that reads
    /// them.
    #[test]
    fn the_profilers_spellings_parse() {
        for (s, c) in [
            ("Broadcast", Coll::Broadcast),
            ("Reduce", Coll::Reduce),
            ("AllGather", Coll::AllGather),
            ("ReduceScatter", Coll::ReduceScatter),
            ("AllReduce", Coll::AllReduce),
        ] {
            assert_eq!(Coll::parse(s), Some(c), "{s}");
        }
        for (s, a) in [
            ("TREE", Algo::Tree),
            ("RING", Algo::Ring),
            ("COLLNET_DIRECT", Algo::CollNetDirect),
            ("COLLNET_CHAIN", Algo::CollNetChain),
            ("NVLS", Algo::Nvls),
            ("NVLS_TREE", Algo::NvlsTree),
            ("PAT", Algo::Pat),
        ] {
            assert_eq!(Algo::parse(s), Some(a), "{s}");
        }
        for (s, p) in [
            ("LL", Proto::LL),
            ("LL128", Proto::LL128),
            ("SIMPLE", Proto::Simple),
        ] {
            assert_eq!(Proto::parse(s), Some(p), "{s}");
        }
        assert_eq!(Coll::parse("SendRecv"), None);
        for (s, n) in [
            ("ncclInt8", 1),
            ("ncclFloat8e5m2", 1),
            ("ncclBfloat16", 2),
            ("ncclFloat32", 4),
            ("ncclUint64", 8),
        ] {
            assert_eq!(datatype_size(s.as_bytes()), Some(n), "{s}");
        }
        assert_eq!(datatype_size(b"ncclFloat128"), None);
    }

    #[test]
    fn names_round_trip() {
        for a in Algo::ALL {
            assert_eq!(Algo::parse(a.name()), Some(a));
            assert_eq!(Algo::parse(a.env_name()), Some(a));
            assert_eq!(Algo::from_u8(a as u8), Some(a));
        }
        for p in Proto::ALL {
            assert_eq!(Proto::parse(p.name()), Some(p));
            assert_eq!(Proto::parse(p.env_name()), Some(p));
        }
        for c in Coll::ALL {
            assert_eq!(Coll::parse(c.name()), Some(c));
            assert_eq!(Coll::from_nccl(c as u32), Some(c));
        }
        assert_eq!(Coll::parse("all_reduce_perf"), Some(Coll::AllReduce));
        assert_eq!(Algo::parse("NVLS_TREE"), Some(Algo::NvlsTree));
        assert_eq!(Algo::parse("COLLNET_DIRECT"), Some(Algo::CollNetDirect));
        assert_eq!(Algo::parse("default"), None);
    }

    /// Every (collective, algorithm) NCCL has a model for (tuning.cc), on a
    /// machine where nothing else stands in the way of that algorithm.
    #[test]
    fn each_collective_runs_the_algorithms_nccl_models_for_it() {
        for c in Coll::ALL {
            for a in Algo::ALL {
                // PAT needs 1 rank per node, NVLS several: pick the shape that suits.
                let ppn = if a == Algo::Pat { 1 } else { 8 };
                let m = Machine::new(2, ppn);
                let modelled = !matches!(
                    m.refusal(c, a, Proto::Simple),
                    Some(Refusal::NotForCollective(_))
                );
                let want = match c {
                    Coll::Broadcast | Coll::Reduce => a == Algo::Ring,
                    Coll::AllGather | Coll::ReduceScatter => {
                        matches!(a, Algo::Ring | Algo::Pat | Algo::Nvls | Algo::CollNetDirect)
                    }
                    Coll::AllReduce => a != Algo::Pat,
                };
                assert_eq!(modelled, want, "{c:?} {a:?}");
                assert_eq!(m.runs(c, a, Proto::Simple), want, "{c:?} {a:?}");
            }
        }
    }

    #[test]
    fn the_rule_table() {
        use Algo::*;
        use Proto::{Simple, LL, LL128};
        use Refusal::*;
        let m = Machine::new;
        let (ar, ag, rs, bc) = (
            Coll::AllReduce,
            Coll::AllGather,
            Coll::ReduceScatter,
            Coll::Broadcast,
        );
        let no_collnet = |n, ppn| Machine {
            collnet: false,
            ..m(n, ppn)
        };
        struct Case {
            machine: Machine,
            coll: Coll,
            algo: Algo,
            proto: Proto,
            want: Option<Refusal>,
        }
        let case = |machine, coll, algo, proto, want| Case {
            machine,
            coll,
            algo,
            proto,
            want,
        };
        #[rustfmt::skip]
        let cases = [
            case(m(1, 8), ar, Tree, LL, None),
            case(m(1, 8), ar, Ring, LL128, None),
            case(m(4, 8), bc, Tree, LL, Some(NotForCollective(bc))),
            case(m(4, 8), ag, Tree, Simple, Some(NotForCollective(ag))),
            case(m(4, 1), ar, Pat, Simple, Some(NotForCollective(ar))),
            // Simple only.
            case(m(1, 8), ar, Nvls, LL, Some(SimpleOnly)),
            case(m(2, 8), ar, NvlsTree, LL128, Some(SimpleOnly)),
            case(m(4, 1), ag, Pat, LL, Some(SimpleOnly)),
            case(m(2, 8), ar, CollNetChain, LL, Some(CollNetSimpleOnly)),
            case(m(2, 8), ag, CollNetDirect, LL128, Some(CollNetSimpleOnly)),
            // The shape.
            case(m(4, 1), ag, Pat, Simple, None),
            case(m(4, 2), rs, Pat, Simple, Some(PatNeedsOneRankPerNode)),
            case(m(1, 8), ar, NvlsTree, Simple, Some(NvlsTreeNeedsNodes)),
            case(m(2, 8), ar, NvlsTree, Simple, None),
            case(m(1, 8), ar, Nvls, Simple, None),
            case(m(4, 1), ar, Nvls, Simple, Some(NvlsNeedsRanksPerNode)),
            case(m(4, 1), ar, NvlsTree, Simple, Some(NvlsNeedsRanksPerNode)),
            case(m(1, 8), ar, CollNetDirect, Simple, Some(CollNetNeedsNodes)),
            case(m(2, 8), ar, CollNetDirect, Simple, None),
            case(m(2, 9), ar, CollNetChain, Simple, Some(CollNetTooManyRanksPerNode)),
            case(m(1, 33), ag, Nvls, Simple, Some(NvlsTooManyRanksPerNode)),
            case(m(1, 33), ar, Nvls, Simple, None),
            case(m(2, 8), ag, Nvls, Simple, None),
            case(no_collnet(2, 8), ar, Nvls, Simple, Some(NvlsAcrossNodesNeedsCollNet)),
            case(no_collnet(1, 8), ar, Nvls, Simple, None),
            case(no_collnet(2, 8), ar, NvlsTree, Simple, None),
            // The machine's features.
            case(Machine { nvls: false, ..m(1, 8) }, ar, Nvls, Simple, Some(NoNvls)),
            case(Machine { nvls: false, ..m(2, 8) }, ar, NvlsTree, Simple, Some(NoNvls)),
            case(no_collnet(2, 8), ar, CollNetChain, Simple, Some(NoCollNet)),
            case(Machine { nvswitch: false, ..m(2, 8) }, ar, CollNetDirect, Simple, Some(NoNvSwitch)),
            case(Machine { nvswitch: false, ..m(2, 8) }, ar, CollNetChain, Simple, None),
            case(Machine { pat: false, ..m(4, 1) }, ag, Pat, Simple, Some(NoPat)),
            case(Machine { ll128: false, ..m(1, 8) }, ar, Ring, LL128, Some(NoLl128)),
            case(Machine { ll128: false, ..m(1, 8) }, ar, Ring, LL, None),
        ];
        for (i, c) in cases.iter().enumerate() {
            assert_eq!(
                c.machine.refusal(c.coll, c.algo, c.proto),
                c.want,
                "case {i}: {:?} {:?} {:?} {:?}",
                c.machine,
                c.coll,
                c.algo,
                c.proto
            );
        }
    }

    /// Without a feature, only that feature's algorithms (or protocol) stop.
    #[test]
    fn a_missing_feature_refuses_only_its_own_algorithms() {
        let full = Machine::new(2, 8);
        /// A machine without one feature, and what that feature's absence stops.
        struct Without {
            machine: Machine,
            lost: fn(Algo, Proto) -> bool,
        }
        let cases = [
            Without {
                machine: Machine {
                    nvls: false,
                    ..full
                },
                lost: |a, _| matches!(a, Algo::Nvls | Algo::NvlsTree),
            },
            Without {
                machine: Machine {
                    collnet: false,
                    ..full
                },
                // NVLS across nodes stops with CollNet.
                lost: |a, _| matches!(a, Algo::CollNetDirect | Algo::CollNetChain | Algo::Nvls),
            },
            Without {
                machine: Machine {
                    nvswitch: false,
                    ..full
                },
                lost: |a, _| a == Algo::CollNetDirect,
            },
            Without {
                machine: Machine {
                    ll128: false,
                    ..full
                },
                lost: |_, p| p == Proto::LL128,
            },
        ];
        for Without { machine: m, lost } in cases {
            for c in Coll::ALL {
                for a in Algo::ALL {
                    for p in Proto::ALL {
                        let want = full.runs(c, a, p) && !lost(a, p);
                        assert_eq!(m.runs(c, a, p), want, "{m:?} {c:?} {a:?} {p:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_refusal_says_why_in_its_own_words() {
        use Refusal::*;
        let all = [
            NotForCollective(Coll::Broadcast),
            NotForCollective(Coll::AllGather),
            NotForCollective(Coll::AllReduce),
            SimpleOnly,
            PatNeedsOneRankPerNode,
            NvlsTreeNeedsNodes,
            NvlsNeedsRanksPerNode,
            CollNetSimpleOnly,
            CollNetNeedsNodes,
            NvlsAcrossNodesNeedsCollNet,
            NvlsTooManyRanksPerNode,
            CollNetTooManyRanksPerNode,
            NoNvls,
            NoCollNet,
            NoNvSwitch,
            NoPat,
            NoLl128,
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a.why(), b.why(), "{a:?} {b:?}");
            }
        }
    }
}
