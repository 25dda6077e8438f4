#include "kernels/cpu/backend.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/avgpool.hpp"
#include "kernels/cpu/batchnorm.hpp"
#include "kernels/cpu/batchnorm_sync.hpp"
#include "kernels/cpu/layernorm.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/backend_util.hpp"
#include "kernels/cpu/embedding.hpp"
#include "kernels/cpu/conv2d.hpp"
#include "kernels/cpu/distill_head.hpp"
#include "kernels/cpu/distill_loss.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/impl.hpp"
#include "kernels/cpu/linear.hpp"
#include "kernels/cpu/optimizer.hpp"
#include "kernels/cpu/pool.hpp"
#include "kernels/cpu/queue.hpp"
#include "kernels/cpu/softmax.hpp"

namespace codistill::kernels {

namespace {

using cpu::CpuQueue;
using cpu::cpu_queue;

using namespace cpu::backend_detail;

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  DeviceKind kind() const override { return DeviceKind::cpu; }
  int device_count() const override { return 1; }

  bool supports(Op op, DType dtype) const override {
    using namespace op_dtypes;  // the table's column spellings
    switch (op) {
#define CODISTILL_OP(id, spelling, cpu, cuda) \
  case Op::id:                                \
    return (cpu).contains(dtype);
#include "kernels/op_list.def"
    }
    return false;
  }
  bool supports_compute(Compute /*c*/) const override { return true; }
  bool supports_channels_last() const override { return true; }
  void set_threads(int n) override { cpu::set_num_threads(n); }
  int threads() const override { return cpu::num_threads(); }

  std::shared_ptr<std::byte> allocate(std::size_t bytes, int /*device*/) override {
    // 64-byte alignment: whole cache lines and aligned AVX-512 loads.
    const std::size_t rounded = std::max<std::size_t>(64, (bytes + 63) / 64 * 64);
    void* p = std::aligned_alloc(64, rounded);
    if (!p) throw std::bad_alloc();
    return {static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); }};
  }
  // Device memory is host memory: the tensor is its own staging area.
  Tensor staging_for(const Tensor& device_tensor) override { return device_tensor; }
  void copy_sync(Tensor& dst, const Tensor& src) override { dst.copy_from(src); }
  void zero_sync(Tensor& t) override {
    if (t.nbytes()) std::memset(t.raw(), 0, t.nbytes());
  }
  std::unique_ptr<Queue> make_queue(Device device, QueueOptions options) override {
    if (!device.is_cpu()) throw std::invalid_argument("cpu backend: cannot make a queue on " + device.str());
    return std::make_unique<CpuQueue>(*this, options);
  }

  void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, Activation act, Tensor* pre,
                      Queue& q) override {
    run_op(*this, act == Activation::none ? Op::linear : Op::linear_activation, x.dtype(), "linear", [&]<class T>() {
      const std::int64_t M = x.dim(0), N = w.dim(0), K = w.dim(1);
      // float32 on the fast path: oneDNN's matmul primitive, bias and relu inside its kernel:
      // in bf16 (kernels/cpu/bf16.hpp; frozen weights packed once) or in float32
      // (kernels/cpu/dnnl_matmul.hpp). The reference queue keeps its loops (tests' truth).
      bool done = false;
      if constexpr (std::is_same_v<T, float>) {
        if (impl_of(q) == cpu::Impl::fast && M > 0 && N > 0 && K > 0 && gemm_engine(q)) {
          gemm_engine(q)->linear_forward(x.data<T>(), w.data<T>(), opt<T>(b), y.data<T>(), M, N, K,
                                         act == Activation::relu, q.options().frozen_params);
          done = true;
        } else {
          done = impl_of(q) == cpu::Impl::fast && M > 0 && N > 0 && K > 0 &&
                 cpu_queue(q, "linear").matmul().linear_forward(x.data<T>(), w.data<T>(), opt<T>(b), y.data<T>(),
                                                                 M, N, K, act == Activation::relu);
        }
      }
      if (!done)
        cpu::linear_forward<T>(x.data<T>(), w.data<T>(), opt<T>(b), y.data<T>(), M, N, K, impl_of(q),
                               gemm_engine(q));
      if (act == Activation::none || (done && act == Activation::relu)) return;
      // gelu's backward needs the pre-activation; relu's only its output (in place).
      if (act == Activation::gelu && pre) std::memcpy(pre->raw(), y.raw(), y.nbytes());
      activate<T>(y.data<T>(), y.data<T>(), y.numel(), act, impl_of(q));
    });
  }

  void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw, Tensor* db,
                       Activation act, const Tensor* saved, Tensor* dpre, bool accumulate, Queue& q) override {
    run_op(*this, act == Activation::none ? Op::linear : Op::linear_activation, x.dtype(), "linear", [&]<class T>() {
      const std::int64_t M = x.dim(0), N = w.dim(0), K = w.dim(1);
      if ((act == Activation::none || act == Activation::relu) && impl_of(q) == cpu::Impl::fast && !gemm_engine(q)) {
        if (act == Activation::relu && (!saved || !dpre))
          throw std::invalid_argument("linear backward: a fused activation needs saved and dpre");
        cpu::linear_backward_relu<T>(x.data<T>(), w.data<T>(), dy.data<T>(),
                                     act == Activation::relu ? saved->data<T>() : nullptr, opt<T>(dpre), opt<T>(dx),
                                     dw.data<T>(), opt<T>(db), M, N, K, accumulate);
        return;
      }
      const T* g = dy.data<T>();
      if (act != Activation::none) {
        if (!saved || !dpre) throw std::invalid_argument("linear backward: a fused activation needs saved and dpre");
        activate_backward<T>(saved->data<T>(), g, dpre->data<T>(), dy.numel(), act, impl_of(q));
        g = dpre->data<T>();
      }
      cpu::linear_backward<T>(x.data<T>(), w.data<T>(), g, opt<T>(dx), dw.data<T>(), opt<T>(db), M, N, K,
                              accumulate, impl_of(q), gemm_engine(q));
    });
  }

  void activation_forward(const Tensor& x, Tensor& y, Activation act, Queue& q) override {
    run_op(*this, Op::activation, x.dtype(), "activation",
           [&]<class T>() { activate<T>(x.data<T>(), y.data<T>(), x.numel(), act, impl_of(q)); });
  }
  void activation_backward(const Tensor& saved, const Tensor& dy, Tensor& dx, Activation act, Queue& q) override {
    run_op(*this, Op::activation, dy.dtype(), "activation backward", [&]<class T>() {
      activate_backward<T>(saved.data<T>(), dy.data<T>(), dx.data<T>(), dy.numel(), act, impl_of(q));
    });
  }

  void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, const Conv2dShape& s,
                      Queue& q) override {
    run_op(*this, Op::conv2d, x.dtype(), "conv2d", [&]<class T>() {
      // float32 on the fast path: oneDNN where it has a primitive for the shape (dnnl_conv.hpp).
      if constexpr (std::is_same_v<T, float>) {
        if (!q.options().reference) {
          s.validate();
          cpu::DnnlConv& dc = cpu_queue(q, "conv2d").conv();
          if (dc.supports(s, b != nullptr))
            return dc.forward(x.data<float>(), w.data<float>(), opt<float>(b), y.data<float>(), s);
        }
      }
      cpu::conv2d_forward<T>(x.data<T>(), w.data<T>(), opt<T>(b), y.data<T>(), s, impl_of(q));
    });
  }
  void conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw, Tensor* db,
                       const Conv2dShape& s, Queue& q) override {
    run_op(*this, Op::conv2d, x.dtype(), "conv2d backward", [&]<class T>() {
      if constexpr (std::is_same_v<T, float>) {
        if (!q.options().reference) {
          s.validate();
          cpu::DnnlConv& dc = cpu_queue(q, "conv2d backward").conv();
          if (dc.supports(s, db != nullptr))
            return dc.backward(x.data<float>(), w.data<float>(), dy.data<float>(), opt<float>(dx), dw.data<float>(),
                               opt<float>(db), s);
        }
      }
      cpu::conv2d_backward<T>(x.data<T>(), w.data<T>(), dy.data<T>(), opt<T>(dx), dw.data<T>(), opt<T>(db), s,
                              /*accumulate=*/true, impl_of(q));
    });
  }

  void maxpool2d_forward(const Tensor& x, Tensor& y, Tensor& argmax, const Pool2dShape& s, Queue& q) override {
    run_op(*this, Op::maxpool2d, x.dtype(), "maxpool2d", [&]<class T>() {
      if (!argmax.defined() || argmax.dtype() != DType::i32 || argmax.shape() != y.shape() || !argmax.device().is_cpu())
        argmax = Tensor::empty(y.shape(), DType::i32);
      cpu::maxpool2d_forward<T>(x.data<T>(), y.data<T>(), argmax.data<std::int32_t>(), s, impl_of(q));
    });
  }
  void maxpool2d_backward(const Tensor& /*x*/, const Tensor& /*y*/, const Tensor& argmax, const Tensor& dy,
                          Tensor& dx, const Pool2dShape& s, Queue& q) override {
    run_op(*this, Op::maxpool2d, dy.dtype(), "maxpool2d backward", [&]<class T>() {
      if (argmax.dtype() != DType::i32 || argmax.numel() != dy.numel())
        throw std::logic_error("maxpool2d backward: no argmax of the matching forward");
      cpu::maxpool2d_backward<T>(dy.data<T>(), argmax.data<std::int32_t>(), dx.data<T>(), s, impl_of(q));
    });
  }

  void batchnorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                         Tensor& running_var, Tensor& y, Tensor& save_mean, Tensor& save_invstd, bool training,
                         const BatchNormShape& s, Queue& q) override {
    run_op(*this, Op::batchnorm, x.dtype(), "batchnorm", [&]<class T>() {
      cpu::batchnorm_forward<T>(x.data<T>(), gamma.data<T>(), beta.data<T>(), running_mean.data<T>(),
                                running_var.data<T>(), y.data<T>(), save_mean.data<T>(), save_invstd.data<T>(),
                                training, s, impl_of(q));
    });
  }
  void batchnorm_activation_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                                    Tensor& running_var, Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                                    bool training, Activation act, const BatchNormShape& s, Queue& q) override {
    run_op(*this, Op::batchnorm_activation, x.dtype(), "batchnorm+activation", [&]<class T>() {
      check_fused_relu(act, "batchnorm+activation");
      cpu::batchnorm_forward<T>(x.data<T>(), gamma.data<T>(), beta.data<T>(), running_mean.data<T>(),
                                running_var.data<T>(), y.data<T>(), save_mean.data<T>(), save_invstd.data<T>(),
                                training, s, impl_of(q), act);
    });
  }
  void batchnorm_activation_backward(const Tensor& x, const Tensor& y, const Tensor& gamma, const Tensor& save_mean,
                                     const Tensor& save_invstd, const Tensor& dy, Tensor* dx, Tensor& dgamma,
                                     Tensor& dbeta, bool training, Activation act, const BatchNormShape& s,
                                     Queue& q) override {
    run_op(*this, Op::batchnorm_activation, x.dtype(), "batchnorm+activation backward", [&]<class T>() {
      check_fused_relu(act, "batchnorm+activation");
      cpu::batchnorm_backward<T>(x.data<T>(), gamma.data<T>(), save_mean.data<T>(), save_invstd.data<T>(),
                                 dy.data<T>(), opt<T>(dx), dgamma.data<T>(), dbeta.data<T>(), training, s,
                                 impl_of(q), y.data<T>());
    });
  }
  void batchnorm_sums(const Tensor& x, const Tensor* dy, const Tensor& center, const Tensor* invstd, Tensor& sums,
                      const BatchNormShape& s, Queue& q) override {
    run_op(*this, Op::batchnorm_sync, x.dtype(), "synchronized batchnorm sums", [&]<class T>() {
      check_sums(sums, s, "sums");
      cpu::batchnorm_sums<T>(x.data<T>(), opt<T>(dy), center.data<T>(),
                             opt<T>(invstd), sums.data<double>(), s, impl_of(q));
    });
  }
  void batchnorm_forward_synced(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                                Tensor& running_var, const Tensor& sums, Tensor& y, Tensor& save_mean,
                                Tensor& save_invstd, const BatchNormShape& s, Queue& q) override {
    run_op(*this, Op::batchnorm_sync, x.dtype(), "synchronized batchnorm", [&]<class T>() {
      check_sums(sums, s, "sums");
      cpu::batchnorm_forward_synced<T>(x.data<T>(), gamma.data<T>(), beta.data<T>(), running_mean.data<T>(),
                                       running_var.data<T>(), sums.data<double>(), y.data<T>(), save_mean.data<T>(),
                                       save_invstd.data<T>(), s, impl_of(q));
    });
  }
  void batchnorm_backward_synced(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                 const Tensor& save_invstd, const Tensor& dy, const Tensor& local_sums,
                                 const Tensor& sums, Tensor* dx, Tensor& dgamma, Tensor& dbeta,
                                 const BatchNormShape& s, Queue& q) override {
    run_op(*this, Op::batchnorm_sync, x.dtype(), "synchronized batchnorm backward", [&]<class T>() {
      check_sums(local_sums, s, "local sums");
      check_sums(sums, s, "sums");
      cpu::batchnorm_backward_synced<T>(x.data<T>(), gamma.data<T>(), save_mean.data<T>(), save_invstd.data<T>(),
                                        dy.data<T>(), local_sums.data<double>(), sums.data<double>(), opt<T>(dx),
                                        dgamma.data<T>(), dbeta.data<T>(), s, impl_of(q));
    });
  }
  void batchnorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd,
                          const Tensor& dy, Tensor* dx, Tensor& dgamma, Tensor& dbeta, bool training,
                          const BatchNormShape& s, Queue& q) override {
    run_op(*this, Op::batchnorm, x.dtype(), "batchnorm backward", [&]<class T>() {
      cpu::batchnorm_backward<T>(x.data<T>(), gamma.data<T>(), save_mean.data<T>(), save_invstd.data<T>(),
                                 dy.data<T>(), opt<T>(dx), dgamma.data<T>(), dbeta.data<T>(), training, s,
                                 impl_of(q));
    });
  }

  void global_avgpool_forward(const Tensor& x, Tensor& y, std::int64_t rows, std::int64_t spatial,
                              std::int64_t channels, Queue& q) override {
    run_op(*this, Op::global_avgpool, x.dtype(), "global_avgpool", [&]<class T>() {
      if (channels == 1)
        cpu::global_avgpool_forward<T>(x.data<T>(), y.data<T>(), rows, spatial, impl_of(q));
      else
        cpu::global_avgpool_nhwc_forward<T>(x.data<T>(), y.data<T>(), rows, spatial, channels, impl_of(q));
    });
  }
  void global_avgpool_backward(const Tensor& dy, Tensor& dx, std::int64_t rows, std::int64_t spatial,
                               std::int64_t channels, Queue& q) override {
    run_op(*this, Op::global_avgpool, dy.dtype(), "global_avgpool backward", [&]<class T>() {
      if (channels == 1)
        cpu::global_avgpool_backward<T>(dy.data<T>(), dx.data<T>(), rows, spatial, impl_of(q));
      else
        cpu::global_avgpool_nhwc_backward<T>(dy.data<T>(), dx.data<T>(), rows, spatial, channels, impl_of(q));
    });
  }

  void embedding_forward(const Tensor& ids, const Tensor& table, Tensor& y, const EmbeddingShape& s,
                         Queue& q) override {
    run_op(*this, Op::embedding, table.dtype(), "embedding", [&]<class T>() {
      check_ids(ids, s, "embedding");
      cpu::embedding_forward<T>(ids.data<std::int32_t>(), table.data<T>(), y.data<T>(), s, impl_of(q));
    });
  }
  void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable, const EmbeddingShape& s,
                          Queue& q) override {
    run_op(*this, Op::embedding, dy.dtype(), "embedding backward", [&]<class T>() {
      check_ids(ids, s, "embedding backward");
      cpu::embedding_backward<T>(ids.data<std::int32_t>(), dy.data<T>(), dtable.data<T>(), s, impl_of(q));
    });
  }
  void attention_forward(const Tensor& qkv, Tensor& y, Tensor& probs, const AttentionShape& s, Queue& q) override {
    run_op(*this, Op::causal_attention, qkv.dtype(), "causal_attention", [&]<class T>() {
      cpu::attention_forward<T>(qkv.data<T>(), y.data<T>(), probs.data<T>(), s, impl_of(q));
    });
  }
  void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy, Tensor& dqkv, Tensor& scratch,
                          const AttentionShape& s, Queue& q) override {
    run_op(*this, Op::causal_attention, dy.dtype(), "causal_attention backward", [&]<class T>() {
      cpu::attention_backward<T>(qkv.data<T>(), probs.data<T>(), dy.data<T>(), dqkv.data<T>(), scratch.data<T>(), s,
                                 impl_of(q));
    });
  }
  void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& save_mean,
                         Tensor& save_invstd, const LayerNormShape& s, Queue& q) override {
    run_op(*this, Op::layernorm, x.dtype(), "layernorm", [&]<class T>() {
      cpu::layernorm_forward<T>(x.data<T>(), gamma.data<T>(), beta.data<T>(), y.data<T>(), save_mean.data<T>(),
                                save_invstd.data<T>(), s, impl_of(q));
    });
  }
  void layernorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean, const Tensor& save_invstd,
                          const Tensor& dy, Tensor* dx, Tensor& dgamma, Tensor& dbeta, const LayerNormShape& s,
                          Queue& q) override {
    run_op(*this, Op::layernorm, x.dtype(), "layernorm backward", [&]<class T>() {
      cpu::layernorm_backward<T>(x.data<T>(), gamma.data<T>(), save_mean.data<T>(), save_invstd.data<T>(),
                                 dy.data<T>(), opt<T>(dx), dgamma.data<T>(), dbeta.data<T>(), s, impl_of(q));
    });
  }

  void softmax_forward(const Tensor& x, Tensor& y, Queue& q) override {
    run_op(*this, Op::softmax, x.dtype(), "softmax", [&]<class T>() {
      cpu::softmax_forward<T>(x.data<T>(), y.data<T>(), x.dim(0), x.dim(-1), impl_of(q));
    });
  }
  void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, Queue& q) override {
    run_op(*this, Op::softmax, y.dtype(), "softmax backward", [&]<class T>() {
      cpu::softmax_backward<T>(y.data<T>(), dy.data<T>(), dx.data<T>(), y.dim(0), y.dim(-1), impl_of(q));
    });
  }

  void multiply(const Tensor& x, const Tensor& m, Tensor& y, Queue& q) override {
    run_op(*this, Op::multiply, x.dtype(), "multiply", [&]<class T>() {
      cpu::multiply<T>(x.data<T>(), m.data<T>(), y.data<T>(), x.numel(), impl_of(q));
    });
  }
  void add(const Tensor& a, const Tensor& b, Tensor& y, Queue& q) override {
    run_op(*this, Op::add, a.dtype(), "add", [&]<class T>() {
      cpu::add<T>(a.data<T>(), b.data<T>(), y.data<T>(), a.numel(), impl_of(q));
    });
  }
  void add_activation(const Tensor& a, const Tensor& b, Tensor& y, Activation act, Queue& q) override {
    run_op(*this, Op::add_activation, a.dtype(), "add+activation", [&]<class T>() {
      check_fused_relu(act, "add+activation");
      cpu::add_relu<T>(a.data<T>(), b.data<T>(), y.data<T>(), a.numel(), impl_of(q));
    });
  }

  DistillLossResult distill_loss(const Tensor& student, const std::vector<const Tensor*>& teachers,
                                 const Tensor& labels, Tensor* grad, const DistillLossParams& p, Queue& q) override {
    return run_op(*this, Op::distill_loss, student.dtype(), "distill_loss", [&]<class T>() {
      const std::int64_t N = student.dim(0), V = student.dim(1);
      // Up to a handful of teachers: a small array on the stack of this call.
      std::vector<const T*> ts;
      ts.reserve(teachers.size());
      for (const Tensor* t : teachers) ts.push_back(t->data<T>());
      return cpu::distill_loss<T>(student.data<T>(), ts.data(), static_cast<int>(ts.size()),
                                  labels.data<std::int32_t>(), opt<T>(grad), N, V, p, impl_of(q));
    });
  }

  DistillLossResult linear_distill_head(const Tensor& hidden, const Tensor& weight, const Tensor* bias,
                                        const std::vector<HeadTeacher>& teachers, const Tensor& labels,
                                        Tensor* dhidden, Tensor* dweight, Tensor* dbias, const DistillHeadParams& p,
                                        Queue& q) override {
    return run_op(*this, Op::linear_distill_head, hidden.dtype(), "linear_distill_head", [&]<class T>() {
      check_distill_head(hidden, weight, bias, teachers, labels, dhidden, dweight, dbias, "cpu");
      const std::int64_t N = hidden.dim(0), H = hidden.dim(1), V = weight.dim(0);
      std::vector<cpu::HeadTeacherPtrs<T>> ts;
      ts.reserve(teachers.size());
      for (const HeadTeacher& t : teachers)
        ts.push_back({t.hidden->data<T>(), t.weight->data<T>(), opt<T>(t.bias), t.hidden->dim(1)});
      return cpu::linear_distill_head<T>(hidden.data<T>(), weight.data<T>(), opt<T>(bias), N, H, V, ts.data(),
                                         static_cast<int>(ts.size()), labels.data<std::int32_t>(), opt<T>(dhidden),
                                         opt<T>(dweight), opt<T>(dbias), p, impl_of(q), gemm_engine(q),
                                         gemm_engine(q, p.teacher_compute));
    });
  }

  void sgd_update(Tensor& value, const Tensor& grad, Tensor* momentum, const SgdScalars& s,
                  const UpdateSource& from, Queue& q) override {
    run_op(*this, Op::sgd_update, value.dtype(), "sgd_update", [&]<class T>() {
      check_update_source(from, value, momentum, nullptr, "sgd_update");
      cpu::sgd_update<T>(value.data<T>(), grad.data<T>(), opt<T>(momentum), value.numel(), s, impl_of(q),
                         opt<T>(from.value), opt<T>(from.m));
    });
  }
  void adamw_update(Tensor& value, const Tensor& grad, Tensor& m, Tensor& v, const AdamWScalars& s,
                    const UpdateSource& from, Queue& q) override {
    run_op(*this, Op::adamw_update, value.dtype(), "adamw_update", [&]<class T>() {
      check_update_source(from, value, &m, &v, "adamw_update");
      cpu::adamw_update<T>(value.data<T>(), grad.data<T>(), m.data<T>(), v.data<T>(), value.numel(), s, impl_of(q),
                           opt<T>(from.value), opt<T>(from.m), opt<T>(from.v));
    });
  }
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace codistill::kernels
