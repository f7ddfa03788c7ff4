//! Ingest a user can trust (issue 11): knobs per run, explicit labels
//! honoured and checked against the log, labelling one's own sweep
//! (manifest, name pattern), copies and setups never posing as repeats,
//! checked CSV rows, implausible values refused, a bounded input walk.

use std::path::{Path, PathBuf};
use std::process::Output;

use dyncc::ingest::{self, IngestOptions};
use dyncc::record::{Algo, Proto};

use crate::support::cli::{dyncc, root};

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(&p, body).unwrap();
    p
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn strict(paths: &[PathBuf], assume: &[&str]) -> anyhow::Result<ingest::Dataset> {
    let a: Vec<String> = assume.iter().map(|s| s.to_string()).collect();
    ingest::read_paths(
        paths,
        &IngestOptions {
            assume: IngestOptions::parse_assume(&a).unwrap(),
            ..Default::default()
        },
    )
}

/// One nccl-tests run (2 ranks on one node), with `info` NCCL INFO lines
/// after the rank lines; times start at `t0` us and grow per size.
fn run(info: &[&str], t0: f64) -> String {
    let mut s = String::from(
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 8192 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n\
         #\n# Using devices\n\
         #  Rank  0 Group  0 Pid  1 on  n1 device  0 [0x01] NVIDIA A100-SXM4-40GB\n\
         #  Rank  1 Group  0 Pid  2 on  n1 device  1 [0x02] NVIDIA A100-SXM4-40GB\n",
    );
    for l in info {
        s.push_str(&format!("n1:1:1 [0] NCCL INFO {l}\n"));
    }
    s.push_str(
        "#\n#                                                              out-of-place                       in-place\n\
         #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n\
         #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n",
    );
    for i in 0..11u32 {
        let size = 8u64 << i;
        let t = t0 * (1.0 + 0.05 * i as f64);
        s.push_str(&format!(
            "{size:>12} {:>12}     float     sum      -1 {t:>8.2}    0.00    0.00      0 {:>8.2}    0.00    0.00      0\n",
            size / 4,
            t * 1.01
        ));
    }
    s.push_str("# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.1 \n#\n");
    s
}

const BANNER: &str = "NCCL version 2.21.5+cuda12.4";

fn configs(ds: &ingest::Dataset) -> Vec<(Option<Algo>, Option<Proto>)> {
    let mut v: Vec<_> = ds
        .records
        .iter()
        .map(|r| (r.run.config.algo, r.run.config.proto))
        .collect();
    v.dedup();
    v
}

// ---- 1. explicit labels -------------------------------------------------

/// `NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET` prints the banner but no
/// environment lines: that proves nothing about the knobs, and the user's
/// label must win (it was overridden with "default").
#[test]
fn explicit_labels_beat_an_info_banner_without_environment_lines() {
    let d = tempfile::tempdir().unwrap();
    let body = run(&[BANNER, "NET/IB : Using [0]mlx5_0:1/IB"], 10.0);
    let p = write(d.path(), "all_reduce.log", &body);
    // Unlabelled: unknown, not default.
    let e = format!("{:#}", strict(std::slice::from_ref(&p), &[]).unwrap_err());
    assert!(e.contains("knobs unknown"), "{e}");
    // --assume.
    let ds = strict(std::slice::from_ref(&p), &["NCCL_ALGO=Ring"]).unwrap();
    assert_eq!(configs(&ds), vec![(Some(Algo::Ring), None)]);
    assert_eq!(ds.records[0].run.nccl_version, Some(22105));
    // A `# dyncc:` header.
    let h = write(
        d.path(),
        "h/all_reduce.log",
        &format!("# dyncc: NCCL_ALGO=Ring NCCL_PROTO=LL\n{body}"),
    );
    let ds = strict(&[h], &[]).unwrap();
    assert_eq!(configs(&ds), vec![(Some(Algo::Ring), Some(Proto::LL))]);
    // A path.
    let q = write(
        d.path(),
        "NCCL_ALGO=Ring/NCCL_PROTO=LL/all_reduce.log",
        &body,
    );
    let ds = strict(&[q], &[]).unwrap();
    assert_eq!(configs(&ds), vec![(Some(Algo::Ring), Some(Proto::LL))]);
    assert!(ds.records.iter().all(|r| r.run.config.channels.is_none()));
}

/// A label that says Ring on a log whose own environment lines say Tree
/// was silently overridden by the log; it is an error naming both.
#[test]
fn explicit_label_contradicting_the_logs_environment_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        "all_reduce.log",
        &run(&[BANNER, "NCCL_ALGO set by environment to Tree"], 10.0),
    );
    let e = format!(
        "{:#}",
        strict(std::slice::from_ref(&p), &["NCCL_ALGO=Ring"]).unwrap_err()
    );
    assert!(
        e.contains("NCCL_ALGO=Tree") && e.contains("NCCL_ALGO=Ring"),
        "{e}"
    );
    assert!(
        e.contains("NCCL INFO line 7") && e.contains("--assume"),
        "{e}"
    );
    assert!(e.contains("remove the label"), "{e}");
    // Agreeing labels are fine; environment lines make unnamed knobs default.
    let ds = strict(&[p], &["NCCL_ALGO=tree"]).unwrap();
    assert_eq!(configs(&ds), vec![(Some(Algo::Tree), None)]);
}

// ---- 2. knobs per run ---------------------------------------------------

/// Three runs concatenated (Ring/LL, Tree/LL, default) were all given the
/// file's one label.
#[test]
fn knobs_follow_each_run_of_a_concatenated_log() {
    let d = tempfile::tempdir().unwrap();
    let ifname = "NCCL_SOCKET_IFNAME set by environment to eth0";
    let body = [
        run(
            &[
                BANNER,
                ifname,
                "NCCL_ALGO set by environment to Ring",
                "NCCL_PROTO set by environment to LL",
            ],
            10.0,
        ),
        run(
            &[
                BANNER,
                ifname,
                "NCCL_ALGO set by environment to Tree",
                "NCCL_PROTO set by environment to LL",
            ],
            11.0,
        ),
        run(&[BANNER, ifname], 12.0),
    ]
    .concat();
    let p = write(d.path(), "all_reduce.log", &body);
    let ds = strict(&[p], &[]).unwrap();
    assert_eq!(
        configs(&ds),
        vec![
            (Some(Algo::Ring), Some(Proto::LL)),
            (Some(Algo::Tree), Some(Proto::LL)),
            (None, None)
        ]
    );
    assert_eq!(ds.records.len(), 3 * 22);
    assert!(
        ds.reports[0].knobs.contains("line 1: NCCL_ALGO=Ring"),
        "{}",
        ds.reports[0].knobs
    );
}

// ---- 3. labelling one's own sweep ---------------------------------------

/// A flat folder of unlabelled runs, as users keep them.
fn flat_sweep(d: &Path) -> PathBuf {
    let s = d.join("sweep");
    write(&s, "allreduce_n1_default_default.r0.log", &run(&[], 10.0));
    write(&s, "allreduce_n1_default_default.r1.log", &run(&[], 10.1));
    write(&s, "allreduce_n1_ring_ll.r0.log", &run(&[], 5.0));
    write(&s, "allreduce_n1_ring_ll.r1.log", &run(&[], 5.1));
    s
}

#[test]
fn flat_sweep_is_labelled_by_name_pattern_or_manifest() {
    let d = tempfile::tempdir().unwrap();
    let s = flat_sweep(d.path());
    let pattern = "{coll}_n{nodes}_{algo}_{proto}.r{repeat}.log";
    for extra in [vec!["--name-pattern".to_string(), pattern.to_string()], {
        let m = write(
            &s,
            "manifest.csv",
            "path,NCCL_ALGO,NCCL_PROTO,nodes,ranks\n\
                 allreduce_n1_ring_ll.*.log,Ring,LL,1,2\n\
                 allreduce_n1_default_default.*.log,default,default,1,2\n",
        );
        vec!["--manifest".to_string(), m.display().to_string()]
    }] {
        let out = dyncc()
            .arg("inspect")
            .arg(&s)
            .args(&extra)
            .output()
            .unwrap();
        let t = text(&out);
        assert_eq!(out.status.code(), Some(0), "{t}");
        assert!(t.contains("knobs per file"), "{t}");
        assert!(
            t.contains("allreduce_n1_ring_ll.r0.log: NCCL_ALGO=ring (")
                || t.contains("allreduce_n1_ring_ll.r0.log: NCCL_ALGO=Ring ("),
            "{t}"
        );
        assert!(t.contains("ring/ll"), "{t}");
        // The next command is printed, and it works as printed.
        let next = t
            .lines()
            .find_map(|l| l.strip_prefix("next: "))
            .unwrap_or_else(|| panic!("no next command: {t}"));
        assert!(next.starts_with("dyncc compile "), "{next}");
        let words = shell_words(next);
        let table = d.path().join("cluster.tbl");
        let out = dyncc()
            .current_dir(d.path())
            .args(&words[1..])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{next}: {}", text(&out));
        assert!(table.exists());
        std::fs::remove_file(&table).unwrap();
        // eval takes the same options.
        let out = dyncc()
            .arg("compile")
            .arg(&s)
            .args(&extra)
            .args(["-o"])
            .arg(&table)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let out = dyncc()
            .arg("eval")
            .arg(&table)
            .arg(&s)
            .args(&extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    }
    // The pattern is documented with an example.
    let help = text(&dyncc().args(["compile", "--help"]).output().unwrap());
    assert!(
        help.contains("--name-pattern '{coll}_n{nodes}_{algo}_{proto}.r{repeat}.log'"),
        "{help}"
    );
    assert!(
        help.contains("path,NCCL_ALGO,NCCL_PROTO,nodes,ranks"),
        "{help}"
    );
}

/// Splits a printed command line (single quotes only, as printed).
fn shell_words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut q = false;
    let mut any = false;
    for c in s.chars() {
        match c {
            '\'' => {
                q = !q;
                any = true;
            }
            ' ' if !q => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            c => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The "knobs unknown" error suggested `--assume NCCL_ALGO=.. NCCL_PROTO=..`
/// (refused) and a path that led to a second error about channels: every
/// remedy it names must work exactly as written.
#[test]
fn every_remedy_the_unknown_knobs_error_suggests_works_as_written() {
    let d = tempfile::tempdir().unwrap();
    let body = run(&[BANNER], 10.0);
    let p = write(d.path(), "plain/all_reduce.log", &body);
    let out = dyncc()
        .arg("compile")
        .arg(&p)
        .args(["-o"])
        .arg(d.path().join("t.dyncc"))
        .output()
        .unwrap();
    let e = text(&out);
    assert_ne!(out.status.code(), Some(0));
    assert!(e.contains("knobs unknown"), "{e}");
    // Every `...` snippet of the message.
    let snippets: Vec<&str> = e.split('`').skip(1).step_by(2).collect();
    let mut tried = 0;
    for s in &snippets {
        let (dir_paths, args): (Vec<PathBuf>, Vec<String>) = if s.starts_with("--assume") {
            (vec![p.clone()], shell_words(s))
        } else if let Some(h) = s.strip_prefix("# dyncc:") {
            let f = write(
                d.path(),
                &format!("h{tried}/all_reduce.log"),
                &format!("# dyncc:{h}\n{body}"),
            );
            (vec![f], vec![])
        } else if s.starts_with("NCCL_ALGO=") && s.ends_with('/') {
            let f = write(d.path(), &format!("p{tried}/{s}all_reduce.log"), &body);
            (vec![f], vec![])
        } else if s.starts_with("--manifest")
            || s.starts_with("--name-pattern")
            || s.starts_with("dyncc ")
        {
            // Documented in --help with a worked example (tested above).
            continue;
        } else {
            panic!("a remedy this test does not know how to try: `{s}` in {e}");
        };
        tried += 1;
        let out = dyncc()
            .arg("inspect")
            .arg("--json")
            .args(&dir_paths)
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "`{s}`: {}", text(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            v["unresolved_records"], 0,
            "`{s}` did not label the file: {v}"
        );
        assert!(v["records"].as_u64().unwrap() > 0);
        // And compile accepts the same words: no labelling error left.
        let out = dyncc()
            .arg("compile")
            .args(&dir_paths)
            .args(&args)
            .arg("-o")
            .arg(d.path().join("t.dyncc"))
            .output()
            .unwrap();
        let t = text(&out);
        for bad in [
            "knobs unknown",
            "unknown key",
            "expected KEY=VALUE",
            "cannot read",
        ] {
            assert!(!t.contains(bad), "`{s}` led to another error: {t}");
        }
    }
    assert!(
        tried >= 4,
        "expected --assume default, --assume knobs, header and path remedies: {e}"
    );
}

// ---- 4. copies are not repeats ------------------------------------------

#[test]
fn identical_inputs_are_counted_once() {
    let d = tempfile::tempdir().unwrap();
    let body = run(&[], 10.0);
    let a = write(d.path(), "a/all_reduce.log", &body);
    let copy = write(d.path(), "a/copy/all_reduce.log", &body);
    let twice = write(d.path(), "b/all_reduce.log", &format!("{body}{body}"));
    let once = strict(std::slice::from_ref(&a), &["default"]).unwrap();
    let n = once.records.len();
    assert_eq!(n, 22);
    // The same path twice, a directory holding a copy, a file concatenated
    // with itself: each counted once, and said so.
    for paths in [
        vec![a.clone(), a.clone()],
        vec![d.path().join("a")],
        vec![twice.clone()],
        vec![a.clone(), twice.clone()],
    ] {
        let ds = strict(&paths, &["default"]).unwrap();
        assert_eq!(ds.records.len(), n, "{paths:?}");
        assert!(
            ds.notes
                .iter()
                .any(|m| m.contains("counted once") || m.contains("read once")),
            "{paths:?}: {:?}",
            ds.notes
        );
    }
    let ds = strict(&[d.path().join("a")], &["default"]).unwrap();
    assert!(ds
        .reports
        .iter()
        .any(|r| r.duplicate_of.is_some() && r.file == copy));
    // The same bytes under different labels are not one measurement: both
    // kept, and reported (a copy, or a mislabel).
    let ring = write(d.path(), "l/NCCL_ALGO=Ring/all_reduce.log", &body);
    let tree = write(d.path(), "l/NCCL_ALGO=Tree/all_reduce.log", &body);
    let ds = strict(&[ring, tree], &[]).unwrap();
    assert_eq!(ds.records.len(), 2 * n);
    assert!(
        ds.notes.iter().any(|m| m.contains("labelled differently")),
        "{:?}",
        ds.notes
    );
    // The tuner CSV concatenated with itself (header line and all).
    let csv =
        std::fs::read_to_string(root().join("datasets/real/nvidia-dgx1v-allreduce.csv")).unwrap();
    let c2 = write(d.path(), "c/twice.csv", &format!("{csv}{csv}"));
    let c1 = write(d.path(), "c1/once.csv", &csv);
    let n1 = strict(std::slice::from_ref(&c1), &[])
        .unwrap()
        .records
        .len();
    assert_eq!(strict(&[c2], &[]).unwrap().records.len(), n1);
    // Compiling two copies decides exactly what one copy does (24 regions
    // changed decision when the copy counted as a repeat).
    let compile = |paths: &[&Path]| -> serde_json::Value {
        let out = dyncc()
            .arg("compile")
            .args(paths)
            .arg("--json")
            .arg("-o")
            .arg(d.path().join("t.dyncc"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let dup = write(d.path(), "c2/copy.csv", &csv);
    let one = compile(&[&c1]);
    let two = compile(&[&c1, &dup]);
    assert_eq!(one["forced"], two["forced"]);
    assert_eq!(one["left_alone"], two["left_alone"]);
    assert!(
        two["notes"].to_string().contains("counted once"),
        "{}",
        two["notes"]
    );
}

// ---- 5. setups ----------------------------------------------------------

#[test]
fn runs_of_different_setups_are_not_repeats() {
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("s");
    let gdr = |v: &str, t: f64, ver: &str| {
        run(
            &[
                &format!("NCCL version {ver}+cuda12.2"),
                &format!("NCCL_NET_GDR_LEVEL set by environment to {v}"),
            ],
            t,
        )
    };
    write(&s, "on/all_reduce.log", &gdr("PHB", 10.0, "2.18.3"));
    write(&s, "off/all_reduce.log", &gdr("LOC", 12.0, "2.18.3"));
    let out = |extra: &[&str]| {
        dyncc()
            .arg("compile")
            .arg(&s)
            .args(["--assume", "default"])
            .args(extra)
            .arg("-o")
            .arg(d.path().join("t.dyncc"))
            .output()
            .unwrap()
    };
    let o = out(&[]);
    let e = text(&o);
    assert_ne!(o.status.code(), Some(0), "{e}");
    assert!(e.contains("mix NCCL setups"), "{e}");
    assert!(e.contains("--setup 'NCCL_NET_GDR_LEVEL=PHB'"), "{e}");
    assert!(e.contains("--pool-setups"), "{e}");
    // Each way out works as written.
    let o = out(&["--setup", "NCCL_NET_GDR_LEVEL=PHB"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = out(&["--pool-setups"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("pooled"), "{t}");
    // NCCL 2.18 loads no tuner plugin: warned.
    assert!(
        t.contains("2.18.3") && t.contains("tuner plugins only from 2.19.0"),
        "{t}"
    );
    // The version is recorded, and verify prints it.
    let v = dyncc()
        .arg("verify")
        .arg(d.path().join("t.dyncc"))
        .output()
        .unwrap();
    let vt = text(&v);
    assert!(vt.contains("nccl_version") && vt.contains("2.18.3"), "{vt}");
    let x = text(
        &dyncc()
            .arg("explain")
            .arg(d.path().join("t.dyncc"))
            .output()
            .unwrap(),
    );
    assert!(x.contains("swept on NCCL 2.18.3"), "{x}");
    // Two NCCL versions: also different setups.
    let s2 = d.path().join("s2");
    write(&s2, "a/all_reduce.log", &gdr("PHB", 10.0, "2.21.5"));
    write(&s2, "b/all_reduce.log", &gdr("PHB", 10.5, "2.23.4"));
    let o = dyncc()
        .arg("compile")
        .arg(&s2)
        .args(["--assume", "default", "-o"])
        .arg(d.path().join("t2.dyncc"))
        .output()
        .unwrap();
    let e = text(&o);
    assert!(e.contains("--setup 'nccl=2.23.4'"), "{e}");
}

// ---- 6, 7. checked values -----------------------------------------------

const CSV_HEAD: &str = "collective,size_bytes,algorithm,protocol,channels,nodes,ranks,latency_us\n";

fn csv_err(body: &str) -> (PathBuf, String, tempfile::TempDir) {
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "t.csv", body);
    let e = format!("{:#}", strict(std::slice::from_ref(&p), &[]).unwrap_err());
    (p, e, d)
}

#[test]
fn csv_rows_with_the_wrong_field_count_are_errors_naming_the_line() {
    let (p, e, _d) = csv_err(&format!(
        "{CSV_HEAD}allreduce,8,default,default,-1,1,8,4.5\n\nallreduce,16,default,default,-1,1,8\n"
    ));
    assert!(e.contains(&format!("{}:4:", p.display())), "{e}");
    assert!(e.contains("7 fields; expected 8"), "{e}");
    // A header without the expected columns lists them.
    let (_, e, _d) = csv_err("collective,size,algorithm\nallreduce,8,ring\n");
    assert!(
        e.contains("lacks `size_bytes`, `protocol`, `channels`, `nodes`, `ranks`, a time"),
        "{e}"
    );
    assert!(e.contains("it has: collective,size,algorithm"), "{e}");
    // A UTF-8 BOM and quoted fields are read.
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        "bom.csv",
        &format!("\u{feff}{CSV_HEAD}\"allreduce\",8,default,default,-1,1,8,\"4.5\"\n"),
    );
    let ds = strict(&[p], &[]).unwrap();
    assert_eq!(
        (ds.records.len(), ds.records[0].measurement.time_us),
        (1, 4.5)
    );
}

#[test]
fn implausible_values_are_refused_naming_file_and_line() {
    for (t, what) in [
        ("0.001", "below what nccl-tests can measure"),
        ("1e-300", "0.1 us"),
        ("1e300", "0.1 us"),
    ] {
        let (p, e, _d) = csv_err(&format!(
            "{CSV_HEAD}allreduce,8,default,default,-1,1,8,4.5\nallreduce,16,ring,ll,-1,1,8,{t}\n"
        ));
        assert!(e.contains(&format!("{}:3:", p.display())), "{t}: {e}");
        assert!(e.contains(what), "{t}: {e}");
    }
    // Channels beyond NCCL's MAXCHANNELS, in a CSV row and in a label.
    let (p, e, _d) = csv_err(&format!("{CSV_HEAD}allreduce,8,ring,ll,1000,1,8,4.5\n"));
    assert!(
        e.contains(&format!("{}:2:", p.display())) && e.contains("MAXCHANNELS"),
        "{e}"
    );
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        "all_reduce.log",
        &format!("# dyncc: NCCL_ALGO=Ring channels=1000\n{}", run(&[], 10.0)),
    );
    let e = format!("{:#}", strict(std::slice::from_ref(&p), &[]).unwrap_err());
    assert!(
        e.contains(&format!("{}:1:", p.display())) && e.contains("MAXCHANNELS"),
        "{e}"
    );
    // A text row below the floor names its line.
    let body = run(&[], 10.0).replacen("   10.00 ", "    0.001 ", 1);
    let p = write(d.path(), "x/all_reduce.log", &body);
    let e = format!(
        "{:#}",
        strict(std::slice::from_ref(&p), &["default"]).unwrap_err()
    );
    assert!(
        e.contains(&format!("{}:10:", p.display())) && e.contains("0.1 us"),
        "{e}"
    );
}

#[test]
fn errors_quote_at_most_a_couple_hundred_bytes_of_a_field() {
    let huge = "x".repeat(100_000);
    let (_, e, _d) = csv_err(&format!(
        "{CSV_HEAD}allreduce,{huge},default,default,-1,1,8,4.5\n"
    ));
    assert!(e.len() < 1000, "{} bytes of error", e.len());
    assert!(e.contains("(100000 bytes)"), "{e}");
}

// ---- 9. bounded walk ----------------------------------------------------

/// Two symlink loops made the walk exponential (10 GB after 11 minutes).
#[test]
fn symlink_loops_are_walked_once() {
    let d = tempfile::tempdir().unwrap();
    let top = d.path().join("t");
    write(&top, "all_reduce.log", &run(&[], 10.0));
    std::os::unix::fs::symlink(&top, top.join("loop1")).unwrap();
    std::os::unix::fs::symlink(&top, top.join("loop2")).unwrap();
    let sub = top.join("sub");
    std::fs::create_dir(&sub).unwrap();
    std::os::unix::fs::symlink(&top, sub.join("up")).unwrap();
    let ds = strict(std::slice::from_ref(&top), &["default"]).unwrap();
    assert_eq!((ds.files, ds.records.len()), (1, 22));
    assert!(
        ds.notes.iter().any(|n| n.contains("read once")),
        "{:?}",
        ds.notes
    );
}

/// The digests in the table's metadata were computed by reading every
/// input a second time, whole; they come from the reading itself now.
#[test]
fn input_digests_are_recorded_while_reading() {
    use sha2::{Digest, Sha256};
    let d = tempfile::tempdir().unwrap();
    let body = run(&[], 10.0);
    let p = write(d.path(), "all_reduce.log", &body);
    let ds = strict(std::slice::from_ref(&p), &["default"]).unwrap();
    let want = format!("{:x}", Sha256::digest(body.as_bytes()));
    assert_eq!(ds.reports[0].sha256, want);
    assert_eq!(
        ds.input_digests_of(
            ds.records
                .iter()
                .map(|r| r.measurement.source.file.as_path())
        ),
        format!("{want}  {}", p.display())
    );
}

// ---- real logs the project had not labelled -----------------------------

/// Real nccl-tests logs whose forced algorithm is only in the file name
/// (`20260305_220043__all_reduce_ring.out`): labelled by a name pattern or
/// a manifest, the same for every command.
#[test]
fn real_logs_are_labelled_by_their_file_names() {
    let dir = root().join("tests/data/together-h100");
    // Unlabelled: an error, never NCCL's default.
    let e = format!("{:#}", strict(std::slice::from_ref(&dir), &[]).unwrap_err());
    assert!(e.contains("knobs unknown"), "{e}");
    let out = dyncc()
        .arg("inspect")
        .arg("--json")
        .arg(&dir)
        .args(["--name-pattern", "*__{coll}_{algo}.out"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["unresolved_records"], 0, "{v}");
    assert_eq!(v["algorithms"]["ring"], v["algorithms"]["nvls"]);
    assert!(v["algorithms"]["ring"].as_u64().unwrap() > 0);
    assert_eq!(v["protocols"]["default"], v["records"]);
    assert_eq!(v["nccl_versions"], serde_json::json!(["2.26.2"]));
    let knobs: Vec<&str> = v["per_file"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["knobs"].as_str())
        .collect();
    assert!(
        knobs
            .iter()
            .any(|k| k.starts_with("NCCL_ALGO=nvls (--name-pattern '*__{coll}_{algo}.out')")),
        "{knobs:?}"
    );
    // The same labels from a manifest.
    let d = tempfile::tempdir().unwrap();
    let m = write(
        d.path(),
        "m.csv",
        "path,NCCL_ALGO\n*_ring.out,Ring\n*_nvls.out,NVLS\n",
    );
    let ds = ingest::read_paths(
        std::slice::from_ref(&dir),
        &IngestOptions {
            manifest: Some(std::sync::Arc::new(
                ingest::labels::Manifest::load(&m).unwrap(),
            )),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(ds
        .records
        .iter()
        .any(|r| r.run.config.algo == Some(Algo::Nvls)));
    assert!(ds
        .records
        .iter()
        .any(|r| r.run.config.algo == Some(Algo::Ring)));
    assert!(ds.reports.iter().all(|r| r.knobs.contains("manifest")));
}

/// Three rows of NVIDIA's raw `data/<nodes>.csv` layout (seven columns).
const RAW_ROWS: &str = "10.1,10.2,10.3,11.1,11.2,11.3,12.0\n\
                        10.4,10.5,10.6,11.4,11.5,11.6,12.1\n\
                        10.7,10.8,10.9,11.7,11.8,11.9,12.2\n";

fn read_with(
    args: dyncc::ingest::args::IngestArgs,
    paths: &[PathBuf],
) -> anyhow::Result<ingest::Dataset> {
    ingest::read_paths(paths, &args.options(false, false)?)
}

/// NVIDIA's raw `data/<n>.csv` took its facts (GPUs per node, platform)
/// only from `--assume`: a manifest row, a name pattern or a `# dyncc:`
/// line labelling the file was ignored (the file was refused as "ranks
/// unknown", or, with a `# dyncc:` line first, not read at all).
#[test]
fn nvidia_raw_csv_honours_manifest_name_pattern_and_dyncc_line() {
    let d = tempfile::tempdir().unwrap();
    // Manifest.
    let f = write(d.path(), "m/4.csv", RAW_ROWS);
    let m = write(
        d.path(),
        "m/labels.csv",
        "path,gpus_per_node,platform\n4.csv,8,DGX-1V\n",
    );
    let ds = read_with(
        dyncc::ingest::args::IngestArgs {
            manifest: Some(m),
            ..Default::default()
        },
        std::slice::from_ref(&f),
    )
    .unwrap();
    assert_eq!(ds.records.len(), 21);
    let r = &ds.records[0];
    assert_eq!(
        (r.run.nnodes, r.run.nranks, r.run.platform.as_deref()),
        (4, 32, Some("DGX-1V"))
    );
    // Name pattern.
    let f = write(d.path(), "p/r16/2.csv", RAW_ROWS);
    let ds = read_with(
        dyncc::ingest::args::IngestArgs {
            name_pattern: vec!["r{ranks}/{nodes}.csv".into()],
            ..Default::default()
        },
        &[f],
    )
    .unwrap();
    assert_eq!(ds.records.len(), 21);
    assert_eq!(
        (ds.records[0].run.nnodes, ds.records[0].run.nranks),
        (2, 16)
    );
    // A `# dyncc:` line.
    let f = write(
        d.path(),
        "h/2.csv",
        &format!("# dyncc: gpus_per_node=16 nccl_version=2.23.4\n{RAW_ROWS}"),
    );
    let ds = strict(std::slice::from_ref(&f), &[]).unwrap();
    assert_eq!(ds.records.len(), 21);
    let r = &ds.records[0];
    assert_eq!(
        (r.run.nnodes, r.run.nranks, r.run.nccl_version),
        (2, 32, Some(22304))
    );
    assert_eq!(r.measurement.source.line, 2);
    // The knobs are the columns': a label naming one is refused, not
    // silently overridden.
    let f = write(
        d.path(),
        "k/2.csv",
        &format!("# dyncc: NCCL_ALGO=Ring gpus_per_node=8\n{RAW_ROWS}"),
    );
    let e = format!("{:#}", strict(&[f], &[]).unwrap_err());
    assert!(e.contains("2.csv:0") && e.contains("one column per"), "{e}");
}

/// The text reader ignored a manifest's (or name pattern's) collective, and
/// the JSON reader let a collective guessed from the file name beat it:
/// every reader now labels a run in one place, where what the user states
/// beats what is inferred.
#[test]
fn a_stated_collective_beats_the_one_guessed_from_the_file_name() {
    let d = tempfile::tempdir().unwrap();
    // A log whose name says allgather but has no `Collective test starting`
    // or launcher line: the manifest says what it is.
    let log = write(d.path(), "all_gather_run.log", &run(&[], 10.0));
    let mut json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            root().join("tests/data/nccl-tests-2.18_all_reduce_ring_ll128_2x8xh100.json"),
        )
        .unwrap(),
    )
    .unwrap();
    json["args"] = serde_json::json!(["./build/runner"]);
    let js = write(d.path(), "all_gather_run.json", &json.to_string());
    let m = write(
        d.path(),
        "labels.csv",
        "path,coll\nall_gather_run.log,allreduce\nall_gather_run.json,allreduce\n",
    );
    for f in [log, js] {
        let ds = read_with(
            dyncc::ingest::args::IngestArgs {
                manifest: Some(m.clone()),
                assume: vec!["default".into()],
                ..Default::default()
            },
            std::slice::from_ref(&f),
        )
        .unwrap();
        assert!(!ds.records.is_empty(), "{}", f.display());
        assert!(
            ds.records
                .iter()
                .all(|r| r.run.collective == dyncc::record::Collective::AllReduce),
            "{}: {:?}",
            f.display(),
            ds.records[0].run.collective
        );
    }
}

/// Whether a run registered its buffers (`regBuff`, a table gate) was
/// never read: nccl-tests `-R 1` in the JSON `args` and a `regBuff=1`
/// label now set the run's state, which keeps it apart from unregistered
/// runs of the same cell.
#[test]
fn registered_buffers_are_read_from_nccl_tests_args_and_labels() {
    let d = tempfile::tempdir().unwrap();
    let mut json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            root().join("tests/data/nccl-tests-2.18_all_reduce_ring_ll128_2x8xh100.json"),
        )
        .unwrap(),
    )
    .unwrap();
    json["args"] = serde_json::json!(["./build/all_reduce_perf", "-b", "8", "-R", "1"]);
    let js = write(d.path(), "registered.json", &json.to_string());
    let log = write(
        d.path(),
        "all_reduce_registered.log",
        &format!("# dyncc: regBuff=1 default\n{}", run(&[], 10.0)),
    );
    // A launcher command line echoed into the log (`set -x`).
    let launched = format!(
        "+ srun -N 1 ./build/all_reduce_perf -b 8 -e 8K -R 1\n{}",
        run(&[], 10.0)
    );
    let launch = write(d.path(), "launched.log", &launched);
    for f in [js, log, launch] {
        let ds = strict(std::slice::from_ref(&f), &["default"]).unwrap();
        assert!(!ds.records.is_empty(), "{}", f.display());
        assert!(
            ds.records.iter().all(|r| r.run.state.reg_buff),
            "{}",
            f.display()
        );
        assert_ne!(ds.records[0].key().state, dyncc::record::State::BASELINE);
    }
    // What the user states beats what the launcher line implies.
    let relabelled = write(
        d.path(),
        "relabelled.log",
        &format!("# dyncc: regBuff=0\n{launched}"),
    );
    let ds = strict(&[relabelled], &["default"]).unwrap();
    assert!(ds.records.iter().all(|r| !r.run.state.reg_buff));
}

/// `dyncc query --data` had its own `--assume` and nothing else: a sweep
/// labelled by a manifest (or a name pattern, or mixing setups) could not
/// be read as evidence the way `compile` read it.
#[test]
fn query_data_reads_with_the_shared_ingest_labels() {
    let d = tempfile::tempdir().unwrap();
    let s = flat_sweep(d.path());
    let m = write(
        d.path(),
        "manifest.csv",
        "path,NCCL_ALGO,NCCL_PROTO,nodes,ranks\n\
         allreduce_n1_ring_ll.*.log,Ring,LL,1,2\n\
         allreduce_n1_default_default.*.log,default,default,1,2\n",
    );
    let table = d.path().join("t.dyncc");
    let o = dyncc()
        .arg("compile")
        .arg(&s)
        .arg("--manifest")
        .arg(&m)
        .arg("-o")
        .arg(&table)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let query = |extra: &[&str]| {
        dyncc()
            .arg("query")
            .arg(&table)
            .args([
                "--coll",
                "allreduce",
                "--bytes",
                "64",
                "--nodes",
                "1",
                "--ranks",
                "2",
            ])
            .arg("--data")
            .arg(&s)
            .args(extra)
            .output()
            .unwrap()
    };
    let pattern = "{coll}_n{nodes}_{algo}_{proto}.r{repeat}.log";
    for extra in [
        vec!["--manifest", m.to_str().unwrap()],
        vec!["--name-pattern", pattern],
    ] {
        let o = query(&extra);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(0), "{extra:?}: {t}");
        assert!(
            t.contains("evidence: measurements at 1 node"),
            "{extra:?}: {t}"
        );
        assert!(t.contains("ring/ll"), "{extra:?}: {t}");
    }
    // --setup is the shared one too: a setup the data does not hold is an
    // error listing the ones it does.
    let o = query(&["--manifest", m.to_str().unwrap(), "--setup", "nccl=2.23.4"]);
    assert_ne!(o.status.code(), Some(0));
    assert!(
        text(&o).contains("--setup matches no records"),
        "{}",
        text(&o)
    );
}

/// `dyncc inspect --setup` read every setup: its counts and cells were
/// not those of the sweep `compile --setup` would compile.
#[test]
fn inspect_keeps_only_the_setup_asked_for() {
    let d = tempfile::tempdir().unwrap();
    let s = d.path().join("s");
    let gdr = |v: &str, t: f64| {
        run(
            &[
                "NCCL version 2.21.5+cuda12.2",
                &format!("NCCL_NET_GDR_LEVEL set by environment to {v}"),
            ],
            t,
        )
    };
    write(&s, "on/all_reduce.log", &gdr("PHB", 10.0));
    write(&s, "off/all_reduce.log", &gdr("LOC", 12.0));
    let inspect = |extra: &[&str]| -> serde_json::Value {
        let o = dyncc()
            .arg("inspect")
            .arg(&s)
            .args(["--assume", "default", "--json"])
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let all = inspect(&[]);
    assert_eq!(all["setups"].as_object().unwrap().len(), 2, "{all}");
    let one = inspect(&["--setup", "NCCL_NET_GDR_LEVEL=PHB"]);
    let setups = one["setups"].as_object().unwrap();
    assert_eq!(setups.len(), 1, "{one}");
    assert!(setups.keys().all(|k| k.contains("PHB")), "{one}");
    assert_eq!(
        one["records"].as_u64().unwrap() * 2,
        all["records"].as_u64().unwrap(),
        "{one}"
    );
}
