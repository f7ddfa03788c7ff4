//! What the simulator runs: one collective at one point and setting, the
//! value every time and chunk function takes (below both [`super::physics`]
//! and [`super::chunk`], which use each other's results).

use crate::record::{Algo, Coll, Proto};

/// What is run: one collective of `nbytes` on `nnodes` nodes, at one
/// (algorithm, protocol, channels). Every time and chunk function of the
/// simulator takes it whole, so a setting and its point are one value from
/// the sweep's grid down to the physics, never six positional arguments.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Op {
    /// The collective.
    pub coll: Coll,
    /// Nodes it spans, each of the profile's `gpus_per_node` ranks.
    pub nnodes: u32,
    /// Its size, bytes (nccl-tests' `size` column).
    pub nbytes: u64,
    /// The algorithm.
    pub algo: Algo,
    /// The protocol.
    pub proto: Proto,
    /// Channels it runs on, forced or NCCL's count; 0 runs as one. Not
    /// [`dyncc_tables::Setting`]'s channels: there 0 is NCCL's choice,
    /// here the count is always resolved (by the `NcclModel`
    /// when nothing forces it).
    pub channels: u32,
}
