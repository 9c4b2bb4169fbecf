# pushpull build. `make` builds everything into build/ (binaries in build/bin/).
#   make         build everything a user runs (daemons, launcher, tools, library, Python module)
#   make test    install missing packages, build, run every test
#   make test-unit   the unit tests alone (seconds: no sockets, no processes)
#   make test-asan   the unit and in-process cluster tests under ASan and UBSan (build-asan/)
#   make demo    install missing packages, build, train on a local cluster (linreg under BSP, SSP,
#                ASP; a killed server and a restart from a checkpoint; fmnist_mlp)
#   make bench   benchmarks; figures into build/bench/results.jsonl
#   make deps    apt-get the Debian packages that are missing (no-op when all are there)
#   make experiments   the consistency-model experiments (docs/EXPERIMENTS.md)
#   make install the daemons and tools, the public headers, the client library (libpushpull.a and
#                .so) and its pkg-config file under $(DESTDIR)$(PREFIX) (PREFIX=/usr/local)
#   make lib     the client library alone (build/lib/libpushpull.a, libpushpull.so)
#   make check-threads   Clang's thread-safety analysis over every source (.ci/run runs it)
#   make check-public-headers   the headers in include/pushpull/ compile alone and name no internal
#   make format / make format-check   apply / check .clang-format (.ci/run checks it)
#   make docs    regenerate docs/configuration.md (from every binary's --help) and the timelines
#   make docs-check   the docs' rules: short sentences, live links, real commands, fresh pages
#   make clean   remove build/
# Switches: ASAN=1, TSAN=1, CUDA=0 (CUDA defaults to 1 when /usr/local/cuda/bin/nvcc exists),
#           DEBUG=1 (no optimisation), BUILD=dir (another build directory),
#           ARCH=-march=... (default x86-64-v3: AVX2 CPUs; -march=x86-64 for older ones).

# `make` alone builds `all`: what a user runs (the first rule below would be the goal otherwise).
.DEFAULT_GOAL := all
# As many jobs as cores, unless -j is given (a sub-make shares its parent's jobs).
ifeq ($(MAKELEVEL)$(filter -j%,$(MAKEFLAGS)),0)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
endif

BUILD   ?= build
NVCC    ?= /usr/local/cuda/bin/nvcc
CUDA_HOME ?= /usr/local/cuda
ifeq ($(wildcard $(NVCC)),)
CUDA ?= 0
else
CUDA ?= 1
endif

CXX      ?= g++
# ASAN=1: -O1, as AddressSanitizer's documentation advises; it also compiles in about 60% of
# -O2's time, which keeps `make test-asan` short.
OPT      := $(if $(filter 1,$(DEBUG)),-O0,$(if $(filter 1,$(ASAN)),-O1,-O2))
ARCH     ?= -march=x86-64-v3
CPPFLAGS := -Iinclude -I. -isystem /usr/include/eigen3 -MMD -MP
# -fPIC: the client's objects go into libpushpull.so as they are (one build, not two).
CXXFLAGS := -std=c++17 $(OPT) -g $(ARCH) -fPIC -Wall -Wextra -Wno-unused-parameter -pthread
LDLIBS   := -lzmq -lgflags -lz -pthread
ifeq ($(ASAN),1)
CXXFLAGS += -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
LDFLAGS  += -fsanitize=address,undefined
endif
ifeq ($(TSAN),1)
CXXFLAGS += -fsanitize=thread
LDFLAGS  += -fsanitize=thread
endif
ifeq ($(CUDA),1)
CPPFLAGS += -DPUSHPULL_CUDA=1 -I$(CUDA_HOME)/include
LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart
NVCCFLAGS ?= -std=c++17 -O2 -Iinclude -I. -Xcompiler -fPIC -MMD -MP \
             -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90 -gencode arch=compute_75,code=compute_75
endif

# One static library per folder (a folder is a library, with one namespace: docs/DESIGN.md,
# "Layout"): its *.cc, and *.cu with CUDA=1, less the binaries' mains (*_main.cc). Listed in link
# order, each before the folders it uses. A folder's library is named after its path
# (server/table: libserver_table.a).
LIBDIRS := deploy/launch apps apps/mlp server server/scheduler server/checkpoint server/table server/consistency \
           worker common/daemon common optimizers
define lib_srcs
$(filter-out %_main.cc,$(wildcard $(1)/*.cc))
endef
define lib_cu
$(if $(filter 1,$(CUDA)),$(wildcard $(1)/*.cu))
endef
objs_of = $(patsubst %.cc,$(BUILD)/obj/%.o,$(call lib_srcs,$(1))) \
          $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(call lib_cu,$(1)))
lib_of = $(BUILD)/lib/lib$(subst /,_,$(1)).a
LIBS := $(foreach d,$(LIBDIRS),$(if $(strip $(call objs_of,$(d))),$(call lib_of,$(d))))

# Test support (tests/support/: the in-process cluster, a TCP proxy, fixtures): a library of its
# own that only the test binary and pushpull-bench link, never a daemon. alloc_fault.cc replaces
# the global operator new: it is linked into the test binary as an object (an archive member
# would be pulled in only by a reference to it), and into nothing else.
TEST_SUPPORT_SRCS := $(filter-out tests/support/alloc_fault.cc,$(wildcard tests/support/*.cc))
TEST_SUPPORT_LIB  := $(BUILD)/lib/libtestsupport.a

# The one place the version is written is the file VERSION; common/version.cc gets it from here.
PP_VERSION := $(shell cat VERSION)
PP_VERSION_WORDS := $(subst ., ,$(PP_VERSION))
# The shared library's soname: its major version, or major.minor while that is 0 (no stable ABI yet).
PP_SOVERSION := $(if $(filter 0,$(word 1,$(PP_VERSION_WORDS))),$(word 1,$(PP_VERSION_WORDS)).$(word 2,$(PP_VERSION_WORDS)),$(word 1,$(PP_VERSION_WORDS)))
VERSION_DEF := -DPUSHPULL_VERSION_STRING='"$(PP_VERSION)"'
$(BUILD)/obj/common/version.o: CPPFLAGS += $(VERSION_DEF)
$(BUILD)/obj/common/version.o: VERSION

# The client library a user's program links: the code behind include/pushpull/ and nothing of the
# daemons, the sample apps, CUDA or gflags.
# (common/daemon/, what only the daemons share, is a folder of its own.) setup.py lists the same.
CLIENT_DIRS := worker optimizers common
CLIENT_SRCS := $(foreach d,$(CLIENT_DIRS),$(wildcard $(d)/*.cc))
CLIENT_OBJS := $(patsubst %.cc,$(BUILD)/obj/%.o,$(CLIENT_SRCS))
CLIENT_LIBS := -lzmq -pthread
CLIENT_A  := $(BUILD)/lib/libpushpull.a
CLIENT_SO := $(BUILD)/lib/libpushpull.so.$(PP_VERSION)

# The Python package (python/): pushpull._core, the client library's calls for Python (pybind11),
# linked with the client's objects, beside the package's .py files in $(BUILD)/python/pushpull/
# (PYTHONPATH=$(BUILD)/python imports it). Debian's python3, whose packages make deps installs
# (another python3 first in PATH, such as pyenv's, lacks them). Not under a sanitizer: Python
# would have to load its runtime first.
PYTHON    ?= /usr/bin/python3
PY_EXT    := $(shell $(PYTHON)-config --extension-suffix 2>/dev/null || echo .so)
PY_FLAGS  := $(shell $(PYTHON) -m pybind11 --includes 2>/dev/null)
PY_MODULE := $(BUILD)/python/pushpull/_core$(PY_EXT)
PY_FILES  := $(patsubst python/%,$(BUILD)/python/%,$(wildcard python/pushpull/*.py python/pushpull/*.pyi python/pushpull/py.typed))
PY_TARGETS := $(if $(filter 1,$(ASAN) $(TSAN)),,$(PY_MODULE) $(PY_FILES))
$(BUILD)/obj/python/src/core.o: CPPFLAGS += $(PY_FLAGS)
$(BUILD)/obj/python/src/core.o: CXXFLAGS += -fvisibility=hidden
$(PY_MODULE): $(BUILD)/obj/python/src/core.o $(CLIENT_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) -shared $(LDFLAGS) -o $@ $^ $(CLIENT_LIBS)
$(BUILD)/python/%: python/%
	@mkdir -p $(dir $@)
	cp $< $@

BINS := $(BUILD)/bin/pushpull-scheduler $(BUILD)/bin/pushpull-server \
        $(BUILD)/bin/pushpull-worker $(BUILD)/bin/pushpull-launch $(BUILD)/bin/pushpull-bench \
        $(BUILD)/bin/pushpull-checkpoint
# The tests, by level, a binary each: tests/unit/ (no sockets, no processes: seconds),
# tests/cluster/ (whole clusters as threads of one process, over real sockets) and
# tests/process/ (the daemons as processes: pushpull-launch, pushpull-checkpoint).
TEST_LEVELS := unit cluster process
test_bin_of = $(BUILD)/bin/pushpull-$(1)-tests
TEST_BINS := $(foreach l,$(TEST_LEVELS),$(call test_bin_of,$(l)))

.PHONY: all lib python test test-unit test-asan demo bench deps clean experiments install check-threads check-public-headers format format-check
# Everything a user runs: the daemons, the launcher, the tools (pushpull-bench among them), the
# client library and the Python module. The test binary is `make test`'s.
all: $(BINS) lib python
python: $(PY_TARGETS)
lib: $(CLIENT_A) $(CLIENT_SO)

$(CLIENT_A): $(CLIENT_OBJS)
$(CLIENT_SO): $(CLIENT_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) -shared $(LDFLAGS) -Wl,-soname,libpushpull.so.$(PP_SOVERSION) -Wl,--no-undefined -o $@ $^ $(CLIENT_LIBS)
	ln -sf libpushpull.so.$(PP_VERSION) $(BUILD)/lib/libpushpull.so.$(PP_SOVERSION)
	ln -sf libpushpull.so.$(PP_SOVERSION) $(BUILD)/lib/libpushpull.so

$(foreach d,$(LIBDIRS),$(eval $(call lib_of,$(d)): $(call objs_of,$(d))))
$(TEST_SUPPORT_LIB): $(patsubst %.cc,$(BUILD)/obj/%.o,$(TEST_SUPPORT_SRCS))
$(BUILD)/lib/%.a:
	@mkdir -p $(dir $@)
	@rm -f $@
	ar rcs $@ $^

# The compile flags a build directory was made with: objects depend on this file, which changes
# only when the flags do, so that a switch (ASAN=1, ARCH=..., a new default such as -fPIC) rebuilds
# what it changes instead of linking objects made otherwise.
FLAGS_STAMP := $(BUILD)/compile-flags
FLAGS_NOW := $(CXX) $(CPPFLAGS) $(CXXFLAGS) | $(NVCC) $(NVCCFLAGS)
$(shell mkdir -p $(BUILD) && (printf '%s\n' '$(FLAGS_NOW)' | cmp -s - $(FLAGS_STAMP) || printf '%s\n' '$(FLAGS_NOW)' > $(FLAGS_STAMP)))

$(BUILD)/obj/%.o: %.cc $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -DPUSHPULL_CUDA=1 -c $< -o $@

$(BUILD)/bin/pushpull-scheduler: $(BUILD)/obj/server/scheduler/scheduler_main.o $(LIBS)
$(BUILD)/bin/pushpull-server:    $(BUILD)/obj/server/server_main.o $(LIBS)
$(BUILD)/bin/pushpull-worker:    $(BUILD)/obj/apps/worker_main.o $(LIBS)
$(BUILD)/bin/pushpull-launch:    $(BUILD)/obj/deploy/launch_main.o $(LIBS)
$(BUILD)/bin/pushpull-checkpoint: $(BUILD)/obj/server/checkpoint/checkpoint_main.o $(LIBS)
# The benches register, and run, in the link order of their objects: sorted by file name.
$(BUILD)/bin/pushpull-bench:     $(patsubst %.cc,$(BUILD)/obj/%.o,$(sort $(wildcard apps/bench/*.cc))) $(TEST_SUPPORT_LIB) $(LIBS)
$(BINS):
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) -o $@ $(filter %.o,$^) $(filter %.a,$^) $(LDLIBS)

$(foreach l,$(TEST_LEVELS),$(eval $(call test_bin_of,$(l)): \
  $(patsubst %.cc,$(BUILD)/obj/%.o,$(wildcard tests/$(l)/*_test.cc) tests/support/alloc_fault.cc)))
$(TEST_BINS): $(TEST_SUPPORT_LIB) $(LIBS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) -o $@ $(filter %.o,$^) $(filter %.a,$^) $(LDLIBS) -lgtest -lgtest_main

# Clang's thread-safety analysis over every C++ source (common/mutex.h): a GUARDED_BY member
# touched without its lock, or a REQUIRES function called without it, fails the build.
ALL_CC := $(sort $(wildcard */*.cc */*/*.cc))
TSA_FLAGS := -std=c++17 -fsyntax-only -Iinclude -I. -isystem /usr/include/eigen3 $(VERSION_DEF) $(PY_FLAGS) -Wthread-safety -Werror=thread-safety \
             -Wno-unknown-warning-option
$(BUILD)/tsa/%.ok: %.cc
	@mkdir -p $(dir $@)
	@clang++ $(TSA_FLAGS) -MMD -MP -MF $@.d -MT $@ $< && touch $@
check-threads: deps
	$(MAKE) $(patsubst %.cc,$(BUILD)/tsa/%.ok,$(ALL_CC))
	@echo "check-threads: thread-safety analysis clean over $(words $(ALL_CC)) sources"

# The code's format (.clang-format: Google's style, 120 columns). `make format` rewrites it.
FORMAT_SRCS = $(shell git ls-files '*.cc' '*.h' '*.cu' 2>/dev/null)
format:
	clang-format -i $(FORMAT_SRCS)
format-check: deps
	@clang-format --dry-run --Werror $(FORMAT_SRCS) || { echo "format-check: run 'make format'"; exit 1; }
	@echo "format-check: $(words $(FORMAT_SRCS)) files formatted as .clang-format says"

# The public headers (include/pushpull/, what a program includes) are plain: each compiles on its
# own with nothing but the others beside it (no -I., so an internal include fails), and none
# names the transport, the serialisation library or the cluster's internal state.
PUBLIC_HEADERS := $(sort $(wildcard include/pushpull/*.h))
check-public-headers:
	@for h in $(PUBLIC_HEADERS); do \
	  echo "#include \"$${h#include/}\"" | \
	    $(CXX) -std=c++17 -fsyntax-only -Wall -Wextra -Werror -Iinclude -x c++ - || { echo "check-public-headers: $$h does not compile on its own"; exit 1; }; \
	done
	@if grep -n -i -E 'zmq|cereal' $(PUBLIC_HEADERS) || grep -n -E 'ClusterMap|Membership' $(PUBLIC_HEADERS); then \
	  echo "check-public-headers: a public header names an internal (above)"; exit 1; fi
	@echo "check-public-headers: $(words $(PUBLIC_HEADERS)) public headers are plain"

DEB_PKGS := g++ make clang clang-format libzmq3-dev cppzmq-dev libcereal-dev libeigen3-dev libgflags-dev \
            libgtest-dev zlib1g-dev pkg-config dataset-fashion-mnist gnuplot-nox \
            python3-dev python3-venv python3-setuptools python3-wheel python3-pybind11 pybind11-dev python3-numpy python3-torch python3-pytest python3-yaml
# A plain `make` on a machine without the packages stops at once, saying which, rather than at a
# compiler error about a missing header (make deps installs them). Checked only where dpkg is.
ifneq ($(filter all,$(or $(MAKECMDGOALS),all)),)
ifneq ($(shell command -v dpkg-query 2>/dev/null),)
MISSING_PKGS := $(shell for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done)
ifneq ($(strip $(MISSING_PKGS)),)
$(error missing Debian packages: $(strip $(MISSING_PKGS)); run 'make deps' first (it installs them with apt-get))
endif
endif
endif
deps:
	@missing=$$(for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing $$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y --no-install-recommends $$missing; \
	else echo "make deps: all packages present"; fi

test: deps
	$(MAKE) all $(TEST_BINS)
	$(MAKE) check-public-headers
	tests/run_tests.sh $(BUILD)
	$(if $(filter 1,$(ASAN) $(TSAN)),@echo "install test: not in a sanitizer build (a program would need its runtime)",tests/install_test.sh $(BUILD))
	$(MAKE) docs-check

# The unit tests alone: no sockets, no processes, seconds to run.
test-unit: deps
	$(MAKE) $(call test_bin_of,unit)
	tests/run_tests.sh $(BUILD) unit

# The unit and in-process cluster tests under AddressSanitizer and UBSan, in a build directory of
# their own ($(BUILD)-asan; CUDA=0: the sanitizers do not see device code). A report fails them.
ASAN_BUILD := $(BUILD)-asan
test-asan: deps
	$(MAKE) ASAN=1 CUDA=0 BUILD=$(ASAN_BUILD) \
	  $(patsubst $(BUILD)/%,$(ASAN_BUILD)/%,$(filter-out %/pushpull-bench,$(BINS)) $(call test_bin_of,unit) $(call test_bin_of,cluster))
	tests/run_tests.sh $(ASAN_BUILD) unit cluster

demo: deps
	$(MAKE) $(BINS)
	apps/demo.sh $(BUILD)

bench: deps
	$(MAKE) $(BINS)
	@mkdir -p $(BUILD)/bench
	$(BUILD)/bin/pushpull-bench --out=$(BUILD)/bench/results.jsonl
	$(MAKE) python
	$(PYTHON) apps/bench/python_bench.py $(BUILD) $(BUILD)/bench/results.jsonl

experiments: deps
	$(MAKE) $(BINS)
	apps/experiments/run.sh $(BUILD)

# The documentation's generated parts and its checks (docs/tools/). `make docs` writes
# docs/configuration.md from each binary's --help and draws docs/images/timeline-*.svg;
# `make docs-check` checks README.md and docs/ (sentence length, links, quoted commands and
# flags, the generated parts, the Grafana dashboard's metrics) and names each problem.
.PHONY: docs docs-check
docs:
	$(MAKE) $(BINS)
	$(PYTHON) docs/tools/configuration.py --build=$(BUILD) --out=docs/configuration.md
	$(PYTHON) docs/tools/timelines.py docs/images
docs-check:
	$(MAKE) $(BINS)
	$(PYTHON) docs/tools/check.py --build=$(BUILD)

PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
INSTALLED := pushpull-scheduler pushpull-server pushpull-worker pushpull-launch pushpull-checkpoint
# A program built against a prefix the loader does not search (PREFIX=/tmp/x) still finds
# libpushpull.so: the pkg-config file's Libs carry the library directory as an rpath.
# The Python package goes where Debian's python3 looks for a prefix's packages.
PY_VERSION  := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
PYTHON_SITE ?= $(if $(filter /usr,$(PREFIX)),/usr/lib/python3/dist-packages,$(PREFIX)/lib/python$(PY_VERSION)/dist-packages)
install: $(addprefix $(BUILD)/bin/,$(INSTALLED)) $(CLIENT_A) $(CLIENT_SO) $(PY_TARGETS)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(INCLUDEDIR)/pushpull $(DESTDIR)$(LIBDIR)/pkgconfig \
	  $(DESTDIR)$(PREFIX)/share/doc/pushpull
	install -m 755 $(addprefix $(BUILD)/bin/,$(INSTALLED)) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(PUBLIC_HEADERS) $(DESTDIR)$(INCLUDEDIR)/pushpull/
	install -m 644 $(CLIENT_A) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(CLIENT_SO) $(DESTDIR)$(LIBDIR)/
	ln -sf libpushpull.so.$(PP_VERSION) $(DESTDIR)$(LIBDIR)/libpushpull.so.$(PP_SOVERSION)
	ln -sf libpushpull.so.$(PP_SOVERSION) $(DESTDIR)$(LIBDIR)/libpushpull.so
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|; s|@VERSION@|$(PP_VERSION)|' \
	  deploy/pushpull.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/pushpull.pc
	install -m 644 LICENSE CHANGELOG.md README.md $(DESTDIR)$(PREFIX)/share/doc/pushpull/
	install -d $(DESTDIR)$(PYTHON_SITE)/pushpull
	install -m 644 $(filter-out %$(PY_EXT),$(PY_TARGETS)) $(DESTDIR)$(PYTHON_SITE)/pushpull/
	install -m 755 $(PY_MODULE) $(DESTDIR)$(PYTHON_SITE)/pushpull/
	@echo "installed pushpull $(PP_VERSION) under $(DESTDIR)$(PREFIX); build a program with:"
	@echo "  PKG_CONFIG_PATH=$(LIBDIR)/pkgconfig g++ -std=c++17 prog.cc \$$(pkg-config --cflags --libs pushpull)"
	@echo "and the Python package in $(PYTHON_SITE) (import pushpull)"

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj $(BUILD)/tsa -name '*.d' 2>/dev/null)
