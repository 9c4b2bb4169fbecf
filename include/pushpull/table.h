// What a program says about a table: its name and shape, how its rows start, its optimizer and
// its consistency model. Plain values; Client::CreateTable (pushpull/client.h) makes the table.
#pragma once

#include <cstdint>
#include <string>

#include "pushpull/optimizer_config.h"
#include "pushpull/status.h"

namespace pushpull {

// A row id: dense tables' rows are [0, rows); a sparse table takes any value.
using Key = uint64_t;

// Consistency model of a table (DESIGN.md "Consistency"). staleness: 0 for BSP, k for SSP(k).
struct Consistency {
  enum Model : uint8_t { kBsp = 0, kSsp = 1, kAsp = 2 };
  Model model = kBsp;
  int32_t staleness = 0;

  // The bound s used by the pull rule "min live clock >= c - s"; -1 means unbounded (ASP).
  int64_t bound() const { return model == kAsp ? -1 : (model == kBsp ? 0 : staleness); }
  std::string ToString() const;
  bool operator==(const Consistency& o) const {
    return model == o.model && (model != kSsp || staleness == o.staleness);
  }
};
// "bsp", "ssp:3", "asp".
Result<Consistency> ParseConsistency(const std::string& s);

enum class InitKind : uint8_t { kZeros = 0, kUniform = 1, kNormal = 2, kGlorot = 3 };
// "zeros", "uniform", "normal", "glorot".
Result<InitKind> ParseInitKind(const std::string& s);

struct TableSpec {
  std::string name;
  bool sparse = false;  // sparse: any u64 row id, rows created on first touch
  uint64_t rows = 0;    // dense: row count; sparse: ignored
  uint32_t dim = 1;     // floats per row
  InitKind init = InitKind::kZeros;
  float init_scale = 0.01f;  // uniform: [-scale, scale]; normal: stddev
  uint64_t seed = 1;
  // Glorot needs fan-in/out: fan_in = dim - glorot_bias_columns (the layer's inputs), fan_out = rows.
  uint32_t glorot_bias_columns = 0;
  opt::OptimizerConfig optimizer;
  Consistency consistency;

  Status Validate() const;
  bool operator==(const TableSpec& o) const;
  std::string ToString() const;
  // Every setting that differs from o's, as "name o's -> this one's" ("lr 0.002 -> 0.001,
  // schedule.total_steps 1876 -> 2814"); "" when they are equal.
  std::string DifferencesFrom(const TableSpec& o) const;
  // Whether rows a checkpoint saved under `was` are this table's rows: the same name, kind,
  // shape, optimizer state (kind and slots) and consistency model. The rest (learning rate and
  // its schedule, other optimizer settings, the initialisation of rows the checkpoint lacks) may
  // change when a job resumes: training a few epochs more, or fine-tuning at another rate.
  bool CanRestoreFrom(const TableSpec& was) const;
};

}  // namespace pushpull
