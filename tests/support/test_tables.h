// Small tables the tests make, each with the numbers its tests count on (rows, dims, learning
// rates, consistency), and a shard helper the server-state tests share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/cluster.h"
#include "server/table/shard.h"

namespace pushpull {

// The consistency tests' counters: `rows` rows of 2 under `c`, SGD with lr 1 (a gradient of -1
// adds exactly 1).
inline TableSpec CounterTable(int rows, Consistency c) {
  TableSpec s;
  s.name = "counters";
  s.rows = rows;
  s.dim = 2;
  s.consistency = c;
  s.optimizer.kind = opt::Kind::kSgd;
  s.optimizer.lr = 1.0f;
  return s;
}

// 8 rows of dim 4, zeros, ASP, SGD with lr 1: a gradient of -1 moves a row by exactly 1.
inline TableSpec AspLrOne(const char* name) {
  TableSpec spec;
  spec.name = name;
  spec.rows = 8;
  spec.dim = 4;
  spec.init = InitKind::kZeros;
  spec.consistency = {Consistency::kAsp, 0};
  spec.optimizer.lr = 1.0f;
  return spec;
}

// A dense ASP table of `rows` x `dim`: zeros, SGD with the default lr (0.01).
inline TableSpec AspTable(const std::string& name, uint64_t rows, uint32_t dim) {
  TableSpec s;
  s.name = name;
  s.rows = rows;
  s.dim = dim;
  s.consistency.model = Consistency::kAsp;
  return s;
}

// The same, sparse: rows made as their keys come.
inline TableSpec AspSparse(const std::string& name, uint32_t dim) {
  TableSpec s = AspTable(name, 0, dim);
  s.sparse = true;
  return s;
}

// A sparse SGD table of `dim` floats a row.
inline TableSpec SgdSparse(const std::string& name, uint32_t dim, InitKind init = InitKind::kZeros) {
  TableSpec s;
  s.name = name;
  s.sparse = true;
  s.dim = dim;
  s.init = init;
  s.optimizer.kind = opt::Kind::kSgd;
  return s;
}

// A sparse Adam table "emb" of dim 3, lr 0.1, zeros, BSP.
inline TableSpec AdamSparse() {
  TableSpec s;
  s.name = "emb";
  s.sparse = true;
  s.dim = 3;
  s.optimizer.kind = opt::Kind::kAdam;
  s.optimizer.lr = 0.1f;
  return s;
}

// A one-stripe shard's selection of keys (its first stripe's part).
inline table::RowSelection FirstStripeOf(table::TableShard& t, const std::vector<Key>& keys) {
  std::vector<table::RowSelection> v;
  t.Split(keys.data(), keys.size(), &v);
  return v[0];
}

// The checkpoint tests' table: dense of 10 x 4 or sparse of dim 4, uniform from seed 7, `kind`
// with lr 0.05, BSP.
inline TableSpec CheckpointSpec(const std::string& name, bool sparse, opt::Kind kind) {
  TableSpec s;
  s.name = name;
  s.sparse = sparse;
  s.rows = sparse ? 0 : 10;
  s.dim = 4;
  s.init = InitKind::kUniform;
  s.seed = 7;
  s.optimizer.kind = kind;
  s.optimizer.lr = 0.05f;
  s.consistency = *ParseConsistency("bsp");
  return s;
}

}  // namespace pushpull
