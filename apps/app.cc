#include "apps/app.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "common/log.h"
#include "common/time.h"

namespace pushpull {

Status MetricsWriter::Write(const std::map<std::string, double>& fields) const {
  if (path_.empty()) return Status::OK();
  std::ostringstream os;
  os.precision(8);
  os << "{";
  bool first = true;
  for (const auto& [k, v] : fields) {
    os << (first ? "" : ", ") << "\"" << k << "\": ";
    if (std::isfinite(v)) os << v; else os << "null";
    first = false;
  }
  os << "}\n";
  std::ofstream f(path_, std::ios::app);
  if (!f) return Status::NotFound("cannot open --metrics_out file '" + path_ + "'");
  f << os.str();
  return f ? Status::OK() : Status::Internal("write to '" + path_ + "' failed");
}

Progress::Progress(std::string prefix, int interval_s)
    : prefix_(std::move(prefix)), interval_s_(interval_s), start_ms_(NowMs()), last_ms_(NowMs()) {}

void Progress::Update(int64_t step, double loss, int64_t samples) {
  int64_t now = NowMs();
  if (interval_s_ <= 0 || now - last_ms_ < interval_s_ * 1000) return;
  double rate = (samples - last_samples_) * 1000.0 / std::max<int64_t>(1, now - last_ms_);
  PP_LOG(Info) << prefix_ << " step " << step << " loss " << loss << " samples/s " << int64_t(rate)
               << " elapsed " << (now - start_ms_) / 1000 << "s";
  last_ms_ = now;
  last_samples_ = samples;
}

}  // namespace pushpull
