//! nccl-tests text logs.

use std::io::BufRead;

use super::{FileCtx, FileOutput, Format};

pub(crate) fn read<R: BufRead>(ctx: &mut FileCtx, _rd: R) -> anyhow::Result<FileOutput> {
    ctx.bad(0, "nccl-tests text logs are not read yet")?;
    Ok(FileOutput::empty(Format::NcclTestsText))
}

pub fn looks_like_nccl_tests(head: &[u8]) -> bool {
    memchr::memmem::find(head, b"nThread").is_some()
        || memchr::memmem::find(head, b"# Using devices").is_some()
}

pub fn looks_like_launch_log(name: &str) -> bool {
    name.ends_with(".out") || name.ends_with(".log") || name.contains(".dat")
}
