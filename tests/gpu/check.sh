#!/usr/bin/env bash
# The check on a real GPU and a real NCCL (issue 27, item 10; README "On a GPU").
#
#   make gpu-bundle                      # here: the wheel `pip install .` builds, into .gpu/
#   tests/gpu/check.sh .gpu "$OUT"       # there: one GPU, PyTorch with its NCCL
#
# What it does, in order, each step logged under OUT (one archive, gpu-check.tgz,
# and summary.txt, which repeats what matters):
#  1. installs the wheel as a user would (`pip install`) and puts `dyncc plugin-path` on LD_LIBRARY_PATH;
#  2. sweeps all_reduce at 128 KiB-64 MiB under NCCL's default and Ring/Tree x
#     LL/LL128/Simple at 2 and 4 "nodes" (one process per rank on the one GPU, each
#     with its own NCCL_HOSTID: NCCL refuses two ranks of one host on one device, so
#     every rank is a node and the ranks talk over sockets on loopback), writing
#     dyncc's CSV; compiles it; the table then decides 3 nodes from 2 and 4, so the
#     plan explores there; compares, per size, NCCL's own pick (its TUNING line)
#     with the same algorithm and protocol forced (picks.py);
#  3. runs a loop of steps (one all_reduce per size) at 3 nodes: without the plugin;
#     with both halves (NCCL_TUNER_PLUGIN=dyncc NCCL_PROFILER_PLUGIN=dyncc),
#     DYNCC_TRACE and DYNCC_EXPLORE=0.1 (its most, so a few jobs explore); with the
#     tuner alone; with both halves and
#     DYNCC_TRACE, no exploring (steps 2-5 record every call, the late ones run
#     after the plugin lowered the event mask); NCCL's INFO log says what it loaded;
#  4. `dyncc inspect` reads the traces (who chose), `dyncc compile` learns from them.
#
# Ranks sharing one GPU run time-sliced, so the step times say what the plugin
# costs relative to the same setup without it, not what a cluster would see.
# A rank that hangs (ranks that disagree deadlock) is stopped by a timeout,
# which the summary reports. DYNCC_GPU_CHECK_BACKEND=gloo runs the same steps
# on CPUs (no NCCL, so no plugin); that checks the script, nothing more.
set -uo pipefail

bundle=${1:?usage: tests/gpu/check.sh BUNDLE_DIR OUT_DIR (make gpu-bundle writes BUNDLE_DIR=.gpu)}
out=${2:?usage: tests/gpu/check.sh BUNDLE_DIR OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/dyncc-gpu-check.XXXXXX)
summary="$out/summary.txt"
mkdir -p "$out"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
timeout_s=${RANK_TIMEOUT:-150}
# Launches stop starting past this many seconds, so what ran comes back inside a
# device call's 10 minutes (the summary names what was skipped).
deadline=${DEADLINE:-420}

# 1. The wheel, installed as a user installs it (pip; --prefix keeps it beside, not
#    inside, the Python that holds PyTorch, which may be a read-only environment).
python3 -m pip install -q --no-index --no-deps --prefix "$work/prefix" "$bundle"/dyncc-*.whl >"$work/pip.log" 2>&1 \
  || { say "FAIL: pip install $(ls "$bundle")"; cat "$work/pip.log" >>"$summary"; exit 1; }
dyncc="$work/prefix/bin/dyncc"
py=python3
plugin_dir=$("$dyncc" plugin-path) || { say "FAIL: dyncc plugin-path"; exit 1; }
export LD_LIBRARY_PATH="$plugin_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
say "dyncc: $("$dyncc" --version); plugin: $plugin_dir"
say "torch, NCCL: $("$py" -c 'import torch; print(torch.__version__, torch.cuda.nccl.version() if torch.cuda.is_available() else "(no CUDA)")' 2>&1)"
command -v nvidia-smi >/dev/null && say "GPU: $(nvidia-smi -L 2>&1 | head -1)"

# launch NAME N MODE FILE [VAR=VALUE...]: N ranks of collectives.py, each its own node.
launch() {
  local name=$1 n=$2 mode=$3 file=$4
  shift 4
  local port=$((20000 + RANDOM % 20000)) pids=() r rc=0 t0=$SECONDS
  if ((SECONDS > deadline)); then
    say "SKIPPED $name: past the ${deadline} s deadline"
    return 1
  fi
  for ((r = 0; r < n; r++)); do
    env RANK=$r WORLD_SIZE="$n" LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      NCCL_HOSTID="dyncc-check-node$r" NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 \
      NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING,PROFILE "$@" \
      timeout "$timeout_s" "$py" "$here/collectives.py" "$mode" "$file" >"$work/$name.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do
    wait "${pids[$r]}" || rc=$?
  done
  local took=$((SECONDS - t0))
  if [ "$rc" = 124 ]; then
    say "HANG? $name: a rank ran past ${timeout_s} s (timeout), ${took} s"
  elif [ "$rc" != 0 ]; then
    say "FAIL: $name exited $rc after ${took} s; tail of rank 0's log:"
    tail -5 "$work/$name.rank0.log" | tee -a "$summary"
  else
    say "$name: ${took} s"
  fi
  return "$rc"
}

# 2. The sweep, at 2 and 4 nodes; the table.
cols=collective,size_bytes,algorithm,protocol,channels,nodes,ranks,pipeOps,regBuff,cost_metric,bandwidth_gbps,latency_us,platform
echo "$cols" >"$work/sweep.csv"
for n in 2 4; do
  launch "sweep-$n" "$n" sweep "$work/sweep.csv"
  grep -h "^sweep" "$work/sweep-$n.rank0.log" | tee -a "$summary"
  say "  NCCL said it took NCCL_ALGO from the environment $(grep -c 'NCCL_ALGO set by environment' "$work/sweep-$n.rank0.log") times, NCCL_PROTO $(grep -c 'NCCL_PROTO set by environment' "$work/sweep-$n.rank0.log") times (6 settings force both)"
done
# Does NCCL's own pick run as fast as the same setting forced? (picks.py says why it matters.)
for n in 2 4; do
  "$py" "$here/picks.py" "$work/sweep.csv" "$n" "$work/sweep-$n.rank0.log" 2>&1 | tee -a "$summary"
done
"$dyncc" compile "$work/sweep.csv" -o "$work/sweep.tbl" >"$work/compile.log" 2>&1 \
  || { say "FAIL: dyncc compile of the sweep"; tail -20 "$work/compile.log" | tee -a "$summary"; }
tail -15 "$work/compile.log" >>"$summary"
"$dyncc" query "$work/sweep.tbl" --coll allreduce --bytes 4MiB --nodes 3 --ranks 3 --explore 0.1 >"$work/query.log" 2>&1
cat "$work/query.log" >>"$summary"

# 3. The loop of steps at 3 nodes.
# DYNCC_TRACE names an existing, writable directory (README, "Learning from your jobs").
mkdir -p "$work/traces/explore" "$work/traces/trace"
both=(NCCL_TUNER_PLUGIN=dyncc NCCL_PROFILER_PLUGIN=dyncc DYNCC_TABLE="$work/sweep.tbl")
launch steps-off 3 steps "$work/steps-off.json"
launch steps-explore 3 steps "$work/steps-explore.json" "${both[@]}" DYNCC_TRACE="$work/traces/explore" DYNCC_EXPLORE=0.1
launch steps-tuner 3 steps "$work/steps-tuner.json" NCCL_TUNER_PLUGIN=dyncc DYNCC_TABLE="$work/sweep.tbl"
launch steps-trace 3 steps "$work/steps-trace.json" "${both[@]}" DYNCC_TRACE="$work/traces/trace"
say "NCCL's lines on plugins (rank 0 of steps-explore):"
grep -hiE "tuner|profiler|plugin|dyncc" "$work/steps-explore.rank0.log" | head -20 | tee -a "$summary"
"$py" - "$work" <<'PY' | tee -a "$summary"
import json, sys, statistics
w = sys.argv[1]
def load(n):
    try:
        return json.load(open(f"{w}/steps-{n}.json"))["step_seconds"]
    except OSError:
        return None
for name in ("off", "explore", "tuner", "trace"):
    t = load(name)
    if not t:
        print(f"steps-{name}: no result"); continue
    # Steps 2-5 record every call (the plugin lowers the mask once each shape has
    # 5 calls per side); the last quarter runs lowered, but where a job explores.
    k = len(t) // 4
    early, late = statistics.median(t[1:5]), statistics.median(t[-k:])
    print(f"steps-{name}: median step {statistics.median(t) * 1e3:.2f} ms; steps 2-5 {early * 1e3:.2f} ms, last quarter {late * 1e3:.2f} ms ({len(t)} steps)")
PY

# 4. What the traces say.
for t in explore trace; do
  if [ -n "$(find "$work/traces/$t" -type f 2>/dev/null)" ]; then
    say "traces/$t: $(find "$work/traces/$t" -type f | wc -l) files"
    "$dyncc" inspect "$work/traces/$t" >"$work/inspect-$t.log" 2>&1 || say "FAIL: dyncc inspect traces/$t"
    head -40 "$work/inspect-$t.log" >>"$summary"
  else
    say "traces/$t: none written"
  fi
done
"$dyncc" compile "$work/sweep.csv" "$work/traces" -o "$work/learned.tbl" >"$work/compile-traces.log" 2>&1 \
  || say "FAIL: dyncc compile with the traces"
tail -20 "$work/compile-traces.log" >>"$summary"

tar -czf "$out/gpu-check.tgz" -C "$work" --exclude=./prefix . 2>/dev/null
say "done; logs in gpu-check.tgz"
