#!/usr/bin/env bash
# Runs the tests, each binary with a hard time bound.
# Usage: tests/run_tests.sh BUILD_DIR [LEVEL...]. The levels are unit (no sockets, no
# processes), cluster (a cluster as threads of one process) and process (the daemons as processes,
# pushpull-launch on free ports); all three when none is named, then the Python tests, the
# documented commands and the experiment's pipeline. Per-binary output goes to a log; gtest's
# summary is printed.
set -euo pipefail
build=${1:-build}
levels=("${@:2}")
all=0
if [ ${#levels[@]} -eq 0 ]; then levels=(unit cluster process); all=1; fi
# TSAN=1 builds: libzmq is not instrumented; see the file for what is suppressed and why.
export TSAN_OPTIONS=${TSAN_OPTIONS:-suppressions=$(pwd)/tests/tsan.supp}
# ASAN=1 builds: any report fails the test binary.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for level in "${levels[@]}"; do
  bin=$build/bin/pushpull-$level-tests
  log=$build/test-$level.log
  echo "running $bin (full log: $log)"
  if ! timeout -s KILL 900 "$bin" --gtest_brief=1 >"$log" 2>&1; then
    grep -E "^\[  FAILED|Failure|^tests/|Expected|Which is|Actual|Value of|ERROR: .*Sanitizer|runtime error" "$log" | head -80 || true
    tail -5 "$log"
    echo "TESTS FAILED: $level (see $log)"
    exit 1
  fi
  grep -E "^\[==========\]|^\[  PASSED|SKIPPED" "$log" || true
done
if [ $all = 0 ]; then echo "tests passed: ${levels[*]}"; exit 0; fi
# The Python package's tests (pytest, Debian's python3), where the build has the package (not in
# sanitizer builds, whose objects Python cannot load).
if ls "$build"/python/pushpull/_core*.so >/dev/null 2>&1; then
  echo "running the Python tests (pytest tests/python)"
  PUSHPULL_BUILD=$build timeout -s KILL 900 /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python
  echo "running every command of README.md and the tutorials (docs/tools/run_commands.py)"
  timeout -s KILL 600 /usr/bin/python3 docs/tools/run_commands.py --self-test --build="$build"
else
  echo "no Python package in $build (a sanitizer build): the Python tests do not run"
fi
if [ -x apps/experiments/run.sh ]; then
  echo "running the tiny consistency experiment (pipeline check)"
  timeout -s KILL 300 apps/experiments/run.sh "$build" --tiny
fi
echo "all tests passed"
