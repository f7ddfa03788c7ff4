//! nccl-tests `-J` JSON output.

use std::io::BufRead;

use super::{FileCtx, FileOutput, Format};

pub(crate) fn read<R: BufRead>(ctx: &mut FileCtx, _rd: R) -> anyhow::Result<FileOutput> {
    ctx.bad(0, "nccl-tests JSON is not read yet")?;
    Ok(FileOutput::empty(Format::NcclTestsJson))
}
