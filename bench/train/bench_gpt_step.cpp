// One training step of a `gpt` model on the CPU (the model kind of codistill/models/
// gpt_model.hpp), for bench/run_gpt_step_bench.sh, which runs the same model in PyTorch
// (bench/torch_gpt_step.py) and JAX (bench/jax_gpt_step.py) beside it.
//   bench_gpt_step [--B 8] [--T 128] [--D 128] [--heads 4] [--layers 4] [--V 8192]
//                  [--threads 2] [--steps 10] [--warmup 2] [--tied] [--reference]
//                  [--device cpu|cuda] [--precision float32|bf16] [--teacher-forward]
//                  [--gelu erf|tanh] [--attention materialized|flash] [--fused-head]
//                  [--teachers K] [--teacher-precision float32|bf16] [--teacher-weights float32|bf16]
//                  [--recompute none|blocks]
// --recompute: train.recompute (blocks: each block's internals dropped after its forward and
// rebuilt for its backward, Model::set_recompute).
// --gelu, --attention: model.gelu and model.attention. --fused-head: train.fused_head (the
// head applied inside the loss by row chunks: no [B*T, V] logits nor their gradient).
// --teachers K (needs --fused-head): K forward-only models of the same architecture (fresh
// weights: a forward's cost does not depend on them) teach through the fused head, as the
// trainer's step with codistill.teacher_precision (default: --precision) and
// codistill.teacher_weights (bf16: their matrices held as bf16, Model::to_bf16_weights).
// The JSON line also carries the process's peak resident memory (VmHWM, MiB) at the end.
// On --device cuda every step ends with the queue's synchronize (the time is the GPU's).
// --precision: the queue's GEMM arithmetic (train.precision; bf16: bf16 operands, float32
// accumulation). --teacher-forward: time what a teacher costs instead of a step: one
// forward in evaluation mode to the logits, no loss, no backward (codistill.teacher_precision).
// A step: forward of int32 tokens [B, T] to logits [B*T, V], the mean next-token
// cross-entropy over the B*T rows with its logits gradient (the fused loss with no
// teacher), backward into the zeroed gradient arena, one AdamW update (lr 3e-4, weight
// decay 0.1). No dropout. The batch is random tokens drawn once (the timing does not depend
// on the values). Prints one JSON line: the median and best step milliseconds over `steps`
// timed steps after `warmup` untimed ones, tokens/s at the median, the parameter count and
// the model FLOPs per step (6 x the parameters that enter matrix products x tokens — not
// the embedding tables, which are gathered, but a tied head's matrix — plus the attention's
// 12 x layers x B x T^2 x D, for a rate to set against the sgemm peak of bench_sgemm).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "codistill/config/config.hpp"
#include "codistill/models/model.hpp"
#include "codistill/optim/optimizer.hpp"
#include "codistill/util/memory_info.hpp"
#include "codistill/util/rng.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu/bf16.hpp"
#include "kernels/cpu/gemm.hpp"

using namespace codistill;
using kernels::Device;
using kernels::DType;
using kernels::Tensor;

namespace {

struct Args {
  std::int64_t B = 8, T = 128, D = 128, heads = 4, layers = 4, V = 8192;
  int threads = 2, steps = 10, warmup = 2;
  bool tied = false, reference = false, teacher_forward = false, fused_head = false;
  std::string gelu = "erf", attention = "materialized", teacher_weights = "float32", recompute = "none";
  int teachers = 0;
  std::optional<kernels::Compute> teacher_precision;
  kernels::Compute precision = kernels::Compute::f32;
  std::string device = "cpu";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::int64_t {
      if (i + 1 >= argc) throw std::invalid_argument(k + " needs a value");
      return std::stoll(argv[++i]);
    };
    if (k == "--B") a.B = next();
    else if (k == "--T") a.T = next();
    else if (k == "--D") a.D = next();
    else if (k == "--heads") a.heads = next();
    else if (k == "--layers") a.layers = next();
    else if (k == "--V") a.V = next();
    else if (k == "--threads") a.threads = static_cast<int>(next());
    else if (k == "--steps") a.steps = static_cast<int>(next());
    else if (k == "--warmup") a.warmup = static_cast<int>(next());
    else if (k == "--tied") a.tied = true;
    else if (k == "--reference") a.reference = true;
    else if (k == "--teacher-forward") a.teacher_forward = true;
    else if (k == "--fused-head") a.fused_head = true;
    else if (k == "--teachers") a.teachers = static_cast<int>(next());
    else if (k == "--teacher-precision") {
      if (i + 1 >= argc) throw std::invalid_argument(k + " needs a value");
      a.teacher_precision = kernels::parse_compute(argv[++i]);
    } else if (k == "--teacher-weights") {
      if (i + 1 >= argc) throw std::invalid_argument(k + " needs a value");
      a.teacher_weights = argv[++i];
      if (a.teacher_weights != "float32" && a.teacher_weights != "bf16")
        throw std::invalid_argument("--teacher-weights: float32 or bf16, got " + a.teacher_weights);
    }
    else if (k == "--gelu" || k == "--attention" || k == "--recompute") {
      if (i + 1 >= argc) throw std::invalid_argument(k + " needs a value");
      (k == "--gelu" ? a.gelu : k == "--attention" ? a.attention : a.recompute) = argv[++i];
    }
    else if (k == "--precision") {
      if (i + 1 >= argc) throw std::invalid_argument(k + " needs a value");
      a.precision = kernels::parse_compute(argv[++i]);
    } else if (k == "--device") {
      if (i + 1 >= argc) throw std::invalid_argument("--device needs a value");
      a.device = argv[++i];
    }
    else throw std::invalid_argument("unknown argument " + k);
  }
  if (a.steps < 1) throw std::invalid_argument("--steps must be >= 1");
  if (a.teachers < 0 || (a.teachers > 0 && !a.fused_head))
    throw std::invalid_argument("--teachers: K >= 0, and teachers need --fused-head");
  return a;
}

// K teachers as TeacherPool makes them: no gradients, frozen parameters on their own queues.
std::vector<Model> make_teachers(const Args& a, const ModelConfig& mc, const Device& device) {
  std::vector<Model> out;
  kernels::QueueOptions to;
  to.compute = a.teacher_precision.value_or(a.precision);
  to.frozen_params = true;
  for (int i = 0; i < a.teachers; ++i) {
    Rng rng(100 + static_cast<std::uint64_t>(i));
    out.push_back(build_model(mc, rng));
    out.back().drop_grads();
    if (a.teacher_weights == "bf16") out.back().to_bf16_weights();
    out.back().to_device(device, to);
  }
  return out;
}

// One step with train.fused_head: the teachers' features, the student's, the head inside the
// loss (no logits of anyone), backward from the features' gradient, the update.
double fused_step(Model& model, std::vector<Model>& teachers, const Tensor& x, const Tensor& labels,
                  Tensor& dfeatures, Optimizer& opt, double lr, const Args& a) {
  std::vector<Tensor> hidden;
  for (Model& t : teachers) hidden.push_back(t.forward_features(x, /*training=*/false));
  for (Model& t : teachers) t.queue().synchronize();
  std::vector<kernels::HeadTeacher> heads;
  for (std::size_t i = 0; i < teachers.size(); ++i) {
    const Model::LinearHead th = *teachers[i].linear_head();
    heads.push_back({&hidden[i], th.weight, th.bias});
  }
  kernels::Queue& q = model.queue();
  const Tensor h = model.forward_features(x, /*training=*/true);
  if (!dfeatures.defined()) dfeatures = Tensor::empty(h.shape(), h.dtype(), q.device());
  model.zero_grad();
  const Model::LinearHead head = *model.linear_head();
  kernels::DistillHeadParams hp;  // the loss's defaults: T = 1, a = h = 1
  hp.teacher_compute = a.teacher_precision.value_or(a.precision);
  const double loss = q.backend().linear_distill_head(h, *head.weight, head.bias, heads, labels, &dfeatures,
                                                      head.weight_grad, head.bias_grad, hp, q).loss;
  model.backward_features(dfeatures);
  opt.step(lr);
  q.synchronize();
  return loss;
}

// The JSON line: median and best step, tokens/s, model FLOPs, the last loss, peak memory.
void print_result(const Args& a, std::vector<double> ms, double params, double loss) {
  std::vector<double>& sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2], best = sorted.front();
  const std::int64_t N = a.B * a.T;
  // Matrix FLOPs: the embeddings are gathers, not products (a tied head's matrix does count).
  const double matrix_params = params - static_cast<double>(a.T * a.D) - (a.tied ? 0.0 : static_cast<double>(a.V * a.D));
  const double flops = (a.teacher_forward ? 2.0 : 6.0) * matrix_params * static_cast<double>(N) +
                       (a.teacher_forward ? 4.0 : 12.0) * static_cast<double>(a.layers * a.B * a.T * a.T * a.D);
  std::printf(
      "{\"contender\": \"codistill\", \"B\": %lld, \"T\": %lld, \"D\": %lld, \"heads\": %lld, \"layers\": %lld, "
      "\"V\": %lld, \"tied\": %s, \"threads\": %d, \"device\": \"%s\", \"path\": \"%s\", \"precision\": \"%s\", "
      "\"what\": \"%s\", \"params\": %.0f, \"step_ms_median\": %.3f, "
      "\"step_ms_best\": %.3f, \"tokens_per_s\": %.1f, \"gflop_per_step\": %.3f, \"gflops_at_median\": %.1f, "
      "\"final_loss\": %.5f, \"steps\": %d, \"warmup\": %d, \"gelu\": \"%s\", \"attention\": \"%s\", "
      "\"fused_head\": %s, \"teachers\": %d, \"teacher_weights\": \"%s\", \"teacher_precision\": \"%s\", "
      "\"recompute\": \"%s\", \"bf16_gemm\": \"%s\", \"peak_rss_mib\": %.1f}\n",
      static_cast<long long>(a.B), static_cast<long long>(a.T), static_cast<long long>(a.D),
      static_cast<long long>(a.heads), static_cast<long long>(a.layers), static_cast<long long>(a.V),
      a.tied ? "true" : "false", a.threads, a.device.c_str(), a.reference ? "reference" : "fast",
      kernels::compute_name(a.precision), a.teacher_forward ? "teacher_forward" : "step", params, median, best,
      static_cast<double>(N) / (median / 1e3), flops / 1e9, flops / 1e9 / (median / 1e3), loss, a.steps, a.warmup,
      a.gelu.c_str(), a.attention.c_str(), a.fused_head ? "true" : "false", a.teachers, a.teacher_weights.c_str(),
      kernels::compute_name(a.teacher_precision.value_or(a.precision)), a.recompute.c_str(),
      kernels::cpu::bf16_kernel_name(kernels::cpu::default_bf16_kernel()),
      static_cast<double>(memory::resident_peak_bytes().value_or(0)) / (1 << 20));
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  kernels::cpu::set_num_threads(a.threads);
  ModelConfig mc;
  mc.kind = "gpt";
  mc.vocab_size = a.V, mc.seq_len = a.T, mc.d_model = a.D, mc.heads = a.heads, mc.blocks = a.layers;
  mc.tie_embeddings = a.tied;
  mc.gelu = a.gelu, mc.attention = a.attention;
  Rng rng(1);
  Model model = build_model(mc, rng);
  if (a.reference) model.set_reference(true);
  model.set_recompute(a.recompute);
  const Device device = Device::parse(a.device);
  kernels::QueueOptions qo;
  qo.compute = a.precision;
  // The reference loops are the CPU reference queue's (to_device would replace it).
  if (!a.reference) model.to_device(device, qo);
  OptimizerConfig oc;
  oc.kind = "adamw", oc.lr = 3e-4, oc.weight_decay = 0.1;
  auto opt = make_optimizer(oc, model);
  std::vector<Model> teachers = make_teachers(a, mc, device);

  const std::int64_t N = a.B * a.T;
  Tensor x = Tensor::empty({a.B, a.T}, DType::i32), labels = Tensor::empty({N}, DType::i32);
  std::mt19937_64 gen(7);
  std::uniform_int_distribution<std::int32_t> tok(0, static_cast<std::int32_t>(a.V - 1));
  for (std::int64_t i = 0; i < N; ++i) {
    x.data<std::int32_t>()[i] = tok(gen);
    labels.data<std::int32_t>()[i] = tok(gen);
  }
  x = x.to(device), labels = labels.to(device);
  Tensor dlogits = a.fused_head ? Tensor() : Tensor::empty({N, a.V}, DType::f32, device), dfeatures;
  kernels::Queue& q = model.queue();
  kernels::DistillLossParams lp;  // no teacher: hard cross-entropy alone
  double loss = 0;
  auto step = [&] {
    if (a.teacher_forward) {  // a teacher: forward only, evaluation mode
      model.forward(x, /*training=*/false);
      q.synchronize();
      return;
    }
    if (a.fused_head) {  // as TrainStep with train.fused_head
      loss = fused_step(model, teachers, x, labels, dfeatures, *opt, oc.lr, a);
      return;
    }
    const Tensor logits = model.forward(x, /*training=*/true);
    loss = q.backend().distill_loss(logits, {}, labels, &dlogits, lp, q).loss;
    model.zero_grad();
    model.backward(dlogits);
    opt->step(oc.lr);
    q.synchronize();
  };
  for (int i = 0; i < a.warmup; ++i) step();
  std::vector<double> ms;
  for (int i = 0; i < a.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  print_result(a, ms, static_cast<double>(model.num_params()), loss);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gpt_step: %s\n", e.what());
  return 1;
}
