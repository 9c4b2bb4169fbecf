#!/usr/bin/env bash
# The installed SDK as a user meets it: `make install` into a temporary prefix; programs of the
# user's (examples/cpp/, and the README's fit.cc) built outside the tree against the installed
# files only, with pkg-config; each run by the installed pushpull-launch as 2 workers with 2
# servers, finding the job through the environment. Usage: tests/install_test.sh BUILD_DIR
set -euo pipefail
build=${1:-build}
tree=$(pwd)
tmp=$(mktemp -d /tmp/pushpull-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "install test FAILED: $*"; exit 1; }
prefix=$tmp/prefix
version=$(cat VERSION)

echo "install test: make install PREFIX=$prefix"
${MAKE:-make} --no-print-directory install BUILD="$build" PREFIX="$prefix" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; fail "make install"; }
for f in bin/pushpull-launch bin/pushpull-scheduler bin/pushpull-server bin/pushpull-worker bin/pushpull-checkpoint \
         include/pushpull/pushpull.h include/pushpull/client.h include/pushpull/version.h \
         lib/libpushpull.a "lib/libpushpull.so.$version" lib/libpushpull.so lib/pkgconfig/pushpull.pc \
         share/doc/pushpull/LICENSE; do
  [[ -e "$prefix/$f" ]] || fail "$prefix/$f is not installed"
done
for b in "$prefix"/bin/*; do
  [[ "$("$b" --version)" == "$(basename "$b") $version" ]] || fail "$b --version says '$("$b" --version)'"
done
# A program that uses only the client needs neither CUDA nor gflags.
if readelf -d "$prefix/lib/libpushpull.so" | grep NEEDED | grep -E -i 'cuda|cublas|gflags'; then
  fail "libpushpull.so needs the libraries above"
fi
readelf -d "$prefix/lib/libpushpull.so" | grep -q "SONAME.*libpushpull.so.${version%.*}" ||
  readelf -d "$prefix/lib/libpushpull.so" | grep -q "SONAME.*libpushpull.so.${version%%.*}\]" ||
  fail "libpushpull.so has no soname of its version"
# DESTDIR stages the same tree, its files naming the final prefix.
${MAKE:-make} --no-print-directory install BUILD="$build" DESTDIR="$tmp/stage" PREFIX=/opt/pp >"$tmp/stage.log" 2>&1 ||
  { cat "$tmp/stage.log"; fail "make install DESTDIR="; }
grep -q '^prefix=/opt/pp$' "$tmp/stage/opt/pp/lib/pkgconfig/pushpull.pc" || fail "the staged pkg-config file's prefix"

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
[[ "$(pkg-config --modversion pushpull)" == "$version" ]] || fail "pkg-config --modversion pushpull"
cd "$tmp"
# The README's program, as it stands.
awk '/<!-- fit.cc:/ {on = 1; next} on && /^```cpp/ {code = 1; next} code && /^```/ {exit} code {print}' \
  "$tree/README.md" >fit.cc
[[ -s fit.cc ]] || fail "no fit.cc block in README.md"
g++ -std=c++17 -O2 -Wall -Wextra -Werror fit.cc -o fit $(pkg-config --cflags --libs pushpull) || fail "fit.cc does not build"
# And linked with the static library: no libpushpull.so needed at run time.
g++ -std=c++17 -O2 fit.cc -o fit_static -I"$prefix/include" "$prefix/lib/libpushpull.a" -lzmq -pthread ||
  fail "fit.cc does not link with libpushpull.a"
if ldd fit_static | grep -q libpushpull; then fail "fit_static loads libpushpull.so"; fi
echo "install test: README's fit.cc under the installed pushpull-launch, 2 servers, 2 workers"
timeout -s KILL 120 "$prefix/bin/pushpull-launch" --servers=2 --workers=2 -- ./fit >fit.log 2>&1 ||
  { tail -30 fit.log; fail "fit under pushpull-launch"; }
for r in 0 1; do
  line=$(grep "worker $r | worker $r: y = " fit.log) || { tail -30 fit.log; fail "worker $r printed no line"; }
  awk -v l="$line" 'BEGIN { split(l, f, " "); a = f[8]; b = f[11];
    exit !(a > 1.9 && a < 2.1 && b > 0.9 && b < 1.1) }' || fail "worker $r learned another line: $line"
done
# examples/cpp/ with its own Makefile, copied out of the tree.
cp -r "$tree/examples/cpp" example
${MAKE:-make} --no-print-directory -C example >example-build.log 2>&1 || { cat example-build.log; fail "examples/cpp"; }
echo "install test: examples/cpp/logistic_regression under the installed pushpull-launch, 2 servers, 2 workers"
(cd example && timeout -s KILL 180 "$prefix/bin/pushpull-launch" --servers=2 --workers=2 --consistency=ssp:1 -- \
  ./logistic_regression --epochs=3) >example.log 2>&1 || { tail -30 example.log; fail "the example under pushpull-launch"; }
for r in 0 1; do
  grep "worker $r | worker $r: test accuracy" example.log || { tail -30 example.log; fail "worker $r's accuracy"; }
done
grep -q "job succeeded" example.log || fail "the example's job"
# The Python package, where the installed tree's python3 finds it.
site=$(ls -d "$prefix"/lib/python3*/dist-packages)
[[ "$(cd / && PYTHONPATH=$site /usr/bin/python3 -c 'import pushpull; print(pushpull.__version__)')" == "$version" ]] ||
  fail "the installed Python package does not import"
echo "install test passed"
