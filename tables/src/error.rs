//! Why a byte image is not a valid table. Allocation-free: every variant is
//! `Copy` and carries only numbers and `&'static str` nouns.

use core::fmt;

/// A table failed validation in [`crate::Table::from_bytes`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum Error {
    /// The first 8 bytes are not `DYNCCTBL`.
    BadMagic,
    /// The format major version is not one this reader knows.
    UnsupportedVersion {
        /// Major version in the file.
        found: u16,
        /// Major version this reader reads.
        supported: u16,
    },
    /// The table was built for an NCCL enum numbering this reader does not know.
    UnsupportedNcclLayout(u32),
    /// Fewer bytes than the header (or the header's length field) needs.
    Truncated {
        /// Bytes needed.
        need: u64,
        /// Bytes present.
        have: u64,
    },
    /// More bytes than the header's total length (trailing garbage).
    LengthMismatch {
        /// Length the header declares.
        header: u64,
        /// Length of the buffer.
        actual: u64,
    },
    /// The body's CRC-32 does not match the header.
    Checksum {
        /// CRC the header records.
        expected: u32,
        /// CRC of the bytes present.
        found: u32,
    },
    /// A header field is inconsistent.
    BadHeader {
        /// What is wrong.
        what: &'static str,
    },
    /// A section directory entry or a section's size is wrong.
    BadSection {
        /// The section kind (1 contexts, 2 rules, 3 trees, 4 meta).
        kind: u32,
        /// What is wrong.
        what: &'static str,
    },
    /// A required section is absent.
    MissingSection {
        /// The section kind.
        kind: u32,
    },
    /// A context record is invalid.
    BadContext {
        /// Index of the context.
        index: u32,
        /// What is wrong.
        what: &'static str,
    },
    /// A rule is invalid.
    BadRule {
        /// Index of the context it belongs to.
        context: u32,
        /// Index of the rule within that context.
        index: u32,
        /// What is wrong.
        what: &'static str,
    },
    /// An exploration-plan record is invalid.
    BadPlan {
        /// Index of the record in the PLAN section.
        index: u32,
        /// What is wrong.
        what: &'static str,
    },
    /// A tree or tree node is invalid.
    BadTree {
        /// Index of the tree in the TREES directory.
        tree: u32,
        /// Index of the node within that tree (0 for tree-level problems).
        node: u32,
        /// What is wrong.
        what: &'static str,
    },
    /// A metadata entry is invalid.
    BadMeta {
        /// Index of the entry.
        index: u32,
        /// What is wrong.
        what: &'static str,
    },
}

fn kind_name(kind: u32) -> &'static str {
    match kind {
        crate::raw::kind::CONTEXTS => "CONTEXTS",
        crate::raw::kind::RULES => "RULES",
        crate::raw::kind::TREES => "TREES",
        crate::raw::kind::META => "META",
        crate::raw::kind::PLAN => "PLAN",
        _ => "unknown",
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::BadMagic => f.write_str(
                "not a dyncc table: the file does not start with DYNCCTBL (is this the right file?)",
            ),
            Error::UnsupportedVersion { found, supported } if found > supported => write!(
                f,
                "table format version {found} is newer than this reader's ({supported}): \
                 upgrade the dyncc plugin, or rebuild the table with this dyncc"
            ),
            Error::UnsupportedVersion { found, supported } => write!(
                f,
                "table format version {found} is not supported (this reader reads version \
                 {supported}): rebuild the table with this dyncc"
            ),
            Error::UnsupportedNcclLayout(l) => write!(
                f,
                "table was built for NCCL enum layout {l}, this reader only knows layout {} \
                 (NCCL 2.23+ numbering): rebuild the table with this dyncc",
                crate::raw::NCCL_LAYOUT
            ),
            Error::Truncated { need, have } => write!(
                f,
                "table is truncated: it needs {need} bytes, the file has {have} \
                 (was the copy interrupted?)"
            ),
            Error::LengthMismatch { header, actual } => write!(
                f,
                "table has trailing bytes: header says {header} bytes, the file has {actual}"
            ),
            Error::Checksum { expected, found } => write!(
                f,
                "table is corrupt: CRC-32 of the body is {found:#010x}, header says {expected:#010x}"
            ),
            Error::BadHeader { what } => write!(f, "table header is invalid: {what}"),
            Error::BadSection { kind, what } => {
                write!(f, "table section {} (kind {kind}) is invalid: {what}", kind_name(kind))
            }
            Error::MissingSection { kind } => {
                write!(f, "table has no {} section (kind {kind})", kind_name(kind))
            }
            Error::BadContext { index, what } => write!(f, "table context {index} is invalid: {what}"),
            Error::BadPlan { index, what } => {
                write!(f, "table exploration plan record {index} is invalid: {what}")
            }
            Error::BadRule { context, index, what } => {
                write!(f, "table context {context}, rule {index} is invalid: {what}")
            }
            Error::BadTree { tree, node, what } => {
                write!(f, "table tree {tree}, node {node} is invalid: {what}")
            }
            Error::BadMeta { index, what } => write!(f, "table metadata entry {index} is invalid: {what}"),
        }
    }
}

impl core::error::Error for Error {}
