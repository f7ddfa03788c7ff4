//! `dyncc plugin-path`: the directory of the NCCL plugin that came with
//! this command (both library names NCCL loads), for job scripts and
//! programs. The search is [`crate::installed`]'s.

use std::io::Write as _;

use anyhow::Context as _;
use serde::Serialize;

use crate::installed::{self, ProfilerName, PROFILER, TUNER};

/// Print the directory holding the NCCL plugin that came with this dyncc.
///
/// The directory holds libnccl-tuner-dyncc.so and libnccl-profiler-dyncc.so
/// (one library under NCCL's tuner and profiler names): put it on
/// LD_LIBRARY_PATH and name the plugin `dyncc`. It is looked for beside
/// this command: DIR/lib for DIR/bin/dyncc (pip install, make install),
/// then the command's own directory (make plugin: target/release). Exits 0
/// with the absolute directory on stdout; 2 with what to do on stderr when
/// the library, or its profiler name, is missing there.
///
/// Examples:
///   export LD_LIBRARY_PATH=$(dyncc plugin-path):$LD_LIBRARY_PATH
///   export NCCL_TUNER_PLUGIN=dyncc NCCL_PROFILER_PLUGIN=dyncc
///   dyncc plugin-path --json | jq -r .tuner
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct PluginPathArgs {
    /// Print a JSON object (`found`; `dir`, `tuner`, `profiler`,
    /// `profiler_name` when found, else `error`; `version` always).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct PluginPathJson {
    found: bool,
    /// The command's version; the plugin's init INFO line names its own.
    version: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    dir: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tuner: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    profiler: Option<String>,
    /// `link` (the same file) or `stub` (pip's: loads the tuner's file).
    #[serde(skip_serializing_if = "Option::is_none")]
    profiler_name: Option<ProfilerName>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

pub fn run(a: PluginPathArgs) -> anyhow::Result<i32> {
    let exe = std::env::current_exe().context("cannot tell where this dyncc is")?;
    let found = installed::find(&exe);
    let mut out = std::io::stdout().lock();
    if a.json {
        let j = match &found {
            Ok(p) => PluginPathJson {
                found: true,
                version: env!("CARGO_PKG_VERSION"),
                dir: Some(p.dir.display().to_string()),
                tuner: Some(p.dir.join(TUNER).display().to_string()),
                profiler: Some(p.dir.join(PROFILER).display().to_string()),
                profiler_name: Some(p.profiler),
                error: None,
            },
            Err(e) => PluginPathJson {
                found: false,
                version: env!("CARGO_PKG_VERSION"),
                dir: None,
                tuner: None,
                profiler: None,
                profiler_name: None,
                error: Some(e.to_string()),
            },
        };
        writeln!(out, "{}", crate::output::pretty(&j)?)?;
    }
    match found {
        Ok(p) => {
            if !a.json {
                writeln!(out, "{}", p.dir.display())?;
            }
            Ok(0)
        }
        Err(e) => {
            if a.json {
                // The JSON says why; stderr says it to a person too.
                eprintln!("error: {e}");
                Ok(2)
            } else {
                Err(e.into())
            }
        }
    }
}
