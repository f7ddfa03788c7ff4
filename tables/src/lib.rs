//! The dyncc table format: NCCL's enum numbering, the on-disk layout, a
//! validating reader that never allocates or panics, and (feature `build`)
//! the builder the compiler writes tables with.
#![no_std]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod nccl;

pub use nccl::{Algo, Coll, Proto};
