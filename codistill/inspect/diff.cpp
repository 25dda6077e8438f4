// codistill-inspect diff: how far apart two checkpoints of one model are, per parameter.
#include <cmath>

#include <fmt/format.h>

#include "codistill/inspect/format.hpp"
#include "codistill/inspect/inspect.hpp"

namespace codistill::inspect {

using json = Json;

namespace {

// Sums in double over float32 parameters: |a - b|^2, |a|^2, |b|^2 and a.b.
struct Sums {
  double diff2 = 0, a2 = 0, b2 = 0, dot = 0;
  void add(const Sums& o) {
    diff2 += o.diff2;
    a2 += o.a2;
    b2 += o.b2;
    dot += o.dot;
  }
};

Sums sums_of(std::span<const float> a, std::span<const float> b) {
  Sums s;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = b[i];
    s.diff2 += (x - y) * (x - y);
    s.a2 += x * x;
    s.b2 += y * y;
    s.dot += x * y;
  }
  return s;
}

// L2, relative L2 and cosine; the ratios are null (not NaN) when a norm is zero, as for a
// bias initialized to zeros.
json distances(const Sums& s) {
  const double l2 = std::sqrt(s.diff2), na = std::sqrt(s.a2), nb = std::sqrt(s.b2);
  return {{"l2", l2},
          {"relative_l2", na > 0 ? json(l2 / na) : json(nullptr)},
          {"cosine", na > 0 && nb > 0 ? json_number(s.dot / (na * nb)) : json(nullptr)},
          {"norm_a", na},
          {"norm_b", nb}};
}

std::string cell(const json& v) { return v.is_null() ? "-" : num(v.get<double>()); }

json side(const std::string& path, const checkpoint::CheckpointMeta& m) {
  return {{"path", path}, {"worker", m.worker}, {"step", m.step}, {"model_fingerprint", m.model_fingerprint}};
}

}  // namespace

Report diff(const std::string& path_a, const std::string& path_b) {
  // Attributes first: a mismatch is reported without reading either file's data.
  auto meta_a = checkpoint::read_meta(path_a), meta_b = checkpoint::read_meta(path_b);
  if (meta_a.model_fingerprint != meta_b.model_fingerprint)
    throw InspectError(fmt::format("{} and {} hold different models (fingerprints {} and {}): diff compares "
                                   "checkpoints of one architecture, parameter by parameter",
                                   path_a, path_b, meta_a.model_fingerprint, meta_b.model_fingerprint));
  auto a = read_checkpoint(path_a, false, false);
  auto b = read_checkpoint(path_b, false, false);

  json params = json::array();
  Sums total;
  Table table({"PARAMETER", "SHAPE", "L2", "REL L2", "COSINE", "|A|", "|B|"}, "llrrrrr");
  for (const auto& ta : a.params) {
    const checkpoint::TensorValue* tb = b.find(checkpoint::Section::params, ta.name);
    // Equal fingerprints mean equal names and shapes; a file that lies about its
    // fingerprint is still caught here rather than read out of bounds.
    if (!tb || tb->shape != ta.shape)
      throw InspectError(fmt::format("{}: parameter {} {} has no counterpart of that shape in {}", path_a, ta.name,
                                     kernels::shape_str(ta.shape), path_b));
    Sums s = sums_of(ta.values<float>(), tb->values<float>());
    total.add(s);
    json d = distances(s);
    table.add({ta.name, kernels::shape_str(ta.shape), cell(d["l2"]), cell(d["relative_l2"]), cell(d["cosine"]),
               cell(d["norm_a"]), cell(d["norm_b"])});
    json e = {{"name", ta.name}, {"shape", ta.shape}};
    e.update(d);
    params.push_back(std::move(e));
  }
  json all = distances(total);
  table.add({"(all parameters)", "", cell(all["l2"]), cell(all["relative_l2"]), cell(all["cosine"]),
             cell(all["norm_a"]), cell(all["norm_b"])});

  Report r;
  r.doc = {{"command", "diff"},
           {"a", side(path_a, a.meta)},
           {"b", side(path_b, b.meta)},
           {"params", std::move(params)},
           {"total", std::move(all)}};
  r.text = fmt::format("A: {} ({})\nB: {} ({})\n", path_a, describe(a.meta), path_b, describe(b.meta)) +
           "relative L2 = |A - B| / |A|; cosine of A and B as vectors\n" + table.render();
  return r;
}

}  // namespace codistill::inspect
