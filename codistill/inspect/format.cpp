#include "codistill/inspect/format.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "checkpoint/naming.hpp"

namespace codistill::inspect {

Table::Table(std::vector<std::string> header, std::string align) : align_(std::move(align)) {
  align_.resize(header.size(), 'l');
  rows_.push_back(std::move(header));
}

void Table::add(std::vector<std::string> row) {
  row.resize(rows_.front().size());
  rows_.push_back(std::move(row));
}

std::string Table::render(const std::string& indent) const {
  const std::size_t cols = rows_.front().size();
  std::vector<std::size_t> width(cols, 0);
  for (const auto& row : rows_)
    for (std::size_t c = 0; c < cols; ++c) width[c] = std::max(width[c], row[c].size());
  std::string out;
  for (const auto& row : rows_) {
    std::string line = indent;
    for (std::size_t c = 0; c < cols; ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      if (c > 0) line += "  ";
      line += align_[c] == 'r' ? pad + row[c] : row[c] + pad;
    }
    // Left-aligned last columns leave padding behind: trim it, as diffs of output hate it.
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + "\n";
  }
  return out;
}

std::string human_duration(double seconds) {
  if (!std::isfinite(seconds)) return "?";
  // A clock skewed between the writer and this machine can make a file look created in
  // the future: show that rather than a nonsense age.
  if (seconds < 0) return "in the future";
  auto s = static_cast<std::int64_t>(seconds);
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m {:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h {:02}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d {:02}h", s / 86400, s % 86400 / 3600);
}

std::string utc_time(std::int64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  if (!gmtime_r(&t, &tm)) return fmt::format("{} (unix)", unix_seconds);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.6g}", v);
}

std::string fixed(double v, int decimals) {
  if (!std::isfinite(v)) return num(v);
  return fmt::format("{:.{}f}", v, decimals);
}

std::string percent(double fraction) {
  if (!std::isfinite(fraction)) return num(fraction);
  return fmt::format("{:.2f}%", 100 * fraction);
}

Json json_number(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

namespace {

template <class T>
Stats stats_of(std::span<const T> v) {
  Stats s;
  s.count = static_cast<std::int64_t>(v.size());
  if (v.empty()) {
    s.mean = s.std = s.min = s.max = std::numeric_limits<double>::quiet_NaN();
    return s;
  }
  // Two passes in double: a one-pass sum of squares loses the spread of weights whose
  // mean is large compared with their std.
  double sum = 0;
  s.min = s.max = static_cast<double>(v[0]);
  for (T x : v) {
    const auto d = static_cast<double>(x);
    sum += d;
    s.min = std::min(s.min, d);
    s.max = std::max(s.max, d);
  }
  s.mean = sum / static_cast<double>(v.size());
  double sq = 0;
  for (T x : v) sq += (static_cast<double>(x) - s.mean) * (static_cast<double>(x) - s.mean);
  s.std = std::sqrt(sq / static_cast<double>(v.size()));
  return s;
}

}  // namespace

Stats tensor_stats(const checkpoint::TensorValue& t) {
  using checkpoint::ElemType;
  switch (t.type) {
    case ElemType::f32: return stats_of(t.values<float>());
    case ElemType::f64: return stats_of(t.values<double>());
    case ElemType::i64: return stats_of(t.values<std::int64_t>());
    case ElemType::u64: return stats_of(t.values<std::uint64_t>());
    case ElemType::bf16: break;  // read() widens it to float32
  }
  return {};
}

std::string name_step_mismatch(const std::string& path, std::int64_t step_attribute) {
  const std::string name = std::filesystem::path(path).filename().string();
  auto named = checkpoint::parse_checkpoint_file_name(name);
  if (!named) named = checkpoint::parse_teacher_file_name(name);
  if (!named || *named == step_attribute) return "";
  return fmt::format("step attribute {} disagrees with the file name (step {})", step_attribute, *named);
}

checkpoint::CheckpointData read_checkpoint(const std::string& path, bool optimizer, bool state) {
  checkpoint::ReadOptions o;
  o.optimizer = optimizer;
  o.state = state;
  return checkpoint::read(path, o);
}

std::string describe(const checkpoint::CheckpointMeta& meta) {
  return fmt::format("worker {}, step {}", meta.worker, meta.step);
}

}  // namespace codistill::inspect
