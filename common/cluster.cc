// The cluster vocabulary (common/cluster.h) and the public table types (pushpull/table.h).
#include "common/cluster.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "optimizers/optimizer.h"

namespace pushpull {

const char* RoleName(Role r) {
  switch (r) {
    case Role::kScheduler: return "scheduler";
    case Role::kServer: return "server";
    case Role::kWorker: return "worker";
  }
  return "?";
}

std::string Consistency::ToString() const {
  switch (model) {
    case kBsp: return "bsp";
    case kSsp: return "ssp:" + std::to_string(staleness);
    case kAsp: return "asp";
  }
  return "?";
}

Result<Consistency> ParseConsistency(const std::string& s) {
  Consistency c;
  if (s == "bsp") return c;
  if (s == "asp") {
    c.model = Consistency::kAsp;
    return c;
  }
  if (s.rfind("ssp:", 0) == 0) {
    char* end = nullptr;
    long k = std::strtol(s.c_str() + 4, &end, 10);
    if (end && *end == '\0' && s.size() > 4 && k >= 0 && k <= 1000000) {
      c.model = Consistency::kSsp;
      c.staleness = static_cast<int32_t>(k);
      return c;
    }
  }
  return Status::InvalidArgument("consistency '" + s + "' must be bsp, ssp:K (K >= 0) or asp");
}

Result<InitKind> ParseInitKind(const std::string& s) {
  if (s == "zeros") return InitKind::kZeros;
  if (s == "uniform") return InitKind::kUniform;
  if (s == "normal") return InitKind::kNormal;
  if (s == "glorot") return InitKind::kGlorot;
  return Status::InvalidArgument("init '" + s + "' must be zeros, uniform, normal or glorot");
}

Status TableSpec::Validate() const {
  if (name.empty() || name.size() > 128) return Status::InvalidArgument("table name must have 1 to 128 characters");
  if (!sparse && (rows == 0 || rows > (uint64_t(1) << 40)))
    return Status::InvalidArgument("table '" + name + "': dense rows must be in [1, 2^40]");
  if (dim == 0 || dim > (1u << 24)) return Status::InvalidArgument("table '" + name + "': dim must be in [1, 2^24]");
  if (!sparse && rows > (uint64_t(1) << 36) / dim)  // (rows * dim would wrap at 2^40 x 2^24)
    return Status::InvalidArgument("table '" + name + "': rows*dim exceeds 2^36 floats");
  if (static_cast<uint8_t>(init) > static_cast<uint8_t>(InitKind::kGlorot))
    return Status::InvalidArgument("table '" + name + "': unknown init kind " + std::to_string(int(init)));
  if (!(init_scale >= 0) || !std::isfinite(init_scale))
    return Status::InvalidArgument("table '" + name + "': init_scale must be finite and >= 0");
  if (glorot_bias_columns >= dim && init == InitKind::kGlorot)
    return Status::InvalidArgument("table '" + name + "': glorot_bias_columns must be < dim");
  if (consistency.model > Consistency::kAsp || consistency.staleness < 0)
    return Status::InvalidArgument("table '" + name + "': bad consistency model");
  // FTRL's weights follow from its z and n alone, which start at 0: its first update would set
  // every initial value back to about 0 (optimizers/ftrl.cc).
  if (optimizer.kind == opt::Kind::kFtrl && init != InitKind::kZeros && (init_scale != 0 || init == InitKind::kGlorot))
    return Status::InvalidArgument("table '" + name +
                                   "': FTRL starts from zero weights (its z and n start at 0); "
                                   "init must be zeros");
  return opt::Validate(optimizer).Annotate("table '" + name + "'");
}

bool TableSpec::operator==(const TableSpec& o) const {
  return name == o.name && sparse == o.sparse && (sparse || rows == o.rows) && dim == o.dim && init == o.init &&
         init_scale == o.init_scale && seed == o.seed && glorot_bias_columns == o.glorot_bias_columns &&
         optimizer == o.optimizer && consistency == o.consistency;
}

namespace {
template <class T>
void Differs(std::string* out, const char* what, const T& was, const T& now) {
  if (was == now) return;
  std::ostringstream os;
  os << (out->empty() ? "" : ", ") << what << " " << was << " -> " << now;
  *out += os.str();
}
}  // namespace

std::string TableSpec::DifferencesFrom(const TableSpec& o) const {
  std::string d;
  const opt::OptimizerConfig &a = o.optimizer, &b = optimizer;
  Differs(&d, "name", o.name, name);
  Differs(&d, "sparse", o.sparse, sparse);
  if (!sparse || !o.sparse) Differs(&d, "rows", o.rows, rows);
  Differs(&d, "dim", o.dim, dim);
  auto init_name = [](InitKind k) {
    static const char* const kNames[] = {"zeros", "uniform", "normal", "glorot"};
    return std::string(size_t(k) < 4 ? kNames[size_t(k)] : "?");
  };
  auto schedule_name = [](opt::ScheduleKind k) {
    static const char* const kNames[] = {"constant", "step", "cosine"};
    return std::string(size_t(k) < 3 ? kNames[size_t(k)] : "?");
  };
  Differs(&d, "init", init_name(o.init), init_name(init));
  Differs(&d, "init_scale", o.init_scale, init_scale);
  Differs(&d, "seed", o.seed, seed);
  Differs(&d, "glorot_bias_columns", o.glorot_bias_columns, glorot_bias_columns);
  Differs(&d, "optimizer", std::string(opt::KindName(a.kind)), std::string(opt::KindName(b.kind)));
  Differs(&d, "lr", a.lr, b.lr);
  Differs(&d, "momentum", a.momentum, b.momentum);
  Differs(&d, "nesterov", a.nesterov, b.nesterov);
  Differs(&d, "weight_decay", a.weight_decay, b.weight_decay);
  Differs(&d, "beta1", a.beta1, b.beta1);
  Differs(&d, "beta2", a.beta2, b.beta2);
  Differs(&d, "epsilon", a.epsilon, b.epsilon);
  Differs(&d, "amsgrad", a.amsgrad, b.amsgrad);
  Differs(&d, "initial_accumulator", a.initial_accumulator, b.initial_accumulator);
  Differs(&d, "ftrl_alpha", a.ftrl_alpha, b.ftrl_alpha);
  Differs(&d, "ftrl_beta", a.ftrl_beta, b.ftrl_beta);
  Differs(&d, "ftrl_l1", a.ftrl_l1, b.ftrl_l1);
  Differs(&d, "ftrl_l2", a.ftrl_l2, b.ftrl_l2);
  Differs(&d, "schedule", schedule_name(a.schedule.kind), schedule_name(b.schedule.kind));
  Differs(&d, "schedule.warmup_steps", a.schedule.warmup_steps, b.schedule.warmup_steps);
  Differs(&d, "schedule.step_size", a.schedule.step_size, b.schedule.step_size);
  Differs(&d, "schedule.gamma", a.schedule.gamma, b.schedule.gamma);
  Differs(&d, "schedule.total_steps", a.schedule.total_steps, b.schedule.total_steps);
  Differs(&d, "schedule.min_lr_ratio", a.schedule.min_lr_ratio, b.schedule.min_lr_ratio);
  Differs(&d, "clip_norm", a.clip_norm, b.clip_norm);
  Differs(&d, "staleness_aware", a.staleness_aware, b.staleness_aware);
  Differs(&d, "consistency", o.consistency.ToString(), consistency.ToString());
  return d;
}

bool TableSpec::CanRestoreFrom(const TableSpec& was) const {
  auto slots = [](const opt::OptimizerConfig& c) {
    auto o = opt::Optimizer::Create(c);
    return o ? o->num_slots() : -1;
  };
  return name == was.name && sparse == was.sparse && (sparse || rows == was.rows) && dim == was.dim &&
         optimizer.kind == was.optimizer.kind && slots(optimizer) == slots(was.optimizer) &&
         consistency == was.consistency;
}

std::string TableSpec::ToString() const {
  std::ostringstream os;
  os << "'" << name << "' " << (sparse ? "sparse" : "dense");
  if (!sparse) os << " rows=" << rows;
  os << " dim=" << dim << " optimizer=" << opt::KindName(optimizer.kind);
  // (FTRL's step size is its alpha; it does not read lr.)
  if (optimizer.kind == opt::Kind::kFtrl)
    os << " alpha=" << optimizer.ftrl_alpha << " beta=" << optimizer.ftrl_beta << " l1=" << optimizer.ftrl_l1
       << " l2=" << optimizer.ftrl_l2;
  else
    os << " lr=" << optimizer.lr;
  os << " consistency=" << consistency.ToString();
  return os.str();
}

TableInfo TableInfo::Make(uint32_t id, const TableSpec& spec, int num_servers) {
  TableInfo t;
  t.id = id;
  t.spec = spec;
  t.row_offsets.resize(num_servers + 1, 0);
  if (!spec.sparse) {
    // Contiguous, balanced ranges: the first (rows % S) servers get one extra row.
    uint64_t base = spec.rows / num_servers, extra = spec.rows % num_servers;
    for (int s = 0; s < num_servers; ++s)
      t.row_offsets[s + 1] = t.row_offsets[s] + base + (uint64_t(s) < extra ? 1 : 0);
  } else {
    t.bucket_owner.resize(kBuckets);
    for (uint32_t b = 0; b < kBuckets; ++b) t.bucket_owner[b] = static_cast<uint16_t>(b % num_servers);
  }
  return t;
}

uint64_t TableInfo::BlockRows(int s) const {
  const uint64_t rows = row_offsets[s + 1] - row_offsets[s];
  const uint64_t row_bytes = uint64_t(std::max<uint32_t>(spec.dim, 1)) * sizeof(float);
  const uint64_t by_bytes = std::max<uint64_t>(1, kBlockBytes / row_bytes);
  const uint64_t by_count = (rows + kMaxBlocks - 1) / kMaxBlocks;
  return std::max(by_bytes, by_count);
}

uint64_t TableInfo::KeysPerRequest(uint64_t n) const {
  if (!spec.sparse) return std::max<uint64_t>(n, 1);
  return std::max(KeyedBlockRows(spec.dim), (n + kMaxBlocks - 1) / kMaxBlocks);
}

int TableInfo::OwnerOf(Key key) const {
  if (spec.sparse) return bucket_owner[BucketOf(key)];
  // Binary search over the S+1 offsets.
  int lo = 0, hi = num_servers() - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (row_offsets[mid] <= key)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

float InitialValue(const TableSpec& spec, Key row, uint32_t col) {
  if (spec.init == InitKind::kZeros) return 0.0f;
  uint64_t h = SplitMix64(spec.seed * 0x2545F4914F6CDD1DULL ^ SplitMix64(row) ^ (uint64_t(col) << 40));
  double u1 = ((h >> 11) + 0.5) * (1.0 / 9007199254740992.0);  // (0, 1)
  switch (spec.init) {
    case InitKind::kUniform: return static_cast<float>((2 * u1 - 1) * spec.init_scale);
    case InitKind::kNormal: {
      uint64_t h2 = SplitMix64(h);
      double u2 = ((h2 >> 11) + 0.5) * (1.0 / 9007199254740992.0);
      return static_cast<float>(std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2) * spec.init_scale);
    }
    case InitKind::kGlorot: {
      uint32_t fan_in = spec.dim - spec.glorot_bias_columns;
      if (col >= fan_in) return 0.0f;  // bias columns start at zero
      double fan_out = spec.sparse ? 1.0 : double(spec.rows);
      double limit = std::sqrt(6.0 / (fan_in + fan_out));
      return static_cast<float>((2 * u1 - 1) * limit);
    }
    default: return 0.0f;
  }
}

}  // namespace pushpull
