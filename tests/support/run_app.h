// Runs a training app on an in-process cluster.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "apps/app.h"
#include "tests/support/local_cluster.h"

namespace pushpull {

// Runs app(client, &result) on a thread per worker of a started cluster, then ends the job,
// expecting every run and the job's end to succeed; returns each worker's result.
inline std::vector<AppResult> RunOnCluster(LocalCluster& cluster,
                                           const std::function<Status(Client&, AppResult*)>& app) {
  std::vector<AppResult> results(cluster.config().workers);
  cluster.RunWorkers([&](Client& c, int w) {
    Status st = app(c, &results[w]);
    EXPECT_TRUE(st.ok()) << st.ToString();
  });
  EXPECT_TRUE(cluster.FinishAndJoin().ok());
  return results;
}

// The same on a cluster of `servers` and `workers` started for it.
inline std::vector<AppResult> RunOnCluster(int servers, int workers,
                                           const std::function<Status(Client&, AppResult*)>& app) {
  LocalClusterConfig cfg;
  cfg.servers = servers;
  cfg.workers = workers;
  LocalCluster cluster(cfg);
  EXPECT_TRUE(cluster.Start().ok());
  return RunOnCluster(cluster, app);
}

}  // namespace pushpull
