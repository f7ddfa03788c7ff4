//! The simulator: realistic nccl-tests sweeps from hardware profiles.

pub mod cli;
