#!/usr/bin/env bash
# The transport bench of two builds in one run, alternating A B A B ..., and each case's ratio
# (pushpull against raw ZeroMQ, measured in the same run) of the second build against the first.
#
#   git worktree add /tmp/old REV && make -C /tmp/old CUDA=0 build/bin/pushpull-bench
#   make build/bin/pushpull-bench
#   apps/bench/compare_builds.sh /tmp/old/build/bin/pushpull-bench build/bin/pushpull-bench build/compare 2
#
# Each run takes about 8 minutes on 2 cores; nothing else should run meanwhile.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 OLD_PUSHPULL_BENCH NEW_PUSHPULL_BENCH OUT_DIR [ROUNDS]" >&2
  exit 2
fi
old=$1 new=$2 out=$3 rounds=${4:-2}
for b in "$old" "$new"; do [ -x "$b" ] || { echo "$0: $b is not an executable" >&2; exit 2; }; done
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for side in A B; do
    bin=$old
    [ "$side" = B ] && bin=$new
    "$bin" --filter=transport --out="$out/$side$r.jsonl" >"$out/$side$r.log" 2>&1
    echo "round $r, build $side ($bin): done $(date +%T)"
  done
done
python3 "$(dirname "$0")/compare_builds.py" "$out"
