//! The sweep script: a header written here (what the plan holds, how to
//! start the script, Slurm's `#SBATCH` lines) above the bash program in
//! `sweep.sh.tmpl`, whose `@NAME@` placeholders take the plan's values,
//! shell-quoted. The template is a bash script in its own right, so the
//! tests shellcheck it as well as the scripts made from it.

use std::fmt::Write as _;

use dyncc_tables::{Algo, Coll, Proto};

use super::launcher::sbatch_lines;
use super::{fmt_duration, Launcher, Plan, Run};
use crate::units::fmt_bytes;

/// The bash program: checks, the function that runs one setting and the
/// loop over the run list.
pub const TEMPLATE: &str = include_str!("sweep.sh.tmpl");

/// The placeholders [`TEMPLATE`] holds, each filled exactly once.
pub const PLACEHOLDERS: &[&str] = &[
    "NCCL_TESTS_DIR",
    "OUT_DIR",
    "GPUS_PER_NODE",
    "LAUNCHER",
    "PLATFORM",
    "LAUNCHER_ARGS",
    "MIN_BYTES",
    "MAX_BYTES",
    "STEP_FACTOR",
    "ITERS",
    "WARMUP",
    "BINARIES",
    "RUNS",
    "ESTIMATE",
    "PLUGIN_DIR",
];

/// The script for `runs` of `p` (estimated `est` seconds; `skipped`: what
/// `--algos` asked for that NCCL cannot run).
pub fn script(p: &Plan, runs: &[Run], est: f64, skipped: &[String]) -> String {
    let mut s = header(p, runs, est, skipped);
    let mut bins: Vec<&str> = p.colls.iter().map(|c| binary(*c)).collect();
    bins.sort_unstable();
    bins.dedup();
    let run_list: Vec<String> = runs
        .iter()
        .map(|r| {
            format!(
                "{} {} {} {} {} {} {} {}",
                r.coll.name(),
                binary(r.coll),
                r.nodes,
                r.algo.map_or("default", Algo::env_name),
                r.proto.map_or("default", Proto::env_name),
                if r.channels == 0 {
                    "default".to_string()
                } else {
                    r.channels.to_string()
                },
                r.repeat,
                if r.chunk == 0 {
                    "default".to_string()
                } else {
                    r.chunk.to_string()
                },
            )
        })
        .collect();
    let value = |name: &str| -> String {
        match name {
            "NCCL_TESTS_DIR" => shell_quote(&p.nccl_tests.display().to_string()),
            "OUT_DIR" => shell_quote(&p.out_dir),
            "GPUS_PER_NODE" => p.gpus_per_node.to_string(),
            "LAUNCHER" => p.launcher.name().to_string(),
            "PLATFORM" => shell_quote(p.platform.as_deref().unwrap_or("")),
            "LAUNCHER_ARGS" => p
                .launcher_args
                .iter()
                .map(|a| shell_quote(a))
                .collect::<Vec<_>>()
                .join(" "),
            "MIN_BYTES" => p.min_bytes.to_string(),
            "MAX_BYTES" => p.max_bytes.to_string(),
            "STEP_FACTOR" => p.step_factor.to_string(),
            "ITERS" => p.iters.to_string(),
            "WARMUP" => p.warmup.to_string(),
            "BINARIES" => bins.join(" "),
            "RUNS" => run_list.join("\n"),
            "ESTIMATE" => shell_quote(&fmt_duration(est)),
            "PLUGIN_DIR" => shell_quote(&p.plugin_dir),
            _ => unreachable!("placeholder {name} is not in PLACEHOLDERS"),
        }
    };
    render(TEMPLATE, &mut s, value);
    s
}

/// Appends `template` to `out` with each `@NAME@` of [`PLACEHOLDERS`]
/// replaced by `value(NAME)`, in one pass over the template (a value that
/// holds `@...@`, a path say, is never read again).
fn render(template: &str, out: &mut String, value: impl Fn(&str) -> String) {
    let mut rest = template;
    while let Some(at) = rest.find('@') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let name = after
            .find('@')
            .map(|end| &after[..end])
            .filter(|n| PLACEHOLDERS.contains(n));
        match name {
            Some(name) => {
                out.push_str(&value(name));
                rest = &after[name.len() + 1..];
            }
            None => {
                out.push('@');
                rest = after;
            }
        }
    }
    out.push_str(rest);
}

/// The comment header: the command that wrote the script, what it runs,
/// how long, what was left out, how to start it; Slurm's #SBATCH lines.
fn header(p: &Plan, runs: &[Run], est: f64, skipped: &[String]) -> String {
    let mut s = String::new();
    let max_nodes = p.nodes.iter().max().copied().unwrap_or(1);
    let _ = writeln!(s, "#!/usr/bin/env bash");
    let _ = writeln!(
        s,
        "# dyncc sweep script, written by dyncc {}:",
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(s, "#   {}", p.command);
    let _ = writeln!(
        s,
        "# {} nccl-tests runs: collectives {}, nodes {}, {} GPUs per node, sizes {} .. {} (x{}), {} repeats",
        runs.len(),
        p.colls.iter().map(|c| c.name()).collect::<Vec<_>>().join(","),
        p.nodes.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(","),
        p.gpus_per_node,
        fmt_bytes(p.min_bytes),
        fmt_bytes(p.max_bytes),
        p.step_factor,
        p.repeats
    );
    let _ = writeln!(
        s,
        "# Estimated duration: {} (rough; alpha-beta model of a typical IB cluster).",
        fmt_duration(est)
    );
    for sk in skipped {
        let _ = writeln!(s, "# Not swept: {sk}");
    }
    let _ = writeln!(s, "#");
    // Piped (`-o -`), the script does not know the name it will be saved
    // under; the README's name stands in.
    let me = if crate::atomic::names_stdout(&p.output) {
        "sweep.sh".to_string()
    } else {
        shell_quote(&p.output.display().to_string())
    };
    let _ = writeln!(s, "{}", p.launcher.how_to_run(&me, max_nodes));
    let _ = writeln!(s, "# Environment: NCCL_TESTS_DIR (nccl-tests binaries), DYNCC_OUT (log directory), RUN_TIMEOUT");
    let _ = writeln!(
        s,
        "# (seconds per run; needs coreutils timeout). Re-running skips the runs that finished."
    );
    let _ = writeln!(
        s,
        "# Afterwards: dyncc compile {}/logs -o cluster.tbl (with DYNCC_OUT set: its logs/)",
        shell_quote(&p.out_dir)
    );
    if p.launcher == Launcher::Slurm {
        let hours = (est * 1.5 / 3600.0).ceil().max(1.0) as u64;
        let _ = writeln!(s, "#SBATCH --job-name=dyncc-sweep");
        let _ = writeln!(s, "#SBATCH --nodes={max_nodes}");
        let _ = writeln!(s, "#SBATCH --ntasks-per-node={}", p.gpus_per_node);
        let _ = writeln!(s, "#SBATCH --gpus-per-node={}", p.gpus_per_node);
        let _ = writeln!(s, "#SBATCH --exclusive");
        let _ = writeln!(s, "#SBATCH --time={hours}:00:00");
        // After dyncc's own lines: sbatch takes the last of a repeated
        // option, so the user's --time (say) wins.
        for line in sbatch_lines(&p.launcher_args) {
            let words: Vec<String> = line.iter().map(|w| shell_quote(w)).collect();
            let _ = writeln!(s, "#SBATCH {}", words.join(" "));
        }
    }
    s
}

/// The nccl-tests binary that runs `c`.
fn binary(c: Coll) -> &'static str {
    match c {
        Coll::Broadcast => "broadcast_perf",
        Coll::Reduce => "reduce_perf",
        Coll::AllGather => "all_gather_perf",
        Coll::ReduceScatter => "reduce_scatter_perf",
        Coll::AllReduce => "all_reduce_perf",
    }
}

/// Quotes a word for bash, leaving plainly safe words (`--partition=gpu`,
/// paths) as they are so the script reads like one written by hand.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        return s.to_string();
    }
    // Only a NUL byte cannot be quoted, and command-line words, paths and
    // labels (all this quotes) cannot hold one.
    shlex::try_quote(s)
        .expect("a command-line word holds no NUL byte")
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_in_the_template_once() {
        for name in PLACEHOLDERS {
            assert_eq!(
                TEMPLATE.matches(&format!("@{name}@")).count(),
                1,
                "@{name}@"
            );
        }
    }

    #[test]
    fn rendering_fills_placeholders_once_and_leaves_other_ats() {
        let mut out = String::new();
        render("a=@OUT_DIR@ \"${x[@]}\" @NOT_ONE@ @", &mut out, |n| {
            format!("<{n} @RUNS@>")
        });
        assert_eq!(out, "a=<OUT_DIR @RUNS@> \"${x[@]}\" @NOT_ONE@ @");
    }

    #[test]
    fn words_are_quoted_only_when_bash_needs_it() {
        assert_eq!(shell_quote("my acct"), "'my acct'");
        assert_eq!(shell_quote("--partition=gpu"), "--partition=gpu");
        assert_eq!(shell_quote(""), "''");
    }
}
