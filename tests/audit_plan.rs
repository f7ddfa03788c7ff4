//! The exploration plan (format 1.1 PLAN) through the audit commands:
//! `verify` counts it, `explain` sums it up per context, `query` shows the
//! cell serving a call with each candidate's chance of being tried, all
//! on the golden 1.1 table (tables/golden/README.md); a 1.0 table says it
//! has no plan.

use std::path::PathBuf;
use std::process::Output;

use crate::support::cli::{dyncc_output, root};

fn golden(name: &str) -> String {
    let p: PathBuf = root().join("tables/golden").join(name);
    p.to_str().unwrap().to_string()
}

/// The 1.1 table: allreduce 2-16 nodes x 8 with plan cells at nodes 2
/// (64 KiB .. <16 MiB: NCCL's choice cost 0.25, tree/ll128 cost 0.125;
/// 16 MiB .. <1 GiB: ring/simple, tree/simple) and 8 (64 KiB .. <16 MiB:
/// NCCL's choice cost 0.125, ring/ll cost 0.5); allgather without plan.
fn with_plan() -> String {
    golden("allreduce_plan_v1.1.tbl")
}

fn without_plan() -> String {
    golden("allreduce_2x8_v1.0.tbl")
}

fn ok(args: &[&str]) -> String {
    let o: Output = dyncc_output(args);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert!(o.status.success(), "dyncc {args:?} failed: {err}\n{out}");
    out
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn close(v: &serde_json::Value, want: f64) -> bool {
    v.as_f64().is_some_and(|x| (x - want).abs() < 1e-9)
}

#[test]
fn verify_counts_the_plan_per_collective() {
    let t = with_plan();
    let out = ok(&["verify", &t]);
    assert!(out.contains("format      1.1"), "{out}");
    assert!(out.contains("plan        3 cells, 6 candidates"), "{out}");
    assert!(
        out.contains("nodes 2-16, ranks/node 8, plan 3 cells, 6 candidates"),
        "{out}"
    );
    let j = json(&["verify", &t, "--json"]);
    assert_eq!(
        (&j["has_plan"], &j["plan_cells"], &j["plan_candidates"]),
        (&true.into(), &3.into(), &6.into())
    );
    assert_eq!(j["collectives"]["allreduce"]["plan_cells"], 3);
    assert_eq!(j["collectives"]["allreduce"]["plan_candidates"], 6);
    assert_eq!(j["collectives"]["allgather"]["plan_cells"], 0);

    let t = without_plan();
    let out = ok(&["verify", &t]);
    assert!(out.contains("plan        none"), "{out}");
    assert!(!out.contains("plan 0 cells"), "{out}");
    let j = json(&["verify", &t, "--json"]);
    assert_eq!(
        (&j["has_plan"], &j["plan_cells"], &j["plan_candidates"]),
        (&false.into(), &0.into(), &0.into())
    );
    assert_eq!(j["collectives"]["allreduce"]["plan_cells"], 0);
}

fn query(table: &str, bytes: &str, nodes: u32, extra: &[&str]) -> Vec<String> {
    let (n, r) = (nodes.to_string(), (nodes * 8).to_string());
    let mut args = vec![
        "query",
        table,
        "--coll",
        "allreduce",
        "--bytes",
        bytes,
        "--nodes",
        &n,
        "--ranks",
        &r,
    ];
    args.extend_from_slice(extra);
    let mut v: Vec<String> = vec![ok(&args)];
    args.push("--json");
    v.push(ok(&args));
    v
}

/// 4 MiB on 3 nodes: the nodes-2 cell over the forced ring/ll128 rule.
/// At F = 0.02 NCCL's choice is picked by 2/3 and drawn with 0.02 / 0.25,
/// tree/ll128 by 1/3 with 0.02 / 0.125: 5.3 % each; at F = 0.1, 26.7 %.
#[test]
fn query_shows_the_cell_serving_the_call_and_each_candidates_chance() {
    let t = with_plan();
    let [text, js] = <[String; 2]>::try_from(query(&t, "4MiB", 3, &[])).unwrap();
    assert!(
        text.contains(
            "explore at share 0.02: plan cell of context #0 (nodes 2-7, 64 KiB .. <16 MiB)"
        ),
        "{text}"
    );
    let line = |setting: &str| -> String {
        text.lines()
            .find(|l| l.contains(setting) && l.contains("of communicators"))
            .unwrap_or_else(|| panic!("no line for {setting}: {text}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        line("NCCL's choice"),
        "0 NCCL's choice -6.2 % ±12.5 % 25.0 % 66.7 % 5.3 % of communicators"
    );
    assert_eq!(
        line("tree/ll128"),
        "1 tree/ll128 +3.1 % ±6.2 % 12.5 % 33.3 % 5.3 % of communicators"
    );
    assert!(
        text.contains("explores this call with chance 10.7 %; expected extra time 2.0 %"),
        "{text}"
    );
    let j: serde_json::Value = serde_json::from_str(&js).unwrap();
    let e = &j["explore"];
    assert!(
        close(&e["share"], 0.02) && e["table_has_plan"] == true,
        "{e}"
    );
    assert_eq!(e["cell"]["nodes"], serde_json::json!([2, 7]));
    assert_eq!(e["cell"]["from_bytes"], 64 * 1024);
    assert_eq!(e["cell"]["to_bytes"], 16 * 1024 * 1024 - 1);
    let c = &e["candidates"];
    assert_eq!(c.as_array().unwrap().len(), 2);
    assert_eq!(
        (&c[0]["rank"], &c[0]["setting"]),
        (&0.into(), &"NCCL's choice".into())
    );
    assert_eq!(
        (&c[1]["algorithm"], &c[1]["protocol"]),
        (&"tree".into(), &"ll128".into())
    );
    assert!(close(&c[0]["gain"], -0.0625) && close(&c[0]["spread"], 0.125));
    assert!(close(&c[0]["cost_bound"], 0.25) && close(&c[1]["cost_bound"], 0.125));
    assert!(close(&c[0]["pick"], 2.0 / 3.0) && close(&c[1]["pick"], 1.0 / 3.0));
    assert!(close(&c[0]["draw"], 0.08) && close(&c[1]["draw"], 0.16));
    assert!(close(&c[0]["chance"], 2.0 / 3.0 * 0.08) && c[0]["never"].is_null());
    assert!(close(&e["expected_cost"], 0.02), "{e}");

    // --explore F: the chances at another share.
    let [text, js] = <[String; 2]>::try_from(query(&t, "4MiB", 3, &["--explore", "0.1"])).unwrap();
    assert!(text.contains("explore at share 0.1:"), "{text}");
    let j: serde_json::Value = serde_json::from_str(&js).unwrap();
    let c = &j["explore"]["candidates"];
    assert!(close(&c[0]["chance"], 2.0 / 3.0 * 0.4) && close(&c[1]["chance"], 1.0 / 3.0 * 0.5));

    // 1 MiB on 12 nodes: the nodes-8 cell serves 8-16.
    let [text, _] = <[String; 2]>::try_from(query(&t, "1MiB", 12, &[])).unwrap();
    assert!(text.contains("(nodes 8-16, 64 KiB .. <16 MiB)"), "{text}");
    assert!(text.contains("ring/ll "), "{text}");
    // 64 MiB on 2 nodes: the default rule's run, ring/simple then tree/simple.
    let [text, _] = <[String; 2]>::try_from(query(&t, "64MiB", 2, &[])).unwrap();
    assert!(
        text.contains("(nodes 2-7, 16 MiB .. <1 GiB)") && text.contains("tree/simple"),
        "{text}"
    );
}

#[test]
fn query_says_plainly_where_no_plan_cell_serves_the_call() {
    let t = with_plan();
    for (bytes, nodes) in [("64MiB", 8), ("32KiB", 2), ("2GiB", 2)] {
        let [text, js] = <[String; 2]>::try_from(query(&t, bytes, nodes, &[])).unwrap();
        assert!(
            text.contains("explore: the plan has no cell for this call (context #0"),
            "{bytes} on {nodes} nodes: {text}"
        );
        let j: serde_json::Value = serde_json::from_str(&js).unwrap();
        assert!(j["explore"]["cell"].is_null() && j["explore"]["table_has_plan"] == true);
        assert_eq!(j["explore"]["candidates"], serde_json::json!([]));
    }
    // No context covers 1 node.
    let [text, _] = <[String; 2]>::try_from(query(&t, "4MiB", 1, &[])).unwrap();
    assert!(
        text.contains("no allreduce context covers the communicator"),
        "{text}"
    );
    // A table without a plan: the plugin derives candidates.
    let [text, js] = <[String; 2]>::try_from(query(&without_plan(), "4MiB", 2, &[])).unwrap();
    assert!(
        text.contains("explore: this table has no exploration plan (format 1.0)")
            && text.contains("neighbouring contexts (runtime/README.md"),
        "{text}"
    );
    let j: serde_json::Value = serde_json::from_str(&js).unwrap();
    assert_eq!(j["explore"]["table_has_plan"], false);
    // A share the plugin would refuse is refused.
    let o = dyncc_output(&[
        "query",
        &t,
        "--coll",
        "allreduce",
        "--bytes",
        "4MiB",
        "--nodes",
        "3",
        "--ranks",
        "24",
        "--explore",
        "0.5",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--explore 0.5"));
}

#[test]
fn query_batch_lines_carry_the_plan() {
    let d = tempfile::tempdir().unwrap();
    let calls = d.path().join("calls.csv");
    std::fs::write(&calls, "allreduce,4MiB,3,24\nallreduce,4MiB,1,8\n").unwrap();
    let out = ok(&[
        "query",
        &with_plan(),
        "--batch",
        calls.to_str().unwrap(),
        "--explore",
        "0.05",
    ]);
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert!(close(&lines[0]["explore"]["share"], 0.05));
    assert_eq!(
        lines[0]["explore"]["candidates"].as_array().unwrap().len(),
        2
    );
    assert!(lines[1]["explore"]["cell"].is_null());
}

#[test]
fn explain_sums_up_the_plan_per_context() {
    let t = with_plan();
    let out = ok(&["explain", &t]);
    assert!(
        out.contains(
            "#0 allreduce  nodes 2-16  ranks/node 8: 3 cells, 6 candidates at nodes 2-7, 8-16 over 64 KiB .. <1 GiB"
        ),
        "{out}"
    );
    // The cells themselves only with --contexts.
    assert!(!out.contains("ring/simple (+6.2 %)"), "{out}");
    let out = ok(&["explain", &t, "--contexts"]);
    let cells: Vec<String> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("nodes "))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        cells,
        [
            "nodes 2-7 64 KiB .. <16 MiB NCCL's choice (-6.2 %), tree/ll128 (+3.1 %)",
            "nodes 2-7 16 MiB .. <1 GiB ring/simple (+6.2 %), tree/simple (+1.6 %)",
            "nodes 8-16 64 KiB .. <16 MiB NCCL's choice (+0.0 %), ring/ll (-3.1 %)",
        ]
    );
    // A collective without a plan.
    let out = ok(&["explain", &t, "--coll", "allgather"]);
    assert!(out.contains("none for these collectives"), "{out}");
    let j = json(&["explain", &t, "--json"]);
    let p = &j["plan"][0];
    assert_eq!(
        (&p["context"], &p["cells"], &p["candidates"]),
        (&0.into(), &3.into(), &6.into())
    );
    assert_eq!(p["nodes"], serde_json::json!(["2-7", "8-16"]));
    assert_eq!(p["plan"][2]["nodes"], serde_json::json!([8, 16]));
    assert_eq!(p["plan"][2]["candidates"][1]["setting"], "ring/ll");
    assert_eq!(j["plan"].as_array().unwrap().len(), 1);

    let t = without_plan();
    let out = ok(&["explain", &t]);
    assert!(out.contains("exploration plan: none"), "{out}");
    assert!(json(&["explain", &t, "--json"])["plan"].is_null());
}

/// `dyncc compile` writes a plan from the shipped sweep and says how big
/// it is, in words and in `--json`, the same counts `verify` reads back.
#[test]
fn compile_says_what_plan_it_wrote() {
    let d = tempfile::tempdir().unwrap();
    let t = d.path().join("dgx1v.tbl");
    let t = t.to_str().unwrap();
    let sweep = root().join("datasets/real/nvidia-dgx1v-allreduce.csv");
    let sweep = sweep.to_str().unwrap();
    let o = dyncc_output(&["compile", sweep, "-o", t]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let v = json(&["verify", t, "--json"]);
    let (cells, cands) = (&v["plan_cells"], &v["plan_candidates"]);
    assert!(cells.as_u64().unwrap() > 0, "{v}");
    let line = format!("exploration plan: {cells} cells, {cands} candidates");
    assert!(said.contains(&line), "{said}");
    let r = json(&["compile", sweep, "-o", t, "--json"]);
    assert_eq!(
        (&r["table"]["plan_cells"], &r["table"]["plan_candidates"]),
        (cells, cands)
    );
}
