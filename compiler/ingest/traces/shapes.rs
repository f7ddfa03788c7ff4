//! Who ran what: each trace file's records sorted, per communicator and
//! shape (nodes, ranks, collective, size), into NCCL's own choice and the
//! other settings that ran, read against what every recording of the same
//! NCCL says NCCL chooses there; and [`Readings`], which reads a set of
//! files so (each communicator once) for compile and `eval --traces`.

use std::collections::{BTreeMap, BTreeSet};

use dyncc_tables::trace::Source as Who;
use dyncc_tables::{Coll, Setting, TraceRecord};

use super::evidence::Side;
use super::files::TraceFile;
use super::notes::TraceCounts;

/// Where a job measured: the communicator's shape, the collective and the
/// size NCCL passed the tuner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shape {
    pub nodes: u32,
    pub ranks: u32,
    pub coll: Coll,
    pub n_bytes: u64,
}

/// A setting other than NCCL's own choice that ran at a shape.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Other {
    pub side: Side,
    /// Collectives the deployed table forced (the others: exploration).
    pub by_table: u64,
}

/// One file's measurements at one shape: NCCL's own choice, and every
/// other setting that ran.
#[derive(Clone, Debug, Default)]
pub struct AtShape {
    pub nccl: Side,
    /// What NCCL ran on its own, with how many collectives each.
    pub nccl_settings: BTreeMap<Setting, u64>,
    pub others: BTreeMap<Setting, Other>,
    /// Collectives no tuner answer could be linked to, or whose setting's
    /// origin cannot be told (not used).
    pub unknown: u64,
    /// Collectives the plugin forced that NCCL ran otherwise ("answered X,
    /// ran Y"), per reason ([`Overridden`]): evidence for neither side.
    pub overridden: [u64; Overridden::COUNT],
}

/// Why a forced call ran otherwise, as the plugin recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Overridden {
    /// Another algorithm or protocol ran (the job's NCCL_ALGO/NCCL_PROTO,
    /// a per-call selection, a path the tuner cannot choose).
    Setting = 0,
    /// Another channel count ran (a channel cap).
    Channels = 1,
}

impl Overridden {
    pub const COUNT: usize = 2;
    pub const ALL: [Overridden; Overridden::COUNT] = [Overridden::Setting, Overridden::Channels];

    /// The reason in words, for the report.
    pub fn describe(self) -> &'static str {
        match self {
            Overridden::Setting => {
                "NCCL ran another algorithm or protocol than the plugin forced (the job sets \
                 NCCL_ALGO or NCCL_PROTO, or NCCL ran a path the tuner cannot choose)"
            }
            Overridden::Channels => {
                "NCCL ran fewer or other channels than the plugin forced (a channel cap such as \
                 NCCL_MAX_NCHANNELS)"
            }
        }
    }
}

/// The setting run most often (ties: the first in order, so every reading
/// names the same one).
pub(super) fn most_run(settings: &BTreeMap<Setting, u64>) -> Option<Setting> {
    settings
        .iter()
        .max_by_key(|(s, n)| (**n, std::cmp::Reverse(**s)))
        .map(|(s, _)| *s)
}

impl AtShape {
    /// What NCCL ran on its own most often.
    pub fn nccl_choice(&self) -> Option<Setting> {
        most_run(&self.nccl_settings)
    }

    /// Adds another recording's measurements at the same shape.
    pub fn merge(&mut self, o: &AtShape) {
        self.nccl.merge(&o.nccl);
        for (s, n) in &o.nccl_settings {
            let e = self.nccl_settings.entry(*s).or_default();
            *e = e.saturating_add(*n);
        }
        for (s, x) in &o.others {
            let e = self.others.entry(*s).or_default();
            e.side.merge(&x.side);
            e.by_table = e.by_table.saturating_add(x.by_table);
        }
        self.unknown = self.unknown.saturating_add(o.unknown);
        for (a, b) in self.overridden.iter_mut().zip(o.overridden) {
            *a = a.saturating_add(b);
        }
    }
}

/// What every recording at one shape (of one NCCL version) says about
/// who ran what: the settings NCCL chose on its own there. A record is
/// read against these facts of all the recordings, not of its own
/// communicator alone: a setting forced in one job that NCCL runs on its
/// own in another is NCCL's choice.
#[derive(Clone, Debug, Default)]
pub struct ShapeFacts {
    nccl: BTreeSet<Setting>,
}

/// [`ShapeFacts`] per shape.
pub type Facts = BTreeMap<Shape, ShapeFacts>;

/// The shape a record of `file` measured (None: a record of a communicator
/// the file does not hold).
fn shape_of(file: &TraceFile, r: &TraceRecord) -> Option<Shape> {
    let c = file.comms.get(r.comm as usize)?;
    Some(Shape {
        nodes: c.n_nodes,
        ranks: c.n_ranks,
        coll: r.coll,
        n_bytes: r.n_bytes,
    })
}

/// Adds what `file`'s records (of the communicators `keep` admits) say to
/// `facts`.
pub fn add_facts(facts: &mut Facts, file: &TraceFile, keep: &dyn Fn(usize) -> bool) {
    for r in file.records.iter().filter(|r| keep(r.comm as usize)) {
        let Some(s) = shape_of(file, r) else { continue };
        let f = facts.entry(s).or_default();
        match r.source {
            Who::Nccl | Who::ExploreNccl => {
                f.nccl.insert(r.setting);
            }
            Who::Table | Who::Explore | Who::Unknown | Who::RanOther | Who::RanOtherChannels => {}
        }
    }
}

/// Splits one file's records (of the communicators `keep` admits) into
/// NCCL's own choice and other settings, per communicator (index into the
/// file's) and shape, read against `facts`. A setting that ran what NCCL
/// runs there on its own is NCCL's choice whoever asked for it: an
/// exploring call that left the choice to NCCL, a forced setting NCCL
/// would have chosen anyway.
pub fn classify_comms(
    file: &TraceFile,
    keep: &dyn Fn(usize) -> bool,
    facts: &Facts,
) -> BTreeMap<(u16, Shape), AtShape> {
    let mut out: BTreeMap<(u16, Shape), AtShape> = BTreeMap::new();
    let none = ShapeFacts::default();
    for r in file.records.iter().filter(|r| keep(r.comm as usize)) {
        let Some(s) = shape_of(file, r) else { continue };
        let f = facts.get(&s).unwrap_or(&none);
        let at = out.entry((r.comm, s)).or_default();
        let ran = r.setting;
        let is_nccl = match r.source {
            Who::Unknown => {
                at.unknown = at.unknown.saturating_add(r.count);
                continue;
            }
            // The plugin's answer was not what ran: neither NCCL's choice
            // nor the setting it forced.
            Who::RanOther | Who::RanOtherChannels => {
                let why = if r.source == Who::RanOther {
                    Overridden::Setting
                } else {
                    Overridden::Channels
                };
                let n = &mut at.overridden[why as usize];
                *n = n.saturating_add(r.count);
                continue;
            }
            // Exploration left the choice to NCCL: NCCL's own choice ran.
            Who::Nccl | Who::ExploreNccl => true,
            // A setting the table or exploration forced (an exploring call
            // runs a setting wherever the plan lists one, over a force
            // too, so it is never taken for NCCL's choice but where NCCL
            // runs the same on its own).
            Who::Table | Who::Explore => f.nccl.contains(&ran),
        };
        if is_nccl {
            at.nccl.add(r);
            let e = at.nccl_settings.entry(ran).or_default();
            *e = e.saturating_add(r.count);
        } else {
            let o = at.others.entry(ran).or_default();
            o.side.add(r);
            if r.source == Who::Table {
                o.by_table = o.by_table.saturating_add(r.count);
            }
        }
    }
    out
}

/// [`classify_comms`] of one file read on its own, pooled per shape over
/// its communicators.
pub fn classify(file: &TraceFile, keep: &dyn Fn(usize) -> bool) -> BTreeMap<Shape, AtShape> {
    let mut facts = Facts::new();
    add_facts(&mut facts, file, keep);
    let mut out: BTreeMap<Shape, AtShape> = BTreeMap::new();
    for ((_, s), at) in classify_comms(file, keep, &facts) {
        out.entry(s).or_default().merge(&at);
    }
    out
}

/// How a set of trace files is read, as compile and `eval --traces` both
/// read it: each communicator once (the lowest rank's recording), and who
/// ran what from the facts of every recording of the same NCCL.
pub struct Readings<'a> {
    files: &'a [TraceFile],
    owner: BTreeMap<u64, (u32, usize, usize)>,
    facts: BTreeMap<u32, Facts>,
}

impl<'a> Readings<'a> {
    /// Reads `files`, counting their communicators into `read`.
    pub fn new(files: &'a [TraceFile], read: &mut TraceCounts) -> Readings<'a> {
        let mut r = Readings {
            files,
            owner: owners(files, read),
            facts: BTreeMap::new(),
        };
        let mut facts: BTreeMap<u32, Facts> = BTreeMap::new();
        for (fi, f) in files.iter().enumerate() {
            add_facts(facts.entry(f.nccl_version).or_default(), f, &|ci| {
                r.keeps(fi, ci)
            });
        }
        r.facts = facts;
        r
    }

    /// Whether communicator `ci` of file `fi` is the recording used.
    pub fn keeps(&self, fi: usize, ci: usize) -> bool {
        self.files[fi]
            .comms
            .get(ci)
            .and_then(|c| self.owner.get(&c.comm_id))
            .is_some_and(|&(_, of, oc)| of == fi && oc == ci)
    }

    /// [`classify_comms`] of file `fi`.
    pub fn classify(&self, fi: usize) -> BTreeMap<(u16, Shape), AtShape> {
        let f = &self.files[fi];
        let none = Facts::new();
        let facts = self.facts.get(&f.nccl_version).unwrap_or(&none);
        classify_comms(f, &|ci| self.keeps(fi, ci), facts)
    }
}

/// One recording per communicator: the lowest rank's, as (rank, file,
/// communicator index) per communicator id; counts the communicators.
fn owners(files: &[TraceFile], read: &mut TraceCounts) -> BTreeMap<u64, (u32, usize, usize)> {
    let mut owner: BTreeMap<u64, (u32, usize, usize)> = BTreeMap::new();
    for (fi, f) in files.iter().enumerate() {
        for (ci, c) in f.comms.iter().enumerate() {
            read.communicators += 1;
            match owner.get(&c.comm_id) {
                Some(&(rank, _, _)) if rank <= c.rank => read.duplicate_ranks += 1,
                Some(_) => {
                    read.duplicate_ranks += 1;
                    owner.insert(c.comm_id, (c.rank, fi, ci));
                }
                None => {
                    owner.insert(c.comm_id, (c.rank, fi, ci));
                }
            }
        }
    }
    read.communicators -= read.duplicate_ranks;
    owner
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::traces::test_util::{file, rec, RING, TREE};
    use dyncc_tables::{Algo, Proto};

    #[test]
    fn an_exploring_call_where_the_table_forced_another_setting_is_nccls_choice() {
        // The table forced Tree/LL; exploration left the choice to NCCL,
        // which ran Ring/Simple.
        let f = file(vec![
            rec(0, 4096, TREE, Who::Table, 90, 1000.0),
            rec(0, 4096, RING, Who::ExploreNccl, 10, 900.0),
        ]);
        let m = classify(&f, &|_| true);
        let at = m.values().next().unwrap();
        assert_eq!(at.nccl.count, 10);
        assert_eq!(at.nccl_choice().map(|s| s.algo), Some(Algo::Ring));
        assert_eq!(at.others.len(), 1);
        assert_eq!(at.others.values().next().unwrap().by_table, 90);
    }

    /// A table's plan may try a setting where the table forces another:
    /// such an exploring call ran that setting, not NCCL's choice. It was
    /// taken for NCCL's choice (the only probe at a forced cell before the
    /// plan), so a job that tried Ring/Simple/4 over a forced Tree/LL made
    /// the compiler compare Tree/LL against it as if against NCCL.
    #[test]
    fn a_planned_setting_explored_where_the_table_forced_another_is_not_nccls_choice() {
        let f = file(vec![
            rec(0, 4096, TREE, Who::Table, 90, 1000.0),
            rec(0, 4096, RING, Who::Explore, 10, 900.0),
        ]);
        let at = classify(&f, &|_| true).into_values().next().unwrap();
        assert_eq!(at.nccl.count, 0, "{:?}", at.nccl_settings);
        assert_eq!(at.others.len(), 2);
        assert_eq!(at.unknown, 0);
    }

    #[test]
    fn a_forced_setting_nccl_runs_on_its_own_is_nccls_choice() {
        // The table left the call to NCCL (Ring/Simple); exploration forced
        // Tree/LL, and another call's forced Ring/Simple is what NCCL ran.
        let f = file(vec![
            rec(0, 4096, RING, Who::Nccl, 80, 1000.0),
            rec(0, 4096, RING, Who::Explore, 5, 1000.0),
            rec(0, 4096, TREE, Who::Explore, 5, 800.0),
        ]);
        let at = classify(&f, &|_| true).into_values().next().unwrap();
        assert_eq!(at.nccl.count, 85);
        assert_eq!(at.others.len(), 1);
        assert_eq!(at.others.keys().next().unwrap().algo, Algo::Tree);
    }
    #[test]
    fn a_neighbours_setting_explored_where_other_calls_were_forced_is_not_nccls_choice() {
        // One shape, two call states (e.g. registered buffers and not): the
        // table forced Tree/LL on some calls, left the others to NCCL
        // (Ring/Simple), and exploration ran a neighbour's Ring/LL on those.
        const RING_LL: (Algo, Proto) = (Algo::Ring, Proto::LL);
        let f = file(vec![
            rec(0, 4096, TREE, Who::Table, 100, 1000.0),
            rec(0, 4096, RING, Who::Nccl, 390, 1000.0),
            rec(0, 4096, RING_LL, Who::Explore, 10, 700.0),
        ]);
        let at = classify(&f, &|_| true).into_values().next().unwrap();
        assert_eq!(at.nccl_choice().map(|s| s.proto), Some(Proto::Simple));
        assert!(
            !at.nccl_settings.keys().any(|s| s.proto == Proto::LL),
            "Ring/LL ran as NCCL's choice: {:?}",
            at.nccl_settings
        );
        assert_eq!(at.nccl.count, 390);
        // An exploring call that forced a setting is that setting.
        assert_eq!(at.unknown, 0);
        assert!(at
            .others
            .keys()
            .any(|s| s.proto == Proto::LL && s.algo == Algo::Ring));
    }
}
