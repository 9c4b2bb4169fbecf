// A test fixture that runs tests on an in-process cluster (LocalCluster), after gloo's
// test/base_test.h: a value-parameterized test (TEST_P) is one check made for each ClusterParams
// it is instantiated with (servers x workers x consistency x optimizer) and finds its cluster
// started; the suite's other tests (TEST_F) start their own, as they need. A suite derives its
// fixture from ClusterTest, named after its file:
//
//   class Linreg : public ClusterTest {};
//
//   TEST_P(Linreg, ConvergesToTheNoiseFloorUnderEveryModel) {
//     ... GetParam().consistency ... RunWorkers([&](Client& c, int w) { ... }); ...
//   }
//   INSTANTIATE_TEST_SUITE_P(, Linreg, ::testing::ValuesIn(UnderEachModel(2, 2, {"bsp", "asp"})),
//                            ClusterParamsName());
//
// Instantiated without a prefix, the instances are tests of the suite itself, named by their
// param: Linreg.ConvergesToTheNoiseFloorUnderEveryModel/2s2w_bsp.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "common/cluster.h"
#include "optimizers/optimizer.h"
#include "tests/support/local_cluster.h"

namespace pushpull {

// One combination a check runs on. servers, workers, update_threads and the copy-on-write budget
// shape the cluster; consistency and optimizer are those of the tables the test makes.
struct ClusterParams {
  int servers = 1;
  int workers = 1;
  Consistency consistency;
  std::optional<opt::Kind> optimizer;  // unset: the test's tables choose their own
  int update_threads = 1;              // per server
  size_t copy_on_write_budget_bytes = server::ServerOptions().copy_on_write_budget_bytes;  // per server

  // A LocalClusterConfig of this shape (every other setting its default).
  LocalClusterConfig Config() const;
  // "2s3w_ssp2_adam": servers, workers, consistency and optimizer (when set); "3t" after the
  // workers for several update threads, "_cow30000" at the end for a budget other than the
  // default.
  std::string Name() const;
};

void PrintTo(const ClusterParams& params, std::ostream* os);

// Names instances by their params (INSTANTIATE_TEST_SUITE_P's last argument).
struct ClusterParamsName {
  std::string operator()(const ::testing::TestParamInfo<ClusterParams>& info) const { return info.param.Name(); }
};

// A cluster of `servers` and `workers` under each consistency model named ("bsp", "ssp:2", "asp").
std::vector<ClusterParams> UnderEachModel(int servers, int workers, std::initializer_list<const char*> models);

class ClusterTest : public ::testing::Test, public ::testing::WithParamInterface<ClusterParams> {
 protected:
  // A TEST_P's: starts cluster_ with ParamConfig(). A TEST_F's: nothing.
  void SetUp() override;

  // A suite's changes to the config its TEST_P tests' cluster starts with (a checkpoint
  // directory, what the job does when a worker dies).
  virtual void Configure(LocalClusterConfig* config) {}
  // The config a TEST_P's cluster starts with: its param's, as Configure changes it.
  LocalClusterConfig ParamConfig();
  // Starts a cluster of `config` as cluster_, the one before (if any) stopped first.
  ::testing::AssertionResult StartCluster(const LocalClusterConfig& config);
  // Runs fn(client, rank) on one thread per worker of cluster_, and waits for them all.
  void RunWorkers(const std::function<void(Client&, int)>& fn) { cluster_->RunWorkers(fn); }

  std::unique_ptr<LocalCluster> cluster_;
};

}  // namespace pushpull
