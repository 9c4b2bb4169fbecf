#!/usr/bin/env bash
# make demo: real processes and sockets on this machine, 2 servers and 2 workers each time:
#   1. linreg (synthetic, a known optimum) under BSP, SSP(2) and ASP: the consistency models side
#      by side, in about a second each;
#   2. fmnist_mlp on Fashion-MNIST (Debian's dataset-fashion-mnist) under BSP, 6 epochs: a real
#      dataset to a test accuracy of 0.88, in about 12 s (BSP runs are deterministic: the same
#      accuracy, 0.8878, every time).
# Exits 0 only if every run reached its target.
set -uo pipefail
build=${1:-build}
launch=$build/bin/pushpull-launch
status=0
summary=()

# run NAME LAUNCH_ARGS... -- WORKER_ARGS...: runs one job, keeps a summary line.
run() {
  local name=$1
  shift
  echo "=== $name ==="
  local start out rc ms metric stale verdict
  start=$(date +%s%N)
  out=$(mktemp)
  "$launch" "$@" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  metric=$(grep -o -E '(final_loss|test_accuracy)=[0-9.]+' "$out" | head -1)
  stale=$(grep -o 'max_staleness=[0-9]*' "$out" | sort -t= -k2 -n | tail -1 | cut -d= -f2)
  if [ "$rc" = 0 ]; then verdict="reached target"; else verdict="FAILED (exit $rc)"; status=1; fi
  summary+=("$(printf '%-28s %-22s max_staleness=%-3s %6d ms  %s' "$name" "${metric:-?}" "${stale:-?}" "$ms" "$verdict")")
  rm -f "$out"
}

for model in bsp ssp:2 asp; do
  run "linreg $model" --servers=2 --workers=2 --consistency=$model -- --app=linreg --epochs=8 \
    --examples=20000 --progress_s=2
done
run "fmnist_mlp bsp, 6 epochs" --servers=2 --workers=2 --consistency=bsp -- --app=fmnist_mlp \
  --epochs=6 --progress_s=5

echo
echo "=== demo summary (2 servers, 2 workers each) ==="
echo "linreg: noise floor 0.005, target 0.0075; fmnist_mlp: test accuracy target 0.88"
for s in "${summary[@]}"; do echo "$s"; done
exit $status
