//! The reading options every command that reads sweeps shares (`compile`,
//! `eval`, `inspect`): one clap struct, flattened into each, so a label that
//! works for `inspect` works the same for `compile`.

use std::path::PathBuf;
use std::sync::Arc;

use super::labels::{Manifest, NamePattern};
use super::setup::SetupChoice;
use super::IngestOptions;

/// How to read and label sweep files.
#[derive(clap::Args, Debug, Clone, Default)]
#[command(next_help_heading = "Reading and labelling the inputs")]
pub struct IngestArgs {
    /// Skip (and report) input that cannot be read instead of failing.
    #[arg(long)]
    pub lenient: bool,
    /// KEY=VALUE facts the files do not state: NCCL_ALGO, NCCL_PROTO,
    /// NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS, channels, chunk (bytes: 65536
    /// or 64K, the chunk the dyncc plugin answered), coll, nodes, ranks,
    /// gpus_per_node, platform, gpu, nccl_version; or `default` (every knob
    /// no file states was NCCL's own choice). Repeatable; applies to every
    /// file, and must agree with what a file or another label says.
    #[arg(long = "assume", value_name = "KEY=VALUE")]
    pub assume: Vec<String>,
    /// A CSV labelling files: a `path` column (a file path or glob, relative
    /// to the manifest's directory; without `/` it matches file names in any
    /// directory; `*` stays within a name, `**/` spans directories) and any
    /// of the --assume keys as columns; an empty cell states nothing.
    /// Example manifest:
    ///   path,NCCL_ALGO,NCCL_PROTO,nodes,ranks
    ///   allreduce_n2_ring_ll.*.log,Ring,LL,2,16
    ///   allreduce_n2_default.*.log,default,default,2,16
    #[arg(long, value_name = "FILE", verbatim_doc_comment)]
    pub manifest: Option<PathBuf>,
    /// Read labels from file names: `{field}` reads a field, `*` matches
    /// anything within a name, the rest is literal. Fields: {coll} {algo}
    /// {proto} {channels} {nodes} {ranks} {ppn} {repeat} {platform} {gpu}
    /// {nccl}. A pattern with `/` matches that many trailing path
    /// components. Repeatable (first match wins). Example, for
    /// allreduce_n2_ring_ll.r0.log:
    ///   --name-pattern '{coll}_n{nodes}_{algo}_{proto}.r{repeat}.log'
    #[arg(long = "name-pattern", value_name = "PATTERN", verbatim_doc_comment)]
    pub name_pattern: Vec<String>,
    /// The inputs mix NCCL setups (NCCL version, or other NCCL_* variables
    /// the logs show, or call states, or how nccl-tests timed): use only
    /// this one, e.g. `--setup nccl=2.23.4`, `--setup
    /// 'NCCL_NET_GDR_LEVEL=PHB NCCL_IB_HCA=mlx5_0,mlx5_3'` (`VAR=unset`: not
    /// set), `--setup regBuff=1` (registered buffers) or `--setup
    /// timing=default` (not `-C 1` cputime, `-z` blocking1-3, `-G` graph).
    #[arg(long, value_name = "KEY=VALUE ...")]
    pub setup: Option<String>,
    /// The inputs mix NCCL setups and they may be pooled as repeats of one
    /// measurement (you know the difference does not matter).
    #[arg(long, conflicts_with = "setup")]
    pub pool_setups: bool,
    /// Show no progress on stderr (files and bytes read; models fitted),
    /// even on a terminal. Progress is never shown in a pipe, nor for work
    /// of under a second.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

impl IngestArgs {
    /// The options to read with. `progress`: show progress (unless
    /// `--quiet`); `keep_unresolved`: keep unlabelled rows (inspect).
    pub fn options(&self, progress: bool, keep_unresolved: bool) -> anyhow::Result<IngestOptions> {
        let manifest = match &self.manifest {
            Some(p) => Some(Arc::new(Manifest::load(p)?)),
            None => None,
        };
        let name_patterns = self
            .name_pattern
            .iter()
            .map(|p| NamePattern::parse(p))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(IngestOptions {
            lenient: self.lenient,
            assume: IngestOptions::parse_assume(&self.assume)?,
            progress: progress && !self.quiet,
            keep_unresolved,
            manifest,
            name_patterns,
        })
    }

    /// Which setup to keep when the inputs mix several.
    pub fn setup_choice(&self) -> anyhow::Result<SetupChoice> {
        SetupChoice::new(self.setup.as_deref(), self.pool_setups)
    }

    /// Reads `paths` as these arguments say and keeps the chosen setup:
    /// what `compile` and `eval` do with their inputs. The measurements are
    /// folded as they are read ([`super::read_paths_folded`]), so memory
    /// grows with the distinct cells of a sweep, not its rows.
    pub fn read_sweep(&self, paths: &[PathBuf], progress: bool) -> anyhow::Result<super::Dataset> {
        let opts = self.options(progress, false)?;
        let setup = self.setup_choice()?;
        let mut ds = super::read_paths_folded(paths, &opts)?;
        super::setup::select_setup(&mut ds, &setup)?;
        Ok(ds)
    }

    /// The options as command-line words (for the commands `inspect`
    /// prints), shell-quoted.
    pub fn to_words(&self) -> Vec<String> {
        let q = |s: &str| {
            if !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_-=./,:+@".contains(&b))
            {
                s.to_string()
            } else {
                format!("'{}'", s.replace('\'', "'\\''"))
            }
        };
        let mut w = Vec::new();
        for a in &self.assume {
            w.push(format!("--assume {}", q(a)));
        }
        if let Some(m) = &self.manifest {
            w.push(format!("--manifest {}", q(&m.display().to_string())));
        }
        for p in &self.name_pattern {
            w.push(format!("--name-pattern {}", q(p)));
        }
        if let Some(s) = &self.setup {
            w.push(format!("--setup {}", q(s)));
        }
        if self.pool_setups {
            w.push("--pool-setups".into());
        }
        w
    }
}
