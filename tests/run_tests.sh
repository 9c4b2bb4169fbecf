#!/usr/bin/env bash
# Runs every test with a hard time bound. Usage: tests/run_tests.sh BUILD_DIR
set -euo pipefail
build=${1:-build}
# Unit and threads-in-one-process cluster tests, plus the multi-process ones (pushpull-launch on
# free ports). Per-process output goes to a log; gtest's summary is printed.
log=$build/test.log
# TSAN=1 builds: libzmq is not instrumented; see the file for what is suppressed and why.
export TSAN_OPTIONS=${TSAN_OPTIONS:-suppressions=$(pwd)/tests/tsan.supp}
echo "running $build/bin/pushpull-tests (full log: $log)"
if ! timeout -s KILL 900 "$build/bin/pushpull-tests" --gtest_brief=1 >"$log" 2>&1; then
  grep -E "^\[  FAILED|Failure|^tests/|Expected|Which is|Actual|Value of" "$log" | head -80 || true
  tail -5 "$log"
  echo "TESTS FAILED (see $log)"
  exit 1
fi
grep -E "^\[==========\]|^\[  PASSED|SKIPPED" "$log" || true
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
