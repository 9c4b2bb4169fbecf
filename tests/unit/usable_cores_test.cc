// The default thread counts (common/daemon/cpus.h): a container's CPU quota and the affinity mask bound
// them, not the node's cores.
#include <gtest/gtest.h>

#include <sched.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "common/daemon/cpus.h"

namespace pushpull {
namespace {

// The default thread counts: a container's CPU quota and the affinity mask bound them, not the
// node's cores.
TEST(UsableCores, QuotasAndAffinityBoundTheCores) {
  EXPECT_EQ(CgroupV2QuotaCores("max 100000"), 0);
  EXPECT_EQ(CgroupV2QuotaCores("150000 100000"), 1.5);
  EXPECT_EQ(CgroupV2QuotaCores("200000 100000\n"), 2);
  EXPECT_EQ(CgroupV2QuotaCores(""), 0);
  EXPECT_EQ(CgroupV2QuotaCores("garbage"), 0);
  EXPECT_EQ(CgroupV2QuotaCores("12x 100000"), 0);
  EXPECT_EQ(CgroupV2QuotaCores("100000 0"), 0);
  EXPECT_EQ(CgroupV1QuotaCores(-1, 100000), 0);
  EXPECT_EQ(CgroupV1QuotaCores(50000, 100000), 0.5);
  EXPECT_EQ(CoresWithin(64, 0), 64);   // no quota: the affinity mask
  EXPECT_EQ(CoresWithin(64, 2), 2);    // docker --cpus=2 on a 64-core node
  EXPECT_EQ(CoresWithin(64, 1.5), 2);  // rounded up: 1.5 CPUs keep 2 threads busy in turns
  EXPECT_EQ(CoresWithin(64, 0.5), 1);  // at least 1
  EXPECT_EQ(CoresWithin(4, 16), 4);    // a quota above the mask does not add cores
  EXPECT_EQ(CoresWithin(0, 0), 1);
  EXPECT_EQ(CoresWithin(8, 1.7e10), 8);  // cgroup v2 allows quotas far past INT_MAX cores
  // The cgroup walk, on a hierarchy made here: the lowest quota on the process's cgroup and its
  // parents counts; a path the container's view lacks reads the mount's root.
  char tmpl[] = "/tmp/pushpull-cgroup-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  auto put = [&](const std::string& rel, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(root + rel).parent_path());
    std::ofstream(root + rel) << text << "\n";
  };
  put("/cpu.max", "max 100000");
  put("/kubepods/cpu.max", "300000 100000");
  put("/kubepods/pod1/cpu.max", "max 100000");
  put("/kubepods/pod1/ctr/cpu.max", "max 100000");
  EXPECT_EQ(CgroupQuotaCores("0::/kubepods/pod1/ctr\n", root), 3);  // a parent's quota binds
  put("/kubepods/pod1/ctr/cpu.max", "150000 100000");
  EXPECT_EQ(CgroupQuotaCores("0::/kubepods/pod1/ctr\n", root), 1.5);    // the lowest
  EXPECT_EQ(CgroupQuotaCores("0::/elsewhere/in/the/host\n", root), 0);  // not in this view: the root's
  put("/cpu/cpu.cfs_quota_us", "-1");
  put("/cpu/cpu.cfs_period_us", "100000");
  put("/cpu/docker/abc/cpu.cfs_quota_us", "200000");
  put("/cpu/docker/abc/cpu.cfs_period_us", "100000");
  EXPECT_EQ(CgroupQuotaCores("4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n", root), 2);  // v1
  EXPECT_EQ(CgroupQuotaCores("", root), 0);
  std::filesystem::remove_all(root);
  // This process: within what the machine has, and what its affinity mask allows.
  const int cores = UsableCores();
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_GE(cores, 1);
  EXPECT_LE(cores, CPU_COUNT(&set));
  // A thread bound to one core (taskset -c 0) sees one.
  int bound = 0;
  std::thread t([&bound] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    if (sched_setaffinity(0, sizeof(one), &one) == 0)
      bound = UsableCores();
    else
      bound = -1;
  });
  t.join();
  if (bound == -1) GTEST_SKIP() << "sched_setaffinity refused here";
  EXPECT_EQ(bound, 1);
}

}  // namespace
}  // namespace pushpull
