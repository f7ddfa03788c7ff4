//! NCCL's numbering of collectives, algorithms and protocols, as the tuner
//! ABI passes them (NCCL 2.23+; PAT = 6 was appended, nothing renumbered).

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
}
