#include "tests/support/cluster_test.h"

#include <cstdio>
#include <cstdlib>
#include <memory>

namespace pushpull {

LocalClusterConfig ClusterParams::Config() const {
  LocalClusterConfig config;
  config.servers = servers;
  config.workers = workers;
  config.update_threads = update_threads;
  config.copy_on_write_budget_bytes = copy_on_write_budget_bytes;
  return config;
}

std::string ClusterParams::Name() const {
  std::string name = std::to_string(servers) + "s" + std::to_string(workers) + "w";
  if (update_threads != 1) name += std::to_string(update_threads) + "t";
  switch (consistency.model) {
    case Consistency::kBsp: name += "_bsp"; break;
    case Consistency::kSsp: name += "_ssp" + std::to_string(consistency.staleness); break;
    case Consistency::kAsp: name += "_asp"; break;
  }
  if (optimizer) name += std::string("_") + opt::KindName(*optimizer);
  if (copy_on_write_budget_bytes != server::ServerOptions().copy_on_write_budget_bytes)
    name += "_cow" + std::to_string(copy_on_write_budget_bytes);
  return name;
}

void PrintTo(const ClusterParams& params, std::ostream* os) { *os << params.Name(); }

std::vector<ClusterParams> UnderEachModel(int servers, int workers, std::initializer_list<const char*> models) {
  std::vector<ClusterParams> all;
  for (const char* model : models) {
    ClusterParams p;
    p.servers = servers;
    p.workers = workers;
    auto parsed = ParseConsistency(model);
    if (!parsed.ok()) {  // (a test's typo, found as the tests are listed)
      std::fprintf(stderr, "UnderEachModel: %s\n", parsed.status().ToString().c_str());
      std::abort();
    }
    p.consistency = *parsed;
    all.push_back(p);
  }
  return all;
}

void ClusterTest::SetUp() {
  if (::testing::UnitTest::GetInstance()->current_test_info()->value_param() == nullptr) return;
  ASSERT_TRUE(StartCluster(ParamConfig()));
}

LocalClusterConfig ClusterTest::ParamConfig() {
  LocalClusterConfig config = GetParam().Config();
  Configure(&config);
  return config;
}

::testing::AssertionResult ClusterTest::StartCluster(const LocalClusterConfig& config) {
  cluster_.reset();
  cluster_ = std::make_unique<LocalCluster>(config);
  Status st = cluster_->Start();
  if (!st.ok()) return ::testing::AssertionFailure() << "the cluster did not start: " << st.ToString();
  return ::testing::AssertionSuccess();
}

}  // namespace pushpull
