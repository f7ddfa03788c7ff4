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
use super::text::collective_from_name;
use super::{FileCtx, FileOutput, Format, UNRESOLVED};
use crate::record::{flags, Collective, Record};

pub(crate) fn read<R: BufRead>(ctx: &mut FileCtx, rd: R) -> anyhow::Result<FileOutput> {
    let assume = Assumptions::from_pairs(&ctx.opts.assume).map_err(|e| anyhow::anyhow!(e))?;
    let mut out = FileOutput::empty(Format::NcclTestsJson);
    let bytes = super::read_all(rd)?;
    out.bytes = bytes.len() as u64;
    let v: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
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
            if k.starts_with("NCCL_") && !env.set(k, val) && super::text::is_setup_var(k) {
                // Words of the setup key are space-separated.
                setup_env.push(format!(
                    "{k}={}",
                    val.split_whitespace().collect::<Vec<_>>().join("_")
                ));
            }
        }
    }
    setup_env.sort();
    let run_env: Option<Arc<str>> = env.complete.then(|| setup_env.join(" ").into());
    let path_src = knobs::from_path(&ctx.path);
    let file_labels = ctx.labels.clone();
    let labels = file_labels.sets();
    let mut sources: Vec<&KnobSource> = vec![&env];
    sources.extend(labels.iter().map(|a| &a.knobs));
    sources.push(&path_src);
    sources.push(&assume.knobs);
    let mut facts: Vec<&Assumptions> = labels.clone();
    facts.push(&assume);
    // Collective from argv[0], else the file name, else --assume.
    let argv_coll = top
        .get("args")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .and_then(|s| Collective::parse(knobs::strip_binary_suffix(s)));
    let name_coll = ctx
        .path
        .file_name()
        .and_then(|n| collective_from_name(&n.to_string_lossy()));
    let coll = argv_coll
        .or(name_coll)
        .or_else(|| facts.iter().find_map(|a| a.coll));
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
    let (mut nranks, mut nnodes) = (None, None);
    if !devices.is_empty() {
        nranks = Some(devices.len() as u32);
        nnodes = Some(hosts.len().max(1) as u32);
    }
    nranks = nranks.or_else(|| facts.iter().find_map(|a| a.ranks));
    nnodes = nnodes.or_else(|| facts.iter().find_map(|a| a.nodes));
    let gpu: Option<Arc<str>> = devices
        .first()
        .and_then(|d| d.get("device_info").or_else(|| d.get("name")))
        .and_then(Value::as_str)
        .map(|s| s.trim().into())
        .or_else(|| facts.iter().find_map(|a| a.gpu.clone()));
    let nccl_version = top
        .get("nccl_version")
        .and_then(Value::as_u64)
        .map(|v| v as u32)
        .or_else(|| facts.iter().find_map(|a| a.nccl_version));
    let mut problems = Vec::new();
    if let Some(e) = &ctx.labels.pattern_error {
        problems.push(e.clone());
    }
    if coll.is_none() {
        problems.push("collective unknown: `args` does not name a *_perf binary and the file name has no collective; pass --assume coll=allreduce (or the right one)".to_string());
    }
    if nranks.is_none() || nnodes.is_none() {
        problems
            .push("ranks/nodes unknown: no config.devices; pass --assume ranks=N nodes=M".into());
    }
    let knob = match coll.map(|c| knobs::resolve(&sources, c)) {
        Some(Ok(k)) => Some(k),
        Some(Err(e)) => {
            problems.push(e);
            None
        }
        None => None,
    };
    out.report.rows = results.len();
    let mut flags0 = 0;
    if !problems.is_empty() {
        let msg = problems.join("; ");
        out.report.resolved = false;
        out.report.knobs = msg.clone();
        if !ctx.unresolved(0, &msg)? || coll.is_none() {
            return Ok(out);
        }
        flags0 = UNRESOLVED;
    }
    let coll = coll.unwrap_or(Collective::AllReduce);
    if let Some(k) = &knob {
        out.report.knobs = k.how.clone();
    }
    let (algo, proto, channels) = knob
        .as_ref()
        .map(|k| (k.algo, k.proto, k.channels))
        .unwrap_or((None, None, None));
    let platform = facts.iter().find_map(|a| a.platform.clone());
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
            let mut f = flags0;
            if wrong {
                f |= flags::WRONG_DATA;
                ctx.anomaly(
                    line,
                    "wrong-data",
                    format!("results[{i}].{key}: nwrong > 0"),
                );
            }
            out.records.push(Record {
                collective: coll,
                nbytes: size,
                nranks: nranks.unwrap_or(0),
                nnodes: nnodes.unwrap_or(0),
                gpu: gpu.clone(),
                nccl_version,
                platform: platform.clone(),
                algo,
                proto,
                channels,
                time_us: time,
                in_place: h == 1,
                dtype: dtype.clone(),
                pipe_ops: 1,
                reg_buff: false,
                source: ctx.source(line),
                flags: f,
                env: run_env.clone(),
            });
        }
    }
    Ok(out)
}
