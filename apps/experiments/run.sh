#!/usr/bin/env bash
# make experiments: the classic consistency-model findings, reproduced on pushpull.
#   apps/experiments/run.sh BUILD_DIR [--tiny]
# Runs fmnist_mlp and sparse_lr with 2 servers and 4 workers under BSP, SSP s=1,2,4,8 and ASP,
# each without and with injected stragglers, over a few seeds; then the staleness-aware rate
# scaling runs. Writes per-run CSV traces (clock, wall_s, loss, metric, staleness), a summary
# CSV, PNG plots (gnuplot) and docs/EXPERIMENTS.md. Every run checks its staleness bound (the
# apps fail loudly on a violation) and the script re-checks it from the traces.
# --tiny: 2 workers, a few clocks, one plot: the pipeline check `make test` runs.
# --resummarize: no runs; rebuild the summary, plots and report from the traces already there
#   (e.g. after changing a target).
# --resume: keep the runs already there, run only the missing ones, then summarise.
set -euo pipefail
build=${1:-build}
tiny=0
resum=0
[ "${2:-}" = "--tiny" ] && tiny=1
[ "${2:-}" = "--resummarize" ] && resum=1
resume=0
[ "${2:-}" = "--resume" ] && resume=1
here=$(cd "$(dirname "$0")" && pwd)
launch="$build/bin/pushpull-launch"
if [ $tiny = 1 ]; then out="$build/experiments-tiny"; else out="$build/experiments"; fi
runs="$out/runs"
[ $resum = 1 ] || [ $resume = 1 ] || rm -rf "$out"
mkdir -p "$runs"
summary="$out/summary.csv"
if [ $resume = 1 ] && [ -f "$summary" ]; then cp "$summary" "$summary.prev"; fi
echo "app,model,bound,stragglers,seed,time_to_target_s,clocks_to_target,final_metric,wait_fraction,max_staleness,wall_s" > "$summary"

if [ $tiny = 1 ]; then
  workers=2; seeds="1"; models="bsp ssp:2"; stragglers="none"; apps="fmnist_mlp"
  fm_flags="--epochs=1 --train_limit=3000 --test_limit=1000 --eval_every=5 --eval_subset=500 --batch=64"
  fm_target=0.5
else
  workers=4; seeds="1 2"; models="bsp ssp:1 ssp:2 ssp:4 ssp:8 asp"; stragglers="none random"
  apps="fmnist_mlp sparse_lr"
  fm_flags="--epochs=2 --eval_every=10 --eval_subset=1000 --batch=32"
  fm_target=0.86
fi
slr_flags="--examples_total=2000000 --epochs=1 --heldout=20000 --eval_every=25 --eval_subset=5000 --batch=500"
slr_target=0.05   # held-out log loss within 5% of the optimum
# Stragglers: every worker, at each clock, with probability 0.1 sleeps an exponential time with a
# mean of 40 ms (transient slowdowns, as in Ho et al. and Cui et al.).
straggler_flags="--random_delay_p=0.1 --random_delay_ms=40"

bound_of() { case $1 in bsp) echo 0;; asp) echo -1;; ssp:*) echo "${1#ssp:}";; esac; }

# Time and clock of the first trace row (worker 0) whose metric reaches the target.
# fmnist: metric = accuracy (>= target); sparse_lr: metric = gap to the optimum (<= target).
# (Clock rows only: an epoch's evaluation row, kind "eval", holds another metric.)
to_target() {  # csv app target
  awk -F, -v app="$2" -v t="$3" 'NR > 1 && $4 != "" && $6 != "eval" {
      hit = (app == "sparse_lr") ? ($4 <= t) : ($4 >= t)
      if (hit) { print $2 "," $1; found = 1; exit } }
    END { if (!found) print ","}' "$1"
}
# The final evaluation's metric (worker 0's last eval row: fmnist_mlp's test accuracy on 10k
# images, sparse_lr's held-out AUC); traces without eval rows: the last clock row's.
last_metric() { awk -F, 'NR > 1 && $4 != "" { if ($6 == "eval") e = $4; else m = $4 } END { print (e != "") ? e : m }' "$1"; }

run_one() {  # app model strag seed [extra flags...]
  local app=$1 model=$2 strag=$3 seed=$4; shift 4
  local name="${app}_${model/:/}_${strag}_s${seed}${EXTRA_TAG:-}"
  local flags target
  if [ "$app" = fmnist_mlp ]; then flags=$fm_flags; target=$fm_target; else flags=$slr_flags; target=$slr_target; fi
  # A target every run reaches (fmnist_mlp: an accuracy; sparse_lr: a gap to the optimum): the
  # experiments measure time to target themselves, so a run that fails is an error.
  local always=0.0001
  [ "$app" = sparse_lr ] && always=1000
  local inject=""
  [ "$strag" = random ] && inject=$straggler_flags
  if [ $resume = 1 ] && [ -f "$runs/$name.w0.csv" ] && [ -f "$runs/$name.wall_ms" ]; then
    summarize "$name" "$app" "$model" "$strag${EXTRA_TAG:-}" "$seed"
    return
  fi
  echo "== $name"
  local start=$(date +%s%N)
  # Worker 0 writes the trace; every worker checks its staleness bound on every pull.
  if ! "$launch" --servers=2 --workers=$workers --consistency=$model -- --app=$app --seed=$seed \
      $flags $inject --progress_s=0 --target=$always "$@" \
      --metrics_out="$runs/$name.jsonl" --trace_out="$runs/$name.w%d.csv" > "$runs/$name.log" 2>&1; then
    echo "run $name failed:"; tail -20 "$runs/$name.log"; exit 1
  fi
  echo $(( ($(date +%s%N) - start) / 1000000 )) > "$runs/$name.wall_ms"
  summarize "$name" "$app" "$model" "$strag${EXTRA_TAG:-}" "$seed"
}

summarize() {  # name app model strag seed
  local name=$1 app=$2 model=$3 strag=$4 seed=$5 target
  if [ "$app" = fmnist_mlp ]; then target=$fm_target; else target=$slr_target; fi
  local trace="$runs/$name.w0.csv"
  local bound=$(bound_of "$model")
  # The bound, checked again from every worker's trace.
  local max_st=$(cat "$runs/$name".w*.csv | awk -F, '$1 != "clock" && $6 != "eval" && $5 > m { m = $5 } END { print m + 0 }')
  if [ "$bound" -ge 0 ] && [ "$max_st" -gt "$bound" ]; then
    echo "STALENESS VIOLATION in $name: observed $max_st > bound $bound"; exit 1
  fi
  local tt=$(to_target "$trace" "$app" "$target")
  local wait=$(grep -o 'network_wait=[0-9]*%' "$runs/$name.log" | tr -dc '0-9\n' | awk '{ s += $1; n++ } END { if (n) printf "%.3f", s / n / 100 }')
  local wall_ms=$(cat "$runs/$name.wall_ms" 2>/dev/null || echo 0)
  echo "$app,$model,$bound,$strag,$seed,${tt%,*},${tt#*,},$(last_metric "$trace"),$wait,$max_st,$(awk -v m=$wall_ms 'BEGIN { printf "%.1f", m / 1000 }')" >> "$summary"
}

if [ $resume = 1 ]; then
  # Runs made before wall times were kept: take them from the previous summary.
  if [ -f "$summary.prev" ]; then
    # (A tagged run's strag column is STRAG_TAG, its name ..._STRAG_sSEED_TAG.)
    awk -F, 'NR > 1 { m = $2; sub(":", "", m); st = $4; tag = ""; u = index(st, "_");
                      if (u) { tag = substr(st, u); st = substr(st, 1, u - 1) }
                      n = $1 "_" m "_" st "_s" $5 tag; print n, $11 * 1000 }' "$summary.prev" |
      while read -r n ms; do [ -f "$runs/$n.wall_ms" ] || echo "${ms%.*}" > "$runs/$n.wall_ms"; done
  fi
fi
if [ $resum = 1 ]; then
  for trace in "$runs"/*.w0.csv; do
    name=$(basename "$trace" .w0.csv)           # app_model_strag_sSEED[_tag]
    app=${name%%_bsp_*}; app=${app%%_ssp*}; app=${app%%_asp_*}
    rest=${name#${app}_}
    IFS=_ read -r m strag seed tag <<< "$rest"
    case $m in bsp|asp) model=$m;; ssp*) model="ssp:${m#ssp}";; esac
    summarize "$name" "$app" "$model" "$strag${tag:+_$tag}" "${seed#s}"
  done
  "$here/plot.sh" "$out" $tiny
  exit 0
fi

for app in $apps; do
  for strag in $stragglers; do
    for model in $models; do
      for seed in $seeds; do run_one "$app" "$model" "$strag" "$seed"; done
    done
  done
done
if [ $tiny = 0 ]; then
  # Staleness-aware rate scaling (Zhang et al. 2016) at high staleness, fmnist with stragglers.
  for model in ssp:8 asp; do
    EXTRA_TAG=_sa run_one fmnist_mlp "$model" random 1 --staleness_aware --lr=0.004
    EXTRA_TAG=_plain run_one fmnist_mlp "$model" random 1 --lr=0.004
  done
fi

# The same seed and flags give the same BSP trajectory: rerun one BSP case and compare losses.
first=$(ls "$runs"/*_bsp_none_s1.w0.csv | head -1)
if [ -n "$first" ]; then
  base=$(basename "$first" .w0.csv)
  app=${base%%_bsp_*}
  echo "== reproducibility check: $base again"
  if [ "$app" = fmnist_mlp ]; then flags=$fm_flags; else flags=$slr_flags; fi
  "$launch" --servers=2 --workers=$workers --consistency=bsp -- --app=$app --seed=1 $flags --progress_s=0 \
    --target=0.0001 --trace_out="$out/repro.w%d.csv" > "$out/repro.log" 2>&1 || true
  if ! diff <(cut -d, -f1,3 "$first") <(cut -d, -f1,3 "$out/repro.w0.csv") > /dev/null; then
    echo "REPRODUCIBILITY FAILURE: BSP loss trajectory of $base differs between two runs"; exit 1
  fi
  echo "   same BSP loss trajectory, clock by clock"
fi

"$here/plot.sh" "$out" $tiny
echo "experiments done: $summary"
