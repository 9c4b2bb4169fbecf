// pushpull-bench: runs the benches registered with PP_BENCH (apps/bench/*.cc) and writes
// their figures, one JSON object per line, to --out.
#include <gflags/gflags.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "apps/bench/bench.h"
#include "common/daemon/flags.h"
#include "common/memory.h"

DEFINE_string(out, "build/bench/results.jsonl",
              "File for the figures, one JSON object per line; truncated at start, its parent "
              "directory created");
DEFINE_string(filter, "", "Run only the benches whose name contains this substring");
DEFINE_bool(quick, false, "Small sizes and few repetitions: a smoke run, not a measurement");
DEFINE_int32(threads, 2, "The most threads a scaling figure may use");
DEFINE_bool(list, false, "List the registered benches and exit");

int main(int argc, char** argv) {
  using pushpull::bench::Registry;
  std::string usage =
      "Runs pushpull's benchmarks.\n  pushpull-bench [--out=FILE] "
      "[--filter=SUBSTRING] [--quick] [--threads=N] [--list]\n"
      "Benches:";
  for (const auto& b : Registry()) usage += " " + b.name;
  usage +=
      "\nProfiling one transport case (docs/performance-notes.md): PP_TRANSPORT_PROFILE=OP/SIZE/SsWw[/raw|/raw_sgd]\n"
      "  (e.g. pushpull/16MB/1s1w, pull_p50/4KB/2s2w, sparse_pushpull/1MB/1s1w) runs only that case, one\n"
      "  side (raw_sgd: raw ZeroMQ whose servers apply each push with SGD, as zmq_ceiling's), for\n"
      "  PP_TRANSPORT_PROFILE_S seconds (default 5), servers with PP_TRANSPORT_PROFILE_K\n"
      "  update threads (default 1); use with --filter=transport, under perf if you like.";
  pushpull::ParseFlagsOrHelp(&argc, &argv, usage.c_str(), "apps/bench/");
  pushpull::RefuseArguments(argc, argv);
  pushpull::TuneMallocForLargeMessages();

  if (FLAGS_list) {
    for (const auto& b : Registry()) std::printf("%s\n", b.name.c_str());
    return 0;
  }
  if (FLAGS_threads < 1) {
    std::fprintf(stderr, "pushpull-bench: --threads=%d must be >= 1\n", FLAGS_threads);
    return 2;
  }

  const std::filesystem::path out_path(FLAGS_out);
  if (out_path.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(out_path.parent_path(), ec);
    if (ec) {
      std::fprintf(stderr, "pushpull-bench: cannot create %s: %s\n", out_path.parent_path().c_str(),
                   ec.message().c_str());
      return 1;
    }
  }
  std::FILE* out = std::fopen(FLAGS_out.c_str(), "w");
  if (out == nullptr) {
    std::fprintf(stderr, "pushpull-bench: cannot open %s: %s\n", FLAGS_out.c_str(), std::strerror(errno));
    return 1;
  }

  pushpull::bench::Options options;
  options.quick = FLAGS_quick;
  options.filter = FLAGS_filter;
  options.threads = FLAGS_threads;
  pushpull::bench::Reporter reporter(out);
  std::vector<std::string> ran;
  for (const auto& b : Registry()) {
    if (b.name.find(options.filter) == std::string::npos) continue;
    b.fn(reporter, options);
    ran.push_back(b.name);
  }
  std::fclose(out);

  if (ran.empty()) {
    std::fprintf(stderr, "pushpull-bench: no bench matches --filter='%s' (registered:", FLAGS_filter.c_str());
    for (const auto& b : Registry()) std::fprintf(stderr, " %s", b.name.c_str());
    std::fprintf(stderr, ")\n");
    return 1;
  }
  std::printf("\nran %zu bench(es):", ran.size());
  for (const auto& name : ran) std::printf(" %s", name.c_str());
  std::printf("; %d figure(s) in %s\n", reporter.rows(), FLAGS_out.c_str());
  return reporter.refused() ? 2 : 0;
}
