//! nccl-tests `-J` JSON output (JSON_FILE_VERSION 3, nccl-tests 2.17.3+):
//! `env` (every `KEY=VALUE` of the run's environment: the knobs), `args`
//! (argv: the binary names the collective), `nccl_version`,
//! `config.devices` (ranks, hosts, GPU) and `results` rows with
//! `out_of_place`/`in_place` objects (`time` or `cpu_time`, `nwrong`, which
//! is null with -c 0; `out_of_place` can be null; NaN is the string "nan").

use std::io::BufRead;
use std::sync::Arc;

use serde_json::Value;

use super::knobs::{self, Assumptions, KnobSource};
use super::run::{Labeller, Shown, ShownKnobs};
use super::{FileCtx, FileOutput, Format};
use crate::record::{flags, Collective, Measurement};

pub(crate) fn read<R: BufRead>(ctx: &mut FileCtx, rd: R) -> anyhow::Result<FileOutput> {
    // `--assume` is checked before the file is parsed.
    Assumptions::from_pairs(&ctx.opts.assume).map_err(|e| anyhow::anyhow!(e))?;
    let mut out = FileOutput::empty(Format::NcclTestsJson);
    let bytes = super::read_all(rd)?;
    out.bytes = bytes.len() as u64;
    let v: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) if e.is_eof() => {
            // A job killed while it wrote (nccl-tests writes the JSON as it
            // goes, closing it at exit): the results it finished are whole.
            let Some((v, n)) = complete_results(&bytes) else {
                ctx.bad(
                    e.line() as u32,
                    format!(
                        "not valid JSON: truncated (it ends at byte {} before any complete \
                         result: the job was killed or the file is incomplete); expected \
                         nccl-tests -J output; rerun the job",
                        bytes.len()
                    ),
                )?;
                return Ok(out);
            };
            ctx.bad(
                e.line() as u32,
                format!(
                    "not valid JSON: truncated (it ends at byte {} inside `results`: the \
                     job was killed or the file is incomplete); its {n} complete results \
                     are read under --lenient, the sizes after them are missing",
                    bytes.len()
                ),
            )?;
            v
        }
        Err(e) => {
            ctx.bad(
                e.line() as u32,
                format!("not valid JSON: {e}; expected nccl-tests -J output"),
            )?;
            return Ok(out);
        }
    };
    let Some(top) = v.as_object() else {
        ctx.bad(1, "expected a JSON object (nccl-tests -J output)")?;
        return Ok(out);
    };
    let Some(results) = top.get("results").and_then(Value::as_array) else {
        ctx.bad(1, "no `results` array; expected nccl-tests -J output")?;
        return Ok(out);
    };
    // Knobs from the recorded environment (complete: unset = NCCL's choice).
    let mut env = KnobSource::fact("JSON env");
    env.complete = top.get("env").is_some_and(Value::is_array);
    let mut setup_env: Vec<String> = Vec::new();
    for e in top
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some((k, val)) = e.as_str().and_then(|s| s.split_once('=')) {
            if k.starts_with("NCCL_")
                && !env.set(k, val)
                && super::text::is_setup_var(k)
                && !super::text::is_dyncc_tuner(k, val)
            {
                // Words of the setup key are space-separated.
                setup_env.push(format!(
                    "{k}={}",
                    val.split_whitespace().collect::<Vec<_>>().join("_")
                ));
            }
        }
    }
    setup_env.sort();
    let run_env = env.complete.then(|| setup_env.join(" ").into());
    let mut shown = Shown::new(ShownKnobs::Log(env));
    let args = top.get("args").and_then(Value::as_array);
    // How nccl-tests timed the run: its options, `config.graph`, and a
    // `cpu_time` in the results (config says only whether -z was given).
    let words: Vec<&str> = args
        .into_iter()
        .flatten()
        .skip(1)
        .filter_map(Value::as_str)
        .collect();
    let mut timing = super::timing::Timing::from_args(&words);
    let config = top.get("config");
    timing.graph |= config
        .and_then(|c| c.get("graph"))
        .and_then(Value::as_i64)
        .is_some_and(|g| g > 0);
    if timing.blocking == 0
        && config
            .and_then(|c| c.get("blocking_collectives"))
            .is_some_and(|b| b.as_bool() == Some(true) || b.as_str() == Some("true"))
    {
        timing.blocking = 1;
    }
    timing.cputime |= results.iter().any(|r| {
        ["out_of_place", "in_place"]
            .iter()
            .any(|k| r.get(*k).is_some_and(|h| h.get("cpu_time").is_some()))
    });
    shown.env = super::timing::with_timing(run_env, timing);
    // The collective from argv[0].
    shown.collective = args
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .and_then(|s| Collective::parse(knobs::strip_binary_suffix(s)));
    shown.collective_unknown = "collective unknown: `args` does not name a *_perf binary and \
                                the file name has no collective; pass --assume \
                                coll=allreduce (or the right one)";
    // Shape from the devices.
    let devices = top
        .get("config")
        .and_then(|c| c.get("devices"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut hosts: Vec<&str> = devices
        .iter()
        .filter_map(|d| d.get("hostname")?.as_str())
        .collect();
    hosts.sort_unstable();
    hosts.dedup();
    // nccl-tests writes one device record per process (its first GPU):
    // a process drives `nthreads` x `ngpus` ranks (`-t`, `-g`).
    let per_process = ["nthreads", "ngpus"]
        .iter()
        .map(|k| {
            top.get("config")
                .and_then(|c| c.get(*k))
                .and_then(Value::as_u64)
                .filter(|&n| (1..=1024).contains(&n))
                .unwrap_or(1) as u32
        })
        .product::<u32>();
    if !devices.is_empty() {
        shown.nranks = Some(devices.len() as u32 * per_process);
        shown.nnodes = Some(hosts.len().max(1) as u32);
        // NCCL_TESTS_SPLIT: the records' `group` is the communicator.
        let mut groups = super::groups::Groups::default();
        for d in &devices {
            let g = d.get("group").and_then(Value::as_u64).unwrap_or(0) as u32;
            let host = d.get("hostname").and_then(Value::as_str);
            groups.add(g, per_process, host.map(str::as_bytes));
        }
        let split = groups.split();
        if let Some(note) = split.note() {
            ctx.anomaly(1, "split-communicators", note);
        }
        match split {
            super::groups::Split::Same { ranks, nodes, .. } => {
                shown.nranks = Some(ranks);
                shown.nnodes = Some(nodes);
            }
            super::groups::Split::Mixed(why) => shown.problems.push(why),
            super::groups::Split::One => {}
        }
    }
    shown.shape_unknown =
        "ranks/nodes unknown: no config.devices; pass --assume ranks=N nodes=M".into();
    shown.gpu = devices
        .first()
        .and_then(|d| d.get("device_info").or_else(|| d.get("name")))
        .and_then(Value::as_str)
        .map(|s| s.trim().into());
    shown.nccl_version = top
        .get("nccl_version")
        .and_then(Value::as_u64)
        .map(|v| v as u32);
    shown.state.reg_buff = args.map(|a| registered(a, shown.nccl_version));
    out.report.rows = results.len();
    if let Some(note) = super::check::datatypes_pooled(
        results
            .iter()
            .filter_map(|r| r.get("type").and_then(Value::as_str)),
    ) {
        ctx.anomaly(1, "datatypes-pooled", note);
    }
    let labelled = Labeller::new(ctx, None)?.label(ctx, 0, shown)?;
    if let Some(msg) = labelled.problem {
        out.report.resolved = false;
        out.report.knobs = msg;
    }
    let Some(run) = labelled.run else {
        return Ok(out);
    };
    if let Some(how) = labelled.how {
        out.report.knobs = how;
    }
    for (i, row) in results.iter().enumerate() {
        let line = i as u32 + 1;
        let Some(size) = row.get("size").and_then(Value::as_u64) else {
            ctx.bad(
                line,
                format!("results[{i}].size: expected a whole number of bytes"),
            )?;
            continue;
        };
        if size == 0 {
            out.report.zero_size_rows += 1;
            continue;
        }
        let dtype: Option<Arc<str>> = row.get("type").and_then(Value::as_str).map(Into::into);
        for (h, key) in ["out_of_place", "in_place"].iter().enumerate() {
            let half = match row.get(*key) {
                None | Some(Value::Null) => continue,
                Some(v) => v,
            };
            let t = half.get("time").or_else(|| half.get("cpu_time"));
            let time = match t.and_then(Value::as_f64).map(super::check_time) {
                Some(Ok(t)) => t,
                Some(Err(e)) => {
                    ctx.bad(line, format!("results[{i}].{key}.time {e}"))?;
                    continue;
                }
                None => {
                    ctx.bad(
                        line,
                        format!(
                            "results[{i}].{key}.time {}: expected a positive number of microseconds",
                            t.map(|v| v.to_string()).unwrap_or_else(|| "missing".into())
                        ),
                    )?;
                    continue;
                }
            };
            let wrong = half
                .get("nwrong")
                .and_then(Value::as_f64)
                .is_some_and(|w| w != 0.0);
            let mut f = labelled.flags;
            if wrong {
                f |= flags::WRONG_DATA;
                ctx.anomaly(
                    line,
                    "wrong-data",
                    format!("results[{i}].{key}: nwrong > 0"),
                );
            }
            out.records.push(
                &run,
                Measurement {
                    nbytes: size,
                    time_us: time,
                    in_place: h == 1,
                    dtype: dtype.clone(),
                    source: ctx.source(line),
                    flags: f,
                },
            );
        }
    }
    Ok(out)
}

/// A truncated `-J` file's document with the results written whole before
/// the cut, and how many: what comes before `"results"` (args, env,
/// config) must be whole. `None` when it is not, or no result is.
fn complete_results(bytes: &[u8]) -> Option<(Value, usize)> {
    const KEY: &[u8] = b"\"results\":";
    let at = bytes.windows(KEY.len()).position(|w| w == KEY)?;
    let mut head = bytes[..at].to_vec();
    head.extend_from_slice(b"\"results\":[]}");
    let mut top: Value = serde_json::from_slice(&head).ok()?;
    let mut p = at + KEY.len();
    let skip = |p: &mut usize, what: &[u8]| {
        while *p < bytes.len() && (bytes[*p].is_ascii_whitespace() || what.contains(&bytes[*p])) {
            *p += 1;
        }
    };
    skip(&mut p, b"[");
    let mut rows = Vec::new();
    loop {
        skip(&mut p, b",");
        if p >= bytes.len() || bytes[p] == b']' {
            break;
        }
        let mut it = serde_json::Deserializer::from_slice(&bytes[p..]).into_iter::<Value>();
        match it.next() {
            Some(Ok(v)) => {
                rows.push(v);
                p += it.byte_offset();
            }
            _ => break,
        }
    }
    if rows.is_empty() {
        return None;
    }
    let n = rows.len();
    top.as_object_mut()?
        .insert("results".into(), Value::Array(rows));
    Some((top, n))
}

/// Whether nccl-tests registered its buffers, from its `args` (see
/// [`knobs::nccl_tests_registers`]; `args[0]` is the binary).
fn registered(args: &[Value], nccl_version: Option<u32>) -> bool {
    let words: Vec<&str> = args.iter().skip(1).filter_map(Value::as_str).collect();
    knobs::nccl_tests_registers(&words, nccl_version)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Value> {
        words.iter().map(|w| Value::from(*w)).collect()
    }

    #[test]
    fn a_truncated_file_keeps_its_complete_results() {
        let doc = br#"{"version":3,"args":["./all_reduce_perf"],"config":{"ngpus":1},"results":[{"size":8,"in_place":{"time":10.5}},{"size":16,"in_place":{"time":10.7}},{"size":32,"in_pl"#;
        let (v, n) = complete_results(doc).unwrap();
        assert_eq!(n, 2);
        assert_eq!(v["results"][1]["size"], 16);
        assert_eq!(v["config"]["ngpus"], 1);
        // Cut before the results: nothing to read.
        assert!(complete_results(br#"{"version":3,"args":["./all_re"#).is_none());
    }

    #[test]
    fn buffer_registration_is_read_from_the_nccl_tests_arguments() {
        let bin = "./build/all_reduce_perf";
        for (words, want) in [
            (vec![bin, "-b", "8", "-R", "1"], true),
            (vec![bin, "-R2"], true),
            (vec![bin, "--local_register", "1"], true),
            (vec![bin, "--local_register=1", "-R", "0"], false),
            (vec![bin, "-b", "8", "-e", "1G"], false),
            (vec![bin, "-R", "0"], false),
        ] {
            assert_eq!(registered(&args(&words), Some(22304)), want, "{words:?}");
        }
        // NCCL 2.18 cannot register: nccl-tests ignores -R.
        assert!(!registered(&args(&[bin, "-R", "1"]), Some(21803)));
    }
}
