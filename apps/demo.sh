#!/usr/bin/env bash
# make demo: trains linreg with 2 servers and 2 workers under BSP, SSP(2) and ASP on this
# machine (real processes, real sockets), and exits 0 only if every run reached its target.
set -uo pipefail
build=${1:-build}
launch=$build/bin/pushpull-launch
status=0
summary=()
for model in bsp ssp:2 asp; do
  echo "=== linreg, 2 servers, 2 workers, consistency $model ==="
  start=$(date +%s%N)
  out=$(mktemp)
  "$launch" --servers=2 --workers=2 --consistency=$model -- --app=linreg --epochs=8 --examples=20000 \
    --progress_s=2 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  loss=$(grep -o 'final_loss=[0-9.]*' "$out" | head -1 | cut -d= -f2)
  stale=$(grep -o 'max_staleness=[0-9]*' "$out" | sort -t= -k2 -n | tail -1 | cut -d= -f2)
  if [ "$rc" = 0 ]; then verdict="reached target"; else verdict="FAILED (exit $rc)"; status=1; fi
  summary+=("$(printf '%-6s final_loss=%-8s max_staleness=%-3s %6d ms  %s' "$model" "${loss:-?}" "${stale:-?}" "$ms" "$verdict")")
  rm -f "$out"
done
echo
echo "=== demo summary (linreg: noise floor 0.005, target 0.0075) ==="
for s in "${summary[@]}"; do echo "$s"; done
exit $status
