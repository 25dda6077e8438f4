#pragma once
// Backend-neutral descriptions of the ops: the shapes and scalar parameters every backend
// takes (kernels/backend.hpp), with no device type in sight. The CPU reference
// (kernels/cpu/) defines the semantics; every other backend is tested against it.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/dtype.hpp"

namespace codistill::kernels {

// A set of dtypes: the dtypes one backend runs an op in (a column of kernels/op_list.def).
class DTypeSet {
 public:
  constexpr DTypeSet() = default;
  // Implicit: a single dtype is the set of it (the table writes `f32`, not `{f32}`).
  constexpr DTypeSet(DType t) : bits_(static_cast<std::uint8_t>(1u << static_cast<unsigned>(t))) {}
  constexpr DTypeSet operator|(DTypeSet o) const { return DTypeSet(static_cast<std::uint8_t>(bits_ | o.bits_)); }
  constexpr bool contains(DType t) const { return (bits_ >> static_cast<unsigned>(t)) & 1u; }

 private:
  constexpr explicit DTypeSet(std::uint8_t bits) : bits_(bits) {}
  std::uint8_t bits_ = 0;
};
// The spellings of the op table's dtype columns (`using namespace op_dtypes` where it is read).
namespace op_dtypes {
inline constexpr DTypeSet none{}, f32{DType::f32}, f64{DType::f64}, bf16{DType::bf16};
}  // namespace op_dtypes

// Every op a backend may implement (one row each in kernels/op_list.def, which says what
// each is); Backend::supports(op, dtype) says which a backend does.
enum class Op : std::uint8_t {
#define CODISTILL_OP(id, spelling, cpu, cuda) id,
#include "kernels/op_list.def"
};
inline constexpr Op kAllOps[] = {
#define CODISTILL_OP(id, spelling, cpu, cuda) Op::id,
#include "kernels/op_list.def"
};
const char* op_name(Op op);

// The arithmetic of the GEMMs inside an op (QueueOptions::compute for a queue's ops,
// DistillHeadParams::teacher_compute for the fused head's teacher logits):
//   f32:  float32 products and sums, as the tensors' dtype says;
//   bf16: mixed precision: each GEMM's float32 inputs are rounded to bfloat16 (round to
//         nearest even, kernels/cpu/bf16.hpp's rule) and multiplied with float32
//         accumulation into float32 outputs. Tensors, master weights, gradients, optimizer
//         state, losses and normalization statistics stay float32; only GEMM operands are
//         rounded. It applies to float32 ops (float64 ones, the gradient checks', ignore it).
enum class Compute : std::uint8_t { f32, bf16 };
const char* compute_name(Compute c);  // "float32", "bf16": the config's spellings
// "float32" | "bf16" -> Compute; throws std::invalid_argument listing the valid names.
Compute parse_compute(const std::string& name);

// relu: y = max(x, 0), backward from y; gelu: exact erf form, backward from x.
// silu: y = x * sigmoid(x) (swish), backward from x. gelu_tanh: GELU's tanh approximation
// (GPT-2's, PyTorch's approximate='tanh'), backward from x.
enum class Activation : std::uint8_t { none, relu, gelu, silu, gelu_tanh };
const char* activation_name(Activation a);
// Whether act's backward reads the activation's input (gelu, silu: a fused linear keeps its
// pre-activation for it) rather than its output (relu) or nothing (none).
constexpr bool keeps_input(Activation act) {
  return act == Activation::gelu || act == Activation::silu || act == Activation::gelu_tanh;
}

// 2-D convolution (cross-correlation, as PyTorch), NCHW, weight [O, C, KH, KW].
// OH = (H + 2*pad_h - KH) / stride_h + 1, likewise OW.
// channels_last: x, y, dx and dy are stored [B, H, W, C] (NHWC: each pixel's channels
// contiguous), the layout oneDNN's CPU convolutions run without reordering; the logical
// shapes and the weight layout (OIHW) stay as above. Backend::supports_channels_last says
// which backends take it.
struct Conv2dShape {
  std::int64_t batch = 1, in_channels = 1, height = 1, width = 1;
  std::int64_t out_channels = 1, kernel_h = 1, kernel_w = 1;
  std::int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  bool channels_last = false;
  std::int64_t out_height() const { return (height + 2 * pad_h - kernel_h) / stride_h + 1; }
  std::int64_t out_width() const { return (width + 2 * pad_w - kernel_w) / stride_w + 1; }
  // Throws std::invalid_argument for impossible shapes (empty output, non-positive sizes).
  void validate() const;
};

// Max pooling, NCHW, no padding. OH = (H - K) / stride + 1. Ties go to the first maximum in
// row-major window order; a NaN in a window is the window's maximum.
struct Pool2dShape {
  std::int64_t batch = 1, channels = 1, height = 1, width = 1;
  std::int64_t kernel = 2, stride = 2;
  std::int64_t out_height() const { return (height - kernel) / stride + 1; }
  std::int64_t out_width() const { return (width - kernel) / stride + 1; }
  void validate() const;  // throws std::invalid_argument
};

// Batch normalization over x viewed as [batch, channels, spatial] (BatchNorm1d: [N, C],
// spatial 1; BatchNorm2d: NCHW, spatial H*W), per channel c over its M = batch*spatial values:
//   training: mean_c, var_c = the batch's mean and biased variance (two passes, double
//             accumulation on the CPU); invstd_c = 1/sqrt(var_c + eps);
//             running_mean = (1-momentum)*running_mean + momentum*mean_c
//             running_var  = (1-momentum)*running_var  + momentum*var_c*M/(M-1)
//             (PyTorch's convention: the running variance is unbiased; M must be > 1)
//   eval:     mean_c, invstd_c from the running statistics, which stay as they are
//   y = (x - mean_c) * invstd_c * gamma_c + beta_c; save_mean/save_invstd keep mean_c and
//   invstd_c for backward.
// Backward (xh = (x - mean) * invstd; gradients accumulate):
//   dbeta += sum dy;  dgamma += sum dy*xh;
//   training: dx = gamma*invstd/M * (M*dy - sum dy - xh * sum dy*xh)
//   eval:     dx = gamma*invstd*dy   (the statistics do not depend on x)
// Synchronized batch normalization (group.sync_batchnorm: the ranks of a group normalize
// with the statistics of all their rows), in three steps around an all-reduce that the
// caller makes of `sums` ([2C + 1] float64):
//   batchnorm_sums, forward (dy null): sums[c] = sum (x - center[c]), sums[C + c] =
//     sum (x - center[c])^2, sums[2C] = the values per channel (batch * spatial). center
//     is the running mean, the same on every rank, so the ranks' shifted sums add up.
//   batchnorm_sums, backward (dy given, center = save_mean, invstd = save_invstd):
//     sums[c] = sum dy, sums[C + c] = sum dy * xh, sums[2C] as above.
//   batchnorm_forward_synced (training), from the summed `sums` of M = sums[2C] values:
//     mean = center + sums[c] / M, var = sums[C + c] / M - (sums[c] / M)^2 (biased; the
//     running variance gets it unbiased, M / (M - 1)), then as batchnorm_forward.
//   batchnorm_backward_synced: dbeta += local sum dy, dgamma += local sum dy*xh (the
//     group's gradient all-reduce adds the ranks' shares), dx from the summed sums:
//     dx = gamma*invstd/M * (M*dy - sum dy - xh * sum dy*xh).
// One rank's sums passed as the summed ones give batchnorm_forward/backward's results.
// With a fused activation (Op::batchnorm_activation; relu only): the forward writes
// y = relu(bn(x)) in its normalize pass; the backward takes that y and dy of it and is the
// batchnorm backward of dz = dy * [y > 0] (the mask from y: no pre-activation is kept).
struct BatchNormShape {
  std::int64_t batch = 1, channels = 1, spatial = 1;
  double eps = 1e-5, momentum = 0.1;
  std::int64_t per_channel() const { return batch * spatial; }
  void validate(bool training) const;  // throws std::invalid_argument
};

// Layer normalization of x [rows, features] over each row (Ba et al. 2016; PyTorch's
// LayerNorm over the last dimension), with an affine gamma, beta [features]:
//   mean_r, var_r = the row's mean and biased variance; invstd_r = 1/sqrt(var_r + eps)
//   y = (x - mean_r) * invstd_r * gamma + beta;  save_mean/save_invstd [rows] for backward
// Backward (xh = (x - mean) * invstd, g = gamma * dy; gradients accumulate):
//   dgamma += sum_r dy*xh;  dbeta += sum_r dy
//   dx = invstd * (g - mean_f(g) - xh * mean_f(g*xh))
struct LayerNormShape {
  std::int64_t rows = 1, features = 1;
  double eps = 1e-5;
  void validate() const;  // throws std::invalid_argument
};

// Embedding lookup: ids int32 [rows], table [vocab, dim], y [rows, dim]:
//   y[n, :] = table[ids[n], :]
// Backward: dtable[ids[n], :] += dy[n, :] for every n, summed in the order of n (every
// backend: deterministic, no atomics). An id outside [0, vocab) throws std::out_of_range
// naming the row and the id, before anything is written.
struct EmbeddingShape {
  std::int64_t rows = 0, vocab = 1, dim = 1;
  void validate() const;  // throws std::invalid_argument
};
// "embedding: row 3 has id 70, outside [0, 64)" when an id is out of range, else nothing.
void check_embedding_ids(const std::int32_t* ids, const EmbeddingShape& s, const char* backend);

// Causal multi-head self-attention core (GPT-2's), for `batch` sequences of `seq` tokens:
//   qkv [batch*seq, 3*D] (D = heads*head_dim): row b*seq + t holds q | k | v of token t of
//       sequence b, head h at columns h*head_dim .. (h+1)*head_dim of each third (what one
//       Linear(D, 3D) gives, no transpose needed);
//   y   [batch*seq, D]: head h's output at columns h*head_dim.., the layout of q;
//   probs [batch, heads, seq, seq]: P = softmax(q k^T * scale + mask) per (b, h), row i
//       over columns j <= i, exactly 0 above the diagonal (saved for the backward; memory
//       batch*heads*seq^2 values per layer); scale = 1/sqrt(head_dim).
//   y_bh = P_bh v_bh.
// Backward (dqkv overwritten, an input gradient): dP = dy v^T, dS = P * (dP - rowsum(dP*P)),
//   dq = scale dS k, dk = scale dS^T q, dv = P^T dy. scratch [batch, heads, seq, seq] holds
//   dP/dS (a backend may ignore it: the CPU keeps one T x T block per thread).
struct AttentionShape {
  std::int64_t batch = 1, seq = 1, heads = 1, head_dim = 1;
  std::int64_t d_model() const { return heads * head_dim; }
  std::int64_t rows() const { return batch * seq; }
  double scale() const;  // 1 / sqrt(head_dim)
  void validate() const;  // throws std::invalid_argument
};

// The fused distillation loss (DESIGN.md section 6). For row r with student logits z,
// label y, K teacher rows t_k:
//   q_T   = (1/K) sum_k softmax(t_k / T)
//   loss  = h * CE(y, softmax(z)) + a * T^2 * KL(q_T || softmax(z / T))
//   dz    = h * (softmax(z) - onehot(y)) + a * T * (softmax(z / T) - q_T)
// averaged over the rows whose label is not -1 (ignored rows get a zero gradient).
// K = 0 leaves only the hard term. A label outside [-1, V) throws std::out_of_range
// naming the row and the label, before anything is written.
struct DistillLossParams {
  double temperature = 1.0;  // T > 0
  double weight = 1.0;       // a: weight of the soft (distillation) term
  double hard_weight = 1.0;  // h: weight of the cross-entropy term
};

struct DistillLossResult {
  double loss = 0;        // h * ce + a * distill
  double ce = 0;          // mean cross-entropy with the labels
  double distill = 0;     // mean T^2 * KL(q_T || softmax(z/T)); 0 when K = 0
  std::int64_t rows = 0;  // rows counted (not ignored)
};

// The fused linear + distillation head (Backend::linear_distill_head). With student hidden
// states h [N, H], head weight W [V, H] and bias b [V], K teachers each with hidden states
// h_k [N, H_k] and head weight W_k [V, H_k] (bias b_k), the student's logits are
// z = h W^T + b, teacher k's t_k = h_k W_k^T + b_k, and the result is exactly that of
// distill_loss(z, {t_k}, labels) over the whole batch (averaged over all N rows' non-ignored
// ones, not per chunk), with its logits gradient dz carried on through the head:
//   dh = dz W (overwritten), dW += dz^T h, db += column sums of dz (accumulated).
// Teachers run forward only. The logits are never held for all N rows: rows go in chunks of
// distill_head_chunk_rows(...) rows, and the chunk's student and teacher logits, (K + 1) x
// chunk x V elements, live in a workspace of at most workspace_bytes (one row per chunk when
// a single row does not fit). The default, 64 MiB, keeps the GEMMs of large vocabularies at
// a few dozen rows (V = 131072, K = 1: 64 rows), enough to amortize reading W once per chunk
// and per product, while staying far below one N x V float32 logits tensor for the batch
// sizes the head is for (N = 4096, V = 32768: 512 MiB).
// The student's GEMMs compute as the queue says (QueueOptions::compute); the teachers'
// logits as teacher_compute says (teachers may run in bf16 while the student does not).
struct DistillHeadParams {
  DistillLossParams loss;
  std::size_t workspace_bytes = std::size_t{64} << 20;
  Compute teacher_compute = Compute::f32;
};

// Rows per chunk: the most whose (K + 1) x rows x V elements of elem_bytes fit in
// workspace_bytes, at least 1 and at most N (N >= 1, V >= 1, K >= 0).
inline std::int64_t distill_head_chunk_rows(std::int64_t N, std::int64_t V, int K,
                                            std::size_t elem_bytes, std::size_t workspace_bytes) {
  const auto per_row = static_cast<std::size_t>(K + 1) * static_cast<std::size_t>(V) * elem_bytes;
  const auto fit = static_cast<std::int64_t>(workspace_bytes / per_row);
  return fit < 1 ? 1 : fit > N ? N : fit;
}

// Optimizer updates, elementwise over flat parameter, gradient and slot arrays, with the
// scalars computed on the host once (in double, then cast to the element type):
//   sgd:   d = g + wd*p;  b = mu*b + d;  p -= lr * (nesterov ? d + mu*b : b)
//          (mu = 0: p -= lr * d, no slot)
//   adamw: m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g;
//          p = p*decay - step_size * m / (sqrt(v)*inv_sqrt_bc2 + eps)
// grad_scale multiplies every gradient before the update reads it (gradient clipping by
// global norm, optimizer.clip_grad_norm); at 1 the update is bit for bit the one without it.
struct SgdScalars {
  double lr = 0, weight_decay = 0, momentum = 0;
  bool nesterov = false;
  double grad_scale = 1;
};

struct AdamWScalars {
  double decay = 1, beta1 = 0.9, beta2 = 0.999, step_size = 0, inv_sqrt_bc2 = 1, eps = 1e-8;
  double grad_scale = 1;
};

}  // namespace codistill::kernels
