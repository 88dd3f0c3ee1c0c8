#!/usr/bin/env bash
# One prepared GPU check for a short loan of a GPU machine (issue #14), run from the repository root:
#   bash benchmarks/gpu_session.sh OUT [smoke] [search] [bench] [small]   (run in the order named; none: all four)
# smoke:  gpu_smoke.py: every training path at tiny (does the GPU path run at all?)
# search: bench_search.py at small on the GPU: search scoring speed
# bench:  bench_gpu.py --compile: ours vs transformers (tokens/s, MFU), dc/sa, supernet vs fixed, compiled model
# small:  gpu_smoke.py's pretrain and compile steps at small (ELECTRA, lvbert-small, 300 steps): the training
#         tokens/s of `lvbert pretrain` eager and with --compile
# each under its own time limit (SMOKE_S=270, SEARCH_S=120, BENCH_S=330, SMALL_S=240 seconds), logs and JSON
# under OUT. A device loan allows 600 s per command and 900 s in all (machine start included), so run it as two
# commands on the warm machine: `... OUT smoke search`, then at once `... OUT bench small`. Wheels packed by
# ../shared/gpu/pack-wheels.sh into .gpu-wheels/ are installed first when present (a machine without nni/datasets).
# BUNDLE=FILE.tgz packs every log, JSON, CSV and text file under OUT (no weights, no data) into one archive: a
# loan returns at most 8 files, so `BUNDLE=$OUT/session.tgz bash benchmarks/gpu_session.sh /tmp/s ...` brings back
# all of them. ACCEL=cpu runs the same plumbing on a CPU at tiny shapes (a check of this script, not a measurement).
set -uo pipefail
OUT=${1:-runs/gpu-session}
shift || true
STEPS=" ${*:-smoke search bench small} "
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if ls .gpu-wheels/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu-wheels/*.whl \
    > "$OUT/pip.log" 2>&1 || echo "wheel install failed: $OUT/pip.log" >&2
  export PYTHONPATH=$PWD:/tmp/site
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONFAULTHANDLER=1 TOKENIZERS_PARALLELISM=false
if [ "${ACCEL:-gpu}" = cpu ]; then
  smoke=(--accelerator cpu --steps 4 --timeout 400)  # 2 cores: ELECTRA compiled whole (aot_eager) takes ~3 min
  : "${SMOKE_S:=480}"
  bench=(--device cpu --size tiny --batch 4 --seq 32 --steps 2 --compile --compile-backend aot_eager)
  search=(--size tiny --device cpu --evaluations 20 --naive-sample 4 --freeze-sample 1)
  small=(--accelerator cpu --size tiny --steps 4 --compile-backend aot_eager)
else
  smoke=(--steps 50 --timeout 200) bench=(--compile)
  search=(--size small --device cuda --evaluations 200 --naive-sample 20 --freeze-sample 2)
  small=(--size small --steps 300)
fi
status=0
step() {  # name, seconds, command...: runs it with a time limit, stdout+stderr to OUT/name.log
  local name=$1 limit=$2 t0=$SECONDS rc
  shift 2
  timeout -k 10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  echo "$name: exit $rc after $((SECONDS - t0)) s (limit $limit s)" | tee -a "$OUT/summary.txt"
  [ "$rc" -eq 0 ] || status=1
}
python3 -c "import torch; print(torch.__version__, torch.cuda.is_available() and torch.cuda.get_device_name(0))" \
  > "$OUT/env.txt" 2>&1
for name in $STEPS; do  # in the order named
  case $name in
    smoke) step smoke "${SMOKE_S:-270}" python3 benchmarks/gpu_smoke.py "${smoke[@]}" --out "$OUT/smoke" ;;
    search) step search "${SEARCH_S:-120}" python3 benchmarks/bench_search.py "${search[@]}" --trial-runs 0 ;;
    bench) step bench "${BENCH_S:-330}" python3 benchmarks/bench_gpu.py "${bench[@]}" --out "$OUT/bench_gpu.json" ;;
    small) step small "${SMALL_S:-240}" python3 benchmarks/gpu_smoke.py "${small[@]}" --only pretrain compile \
             --arch lvbert-small --timeout 200 --out "$OUT/small" ;;
    *) echo "unknown step $name (smoke, search, bench, small)" >&2; exit 2 ;;
  esac
done
cat "$OUT/env.txt" "$OUT/summary.txt"
if [ -n "${BUNDLE:-}" ]; then  # text results only (no tokenizers), each under 4 MB, paths relative to OUT
  (cd "$OUT" && find . -type f -size -4M ! -name 'tokenizer*' \
    \( -name '*.json' -o -name '*.log' -o -name '*.txt' -o -name '*.csv' \) -print0 | tar czf "$BUNDLE" --null -T -) \
    && echo "bundle: $BUNDLE ($(du -h "$BUNDLE" | cut -f1))" || status=1
fi
exit $status
