// Where an image model's training step goes, layer by layer, against the float32 GEMM peak
// measured in the same process:
//   bench_layer_times --config configs/fmnist_cnn.yaml [--threads 2] [--block 10]
//                     [--blocks 8] [--warmup 5] [--set key=value ...]
// Each block runs three things in turn, so that a slow spell of the host (docs/results.md)
// falls on all three alike:
//   peak   square 1024 and 2048 float32 GEMMs, through the CPU fast path (kernels/cpu/gemm.hpp,
//          the trainer's own GEMM) and through one multi-threaded oneDNN sgemm call: the best
//          rate of three calls each (bench_sgemm's "peak", in fewer calls);
//   layers `block` passes over the model's top-level modules one by one as the step runs
//          them, on the trainer's first batch in its micro-batches (StepFixture::first_batch):
//          the gradients marked or zeroed as the step does (Model::zero_grad_lazily),
//          each module's forward in the root's order (a ReLU after the max pool that follows
//          it: Sequential::runs_after_next), then each backward in reverse from a fixed
//          dlogits, skipping what Model::backward skips (modules before the first with
//          parameters; that one without its input gradient); each call timed on its own
//          (the queue synchronized after it);
//   step   `block` of the trainer's own steps (TrainStep: batch, loss and update included),
//          timed phase by phase (StepHooks::times, as bench_step_phases).
// Per module it prints forward and backward milliseconds (medians over the blocks), the
// multiply-adds of its convolutions and linear maps as FLOPs (2 per multiply-add; backward:
// the weight gradient, plus the input gradient where it is computed), their GFLOP/s, and
// "lost": its milliseconds minus its FLOPs' time at the peak rate. The lost times of the
// modules and the step's time outside its forward and backward phases (batch, loss,
// zeroing, update) add up to the gap between the step and its FLOPs at the peak, up to the
// difference between the layers' sum and the step's own forward and backward (printed):
// they say where a model's share of the peak goes. Modules other than convolutions, linear
// maps and Sequential containers of them count no FLOPs (pooling, activations, norms:
// memory-bound work, all "lost"); a container of another kind with parameters inside (a
// residual block) is marked unknown. The peak is a yardstick, not a ceiling: oneDNN's
// convolution kernels can beat its sgemm (a negative "lost").
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/bench_args.hpp"
#include "bench/train/step_fixture.hpp"
#include "codistill/nn/blocks/sequential.hpp"

using namespace codistill;
using codistill::bench::median;
using Clock = std::chrono::steady_clock;

namespace {

using Args = bench::StepArgs;  // its defaults: blocks of 10 passes and steps, 8 blocks, 5 warm-up steps

Args parse(int argc, char** argv) {
  Args a;
  bench::ArgReader r(argc, argv);
  while (r.next())
    if (!a.read(r)) throw std::invalid_argument("unknown argument " + r.key() + " (valid: " + Args::kValid + ")");
  a.check();
  return a;
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Multiply-adds x 2 of one example's forward through m from input shape `in` (no batch
// dimension); nullopt where a container of another kind holds parameters.
std::optional<double> forward_flops(Module& m, const kernels::Shape& in) {
  if (auto* seq = dynamic_cast<Sequential*>(&m)) {
    double sum = 0;
    kernels::Shape s = in;
    for (const auto& [name, child] : seq->children()) {
      const auto f = forward_flops(*child, s);
      if (!f) return std::nullopt;
      sum += *f;
      s = child->output_shape(s);
    }
    return sum;
  }
  if (m.kind() == "conv2d" || m.kind() == "linear") {
    // weight [out, in/groups (x k x k)]: each output element takes numel/out multiply-adds.
    const kernels::Tensor& w = *m.params().front().value;
    const kernels::Shape out = m.output_shape(in);
    double out_numel = 1;
    for (std::int64_t d : out) out_numel *= static_cast<double>(d);
    return 2.0 * out_numel * static_cast<double>(w.numel() / w.shape()[0]);
  }
  if (m.has_params()) return std::nullopt;
  return 0.0;
}

struct Row {
  std::string name, kind;
  kernels::Shape out;
  std::optional<double> fwd_flops, bwd_flops;  // per step (the whole batch)
  bool backward = false;                       // Model::backward runs it
  std::vector<double> fwd_ms, bwd_ms;          // per block
};

using Children = std::vector<std::pair<std::string, ModulePtr>>;

// The modules as Model::backward runs them: none before the first with parameters (its index,
// or children.size() if none has any).
std::size_t first_with_params(const Children& children) {
  for (std::size_t i = 0; i < children.size(); ++i)
    if (children[i].second->has_params()) return i;
  return children.size();
}

// One row per top-level module, its FLOPs per step for a batch of `batch` examples.
std::vector<Row> module_rows(const Children& children, std::size_t first, kernels::Shape shape, double batch) {
  std::vector<Row> rows;
  for (std::size_t i = 0; i < children.size(); ++i) {
    Module& m = *children[i].second;
    Row r{children[i].first, m.kind(), m.output_shape(shape), forward_flops(m, shape), std::nullopt, i >= first,
          {}, {}};
    if (r.fwd_flops) {
      *r.fwd_flops *= batch;
      // Backward: the weight gradient's GEMMs match the forward's, and so do the input
      // gradient's where it is computed (not for the first module with parameters).
      r.bwd_flops = r.backward ? *r.fwd_flops * (i > first ? 2.0 : 1.0) : 0.0;
    }
    shape = r.out;
    rows.push_back(std::move(r));
  }
  return rows;
}

// The order the root runs its children in (a ReLU after the MaxPool2d that follows it,
// Sequential::runs_after_next); backward runs it in reverse.
std::vector<std::size_t> run_order(const Sequential& root) {
  const std::size_t n = root.children().size();
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < n; ++i)
    if (i + 1 < n && root.runs_after_next(i)) {
      order.push_back(i + 1);
      order.push_back(i++);
    } else {
      order.push_back(i);
    }
  return order;
}

// The peak's GEMMs; operands filled with normal numbers (no denormals to slow them).
struct PeakGemms {
  std::vector<float> ga = std::vector<float>(2048 * 2048, 0.5f), gb = std::vector<float>(2048 * 2048, 0.25f),
                     gc = std::vector<float>(2048 * 2048);

  double gflops() {
    double best = 0;
    for (const std::int64_t n : {1024, 2048})
      for (const bool onednn : {false, true})
        for (int r = 0; r < 3; ++r) {
          const auto t0 = Clock::now();
          if (!onednn)
            kernels::cpu::gemm<float>(false, false, n, n, n, 1.0f, ga.data(), gb.data(), 0.0f, gc.data());
          else if (dnnl_sgemm('N', 'N', n, n, n, 1.0f, ga.data(), n, gb.data(), n, 0.0f, gc.data(), n) != dnnl_success)
            throw std::runtime_error("dnnl_sgemm failed");
          best = std::max(best, 2.0 * static_cast<double>(n * n * n) / (ms_since(t0) * 1e6));
        }
    return best;
  }
};

// The trainer's first batch in its micro-batches, each with a fixed dlogits.
struct Batch {
  std::vector<kernels::Tensor> xs, dlogits;
};

// One block's `passes` passes over the modules one by one (the header's "layers"): appends
// each module's mean milliseconds per pass to its row; returns their sum.
double time_layer_passes(Model& model, const std::vector<std::size_t>& order, std::size_t first, const Batch& batch,
                         int passes, std::vector<Row>& rows) {
  const Children& children = model.root().children();
  std::vector<double> fwd(rows.size(), 0.0), bwd(rows.size(), 0.0);
  for (int p = 0; p < passes; ++p) {
    model.zero_grad_lazily();
    model.synchronize();
    for (std::size_t part = 0; part < batch.xs.size(); ++part) {
      kernels::Tensor h = batch.xs[part];
      for (std::size_t i : order) {
        const auto t0 = Clock::now();
        h = children[i].second->forward(h, /*training=*/true);
        model.synchronize();
        fwd[i] += ms_since(t0);
      }
      kernels::Tensor g = batch.dlogits[part];
      for (auto it = order.rbegin(); it != order.rend(); ++it) {
        const std::size_t i = *it;
        if (i < first) continue;
        const auto t0 = Clock::now();
        g = children[i].second->backward(g, /*need_dx=*/i > first);
        model.synchronize();
        bwd[i] += ms_since(t0);
      }
    }
  }
  double total = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    rows[i].fwd_ms.push_back(fwd[i] / passes);
    rows[i].bwd_ms.push_back(bwd[i] / passes);
    total += (fwd[i] + bwd[i]) / passes;
  }
  return total;
}

// Per block: the peak, the layers one by one and the trainer's steps (medians taken later).
struct Blocks {
  std::vector<double> peak, layers_ms, step_ms, step_fwd, step_bwd;
};

// The medians over the blocks, and what they make of the step's gap to the peak.
struct Summary {
  double pk, step, layers, fwd_bwd, outside, at_peak, gap;
  Summary(const Blocks& b, double step_flops)
      : pk(median(b.peak)), step(median(b.step_ms)), layers(median(b.layers_ms)),
        fwd_bwd(median(b.step_fwd) + median(b.step_bwd)), outside(step - fwd_bwd),
        at_peak(step_flops / (pk * 1e6)), gap(step - at_peak) {}
};

// The per-module table (and the JSON's "modules" entries, appended to json).
void print_modules(const std::vector<Row>& rows, const Summary& s, std::string& json) {
  std::printf("%-10s %-10s %-14s %8s %8s %8s %8s %8s %8s %7s\n", "module", "kind", "output", "fwd ms", "bwd ms",
              "fwd GF/s", "bwd GF/s", "fwd lost", "bwd lost", "of gap");
  auto gflops = [](std::optional<double> flops, double ms) {
    return flops && *flops > 0 && ms > 0 ? fmt::format("{:.1f}", *flops / (ms * 1e6)) : std::string("-");
  };
  auto lost = [&](std::optional<double> flops, double ms) {
    return flops ? std::optional<double>(ms - *flops / (s.pk * 1e6)) : std::nullopt;
  };
  auto fmt_ms = [](std::optional<double> v) { return v ? fmt::format("{:.3f}", *v) : std::string("?"); };
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const double fm = median(r.fwd_ms), bm = median(r.bwd_ms);
    const auto fl = lost(r.fwd_flops, fm), bl = lost(r.bwd_flops, bm);
    std::string out = "[";
    for (std::size_t d = 0; d < r.out.size(); ++d) {
      if (d) out += ",";
      out += std::to_string(r.out[d]);
    }
    out += "]";
    const std::string share = fl && bl && s.gap > 0 ? fmt::format("{:.1f}%", 100 * (*fl + *bl) / s.gap) : "-";
    std::printf("%-10s %-10s %-14s %8.3f %8.3f %8s %8s %8s %8s %7s\n", r.name.c_str(), r.kind.c_str(), out.c_str(), fm,
                bm, gflops(r.fwd_flops, fm).c_str(), gflops(r.bwd_flops, bm).c_str(), fmt_ms(fl).c_str(),
                fmt_ms(bl).c_str(), share.c_str());
    json += fmt::format(R"({}{{"name":{},"kind":"{}","fwd_ms":{:.5f},"bwd_ms":{:.5f},"fwd_gflop":{},"bwd_gflop":{}}})",
                        i ? "," : "", nlohmann::json(r.name).dump(), r.kind, fm, bm,
                        r.fwd_flops ? fmt::format("{:.6f}", *r.fwd_flops / 1e9) : "null",
                        r.bwd_flops ? fmt::format("{:.6f}", *r.bwd_flops / 1e9) : "null");
  }
}

void print_report(const Args& a, const Config& c, const std::vector<Row>& rows, const Blocks& b, double step_flops) {
  const Summary s(b, step_flops);
  std::printf("\npeak (median of blocks) %.1f GFLOP/s; step %.3f ms median (best %.3f), %.3f GFLOP per step: %.1f "
              "GFLOP/s = %.1f%% of the peak; at the peak its FLOPs take %.3f ms, %.3f ms less\n",
              s.pk, s.step, *std::min_element(b.step_ms.begin(), b.step_ms.end()), step_flops / 1e9,
              step_flops / (s.step * 1e6), 100 * step_flops / (s.step * 1e6) / s.pk, s.at_peak, s.gap);
  std::printf("the step's forward + backward phases %.3f ms, the modules one by one %.3f ms (%+.3f)\n", s.fwd_bwd,
              s.layers, s.layers - s.fwd_bwd);
  std::string json = fmt::format(
      R"({{"bench":"layer_times","config":{},"threads":{},"batch":{},"blocks":{},"block":{},"peak_gflops":{:.2f},)"
      R"("peak_gflops_best":{:.2f},"step_ms":{:.5f},"step_ms_best":{:.5f},"step_fwd_bwd_ms":{:.5f},)"
      R"("outside_ms":{:.5f},"layers_ms":{:.5f},"step_gflop":{:.6f},"modules":[)",
      nlohmann::json(a.config).dump(), c.run.threads, c.data.batch_size, a.blocks, a.block, s.pk,
      *std::max_element(b.peak.begin(), b.peak.end()), s.step, *std::min_element(b.step_ms.begin(), b.step_ms.end()),
      s.fwd_bwd, s.outside, s.layers, step_flops / 1e9);
  print_modules(rows, s, json);
  std::printf("%-25s %-14s %8.3f %8s %8s %8s %8s %8s %7s\n", "the step outside them", "(batch,loss,..)", s.outside, "",
              "", "", "", "", s.gap > 0 ? fmt::format("{:.1f}%", 100 * s.outside / s.gap).c_str() : "-");
  std::printf("%s]}\n", json.c_str());
}

int run(const Args& a) {
  bench::StepFixture f(a.config, a.overrides, a.threads, 0);
  const Config& c = f.config();
  Model& model = f.student();
  f.steps(0, a.warmup);

  const Children& children = model.root().children();
  const std::size_t first = first_with_params(children);
  std::vector<Row> rows = module_rows(children, first, f.example_shape(), static_cast<double>(c.data.batch_size));
  const std::vector<std::size_t> order = run_order(model.root());
  for (std::size_t i = 0; i + 1 < rows.size(); ++i)
    if (model.root().runs_after_next(i)) rows[i].out = rows[i + 1].out;  // the relu sees the pooled map
  Batch batch;
  for (const kernels::Tensor& part : f.first_batch()) {
    batch.xs.push_back(part.to(model.device()));
    batch.dlogits.push_back(kernels::Tensor::full({part.shape()[0], rows.back().out.back()}, 1e-3).to(model.device()));
  }
  PeakGemms gemms;
  gemms.gflops();  // warm-up

  std::printf("bench_layer_times: %s, batch %lld, %d threads; %d blocks of %d passes and %d steps after %d warm-up "
              "steps\n",
              a.config.c_str(), static_cast<long long>(c.data.batch_size), c.run.threads, a.blocks, a.block, a.block,
              a.warmup);
  std::printf("%-6s %10s %10s %10s %10s\n", "block", "peak GF/s", "layers ms", "step ms", "step GF/s");
  Blocks b;
  double step_flops = 0;
  for (const Row& r : rows) step_flops += r.fwd_flops.value_or(0) + r.bwd_flops.value_or(0);
  for (int k = 0; k < a.blocks; ++k) {
    b.peak.push_back(gemms.gflops());
    const double total = time_layer_passes(model, order, first, batch, a.block, rows);
    b.layers_ms.push_back(total);
    // The passes above left the gradients as a step's backward does; the step starts anew.
    StepTimes t;
    const auto t0 = Clock::now();
    f.steps(0, a.block, &t);
    b.step_ms.push_back(ms_since(t0) / a.block);
    b.step_fwd.push_back(t.seconds[StepTimes::forward] * 1e3 / static_cast<double>(t.steps));
    b.step_bwd.push_back(t.seconds[StepTimes::backward] * 1e3 / static_cast<double>(t.steps));
    std::printf("%-6d %10.1f %10.3f %10.3f %10.1f\n", k + 1, b.peak.back(), total, b.step_ms.back(),
                step_flops / (b.step_ms.back() * 1e6));
  }
  print_report(a, c, rows, b, step_flops);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_layer_times: %s\n", e.what());
    return 1;
  }
}
