//! The byte layout: fixed-size, little-endian, alignment-1 records (see
//! `tables/FORMAT.md` for the prose version of this file).
//!
//! zerocopy checks at compile time that every struct has no padding and
//! alignment 1, so the reader can view any `&[u8]` in place.

use zerocopy::little_endian::{F32, U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// First eight bytes of every table.
pub const MAGIC: [u8; 8] = *b"DYNCCTBL";
/// Format major version this code reads and writes. Readers reject any other
/// major.
pub const FORMAT_MAJOR: u16 = 1;
/// Format minor version this code writes when a table holds what only that
/// minor defines (1.2: a decision with a chunk size, byte 3 of the packed
/// decision); a table with a plan and no chunk is written as 1.1, one with
/// neither as 1.0, byte for byte what those writers wrote. 1.1 added a
/// section kind, which older readers skip; 1.2 gave the packed decision's
/// reserved byte a meaning, so a 1.1 reader refuses (never misreads) a
/// table whose decisions carry a chunk.
pub const FORMAT_MINOR: u16 = 2;
/// `nccl_layout` value meaning "NCCL 2.23+ numbering" (algorithms 0..=6 with
/// PAT = 6, protocols 0..=2, collectives 0..=4).
pub const NCCL_LAYOUT: u32 = 1;
/// The `nccl_enum` metadata string describing [`NCCL_LAYOUT`] 1.
pub const NCCL_ENUM: &str = "algo:tree=0,ring=1,collnet_direct=2,collnet_chain=3,nvls=4,nvls_tree=5,pat=6;proto:ll=0,ll128=1,simple=2";
/// Longest table the format allows (64 MiB, `total_len` included): readers
/// can refuse a bigger file from its size alone, before reading it. Real
/// tables are kilobytes to a few megabytes.
pub const MAX_TABLE_LEN: u64 = 64 << 20;
/// Most sections a table may list; bounds the directory checks.
pub const MAX_SECTIONS: u32 = 64;

/// Section kinds (the directory's `kind` field).
pub mod kind {
    /// Context records.
    pub const CONTEXTS: u32 = 1;
    /// Rule records.
    pub const RULES: u32 = 2;
    /// Tree directory + tree nodes.
    pub const TREES: u32 = 3;
    /// Metadata key/value strings.
    pub const META: u32 = 4;
    /// Exploration plan (format 1.1, optional): PlanRecord array.
    pub const PLAN: u32 = 5;
}

/// Fixed header, at offset 0.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Header {
    pub magic: [u8; 8],
    pub major: U16,
    pub minor: U16,
    /// Bytes of fixed header; the directory starts here. >= 40; a newer
    /// minor may grow it, older readers skip the extra bytes.
    pub header_len: U32,
    /// Length of the whole table in bytes.
    pub total_len: U32,
    /// No bits defined in 1.x; written 0, ignored by readers.
    pub flags: U32,
    pub nccl_layout: U32,
    pub section_count: U32,
    /// CRC-32 (IEEE, as crc32fast) of bytes `40..total_len`.
    pub body_crc32: U32,
    /// Must be zero to load.
    pub reserved: U32,
}
pub const HEADER_LEN: usize = 40;

/// One directory entry.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct SectionEntry {
    pub kind: U32,
    /// From the start of the table.
    pub offset: U32,
    pub len: U32,
}
pub const SECTION_ENTRY_LEN: usize = 12;

/// One context (CONTEXTS is an array of these).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct ContextRecord {
    pub coll: u8,
    pub reg_buff: u8,
    pub reserved: [u8; 2],
    pub nodes_min: U32,
    pub nodes_max: U32,
    pub ppn_min: U32,
    pub ppn_max: U32,
    pub max_pipe_ops: U32,
    /// Index of the first rule in RULES; contexts tile RULES in order.
    pub rule_start: U32,
    pub rule_count: U32,
}
pub const CONTEXT_LEN: usize = 32;

/// One rule (RULES is an array of these).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct RuleRecord {
    pub last_bucket: u8,
    pub basis: u8,
    pub reserved: [u8; 2],
    pub decision: U32,
    pub gain: F32,
}
pub const RULE_LEN: usize = 12;

/// Prefix of the TREES and META sections.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct CountPrefix {
    pub count: U32,
    pub reserved: U32,
}
pub const COUNT_PREFIX_LEN: usize = 8;

/// One tree in the TREES directory.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct TreeEntry {
    pub coll: u8,
    pub reserved: [u8; 3],
    /// Index of the tree's first node in the node array; trees tile it.
    pub node_start: U32,
    pub node_count: U32,
}
pub const TREE_ENTRY_LEN: usize = 12;

/// One tree node. `kind` 0 = split: `a` feature, `w0` threshold (f32 bits),
/// `w1` left, `w2` right (indices within the tree). `kind` 1 = leaf: `a`
/// basis, `w0` packed decision, `w1` gain (f32 bits), `w2` 0.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct NodeRecord {
    pub kind: u8,
    pub a: u8,
    pub reserved: [u8; 2],
    pub w0: U32,
    pub w1: U32,
    pub w2: U32,
}
pub const NODE_LEN: usize = 16;
pub const NODE_SPLIT: u8 = 0;
pub const NODE_LEAF: u8 = 1;

/// One metadata entry; offsets are from the start of the string area that
/// follows the entry array.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct MetaEntry {
    pub key_off: U32,
    pub key_len: U32,
    pub val_off: U32,
    pub val_len: U32,
}
pub const META_ENTRY_LEN: usize = 16;

/// One exploration candidate (PLAN is an array of these, ordered by
/// (context, nodes, bucket, rank)).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct PlanRecord {
    pub context: U32,
    pub nodes: U32,
    /// First size bucket of the cell.
    pub bucket: u8,
    pub rank: u8,
    /// Last size bucket of the cell (inclusive), >= `bucket`.
    pub last_bucket: u8,
    pub reserved: u8,
    pub decision: U32,
    pub gain: F32,
    pub spread: F32,
    pub cost_bound: F32,
}
pub const PLAN_LEN: usize = 28;

// The documented sizes are the real sizes.
const _: () = {
    assert!(core::mem::size_of::<Header>() == HEADER_LEN);
    assert!(core::mem::size_of::<SectionEntry>() == SECTION_ENTRY_LEN);
    assert!(core::mem::size_of::<ContextRecord>() == CONTEXT_LEN);
    assert!(core::mem::size_of::<RuleRecord>() == RULE_LEN);
    assert!(core::mem::size_of::<CountPrefix>() == COUNT_PREFIX_LEN);
    assert!(core::mem::size_of::<TreeEntry>() == TREE_ENTRY_LEN);
    assert!(core::mem::size_of::<NodeRecord>() == NODE_LEN);
    assert!(core::mem::size_of::<MetaEntry>() == META_ENTRY_LEN);
    assert!(core::mem::size_of::<PlanRecord>() == PLAN_LEN);
};
