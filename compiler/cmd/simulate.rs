//! `dyncc simulate`: write realistic nccl-tests sweeps from a hardware profile.

use std::path::PathBuf;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};

use crate::record::Coll;
use crate::simulate::calibrate;
use crate::simulate::profile::{self, Profile};
use crate::simulate::sweep::{self, Ch, Spec};

const HELP: &str = "\
Each run (node count x collective x forced NCCL_ALGO/NCCL_PROTO/channels x
repeat, plus NCCL-default runs) becomes one nccl-tests 2.19 log under
OUT/<profile>/n<nodes>/<collective>/, with a `# dyncc:` line naming the knobs;
a run at a --chunks size goes under .../chunk=BYTES/ with the plugin's
`dyncc: sweep chunk=BYTES` lines, as a `dyncc plan --chunks` run.
OUT/truth.csv holds the noise-free time of every cell and NCCL's emulated
default choice. The same --seed gives the same files.

Examples:
  dyncc simulate -o sweep                      # h100, 1-16 nodes, 5 collectives
  dyncc simulate -o sweep --profile v100 --nodes 2,4 --colls allreduce --csv
  dyncc simulate -o sweep --nodes 8,16 --colls broadcast --chunks 64K,128K,256K
  dyncc simulate --list-profiles --json > my.json   # keep and edit one, then --profile-file my.json
  dyncc simulate --report --profile a100       # NCCL default vs best, no files
  dyncc simulate --profile v100 --calibrate datasets/real/nvidia-dgx1v-allreduce.csv";

/// Write realistic sweeps from a hardware profile.
#[derive(clap::Args, Debug)]
#[command(after_help = HELP)]
pub struct SimulateArgs {
    /// Output directory: new or empty (see --force).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Write into an output directory that is not empty. Files of an
    /// earlier sweep that this one does not replace stay there, and
    /// `dyncc compile DIR` reads them together with the new ones.
    #[arg(long)]
    pub force: bool,
    /// Built-in profile (see --list-profiles).
    #[arg(long, default_value = "h100")]
    pub profile: String,
    /// Read the profile from a TOML or JSON file instead.
    #[arg(long, value_name = "FILE")]
    pub profile_file: Option<PathBuf>,
    /// List the built-in profiles and exit.
    #[arg(long)]
    pub list_profiles: bool,
    /// Node counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    pub nodes: Vec<u32>,
    /// Collectives, comma-separated (allreduce, allgather, reducescatter, broadcast, reduce).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "allreduce,allgather,reducescatter,broadcast,reduce"
    )]
    pub colls: Vec<String>,
    /// Smallest size (bytes; K/M/G and KiB/MiB/GiB are powers of 1024).
    #[arg(long, default_value = "8")]
    pub min_bytes: String,
    /// Largest size.
    #[arg(long, default_value = "4GiB")]
    pub max_bytes: String,
    /// Channel settings of forced runs: numbers, and `auto` (NCCL's own count).
    #[arg(long, value_delimiter = ',', default_value = "auto,4,8,16,32")]
    pub channels: Vec<String>,
    /// Chunk sizes (bytes: 65536, 64K, 1M), comma-separated: each forced
    /// setting also runs at each, with the dyncc plugin answering NCCL's
    /// getChunkSize as `dyncc plan --chunks` sweeps do (logs under
    /// `chunk=BYTES/`); the chunk's modelled effect is in
    /// compiler/simulate/CALIBRATION.md. Default: NCCL's chunk only.
    #[arg(long, value_delimiter = ',', value_name = "BYTES")]
    pub chunks: Vec<String>,
    /// Repeats of every run.
    #[arg(long, default_value_t = 3)]
    pub repeats: u32,
    /// Random seed; the same seed gives the same files.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write OUT/sweep.csv in the NCCL tuner-example schema.
    #[arg(long)]
    pub csv: bool,
    /// Print NCCL's default-vs-best gap for the profile and exit (no files);
    /// with --chunks, also where each chunk beats NCCL's for the same setting.
    #[arg(long)]
    pub report: bool,
    /// Compare the physics with a real AllReduce sweep CSV (tuner schema) and print a markdown report.
    #[arg(long, value_name = "CSV")]
    pub calibrate: Option<PathBuf>,
    /// Machine-readable output on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Parses `8`, `4096`, `4K`, `4KiB`, `4MB`, `1G`: suffixes are powers of 1024, like nccl-tests.
pub fn parse_size(s: &str) -> anyhow::Result<u64> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suf) = t.split_at(digits);
    let n: u64 = num
        .parse()
        .with_context(|| format!("size {s:?}: expected a number like 8, 64K or 4GiB"))?;
    let mult: u64 = match suf.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => bail!("size {s:?}: unknown suffix {suf:?} (use K, M, G or KiB, MiB, GiB)"),
    };
    n.checked_mul(mult)
        .with_context(|| format!("size {s:?} is too large"))
}

/// Refuses an output directory that already holds anything, unless
/// `force`: the new sweep's logs would sit beside the old ones, and
/// `compile DIR` would read both as one sweep. A path that is not a
/// directory is left to the write to report.
fn check_output_dir(out: &std::path::Path, force: bool) -> anyhow::Result<()> {
    let Ok(entries) = std::fs::read_dir(out) else {
        return Ok(());
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if names.is_empty() || force {
        return Ok(());
    }
    names.sort();
    let n = names.len();
    names.truncate(3);
    bail!(
        "-o {} is not empty ({n} entr{}: {}{}): the new sweep would sit beside what is there, and \
         `dyncc compile {}` would read both as one sweep. Choose a new or empty directory, remove \
         this one first, or pass --force to write into it anyway",
        out.display(),
        if n == 1 { "y" } else { "ies" },
        names.join(", "),
        if n > names.len() { ", ..." } else { "" },
        out.display()
    )
}

fn load_profile(a: &SimulateArgs) -> anyhow::Result<Profile> {
    match &a.profile_file {
        Some(f) => Profile::load(f),
        None => profile::builtin(&a.profile).with_context(|| {
            let names: Vec<String> = profile::builtins().into_iter().map(|p| p.name).collect();
            format!(
                "unknown profile {:?}; built-in profiles are {} (or pass --profile-file FILE)",
                a.profile,
                names.join(", ")
            )
        }),
    }
}

fn spec(a: &SimulateArgs, prof: Profile) -> anyhow::Result<Spec> {
    let mut colls = Vec::new();
    for c in &a.colls {
        let c = Coll::parse(c).with_context(|| {
            format!("unknown collective {c:?}; use allreduce, allgather, reducescatter, broadcast, reduce")
        })?;
        if !colls.contains(&c) {
            colls.push(c);
        }
    }
    let mut channels = Vec::new();
    for c in &a.channels {
        let ch = if c.trim().eq_ignore_ascii_case("auto") {
            Ch::Auto
        } else {
            let n: u32 = c
                .trim()
                .parse()
                .with_context(|| format!("--channels {c:?}: expected a number or `auto`"))?;
            if n == 0 || n > 64 {
                bail!("--channels {n}: NCCL allows 1 to 64 channels");
            }
            Ch::Fixed(n)
        };
        if !channels.contains(&ch) {
            channels.push(ch);
        }
    }
    let mut chunks = Vec::new();
    for c in &a.chunks {
        let b = dyncc_tables::Chunk::parse_bytes(c).with_context(|| {
            format!(
                "--chunks: `{c}` is not a chunk size; give bytes such as 65536, 64K or 1M \
                 (at most 2 GiB), comma-separated"
            )
        })?;
        if !chunks.contains(&b) {
            chunks.push(b);
        }
    }
    let (min_bytes, max_bytes) = (parse_size(&a.min_bytes)?, parse_size(&a.max_bytes)?);
    if min_bytes == 0 || min_bytes > max_bytes {
        bail!("--min-bytes {min_bytes} must be at least 1 and at most --max-bytes {max_bytes}");
    }
    let mut nodes = a.nodes.clone();
    nodes.dedup();
    if nodes.iter().any(|&n| n == 0 || n > 4096) {
        bail!("--nodes: node counts must be 1 to 4096, got {nodes:?}");
    }
    if nodes.iter().any(|&n| n * prof.gpus_per_node < 2) {
        bail!(
            "--nodes: profile {} has 1 GPU per node, so every node count must be at least 2",
            prof.name
        );
    }
    if a.repeats == 0 {
        bail!("--repeats must be at least 1");
    }
    Ok(Spec {
        profile: prof,
        nodes,
        colls,
        min_bytes,
        max_bytes,
        channels,
        chunks,
        repeats: a.repeats,
        seed: a.seed,
    })
}

fn print_gaps(gaps: &[sweep::Gap]) {
    println!(
        "NCCL default vs best (noise-free truth), profile {}:",
        gaps.first().map(|g| g.profile.as_str()).unwrap_or("?")
    );
    println!("  nodes   cells  geomean  >=1.2x   max   geomean(incl. pinned channels)");
    for g in gaps {
        let n = g
            .nodes
            .map(|n| n.to_string())
            .unwrap_or_else(|| "all".into());
        println!(
            "  {n:>5} {:>7}  {:>7.3}  {:>5.1} %  {:>4.2}  {:.3}",
            g.cells,
            g.geomean,
            100.0 * g.frac_over_1_2,
            g.max,
            g.geomean_all
        );
    }
}

fn print_chunk_gains(k: &[sweep::ChunkGain]) {
    println!("\nA --chunks size vs NCCL's chunk, same setting at NCCL's channel count (noise-free truth, >= 3 % only):");
    println!(
        "  nodes  collective     setting        sizes                 best gain  at        chunk"
    );
    for g in k {
        println!(
            "  {:>5}  {:<13}  {:<13}  {:>9} .. {:<9}  {:>6.3}x   {:<8}  {}",
            g.nodes,
            g.collective,
            format!("{}/{}", g.algorithm, g.protocol),
            crate::units::fmt_bytes(g.from_bytes),
            crate::units::fmt_bytes(g.to_bytes),
            g.max_gain,
            crate::units::fmt_bytes(g.at_bytes),
            g.chunk
        );
    }
    if k.is_empty() {
        println!("  (none)");
    }
}

pub fn run(a: SimulateArgs) -> anyhow::Result<i32> {
    if a.list_profiles {
        let ps = profile::builtins();
        if a.json {
            // A list of profiles, each readable back by --profile-file
            // (which refuses unknown fields): no schema field added.
            println!("{}", serde_json::to_string_pretty(&ps)?);
        } else {
            for p in &ps {
                println!(
                    "{:<7} {}\n        {} x{} per node, cc {}, intra {:?} {:.0} GB/s, {}x{:.0}G {}, NVLS {}, CollNet {}, PAT {}",
                    p.name,
                    p.description,
                    p.gpu_name,
                    p.gpus_per_node,
                    p.compute_capability,
                    p.intra.kind,
                    p.intra.bw_gbs,
                    p.net.nics_per_node,
                    p.net.gbps_per_nic,
                    p.net.kind,
                    p.features.nvls,
                    p.features.collnet,
                    p.features.pat
                );
            }
            println!("\nA profile file (TOML or JSON) has the same fields: `dyncc simulate --list-profiles --json` prints them.");
        }
        return Ok(0);
    }
    let prof = load_profile(&a)?;
    if let Some(real) = &a.calibrate {
        let r = calibrate::compare(&prof, &calibrate::read_real(real)?);
        if a.json {
            println!("{}", crate::output::pretty(&r)?);
        } else {
            print!("{}", calibrate::markdown(&r));
        }
        return Ok(0);
    }
    let spec = spec(&a, prof)?;
    if a.report {
        let models = sweep::Models::new(&spec);
        let g = sweep::gaps(&spec, &models);
        if spec.chunks.is_empty() {
            if a.json {
                println!("{}", crate::output::pretty(&g)?);
            } else {
                print_gaps(&g);
            }
            return Ok(0);
        }
        let k = sweep::chunk_gains(&spec, &models);
        if a.json {
            let both = serde_json::json!({ "gaps": g, "chunk_gains": k });
            println!("{}", crate::output::pretty(&both)?);
        } else {
            print_gaps(&g);
            print_chunk_gains(&k);
        }
        return Ok(0);
    }
    let Some(out) = a.output.clone() else {
        bail!("nothing to do: pass -o DIR to write a sweep (or --list-profiles, --report, --calibrate CSV)");
    };
    check_output_dir(&out, a.force)?;
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{spinner} simulating [{bar:40}] {pos}/{len} runs ({eta})")
            .unwrap()
            .progress_chars("=> "),
    );
    let w = sweep::write(&spec, &out, a.csv, &bar)?;
    bar.finish_and_clear();
    if a.json {
        println!("{}", crate::output::pretty(&w)?);
    } else {
        println!(
            "wrote {} nccl-tests logs ({:.1} MB) for profile {} under {}",
            w.files,
            w.bytes as f64 / 1e6,
            w.profile,
            out.join(&w.profile).display()
        );
        println!(
            "ground truth: {} ({} rows)",
            out.join("truth.csv").display(),
            w.truth_rows
        );
        if let Some(c) = &w.csv {
            println!("CSV: {}", c.display());
        }
        print_gaps(&w.gaps);
        println!("next: dyncc inspect {}", out.display());
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_like_nccl_tests() {
        assert_eq!(parse_size("8").unwrap(), 8);
        assert_eq!(parse_size("4MiB").unwrap(), 4 << 20);
        assert_eq!(parse_size("4M").unwrap(), 4 << 20);
        assert_eq!(parse_size("64K").unwrap(), 64 << 10);
        assert_eq!(parse_size("4GiB").unwrap(), 4 << 30);
        assert!(parse_size("4X").is_err());
        assert!(parse_size("big").is_err());
    }
}
