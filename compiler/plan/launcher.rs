//! How the script starts nccl-tests: the launchers, what each costs per
//! run, how a user starts the script under each, and for Slurm which of the
//! user's `--launcher-args` also belong on `#SBATCH` lines (sbatch's
//! option tables).

use serde::Serialize;

/// How the script starts nccl-tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Launcher {
    /// srun inside an sbatch/salloc allocation (the script carries #SBATCH lines).
    Slurm,
    /// OpenMPI mpirun (-x exports the knobs to every rank; HOSTFILE=... to pick hosts).
    Mpirun,
    /// No launcher: one process driving all GPUs of this node (-g); single node only.
    Local,
}

impl Launcher {
    /// The name the script's `LAUNCHER` variable holds.
    pub const fn name(self) -> &'static str {
        match self {
            Launcher::Slurm => "slurm",
            Launcher::Mpirun => "mpirun",
            Launcher::Local => "local",
        }
    }

    /// Rough seconds the launcher adds to every run.
    pub const fn launch_seconds(self) -> f64 {
        match self {
            Launcher::Slurm => 8.0,
            Launcher::Mpirun => 5.0,
            Launcher::Local => 1.0,
        }
    }

    /// The script's comment line on how to start it (`me`: its path, quoted).
    pub fn how_to_run(self, me: &str, max_nodes: u32) -> String {
        match self {
            Launcher::Slurm => format!(
                "# Submit with `sbatch {me}`, or run `bash {me}` inside `salloc -N {max_nodes}`."
            ),
            Launcher::Mpirun => format!("# Run `bash {me}` on a host that can mpirun onto {max_nodes} node(s); set HOSTFILE to an OpenMPI hostfile to choose them."),
            Launcher::Local => format!("# Run `bash {me}` on the GPU node."),
        }
    }
}

/// Splits `--launcher-args` into words as a POSIX shell would.
pub fn split_launcher_args(s: &str) -> anyhow::Result<Vec<String>> {
    shlex::split(s).ok_or_else(|| {
        anyhow::anyhow!(
            "--launcher-args: cannot split `{s}` into shell words (an unbalanced quote or a \
             trailing backslash?); quote it like a shell command line, e.g. \
             --launcher-args \"--partition=gpu --account='my acct'\""
        )
    })
}

/// Long sbatch options (without `--`) that request resources of the
/// allocation (`sbatch --help`); with `--launcher-args` they also go on
/// #SBATCH lines, since sbatch refuses a job that lacks, say, the account a
/// site requires. All but `exclusive` take a value.
const SBATCH_LONG: &[&str] = &[
    "account",
    "partition",
    "qos",
    "reservation",
    "constraint",
    "clusters",
    "gres",
    "gpus",
    "mem",
    "mem-per-cpu",
    "mem-per-gpu",
    "cpus-per-task",
    "cpus-per-gpu",
    "exclude",
    "nodelist",
    "time",
    "time-min",
    "exclusive",
    "licenses",
    "wckey",
    "comment",
    "switches",
    "network",
    "begin",
    "mail-type",
    "mail-user",
];

/// The short forms of [`SBATCH_LONG`] options (all take a value).
const SBATCH_SHORT: &[(char, &str)] = &[
    ('A', "account"),
    ('p', "partition"),
    ('q', "qos"),
    ('C', "constraint"),
    ('M', "clusters"),
    ('G', "gpus"),
    ('c', "cpus-per-task"),
    ('x', "exclude"),
    ('w', "nodelist"),
    ('t', "time"),
    ('L', "licenses"),
];

/// The `--launcher-args` options that belong on #SBATCH lines, one line's
/// words each (an option and its value), in the order given.
pub(super) fn sbatch_lines(words: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        i += 1;
        let (known, needs_value) = if let Some(long) = w.strip_prefix("--") {
            match long.split_once('=') {
                Some((name, _)) => (SBATCH_LONG.contains(&name), false),
                None => (SBATCH_LONG.contains(&long), long != "exclusive"),
            }
        } else if let Some(short) = w.strip_prefix('-') {
            let mut cs = short.chars();
            match (cs.next(), cs.as_str()) {
                (Some(c), rest) if SBATCH_SHORT.iter().any(|(s, _)| *s == c) => {
                    (true, rest.is_empty())
                }
                _ => (false, false),
            }
        } else {
            (false, false)
        };
        if !known {
            continue;
        }
        let mut line = vec![w.clone()];
        if needs_value && i < words.len() {
            line.push(words[i].clone());
            i += 1;
        }
        out.push(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_options_of_the_launcher_args_become_sbatch_lines() {
        let words = split_launcher_args(
            "--partition=gpu -A 'my acct' --mpi=pmix -l --qos high --exclusive --constraint=a100 -t30 --cpu-bind=none",
        )
        .unwrap();
        assert_eq!(
            sbatch_lines(&words),
            [
                vec!["--partition=gpu".to_string()],
                vec!["-A".into(), "my acct".into()],
                vec!["--qos".into(), "high".into()],
                vec!["--exclusive".into()],
                vec!["--constraint=a100".into()],
                vec!["-t30".into()],
            ]
        );
    }

    #[test]
    fn launcher_args_split_as_a_shell_would() {
        assert!(split_launcher_args("--account='unbalanced").is_err());
        assert_eq!(
            split_launcher_args("--partition=gpu 'a b' \"c\"").unwrap(),
            ["--partition=gpu", "a b", "c"]
        );
    }
}
