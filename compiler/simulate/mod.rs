//! The simulator: realistic nccl-tests sweeps from hardware profiles.
//!
//! [`profile`] describes a machine; [`physics`] is the "true" time of every
//! (collective, algorithm, protocol, channels, shape, size) with noise,
//! one [`op::Op`] each, and [`chunk`] what a chunk size other than
//! NCCL's changes in it;
//! [`nccl_model`] is NCCL's own cost model, which picks what default runs
//! execute; [`sweep`] lays out the runs and writes them through [`format`](mod@format)
//! (nccl-tests text) with the ground truth beside them; [`calibrate`]
//! compares the physics with a real sweep. The command is `crate::cmd::simulate`.

pub mod calibrate;
pub mod chunk;
pub mod format;
pub mod nccl_model;
pub mod op;
pub mod physics;
pub mod profile;
pub mod sweep;
