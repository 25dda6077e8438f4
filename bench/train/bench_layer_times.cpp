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

int run(const Args& a) {
  bench::StepFixture f(a.config, a.overrides, a.threads, 0);
  const Config& c = f.config();
  Model& model = f.student();
  const auto batch = static_cast<double>(c.data.batch_size);
  f.steps(0, a.warmup);

  // The modules as Model::backward runs them: none before the first with parameters.
  auto& children = model.root().children();
  std::size_t first = children.size();
  for (std::size_t i = 0; i < children.size(); ++i)
    if (children[i].second->has_params()) {
      first = i;
      break;
    }
  std::vector<Row> rows;
  kernels::Shape shape = f.example_shape();
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

  // The order the root runs its children in (a ReLU after the MaxPool2d that follows it,
  // Sequential::runs_after_next); backward runs it in reverse.
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < children.size(); ++i)
    if (i + 1 < children.size() && model.root().runs_after_next(i)) {
      order.push_back(i + 1);
      order.push_back(i++);
    } else {
      order.push_back(i);
    }
  for (std::size_t i = 0; i + 1 < rows.size(); ++i)
    if (model.root().runs_after_next(i)) rows[i].out = rows[i + 1].out;  // the relu sees the pooled map
  // The trainer's first batch in its micro-batches, each with a fixed dlogits.
  std::vector<kernels::Tensor> xs, dlogits;
  for (const kernels::Tensor& part : f.first_batch()) {
    xs.push_back(part.to(model.device()));
    dlogits.push_back(kernels::Tensor::full({part.shape()[0], rows.back().out.back()}, 1e-3).to(model.device()));
  }

  // The peak's GEMMs; operands filled with normal numbers (no denormals to slow them).
  std::vector<float> ga(2048 * 2048, 0.5f), gb(2048 * 2048, 0.25f), gc(2048 * 2048);
  auto peak_gflops = [&] {
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
  };
  peak_gflops();  // warm-up

  std::printf("bench_layer_times: %s, batch %lld, %d threads; %d blocks of %d passes and %d steps after %d warm-up "
              "steps\n",
              a.config.c_str(), static_cast<long long>(c.data.batch_size), c.run.threads, a.blocks, a.block, a.block,
              a.warmup);
  std::printf("%-6s %10s %10s %10s %10s\n", "block", "peak GF/s", "layers ms", "step ms", "step GF/s");
  std::vector<double> peak, layers_ms, step_ms, step_fwd, step_bwd;
  double step_flops = 0;
  for (const Row& r : rows) step_flops += r.fwd_flops.value_or(0) + r.bwd_flops.value_or(0);
  for (int b = 0; b < a.blocks; ++b) {
    peak.push_back(peak_gflops());

    std::vector<double> fwd(rows.size(), 0.0), bwd(rows.size(), 0.0);
    for (int p = 0; p < a.block; ++p) {
      model.zero_grad_lazily();
      model.synchronize();
      for (std::size_t part = 0; part < xs.size(); ++part) {
        kernels::Tensor h = xs[part];
        for (std::size_t i : order) {
          const auto t0 = Clock::now();
          h = children[i].second->forward(h, /*training=*/true);
          model.synchronize();
          fwd[i] += ms_since(t0);
        }
        kernels::Tensor g = dlogits[part];
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
      rows[i].fwd_ms.push_back(fwd[i] / a.block);
      rows[i].bwd_ms.push_back(bwd[i] / a.block);
      total += (fwd[i] + bwd[i]) / a.block;
    }
    layers_ms.push_back(total);
    // The passes above left the gradients as a step's backward does; the step starts anew.
    StepTimes t;
    const auto t0 = Clock::now();
    f.steps(0, a.block, &t);
    step_ms.push_back(ms_since(t0) / a.block);
    step_fwd.push_back(t.seconds[StepTimes::forward] * 1e3 / static_cast<double>(t.steps));
    step_bwd.push_back(t.seconds[StepTimes::backward] * 1e3 / static_cast<double>(t.steps));
    std::printf("%-6d %10.1f %10.3f %10.3f %10.1f\n", b + 1, peak.back(), total, step_ms.back(),
                step_flops / (step_ms.back() * 1e6));
  }

  const double pk = median(peak), step = median(step_ms), layers = median(layers_ms);
  const double fwd_bwd = median(step_fwd) + median(step_bwd), outside = step - fwd_bwd;
  const double at_peak = step_flops / (pk * 1e6), gap = step - at_peak;
  std::printf("\npeak (median of blocks) %.1f GFLOP/s; step %.3f ms median (best %.3f), %.3f GFLOP per step: %.1f "
              "GFLOP/s = %.1f%% of the peak; at the peak its FLOPs take %.3f ms, %.3f ms less\n",
              pk, step, *std::min_element(step_ms.begin(), step_ms.end()), step_flops / 1e9,
              step_flops / (step * 1e6), 100 * step_flops / (step * 1e6) / pk, at_peak, gap);
  std::printf("the step's forward + backward phases %.3f ms, the modules one by one %.3f ms (%+.3f)\n", fwd_bwd,
              layers, layers - fwd_bwd);
  std::printf("%-10s %-10s %-14s %8s %8s %8s %8s %8s %8s %7s\n", "module", "kind", "output", "fwd ms", "bwd ms",
              "fwd GF/s", "bwd GF/s", "fwd lost", "bwd lost", "of gap");
  auto gflops = [](std::optional<double> flops, double ms) {
    return flops && *flops > 0 && ms > 0 ? fmt::format("{:.1f}", *flops / (ms * 1e6)) : std::string("-");
  };
  auto lost = [&](std::optional<double> flops, double ms) {
    return flops ? std::optional<double>(ms - *flops / (pk * 1e6)) : std::nullopt;
  };
  auto fmt_ms = [](std::optional<double> v) { return v ? fmt::format("{:.3f}", *v) : std::string("?"); };
  std::string json = fmt::format(
      R"({{"bench":"layer_times","config":{},"threads":{},"batch":{},"blocks":{},"block":{},"peak_gflops":{:.2f},)"
      R"("peak_gflops_best":{:.2f},"step_ms":{:.5f},"step_ms_best":{:.5f},"step_fwd_bwd_ms":{:.5f},)"
      R"("outside_ms":{:.5f},"layers_ms":{:.5f},"step_gflop":{:.6f},"modules":[)",
      nlohmann::json(a.config).dump(), c.run.threads, c.data.batch_size, a.blocks, a.block, pk,
      *std::max_element(peak.begin(), peak.end()), step, *std::min_element(step_ms.begin(), step_ms.end()), fwd_bwd,
      outside, layers, step_flops / 1e9);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const double fm = median(r.fwd_ms), bm = median(r.bwd_ms);
    const auto fl = lost(r.fwd_flops, fm), bl = lost(r.bwd_flops, bm);
    std::string out = "[";
    for (std::size_t d = 0; d < r.out.size(); ++d) out += (d ? "," : "") + std::to_string(r.out[d]);
    out += "]";
    const std::string share = fl && bl && gap > 0 ? fmt::format("{:.1f}%", 100 * (*fl + *bl) / gap) : "-";
    std::printf("%-10s %-10s %-14s %8.3f %8.3f %8s %8s %8s %8s %7s\n", r.name.c_str(), r.kind.c_str(), out.c_str(), fm,
                bm, gflops(r.fwd_flops, fm).c_str(), gflops(r.bwd_flops, bm).c_str(), fmt_ms(fl).c_str(),
                fmt_ms(bl).c_str(), share.c_str());
    json += fmt::format(R"({}{{"name":{},"kind":"{}","fwd_ms":{:.5f},"bwd_ms":{:.5f},"fwd_gflop":{},"bwd_gflop":{}}})",
                        i ? "," : "", nlohmann::json(r.name).dump(), r.kind, fm, bm,
                        r.fwd_flops ? fmt::format("{:.6f}", *r.fwd_flops / 1e9) : "null",
                        r.bwd_flops ? fmt::format("{:.6f}", *r.bwd_flops / 1e9) : "null");
  }
  std::printf("%-25s %-14s %8.3f %8s %8s %8s %8s %8s %7s\n", "the step outside them", "(batch,loss,..)", outside, "",
              "", "", "", "", gap > 0 ? fmt::format("{:.1f}%", 100 * outside / gap).c_str() : "-");
  std::printf("%s]}\n", json.c_str());
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
