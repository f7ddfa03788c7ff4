//! Setups: the NCCL version of a run, the other `NCCL_*` variables its
//! log shows (GPUDirect RDMA on or off, the IB HCAs, ...) and the state of
//! its calls (registered buffers, pipelined operations). Runs of
//! different setups can differ by 20 % and more at the same size: they are
//! not repeats of one measurement. [`select_setup`] refuses to blend them
//! unless the user picks one (`--setup`) or says they may be pooled
//! (`--pool-setups`), the way `compile` treats mixed platforms. Call
//! states are never pooled: a table decides for one (its contexts' gates).
//!
//! A run whose log does not show a version or its environment is compatible
//! with any setup: only two runs known to differ are "mixed".

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use anyhow::bail;

use super::fold::{Folded, Group};
use super::{quote, Dataset};
use crate::record::{PartialState, Record, Run, State};

/// NCCL loads tuner plugins from 2.19.0 on (`ncclTunerPlugin_v1`, see
/// the design notes' reference/nccl-tuner-abi.md); older NCCLs never load one.
pub const FIRST_TUNER_NCCL: u32 = 21900;

/// `22304` -> `2.23.4`.
pub fn version_string(code: u32) -> String {
    format!("{}.{}.{}", code / 10000, (code / 100) % 100, code % 100)
}

/// The NCCL versions of `records`, sorted, as the table's `nccl_version`
/// metadata: `2.18.3,2.19.1`; None when no record knows its version.
pub fn nccl_versions(records: &[Record]) -> Option<String> {
    versions_string(records.iter().filter_map(|r| r.run.nccl_version).collect())
}

/// [`nccl_versions`] of folded measurements.
pub fn nccl_versions_folded(f: &Folded) -> Option<String> {
    versions_string(
        f.groups
            .iter()
            .filter_map(|g| g.key.run.nccl_version)
            .collect(),
    )
}

fn versions_string(v: BTreeSet<u32>) -> Option<String> {
    (!v.is_empty()).then(|| {
        v.into_iter()
            .map(version_string)
            .collect::<Vec<_>>()
            .join(",")
    })
}

/// What `--setup` / `--pool-setups` ask for.
#[derive(Clone, Debug, Default)]
pub struct SetupChoice {
    /// `nccl=2.23.4`, `NCCL_NET_GDR_LEVEL=PHB`, `NCCL_IB_HCA=unset`.
    pub want: Vec<(String, String)>,
    pub pool: bool,
}

impl SetupChoice {
    pub fn new(spec: Option<&str>, pool: bool) -> anyhow::Result<SetupChoice> {
        let mut want = Vec::new();
        for w in words(spec.unwrap_or("")) {
            let w = w.as_str();
            let Some((k, v)) = w.split_once('=') else {
                bail!(
                    "--setup {:?}: expected KEY=VALUE words: nccl=2.23.4 or NCCL_VAR=value \
                     (NCCL_VAR=unset: not set)",
                    quote(w)
                );
            };
            let k = if k.eq_ignore_ascii_case("nccl") || k.eq_ignore_ascii_case("nccl_version") {
                let Some(code) = super::knobs::parse_nccl_version(v) else {
                    bail!("--setup {w}: expected a version like 2.23.4");
                };
                want.push(("nccl".to_string(), code.to_string()));
                continue;
            } else {
                k
            };
            // The call state (`regBuff=1`, `pipeOps=2`) picks runs too.
            let mut state = PartialState::default();
            match state.set(k, v) {
                Err(e) => bail!("--setup {e}"),
                Ok(true) => {
                    want.extend(state.columns().into_iter().map(|(k, v)| (k.to_string(), v)));
                    continue;
                }
                Ok(false) => {}
            }
            if k == super::timing::KEY {
                want.push((k.to_string(), v.to_string()));
                continue;
            }
            if !k.starts_with("NCCL_") {
                bail!(
                    "--setup {w}: expected nccl=VERSION or an NCCL_* variable (or the call \
                     state: regBuff=0|1, pipeOps=N; or how nccl-tests timed: timing=default, \
                     timing=cputime, ...)"
                );
            }
            want.push((k.to_string(), v.to_string()));
        }
        Ok(SetupChoice { want, pool })
    }

    fn matches(&self, g: &Group) -> bool {
        let state = g.key.run.state;
        let setup = Setup::of(g);
        self.want.iter().all(|(k, v)| {
            if k == super::timing::KEY {
                return setup.timing_word() == v.as_str();
            }
            if k == "nccl" {
                return g.key.run.nccl_version.map(|c| c.to_string()).as_deref()
                    == Some(v.as_str());
            }
            if let Some((_, sv)) = state.columns().into_iter().find(|(sk, _)| sk == k) {
                return sv == *v;
            }
            let Some(env) = setup.env.as_deref() else {
                return false;
            };
            let found = env.split(' ').find_map(|kv| {
                kv.split_once('=')
                    .filter(|(ek, _)| ek == k)
                    .map(|(_, ev)| ev)
            });
            match found {
                Some(ev) => ev == v,
                None => v.eq_ignore_ascii_case("unset"),
            }
        })
    }
}

/// The `KEY=VALUE` words of a `--setup` value: separated by spaces or
/// commas, where a comma followed by no `=` continues the value before it
/// (`NCCL_IB_HCA=mlx5_0,mlx5_3`, as the inputs and dyncc's messages write
/// such a variable).
fn words(spec: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in spec.split(' ').filter(|w| !w.is_empty()) {
        let mut pieces = w.split(',').filter(|p| !p.is_empty());
        let Some(first) = pieces.next() else { continue };
        out.push(first.to_string());
        for p in pieces {
            match out.last_mut() {
                Some(last) if !p.contains('=') && last.contains('=') => {
                    last.push(',');
                    last.push_str(p);
                }
                _ => out.push(p.to_string()),
            }
        }
    }
    out
}

/// One setup of the inputs.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Setup {
    version: Option<u32>,
    env: Option<Arc<str>>,
    /// The state of the run's calls: runs in different states are not
    /// repeats either, and a table decides for one (see [`State::gates`]).
    state: State,
    /// How nccl-tests timed it when not as by default (`cputime`, ...):
    /// such runs time something else, never pooled with default ones.
    timing: Option<Arc<str>>,
}

/// A run's setup as reports name it: `NCCL 2.23.4, NCCL_IB_HCA=mlx5`
/// (and its call state when not the baseline).
pub fn describe(run: &Run) -> String {
    Setup::of_run(run).describe()
}

impl Setup {
    fn of(g: &Group) -> Setup {
        Setup::of_run(&g.key.run)
    }

    fn of_run(run: &Run) -> Setup {
        let (env, timing) = super::timing::split(run.env.as_deref());
        Setup {
            version: run.nccl_version,
            env,
            state: run.state,
            timing,
        }
    }

    /// Its timing as `--setup timing=` names it.
    fn timing_word(&self) -> &str {
        self.timing.as_deref().unwrap_or("default")
    }

    fn describe(&self) -> String {
        let v = match self.version {
            Some(c) => format!("NCCL {}", version_string(c)),
            None => "NCCL version not shown".to_string(),
        };
        let e = match self.env.as_deref() {
            Some("") => "no other NCCL_* variable set".to_string(),
            Some(e) => e.to_string(),
            None => "environment not shown".to_string(),
        };
        let e = match self.timing.as_deref() {
            None => e,
            t => format!("{e}, {}", super::timing::describe(t)),
        };
        if self.state == State::BASELINE {
            return format!("{v}, {e}");
        }
        format!("{v}, {e}, {}", self.state)
    }

    fn vars(&self) -> BTreeMap<&str, &str> {
        self.env
            .as_deref()
            .unwrap_or("")
            .split(' ')
            .filter_map(|kv| kv.split_once('='))
            .collect()
    }
}

/// Keeps the records of one setup, or all of them when the inputs hold one
/// setup or the user said they may be pooled; otherwise an error listing
/// the setups and the option that picks each. Adds a note when the sweep
/// ran an NCCL too old to load tuner plugins.
pub fn select_setup(ds: &mut Dataset, choice: &SetupChoice) -> anyhow::Result<()> {
    let rows = !ds.records.is_empty();
    let mut f = ds.take_folded();
    let res = select_setup_folded(&mut f, &mut ds.notes, choice);
    if rows {
        ds.records = f.into_records();
    } else {
        ds.folded = f;
    }
    res
}

/// [`select_setup`] on folded measurements; notes go to `notes`.
pub fn select_setup_folded(
    f: &mut Folded,
    notes: &mut Vec<String>,
    choice: &SetupChoice,
) -> anyhow::Result<()> {
    // Per setup: records, and the first place one was read.
    let mut first: BTreeMap<Setup, (usize, u32, String)> = BTreeMap::new();
    for g in &f.groups {
        let Some(s) = g.first() else { continue };
        let e = first
            .entry(Setup::of(g))
            .or_insert((0, s.seq, g.source(&s).to_string()));
        e.0 += g.samples.len();
        if s.seq < e.1 {
            (e.1, e.2) = (s.seq, g.source(&s).to_string());
        }
    }
    let groups: BTreeMap<Setup, (usize, String)> = first
        .into_iter()
        .map(|(k, (n, _, at))| (k, (n, at)))
        .collect();
    let versions: BTreeSet<u32> = groups.keys().filter_map(|s| s.version).collect();
    let envs: BTreeSet<&str> = groups.keys().filter_map(|s| s.env.as_deref()).collect();
    let states: BTreeSet<State> = groups.keys().map(|s| s.state).collect();
    let timings: BTreeSet<&str> = groups.keys().map(Setup::timing_word).collect();
    let mixed = versions.len() > 1 || envs.len() > 1 || states.len() > 1 || timings.len() > 1;
    let list = |groups: &BTreeMap<Setup, (usize, String)>| -> String {
        groups
            .iter()
            .map(|(s, (n, at))| {
                let pick = pick_spec(s, groups.keys(), versions.len() > 1, &states)
                    .map(|p| {
                        if timings.len() > 1 {
                            format!("{p} {}={}", super::timing::KEY, s.timing_word())
                        } else {
                            p
                        }
                    })
                    .or_else(|| {
                        (timings.len() > 1)
                            .then(|| format!("{}={}", super::timing::KEY, s.timing_word()))
                    });
                format!(
                    "{} ({n} records, e.g. {at}){}",
                    s.describe(),
                    pick.map(|p| format!(": --setup '{p}'")).unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    if !choice.want.is_empty() {
        let before = f.len();
        f.retain(|g| choice.matches(g));
        let kept = f.len();
        if kept == 0 {
            bail!(
                "--setup matches no records; the inputs hold: {}",
                list(&groups)
            );
        }
        let dropped = before - kept;
        if dropped > 0 {
            notes.push(format!(
                "--setup: kept {kept} records, left out {dropped} of other or unshown setups"
            ));
        }
    } else if states.len() > 1 {
        bail!(
            "the inputs mix call states: {}. Runs in different states are not repeats of one \
             measurement, and a table decides for one state (its contexts are gated on \
             it): compile each separately, picking one with --setup as shown",
            list(&groups)
        );
    } else if timings.len() > 1 {
        bail!(
            "the inputs mix runs nccl-tests timed differently: {}. A run timed with -C (CPU \
             time), -z (blocking) or -G (CUDA graphs) measures something else than a default \
             run, even with --pool-setups: compile each separately, picking one with --setup \
             as shown",
            list(&groups)
        );
    } else if mixed && !choice.pool {
        bail!(
            "the inputs mix NCCL setups: {}. Runs of different setups are not repeats of one \
             measurement: compile each separately, pick one with --setup as shown, or pass \
             --pool-setups if they may be pooled",
            list(&groups)
        );
    } else if mixed {
        notes.push(format!(
            "setups pooled as repeats (--pool-setups): {}",
            groups
                .iter()
                .map(|(s, (n, _))| format!("{} ({n} records)", s.describe()))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    let old: BTreeSet<u32> = f
        .groups
        .iter()
        .filter_map(|g| g.key.run.nccl_version)
        .filter(|&v| v < FIRST_TUNER_NCCL)
        .collect();
    if !old.is_empty() {
        notes.push(format!(
            "warning: the sweep ran NCCL {}; NCCL loads tuner plugins only from {} on, so jobs \
             on that NCCL will not load this table; sweep on the NCCL your jobs use",
            old.into_iter()
                .map(version_string)
                .collect::<Vec<_>>()
                .join(", "),
            version_string(FIRST_TUNER_NCCL)
        ));
    }
    Ok(())
}

/// The `--setup` words that pick `s` out of `all`: its version (when
/// versions differ) and the variables whose values differ between setups.
fn pick_spec<'a>(
    s: &Setup,
    all: impl Iterator<Item = &'a Setup> + Clone,
    by_version: bool,
    states: &BTreeSet<State>,
) -> Option<String> {
    let mut words = Vec::new();
    if by_version {
        words.push(format!("nccl={}", version_string(s.version?)));
    }
    // The state columns whose values differ between states.
    let others: Vec<Vec<(&str, String)>> = states.iter().map(|o| o.columns()).collect();
    for (i, (k, v)) in s.state.columns().into_iter().enumerate() {
        if others
            .iter()
            .any(|o| o.get(i).is_some_and(|(_, ov)| *ov != v))
        {
            words.push(format!("{k}={v}"));
        }
    }
    if s.env.is_some() {
        let mine = s.vars();
        let mut names: BTreeSet<&str> = BTreeSet::new();
        let known: Vec<&Setup> = all.filter(|o| o.env.is_some()).collect();
        for o in &known {
            names.extend(o.vars().into_keys());
        }
        for n in names {
            let vals: BTreeSet<Option<&str>> =
                known.iter().map(|o| o.vars().get(n).copied()).collect();
            if vals.len() > 1 {
                words.push(format!("{n}={}", mine.get(n).copied().unwrap_or("unset")));
            }
        }
    }
    (!words.is_empty()).then(|| words.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setup_values_with_commas_are_one_word() {
        assert_eq!(
            words("NCCL_IB_HCA=mlx5_0,mlx5_3 nccl=2.23.4"),
            ["NCCL_IB_HCA=mlx5_0,mlx5_3", "nccl=2.23.4"]
        );
        assert_eq!(
            words("nccl=2.23.4,NCCL_IB_HCA=mlx5_0,mlx5_3,NCCL_NET_GDR_LEVEL=PHB"),
            [
                "nccl=2.23.4",
                "NCCL_IB_HCA=mlx5_0,mlx5_3",
                "NCCL_NET_GDR_LEVEL=PHB"
            ]
        );
        let c = SetupChoice::new(Some("NCCL_IB_HCA=mlx5_0,mlx5_3"), false).unwrap();
        assert_eq!(
            c.want,
            [("NCCL_IB_HCA".to_string(), "mlx5_0,mlx5_3".to_string())]
        );
        // A word without `=` at the start is still refused, by name.
        let e = SetupChoice::new(Some("mlx5_3"), false).unwrap_err();
        assert!(e.to_string().contains("mlx5_3"), "{e}");
    }
}
