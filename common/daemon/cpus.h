// How many CPUs this process may really use, for defaults that size thread pools.
#pragma once

#include <string>

namespace pushpull {

// The cores in this process's CPU affinity mask (taskset, cpuset cgroups, Slurm's binding),
// lowered to a cgroup CPU quota when one is set (docker --cpus, a Kubernetes container's
// limits.cpu: cgroup v2 cpu.max or v1 cpu.cfs_quota_us, on this process's cgroup and its
// parents), rounded up; at least 1. std::thread::hardware_concurrency() counts the machine's
// cores and sees neither, so a server in a 2-CPU container on a 64-core node started 63
// update threads.
int UsableCores();

// The pieces, for tests. A quota in cores (quota / period), or 0 where there is none: cgroup
// v2's cpu.max holds "QUOTA PERIOD" or "max PERIOD"; v1 gives a quota of -1 for none.
double CgroupV2QuotaCores(const std::string& cpu_max);
double CgroupV1QuotaCores(long long quota_us, long long period_us);
// The lowest quota, in cores, on the cgroup that /proc/self/cgroup's text names and its
// parents, under the hierarchy mounted at `root` (/sys/fs/cgroup: v2 there, v1 in its cpu or
// cpu,cpuacct directory); 0 for none. Inside a container the named path may not exist in the
// container's view (its cgroup is the mount's root there): then the root is read.
double CgroupQuotaCores(const std::string& proc_self_cgroup, const std::string& root);
// min(affinity cores, the quota rounded up), at least 1; a quota of 0 is none.
int CoresWithin(int affinity_cores, double quota_cores);

}  // namespace pushpull
