#!/usr/bin/env bash
# The ranking study of docs/results.md ("Which ranker can be trusted?"), every stage resumable: run it again after
# an interruption (kill -9 included) and it continues where it stopped; run it in a second terminal and the two
# split the stand-alone trainings (one thread each: THREADS=1 is the default).
#
#   bash scripts/ranking_study.sh            # tiny, 20 stratified orders x 3 seeds, 1,500 steps: many core-hours
#   QUICK=1 bash scripts/ranking_study.sh    # CI-sized (a few minutes): checks the chain, not the answer
#
# Stages (each skipped when done): the quickstart (spos supernet + search) -> a FairNAS supernet at SPOS's compute
# (375 steps x 4 paths) -> a few-shot split of the spos supernet (4 x 375 steps) -> a spos supernet at the few-shot
# total compute (3,000 steps) -> `lvbert study ranking` with every ranker (ground truth, short:300, zero-cost,
# two-stage rerank:K:300, and short:4000: the budget check, whether 1,500 steps rank the orders as 4,000 do) ->
# the same rankers on the graded order set (12 orders that differ in one count at a time; same model store).
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS="${THREADS:-1}"
LVBERT="${LVBERT:-.venv/bin/lvbert}"
R="${RUN:-runs/quickstart}"
S="${STUDY:-runs/study}"
if [ -n "${QUICK:-}" ]; then
  R="${RUN:-runs/ranking-quick}" S="${STUDY:-runs/ranking-quick/study}"
  SUPER=(--max-steps 40 --val-every 20) FAIR=(--max-steps 10) FEW=(--max-steps 10) LONG=(--max-steps 80)
  SEARCH=(--population 6 --iterations 2) STUDY_ARGS=(--quick) SHORT=short:10 RERANK=(rerank:2:10) BUDGET=short:60
else
  SUPER=() FAIR=(--max-steps 375) FEW=(--max-steps 375) LONG=(--max-steps 3000)
  SEARCH=() STUDY_ARGS=() SHORT=short:300 RERANK=(rerank:3:300 rerank:5:300) BUDGET=short:4000
fi

# run DIR DONE_FILE COMMAND...: COMMAND --out DIR, with --resume when DIR holds an unfinished run, skipped when done.
# A stage that trains one run holds DIR.lock meanwhile: a second copy of this script waits for it, then skips it.
run() {
  local dir=$1 done=$2
  shift 2
  mkdir -p "$(dirname "$dir")"
  exec 9>"$dir.lock"
  [ "$1" = study ] || flock 9  # the study splits its models between copies itself (a lock per model)
  if [ -f "$dir/$done" ]; then echo "done: $dir"
  elif [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ]; then "$LVBERT" "$@" --out "$dir" --resume --no-progress
  else "$LVBERT" "$@" --out "$dir" --no-progress; fi
  exec 9>&-
}

run "$R/supernet" meta.json supernet train --size tiny "${SUPER[@]}"
run "$R/search" best_arch.json search run --supernet "$R/supernet" "${SEARCH[@]}"
run "$R/supernet-fair" meta.json supernet train --size tiny --sampling fair "${SUPER[@]}" "${FAIR[@]}"
run "$R/supernet-fewshot" fewshot.json supernet few-shot --warm-start "$R/supernet" --split slot:0 "${FEW[@]}"
run "$R/supernet-long" meta.json supernet train --size tiny "${SUPER[@]}" "${LONG[@]}"
run "$S/ranking" ranking.json study ranking --supernet "$R/supernet" --searched "$R/search" --models "$S/models" \
  --rankers spos fair="$R/supernet-fair" few-shot="$R/supernet-fewshot" spos-long="$R/supernet-long" "$SHORT" \
  zc:synflow zc:grad-norm zc:snip "${RERANK[@]}" "$BUDGET" "${STUDY_ARGS[@]}"
run "$S/graded" ranking.json study ranking --order-set graded --no-baselines --supernet "$R/supernet" \
  --models "$S/models" --rankers spos fair="$R/supernet-fair" few-shot="$R/supernet-fewshot" "$SHORT" \
  zc:synflow zc:grad-norm zc:snip "${RERANK[@]}" "${STUDY_ARGS[@]}"
