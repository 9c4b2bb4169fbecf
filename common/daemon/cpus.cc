#include "common/daemon/cpus.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

namespace pushpull {
namespace {

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

// The lowest quota set on `dir` or any parent of it up to `root` (a cgroup's limits bind its
// children too); 0 for none. `read` gives the quota in cores of one directory, 0 for none.
template <class Read>
double LowestQuotaUpTo(const std::string& root, std::string dir, Read read) {
  double lowest = 0;
  while (true) {
    double q = read(dir);
    if (q > 0 && (lowest == 0 || q < lowest)) lowest = q;
    if (dir.size() <= root.size()) return lowest;
    dir.resize(dir.rfind('/'));
    if (dir.size() < root.size()) dir = root;
  }
}

}  // namespace

double CgroupQuotaCores(const std::string& proc_self_cgroup, const std::string& root) {
  std::istringstream in(proc_self_cgroup);
  std::string line, v2_path, v1_path;
  while (std::getline(in, line)) {  // "ID:CONTROLLERS:PATH"
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    const std::string path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers == ",,")
      v2_path = path;
    else if (controllers.find(",cpu,") != std::string::npos)
      v1_path = path;
  }
  double quota = 0;
  auto lower = [&quota](double q) {
    if (q > 0 && (quota == 0 || q < quota)) quota = q;
  };
  auto exists = [](const std::string& d) {
    std::error_code ec;
    return std::filesystem::is_directory(d, ec);
  };
  if (!v1_path.empty()) {
    for (const char* mount : {"/cpu", "/cpu,cpuacct"}) {
      const std::string r = root + mount;
      std::string dir = r + (v1_path == "/" ? "" : v1_path);
      if (!exists(dir)) dir = r;
      lower(LowestQuotaUpTo(r, dir, [](const std::string& d) {
        const std::string q = ReadFirstLine(d + "/cpu.cfs_quota_us"), p = ReadFirstLine(d + "/cpu.cfs_period_us");
        if (q.empty() || p.empty()) return 0.0;
        return CgroupV1QuotaCores(std::atoll(q.c_str()), std::atoll(p.c_str()));
      }));
    }
  }
  if (!v2_path.empty()) {
    const std::string r = root;
    std::string dir = r + (v2_path == "/" ? "" : v2_path);
    if (!exists(dir)) dir = r;
    lower(LowestQuotaUpTo(r, dir,
                          [](const std::string& d) { return CgroupV2QuotaCores(ReadFirstLine(d + "/cpu.max")); }));
  }
  return quota;
}

double CgroupV2QuotaCores(const std::string& cpu_max) {
  std::istringstream in(cpu_max);
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return 0;
  char* end = nullptr;
  const long long q = std::strtoll(quota.c_str(), &end, 10);
  if (*end != '\0' || q <= 0) return 0;
  return double(q) / double(period);
}

double CgroupV1QuotaCores(long long quota_us, long long period_us) {
  return quota_us > 0 && period_us > 0 ? double(quota_us) / double(period_us) : 0;
}

int CoresWithin(int affinity_cores, double quota_cores) {
  int cores = std::max(1, affinity_cores);
  // (In doubles first: a quota may be far more cores than an int holds.)
  if (quota_cores > 0) cores = static_cast<int>(std::min<double>(cores, std::max(1.0, std::ceil(quota_cores - 1e-9))));
  return cores;
}

int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int affinity = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
  if (affinity <= 0) affinity = static_cast<int>(std::thread::hardware_concurrency());
  std::ifstream f("/proc/self/cgroup");
  const std::string cgroup((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return CoresWithin(affinity, CgroupQuotaCores(cgroup, "/sys/fs/cgroup"));
}

}  // namespace pushpull
