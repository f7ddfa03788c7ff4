//! `dyncc simulate`: physics properties, NCCL-default realism, determinism,
//! and that the files are nccl-tests text a parser can read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use dyncc::record::{Algo, Coll, Proto};
use dyncc::simulate::calibrate;
use dyncc::simulate::nccl_model::NcclModel;
use dyncc::simulate::op::Op;
use dyncc::simulate::physics::{configs, true_time};
use dyncc::simulate::profile::{builtin, builtins};
use dyncc::simulate::sweep::{gaps, Ch, Models, Spec};

use crate::support::cli::{dyncc, root};

fn sizes() -> Vec<u64> {
    (3..=32).map(|i| 1u64 << i).collect()
}

/// An AllReduce of `nbytes` on `m`'s nodes at `(algo, proto)`, with
/// NCCL's channel count.
fn allreduce(m: &NcclModel, algo: Algo, proto: Proto, nbytes: u64) -> Op {
    Op {
        coll: Coll::AllReduce,
        nnodes: m.nnodes,
        nbytes,
        algo,
        proto,
        channels: m.channels(algo, proto, nbytes),
    }
}

/// Best time over protocols of `a` with NCCL's channel count.
fn best_of(prof: &dyncc::simulate::profile::Profile, nn: u32, a: Algo, s: u64) -> f64 {
    let m = NcclModel::new(prof, nn);
    Proto::ALL
        .iter()
        .map(|&p| true_time(prof, allreduce(&m, a, p, s)))
        .fold(f64::INFINITY, f64::min)
}

/// First size from which Ring beats Tree for good.
fn tree_ring_crossover(prof: &dyncc::simulate::profile::Profile, nn: u32) -> u64 {
    let ss = sizes();
    let mut last_tree = 0;
    for (i, &s) in ss.iter().enumerate() {
        if best_of(prof, nn, Algo::Tree, s) <= best_of(prof, nn, Algo::Ring, s) && i + 1 < ss.len()
        {
            last_tree = i + 1;
        }
        // Stop at the first size where Ring wins here and at the next size.
        if i + 1 < ss.len()
            && best_of(prof, nn, Algo::Ring, s) < best_of(prof, nn, Algo::Tree, s)
            && best_of(prof, nn, Algo::Ring, ss[i + 1]) < best_of(prof, nn, Algo::Tree, ss[i + 1])
            && s > 8
        {
            return s;
        }
    }
    ss[last_tree.min(ss.len() - 1)]
}

#[test]
fn protocol_order_ll_small_simple_large_on_every_profile() {
    for prof in builtins() {
        for nn in [1u32, 2, 4, 16] {
            let m = NcclModel::new(&prof, nn);
            let t = |p: Proto, s: u64| true_time(&prof, allreduce(&m, Algo::Ring, p, s));
            assert!(t(Proto::LL, 64) < t(Proto::LL128, 64), "{} {nn}", prof.name);
            assert!(
                t(Proto::LL, 64) < t(Proto::Simple, 64),
                "{} {nn}",
                prof.name
            );
            assert!(
                t(Proto::Simple, 4 << 30) < t(Proto::LL, 4 << 30),
                "{} {nn}",
                prof.name
            );
            // LL128 sits between: never the worst at mid sizes (where NCCL
            // allows it: not over PCIe, where 128-byte stores do not land whole).
            let mid = 4 << 20;
            assert!(
                prof.intra.kind == dyncc::simulate::profile::LinkKind::Pcie
                    || t(Proto::LL128, mid) < t(Proto::LL, mid).max(t(Proto::Simple, mid)),
                "{} {nn}",
                prof.name
            );
        }
    }
}

#[test]
fn tree_ring_crossover_moves_up_with_node_count() {
    for name in ["v100", "a100", "h100"] {
        let prof = builtin(name).unwrap();
        let xs: Vec<u64> = [2u32, 4, 8, 16, 32]
            .iter()
            .map(|&n| tree_ring_crossover(&prof, n))
            .collect();
        assert!(xs.windows(2).all(|w| w[1] >= w[0]), "{name}: {xs:?}");
        assert!(xs[4] >= 8 * xs[1], "{name}: crossover barely moves: {xs:?}");
    }
    // Calibrated profile: DGX-1V puts it at 2 MiB on 2 nodes and 64 MiB on 32; within 4x.
    let v = builtin("v100").unwrap();
    for (nn, real) in [(2u32, 2u64 << 20), (32, 64 << 20)] {
        let x = tree_ring_crossover(&v, nn);
        assert!(
            x * 4 >= real && x <= real * 4,
            "v100 {nn} nodes: {x} vs real {real}"
        );
    }
}

#[test]
fn tree_beats_ring_at_small_sizes_on_more_than_one_node() {
    for prof in builtins() {
        for nn in [2u32, 4, 8] {
            assert!(
                best_of(&prof, nn, Algo::Tree, 1024) < best_of(&prof, nn, Algo::Ring, 1024),
                "{} {nn}",
                prof.name
            );
        }
    }
}

#[test]
fn two_node_tree_advantage_at_large_sizes() {
    for prof in builtins() {
        let ratio = |nn: u32| {
            let s = 1u64 << 30;
            let m = NcclModel::new(&prof, nn);
            let t = |a: Algo| true_time(&prof, allreduce(&m, a, Proto::Simple, s));
            t(Algo::Tree) / t(Algo::Ring)
        };
        assert!(
            ratio(2) < 0.9 * ratio(4),
            "{}: tree/ring 2N {} 4N {}",
            prof.name,
            ratio(2),
            ratio(4)
        );
    }
    // On the calibrated DGX-1V profile Tree wins outright at 1 GiB on 2 nodes, as measured.
    let v = builtin("v100").unwrap();
    assert!(best_of(&v, 2, Algo::Tree, 1 << 30) < best_of(&v, 2, Algo::Ring, 1 << 30));
}

#[test]
fn channel_count_is_unimodal_for_every_config() {
    for prof in builtins() {
        for nn in [1u32, 4] {
            for c in Coll::ALL {
                for (a, p) in configs(&prof, nn, c) {
                    for s in [64u64, 1 << 16, 1 << 22, 1 << 30] {
                        let op = |channels| Op {
                            coll: c,
                            nnodes: nn,
                            nbytes: s,
                            algo: a,
                            proto: p,
                            channels,
                        };
                        let ts: Vec<f64> = (1..=64).map(|ch| true_time(&prof, op(ch))).collect();
                        let m = ts
                            .iter()
                            .enumerate()
                            .min_by(|x, y| x.1.total_cmp(y.1))
                            .unwrap()
                            .0;
                        let ok = ts[..=m].windows(2).all(|w| w[1] <= w[0] * (1.0 + 1e-12))
                            && ts[m..].windows(2).all(|w| w[1] >= w[0] * (1.0 - 1e-12));
                        assert!(ok, "{} {nn}N {c:?} {a:?} {p:?} {s}: {ts:?}", prof.name);
                    }
                }
            }
        }
    }
    // Few channels starve bandwidth at large sizes; many cost time at small sizes.
    let h = builtin("h100").unwrap();
    let t = |channels: u32, nbytes: u64| {
        let op = Op {
            coll: Coll::AllReduce,
            nnodes: 2,
            nbytes,
            algo: Algo::Ring,
            proto: Proto::Simple,
            channels,
        };
        true_time(&h, op)
    };
    assert!(t(2, 1 << 30) > 3.0 * t(16, 1 << 30));
    assert!(t(32, 64) > t(1, 64));
}

fn spec(name: &str) -> Spec {
    Spec {
        profile: builtin(name).unwrap(),
        nodes: vec![1, 2, 4, 8, 16],
        colls: Coll::ALL.to_vec(),
        min_bytes: 8,
        max_bytes: 4 << 30,
        channels: vec![
            Ch::Auto,
            Ch::Fixed(4),
            Ch::Fixed(8),
            Ch::Fixed(16),
            Ch::Fixed(32),
        ],
        chunks: vec![],
        repeats: 1,
        seed: 1,
    }
}

#[test]
fn default_gap_is_realistic_on_every_profile() {
    for prof in builtins() {
        let sp = spec(&prof.name);
        let g = gaps(&sp, &Models::new(&sp));
        let all = g.last().unwrap();
        assert!(all.nodes.is_none());
        assert!(
            (1.01..=1.10).contains(&all.geomean),
            "{}: geomean default/best {}",
            prof.name,
            all.geomean
        );
        assert!(
            all.max >= 1.2,
            "{}: NCCL's default is never 1.2x off (max {})",
            prof.name,
            all.max
        );
        assert!(
            all.frac_over_1_2 < 0.2,
            "{}: default too often 1.2x off ({})",
            prof.name,
            all.frac_over_1_2
        );
        assert!(
            all.max < 3.0,
            "{}: default absurdly off ({})",
            prof.name,
            all.max
        );
    }
}

#[test]
fn physics_matches_real_dgx1v_sweep() {
    let real =
        calibrate::read_real(&root().join("datasets/real/nvidia-dgx1v-allreduce.csv")).unwrap();
    let r = calibrate::compare(&builtin("v100").unwrap(), &real);
    assert!(
        r.overall_rms_log < 0.25,
        "RMS log error {}",
        r.overall_rms_log
    );
    for g in &r.default_gap {
        assert!(g.sim_geomean >= 1.0 && g.sim_geomean < 1.15, "{g:?}");
    }
}

// ---- files -------------------------------------------------------------------

fn run_sim(dir: &Path, extra: &[&str]) {
    let out = dyncc()
        .args(["simulate", "-o"])
        .arg(dir)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn logs(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "log") {
                v.push(p);
            }
        }
    }
    v.sort();
    v
}

/// A minimal nccl-tests 2.17+ reader: returns (knobs, nranks, hosts, rows (size, oop, ip)).
#[allow(clippy::type_complexity)]
fn parse(
    path: &Path,
) -> (
    BTreeMap<String, String>,
    usize,
    BTreeSet<String>,
    Vec<(u64, f64, f64)>,
) {
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let ctx = |i: usize| format!("{}:{}", path.display(), i + 1);
    let mut knobs = BTreeMap::new();
    let mut i = 0;
    while lines[i].starts_with("# dyncc: ") {
        for kv in lines[i]["# dyncc: ".len()..].split_whitespace() {
            let (k, v) = kv
                .split_once('=')
                .unwrap_or_else(|| panic!("{} bad knob {kv}", ctx(i)));
            knobs.insert(k.to_string(), v.to_string());
        }
        i += 1;
    }
    assert!(i > 0, "{}: no # dyncc: line", ctx(0));
    assert!(
        lines[i].starts_with("# nccl-tests version 2.19.6 nccl-headers="),
        "{}",
        ctx(i)
    );
    assert!(
        lines[i + 1].starts_with("# Collective test starting: "),
        "{}",
        ctx(i + 1)
    );
    let prog = lines[i + 1]["# Collective test starting: ".len()..].to_string();
    assert!(
        lines[i + 2].starts_with("# nThread 1 nGpus 1 minBytes "),
        "{}",
        ctx(i + 2)
    );
    assert!(lines[i + 2].ends_with("unalign: 0"), "{}", ctx(i + 2));
    assert_eq!(lines[i + 3], "#");
    assert_eq!(lines[i + 4], "# Using devices");
    let mut nranks = 0;
    let mut hosts = BTreeSet::new();
    let mut rows = Vec::new();
    let mut concluded = false;
    for (j, l) in lines.iter().enumerate().skip(i + 5) {
        if let Some(r) = l.strip_prefix("#  Rank ") {
            let t: Vec<&str> = r.split_whitespace().collect();
            assert_eq!(t[0].parse::<usize>().unwrap(), nranks, "{}", ctx(j));
            assert_eq!(
                (t[1], t[3], t[5], t[7]),
                ("Group", "Pid", "on", "device"),
                "{}",
                ctx(j)
            );
            assert!(
                t[9].starts_with("[0000:") && t[9].ends_with(":00]"),
                "{}",
                ctx(j)
            );
            hosts.insert(t[6].to_string());
            nranks += 1;
        } else if l.starts_with('#') {
            if let Some(p) = l.strip_prefix("# Collective test concluded: ") {
                assert_eq!(p, prog);
                concluded = true;
            }
        } else if !l.is_empty() {
            let t: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(t.len(), 13, "{}: {l}", ctx(j));
            let size: u64 = t[0].parse().unwrap();
            let _count: u64 = t[1].parse().unwrap();
            let oop: f64 = t[5].parse().unwrap();
            let alg: f64 = t[6].parse().unwrap();
            let ip: f64 = t[9].parse().unwrap();
            assert!(oop > 0.0 && ip > 0.0, "{}", ctx(j));
            if size > 0 && alg >= 1.0 {
                let want = size as f64 / 1000.0 / oop;
                assert!(
                    (alg - want).abs() / want < 0.01 + 0.01 / alg,
                    "{}: algbw {alg} vs {want}",
                    ctx(j)
                );
            }
            assert_eq!((t[8], t[12]), ("0", "0"), "{}: #wrong", ctx(j));
            rows.push((size, oop, ip));
        }
    }
    assert!(concluded, "{}: no conclusion line", path.display());
    (knobs, nranks, hosts, rows)
}

#[test]
fn output_is_nccl_tests_text_with_knobs_and_hosts() {
    let dir = tempfile::tempdir().unwrap();
    run_sim(
        dir.path(),
        &[
            "--profile",
            "h100",
            "--nodes",
            "1,2,4",
            "--max-bytes",
            "1MiB",
            "--channels",
            "auto,8",
            "--repeats",
            "2",
            "--csv",
        ],
    );
    let files = logs(dir.path());
    // Per node count and repeat: AR 7/10 configs, AG/RS 4/5, Bcast/Reduce 3, times 2 channel settings, plus 5 defaults.
    assert!(files.len() > 100, "{}", files.len());
    let mut seen_default = 0;
    for f in &files {
        let (knobs, nranks, hosts, rows) = parse(f);
        let nn: usize = f
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()[1..]
            .parse()
            .unwrap();
        assert_eq!(nranks, 8 * nn, "{}", f.display());
        assert_eq!(hosts.len(), nn, "{}", f.display());
        assert_eq!(knobs["platform"], "h100");
        assert_eq!(knobs["simulated"], "1");
        assert!(knobs.contains_key("repeat"));
        assert_eq!(rows.len(), 18, "{}: 8 B .. 1 MiB", f.display());
        if knobs["NCCL_ALGO"] == "default" {
            assert_eq!(knobs["NCCL_PROTO"], "default");
            assert!(!knobs.contains_key("NCCL_MIN_NCHANNELS"));
            seen_default += 1;
        } else {
            assert!(
                Algo::parse(&knobs["NCCL_ALGO"]).is_some(),
                "{}",
                f.display()
            );
            assert!(
                Proto::parse(&knobs["NCCL_PROTO"]).is_some(),
                "{}",
                f.display()
            );
            if let Some(c) = knobs.get("NCCL_MIN_NCHANNELS") {
                assert_eq!(Some(c), knobs.get("NCCL_MAX_NCHANNELS"));
            }
        }
    }
    assert_eq!(seen_default, 3 * 5 * 2);
    // Broadcast/Reduce only ever run Ring.
    for f in files
        .iter()
        .filter(|f| f.to_string_lossy().contains("/broadcast/"))
    {
        let name = f.file_name().unwrap().to_string_lossy();
        assert!(
            name.starts_with("ring_") || name.starts_with("default_"),
            "{name}"
        );
    }
    let truth = std::fs::read_to_string(dir.path().join("truth.csv")).unwrap();
    assert!(truth.starts_with("platform,collective,nodes,ranks,size_bytes,algorithm,protocol,channels,true_us,ran_algorithm,ran_protocol,ran_channels\n"));
    let csv = std::fs::read_to_string(dir.path().join("sweep.csv")).unwrap();
    assert!(csv.starts_with("collective,size_bytes,algorithm,protocol,channels,nodes,ranks,pipeOps,regBuff,cost_metric,bandwidth_gbps,latency_us,platform\n"));
    assert!(csv.lines().skip(1).all(|l| l.split(',').count() == 13));
}

#[test]
fn logs_scatter_around_the_ground_truth() {
    let dir = tempfile::tempdir().unwrap();
    run_sim(
        dir.path(),
        &[
            "--profile",
            "a100",
            "--nodes",
            "2",
            "--colls",
            "allreduce",
            "--min-bytes",
            "1MiB",
            "--max-bytes",
            "64MiB",
            "--channels",
            "8",
            "--repeats",
            "5",
        ],
    );
    let mut truth = BTreeMap::new();
    let mut rd = csv::Reader::from_path(dir.path().join("truth.csv")).unwrap();
    for r in rd.records() {
        let r = r.unwrap();
        if &r[5] == "ring" && &r[6] == "simple" {
            truth.insert(r[4].parse::<u64>().unwrap(), r[8].parse::<f64>().unwrap());
        }
    }
    let mut samples: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for f in logs(dir.path())
        .iter()
        .filter(|f| f.to_string_lossy().contains("ring_simple_c8"))
    {
        for (s, oop, ip) in parse(f).3 {
            samples.entry(s).or_default().extend([oop, ip]);
        }
    }
    assert_eq!(samples.len(), 7);
    for (s, mut v) in samples {
        v.sort_by(f64::total_cmp);
        let med = v[v.len() / 2];
        let t = truth[&s];
        assert!((med / t - 1.0).abs() < 0.08, "{s}: median {med} truth {t}");
    }
}

#[test]
fn same_seed_same_files_other_seed_other_numbers() {
    let (a, b, c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let args = [
        "--profile",
        "gh200",
        "--nodes",
        "2",
        "--colls",
        "allgather",
        "--max-bytes",
        "64KiB",
        "--repeats",
        "2",
    ];
    run_sim(a.path(), &[&args[..], &["--seed", "7"]].concat());
    run_sim(b.path(), &[&args[..], &["--seed", "7"]].concat());
    run_sim(c.path(), &[&args[..], &["--seed", "8"]].concat());
    let (fa, fb, fc) = (logs(a.path()), logs(b.path()), logs(c.path()));
    assert_eq!(fa.len(), fb.len());
    let mut differ = 0;
    for ((x, y), z) in fa.iter().zip(&fb).zip(&fc) {
        let (x, y, z) = (
            std::fs::read(x).unwrap(),
            std::fs::read(y).unwrap(),
            std::fs::read(z).unwrap(),
        );
        assert_eq!(x, y);
        differ += (x != z) as usize;
    }
    assert_eq!(differ, fa.len());
}

#[test]
fn profile_file_with_one_gpu_per_node_gets_pat() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = builtin("h100").unwrap();
    p.name = "h100-1gpu".into();
    p.gpus_per_node = 1;
    let f = dir.path().join("one.json");
    std::fs::write(&f, serde_json::to_string(&p).unwrap()).unwrap();
    let out = dir.path().join("out");
    run_sim(
        &out,
        &[
            "--profile-file",
            f.to_str().unwrap(),
            "--nodes",
            "4",
            "--colls",
            "allgather,allreduce",
            "--max-bytes",
            "4KiB",
            "--repeats",
            "1",
            "--channels",
            "auto",
        ],
    );
    let names: Vec<String> = logs(&out)
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .any(|n| n.contains("/allgather/pat_simple_cauto_r0.log")),
        "{names:?}"
    );
    assert!(!names.iter().any(|n| n.contains("/allreduce/pat_")));
    for f in logs(&out) {
        let (_, nranks, hosts, _) = parse(&f);
        assert_eq!((nranks, hosts.len()), (4, 4));
    }
}

#[test]
fn bad_profile_file_and_unknown_profile_fail_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("broken.toml");
    std::fs::write(&f, "name = \"x\"\ngpus_per_node = \"lots\"\n").unwrap();
    let out = dyncc()
        .args(["simulate", "--report", "--profile-file"])
        .arg(&f)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("broken.toml:"), "{err}");
    let out = dyncc()
        .args(["simulate", "--report", "--profile", "tpu"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("h100"));
    let out = dyncc()
        .args(["simulate", "--report", "--max-bytes", "4X"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("suffix"));
}

#[test]
fn list_profiles_json_round_trips_as_profile_files() {
    let out = dyncc()
        .args(["simulate", "--list-profiles", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.len(), 5);
    let dir = tempfile::tempdir().unwrap();
    for p in v {
        let f = dir
            .path()
            .join(format!("{}.json", p["name"].as_str().unwrap()));
        std::fs::write(&f, p.to_string()).unwrap();
        let out = dyncc()
            .args(["simulate", "--report", "--nodes", "2", "--profile-file"])
            .arg(&f)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

// ---- chunk sizes ---------------------------------------------------------------

/// Every file under `dir` by its path relative to `dir`.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// The chunk model never reaches a run at NCCL's chunk: the shipped sweep
/// (datasets/sim, written before chunks were modelled, by the command its
/// README gives) comes out byte for byte, and a sweep that also runs chunks
/// only adds files (its truth.csv one column, 0 on every line NCCL's chunk ran).
#[test]
fn the_shipped_sweep_regenerates_byte_for_byte_with_or_without_chunks() {
    let shipped = tree(&root().join("datasets/sim"));
    let args = [
        "--profile",
        "h100",
        "--nodes",
        "1,2,4,8",
        "--channels",
        "auto,8",
        "--repeats",
        "2",
        "--seed",
        "1",
    ];
    let plain = tempfile::tempdir().unwrap();
    run_sim(plain.path(), &args);
    let again = tree(plain.path());
    assert_eq!(
        again.keys().collect::<Vec<_>>(),
        shipped.keys().collect::<Vec<_>>()
    );
    for (rel, bytes) in &shipped {
        assert!(again[rel] == *bytes, "{} differs", rel.display());
    }
    let chunked = tempfile::tempdir().unwrap();
    let mut with = args.to_vec();
    with.extend(["--chunks", "64K,256K"]);
    run_sim(chunked.path(), &with);
    let got = tree(chunked.path());
    let mut extra = 0;
    for (rel, bytes) in &got {
        if rel == Path::new("truth.csv") {
            continue;
        }
        match shipped.get(rel) {
            Some(b) => assert!(b == bytes, "{} differs", rel.display()),
            None => {
                assert!(
                    rel.components()
                        .any(|c| c.as_os_str() == "chunk=65536" || c.as_os_str() == "chunk=262144"),
                    "{}",
                    rel.display()
                );
                extra += 1;
            }
        }
    }
    assert!(extra > 0);
    let truth = String::from_utf8(got[Path::new("truth.csv")].clone()).unwrap();
    let old = String::from_utf8(shipped[Path::new("truth.csv")].clone()).unwrap();
    let at_nccls: Vec<&str> = truth.lines().filter_map(|l| l.strip_suffix(",0")).collect();
    let old: Vec<&str> = old.lines().skip(1).collect();
    assert_eq!(at_nccls, old);
}

/// A simulated run at a chunk carries the plugin's own init line: the one
/// the real plugin printed in tests/data/chunk-sweep (chunk_sweep.rs checks
/// that one against the built .so).
#[test]
fn simulated_chunk_runs_carry_the_plugins_init_line() {
    let sample = root().join(
        "tests/data/chunk-sweep/allreduce/nodes=1/NCCL_ALGO=Ring/NCCL_PROTO=LL/channels=default/chunk=65536/repeat=1.log",
    );
    let line = |text: &str| {
        text.lines()
            .find_map(|l| l.split_once("NCCL INFO dyncc: sweep chunk="))
            .map(|(_, rest)| rest.split("; plugin ").next().unwrap().to_string())
    };
    let real = line(&std::fs::read_to_string(sample).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    run_sim(
        dir.path(),
        &[
            "--nodes",
            "2",
            "--colls",
            "allreduce",
            "--min-bytes",
            "1M",
            "--max-bytes",
            "2M",
            "--chunks",
            "64K",
        ],
    );
    let mut seen = 0;
    for f in logs(dir.path()) {
        let text = std::fs::read_to_string(&f).unwrap();
        let chunk_run = f.components().any(|c| c.as_os_str() == "chunk=65536");
        match line(&text) {
            Some(l) => {
                assert!(chunk_run, "{}", f.display());
                assert_eq!(l, real, "{}", f.display());
                // One per rank, as NCCL_DEBUG=INFO prints it.
                assert_eq!(text.matches("dyncc: sweep chunk=").count(), 16);
                seen += 1;
            }
            None => assert!(!chunk_run, "{}", f.display()),
        }
    }
    assert!(seen > 0);
}

/// A simulated chunk sweep (Broadcast on 8 and 16 nodes, where the modelled
/// ring pipeline is deep) compiles, with no special case, into a table that
/// forces chunks; at every measured cell where it does, the ground truth
/// says the forced chunk is no slower than the same setting at NCCL's chunk
/// and, at some, faster by 5 % or more, and `eval --truth` scores the table
/// near the best and well ahead of NCCL's default.
#[test]
fn a_simulated_chunk_sweep_compiles_into_chunk_decisions_that_beat_nccls_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let sweep = dir.path().join("sweep");
    run_sim(
        &sweep,
        &[
            "--nodes",
            "8,16",
            "--colls",
            "broadcast",
            "--min-bytes",
            "1M",
            "--max-bytes",
            "64M",
            "--channels",
            "auto",
            "--repeats",
            "2",
            "--chunks",
            "64K,128K,256K",
        ],
    );
    let tbl = dir.path().join("c.tbl");
    let out = dyncc()
        .arg("compile")
        .arg(&sweep)
        .arg("-o")
        .arg(&tbl)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // (nodes, size, algorithm, protocol, chunk) -> true µs.
    let mut truth = BTreeMap::new();
    let mut rd = csv::Reader::from_path(sweep.join("truth.csv")).unwrap();
    for r in rd.records() {
        let r = r.unwrap();
        let key = (
            r[2].parse::<u32>().unwrap(),
            r[4].parse::<u64>().unwrap(),
            r[5].to_string(),
            r[6].to_string(),
            r[12].parse::<u64>().unwrap(),
        );
        truth.insert(key, r[8].parse::<f64>().unwrap());
    }
    let mut forced = 0;
    let mut wins = 0;
    for nodes in [8u32, 16] {
        for lg in 20..=26 {
            let size = 1u64 << lg;
            let q = dyncc()
                .arg("query")
                .arg(&tbl)
                .args(["--coll", "broadcast", "--bytes", &size.to_string()])
                .args([
                    "--nodes",
                    &nodes.to_string(),
                    "--ranks",
                    &(8 * nodes).to_string(),
                ])
                .arg("--json")
                .output()
                .unwrap();
            assert!(q.status.success(), "{}", String::from_utf8_lossy(&q.stderr));
            let v: serde_json::Value = serde_json::from_slice(&q.stdout).unwrap();
            let chunk = v["chunk_bytes"].as_u64().unwrap_or(0);
            if chunk == 0 {
                continue;
            }
            forced += 1;
            let (a, p) = (
                v["algorithm"].as_str().unwrap().to_string(),
                v["protocol"].as_str().unwrap().to_string(),
            );
            let at = truth[&(nodes, size, a.clone(), p.clone(), chunk)];
            let nccls = truth[&(nodes, size, a.clone(), p.clone(), 0)];
            let default = truth[&(nodes, size, "default".into(), "default".into(), 0)];
            assert!(
                at <= nccls * 1.0001,
                "{nodes} nodes {size} B: {a}/{p} at {chunk} is {at} µs, at NCCL's chunk {nccls}"
            );
            assert!(
                at < default,
                "{nodes} nodes {size} B: {at} vs default {default}"
            );
            if at < nccls / 1.05 {
                wins += 1;
            }
        }
    }
    assert!(forced > 0 && wins > 0, "forced {forced}, wins {wins}");
    let ev = dyncc()
        .arg("eval")
        .arg(&tbl)
        .arg("--truth")
        .arg(sweep.join("truth.csv"))
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        ev.status.success(),
        "{}",
        String::from_utf8_lossy(&ev.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&ev.stdout).unwrap();
    // Every chunk decision is scored on its own truth line (chunk column).
    assert_eq!(v["unscorable"], 0, "{v}");
    let (table, default) = (
        v["table"]["geomean"].as_f64().unwrap(),
        v["default"]["geomean"].as_f64().unwrap(),
    );
    assert!(table < 1.03 && default > table * 1.03, "{v}");
}

/// `--report --chunks` says where a chunk beats NCCL's for the same setting:
/// on 16 nodes' Broadcast, and nowhere on one node.
#[test]
fn report_with_chunks_names_where_a_chunk_wins() {
    let out = dyncc()
        .args([
            "simulate",
            "--report",
            "--json",
            "--nodes",
            "1,16",
            "--colls",
            "broadcast",
        ])
        .args(["--chunks", "32K,64K,128K"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let gains = v["chunk_gains"].as_array().unwrap();
    assert!(!gains.is_empty(), "{v}");
    for g in gains {
        assert_eq!(g["nodes"], 16, "{g}");
        let gain = g["max_gain"].as_f64().unwrap();
        assert!((1.03..1.2).contains(&gain), "{g}");
    }
    assert!(v["gaps"].is_array());
}
