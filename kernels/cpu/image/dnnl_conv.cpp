#include "kernels/cpu/image/dnnl_conv.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "kernels/cpu/backend_impl.hpp"
#include "kernels/cpu/backend_util.hpp"
#include "kernels/cpu/dnnl_context.hpp"
#include "kernels/cpu/image/conv2d.hpp"

namespace codistill::kernels::cpu {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dims = memory::dims;

// A growable 64-byte aligned block, reused by every call (never shrinks).
class Scratch {
 public:
  void* get(std::size_t bytes) {
    if (bytes > size_) {
      const std::size_t rounded = (bytes + 63) / 64 * 64;
      void* p = std::aligned_alloc(64, rounded);
      if (!p) throw std::bad_alloc();
      ptr_.reset(p);
      size_ = rounded;
    }
    return ptr_.get();
  }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> ptr_;
  std::size_t size_ = 0;
};

// What selects a primitive: the shape, the bias, and the thread count (dnnl_context.hpp).
struct Key {
  std::array<std::int64_t, 11> shape;
  bool channels_last;
  bool bias;
  int threads;
  auto operator<=>(const Key&) const = default;
};

Key key_of(const Conv2dShape& s, bool bias) {
  return {{s.batch, s.in_channels, s.height, s.width, s.out_channels, s.kernel_h, s.kernel_w, s.stride_h,
           s.stride_w, s.pad_h, s.pad_w},
          s.channels_last,
          bias,
          omp_get_max_threads()};
}

// A tensor of ours (plain layout) and the layout a primitive wants for it: with `reorder`
// set the data goes through a scratch copy in the primitive's layout.
struct Port {
  memory::desc plain, want;
  std::optional<dnnl::reorder> reorder;  // plain -> want (inputs) or want -> plain (outputs)
};

struct Entry {
  bool ok = false;  // oneDNN has primitives for this shape
  memory::desc bias_md;
  // forward
  dnnl::convolution_forward fwd;
  Port fsrc, fwei, fdst;
  // backward data
  dnnl::convolution_backward_data bwd_data;
  Port dsrc, dwei, ddst;
  // backward weights (+ bias)
  dnnl::convolution_backward_weights bwd_weights;
  Port wsrc, wdiff, wddst;  // wdiff's reorder adds into dw (sum post-op)
  std::size_t scratchpad = 0;
};

}  // namespace

struct DnnlConv::State {
  // Calls take turns under ctx.mu (they share the scratch), uncontended in the trainer,
  // where one thread runs the ops.
  DnnlContext ctx;
  DnnlCache<Key, Entry> entries;
  // 0: scratchpad; 1-3: blocked copies of one call's operands; 4: the bias gradient.
  std::array<Scratch, 5> scratch;

  // Input port: plain -> want reorder when they differ.
  Port in_port(const memory::desc& plain, const memory::desc& want) {
    Port p{plain, want, std::nullopt};
    if (plain != want) p.reorder = dnnl::reorder(dnnl::reorder::primitive_desc(ctx.engine, plain, ctx.engine, want));
    return p;
  }
  // Output port: want -> plain; `accumulate` adds into the plain tensor (sum post-op).
  Port out_port(const memory::desc& plain, const memory::desc& want, bool accumulate) {
    Port p{plain, want, std::nullopt};
    if (plain != want || accumulate) {
      dnnl::primitive_attr attr;
      if (accumulate) {
        dnnl::post_ops po;
        po.append_sum(1.0f);
        attr.set_post_ops(po);
      }
      p.reorder = dnnl::reorder(dnnl::reorder::primitive_desc(ctx.engine, want, ctx.engine, plain, attr));
    }
    return p;
  }

  // blocked16: describe a 16 -> 16 channels-last convolution's maps as nChw16c to the
  // forward and backward-data primitives. With 16 channels that layout ([N][1][H][W][16]) has
  // the bytes of nhwc, so nothing is reordered, and oneDNN runs its direct blocked kernel
  // instead of its NHWC brgemm one, whose inner products are only 16 long: ResNet-8's stage-0
  // convolution (batch 128, 2 threads, AVX-512) forward 1.45 -> 1.03 ms, backward data 1.18
  // -> 1.03 ms. Backward weights keeps nhwc (blocked measured 0.94 -> 1.10 ms). Only 16 -> 16:
  // with a 16-channel input and a 32-channel output oneDNN has only its reference kernels.
  Entry build(const Conv2dShape& s, bool bias, bool blocked16) {
    const auto f32 = memory::data_type::f32;
    const Dims xd{s.batch, s.in_channels, s.height, s.width}, wd{s.out_channels, s.in_channels, s.kernel_h, s.kernel_w};
    const Dims yd{s.batch, s.out_channels, s.out_height(), s.out_width()}, bd{s.out_channels};
    const Dims strides{s.stride_h, s.stride_w}, pad{s.pad_h, s.pad_w};
    const Tag act = s.channels_last ? Tag::nhwc : Tag::nchw;
    const Tag act_fwd = blocked16 ? Tag::nChw16c : act;
    const memory::desc w_plain(wd, f32, Tag::oihw);
    const memory::desc x_plain(xd, f32, act_fwd), y_plain(yd, f32, act_fwd);  // forward, backward data
    const memory::desc xw_plain(xd, f32, act), yw_plain(yd, f32, act);        // backward weights
    // NCHW maps: format_tag::any, oneDNN picks the (blocked) layouts its fastest kernel wants
    // and the maps are reordered in and out (plain nchw, no reorders, measured 1.7x slower in
    // ResNet-8's step at one thread: oneDNN then falls back to its im2col + GEMM kernels for
    // all but the stem). NHWC maps go in as they are: oneDNN has direct kernels for them, and
    // without the reorders ResNet-8's convolutions took 21% less CPU time (one thread).
    const memory::desc w_any(wd, f32, Tag::any);
    const memory::desc x_any = s.channels_last ? x_plain : memory::desc(xd, f32, Tag::any);
    const memory::desc y_any = s.channels_last ? y_plain : memory::desc(yd, f32, Tag::any);
    const memory::desc xw_any = s.channels_last ? xw_plain : x_any, yw_any = s.channels_last ? yw_plain : y_any;
    Entry e;
    e.bias_md = memory::desc(bd, f32, Tag::x);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const auto algo = dnnl::algorithm::convolution_direct;
    try {
      const auto fwd_desc =
          bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, x_any, w_any, e.bias_md,
                                                 y_any, strides, pad, pad)
               : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, x_any, w_any, y_any,
                                                 strides, pad, pad);
      const dnnl::convolution_forward::primitive_desc fpd(fwd_desc, attr, ctx.engine);
      const dnnl::convolution_backward_data::primitive_desc dpd(
          dnnl::convolution_backward_data::desc(algo, x_any, w_any, y_any, strides, pad, pad), attr, ctx.engine, fpd);
      const auto wdesc = bias ? dnnl::convolution_backward_weights::desc(algo, xw_any, w_any, e.bias_md, yw_any,
                                                                         strides, pad, pad)
                              : dnnl::convolution_backward_weights::desc(algo, xw_any, w_any, yw_any, strides, pad, pad);
      const dnnl::convolution_backward_weights::primitive_desc wpd(wdesc, attr, ctx.engine, fpd);
      // The blocked description is only worth it with a jitted kernel (not on a CPU whose
      // vectors are not 16 floats wide, where oneDNN answers with its reference one).
      if (blocked16 && (is_reference(fpd.impl_info_str()) || is_reference(dpd.impl_info_str()))) return {};
      e.fwd = dnnl::convolution_forward(fpd);
      e.fsrc = in_port(x_plain, fpd.src_desc());
      e.fwei = in_port(w_plain, fpd.weights_desc());
      e.fdst = out_port(y_plain, fpd.dst_desc(), false);
      e.bwd_data = dnnl::convolution_backward_data(dpd);
      e.dsrc = out_port(x_plain, dpd.diff_src_desc(), false);
      e.dwei = in_port(w_plain, dpd.weights_desc());
      e.ddst = in_port(y_plain, dpd.diff_dst_desc());
      e.bwd_weights = dnnl::convolution_backward_weights(wpd);
      e.wsrc = in_port(xw_plain, wpd.src_desc());
      e.wdiff = out_port(w_plain, wpd.diff_weights_desc(), true);
      e.wddst = in_port(yw_plain, wpd.diff_dst_desc());
      e.scratchpad = std::max({fpd.scratchpad_desc().get_size(), dpd.scratchpad_desc().get_size(),
                               wpd.scratchpad_desc().get_size()});
      e.ok = true;
    } catch (const dnnl::error&) {
      e.ok = false;  // no primitive for this shape: the caller takes the im2col path
    }
    return e;
  }

  static bool is_reference(const std::string& impl) { return impl.rfind("ref", 0) == 0; }

  Entry build(const Conv2dShape& s, bool bias) {
    if (s.channels_last && s.in_channels == 16 && s.out_channels == 16) {
      Entry e = build(s, bias, true);
      if (e.ok) return e;
    }
    return build(s, bias, false);
  }

  Entry& entry(const Conv2dShape& s, bool bias) {
    return entries.get(key_of(s, bias), [&] { return build(s, bias); });
  }

  memory mem(const memory::desc& d, const void* p) const { return ctx.wrap(d, p); }
  memory scratchpad(const Entry& e) {
    return mem(memory::desc({static_cast<memory::dim>(e.scratchpad)}, memory::data_type::u8, Tag::x),
               scratch[0].get(std::max<std::size_t>(e.scratchpad, 64)));
  }
  // An input in the primitive's layout: the tensor itself, or its reordered copy in scratch[slot].
  memory input(const Port& p, const void* data, int slot) {
    memory plain = mem(p.plain, data);
    if (!p.reorder) return plain;
    memory want = mem(p.want, scratch[slot].get(p.want.get_size()));
    p.reorder->execute(ctx.stream, plain, want);
    return want;
  }
  // An output's memory in the primitive's layout (scratch[slot] when it must be reordered).
  memory output(const Port& p, void* data, int slot) {
    return p.reorder ? mem(p.want, scratch[slot].get(p.want.get_size())) : mem(p.plain, data);
  }
  void finish(const Port& p, memory out, void* data) {
    memory plain = mem(p.plain, data);
    if (p.reorder) p.reorder->execute(ctx.stream, out, plain);
  }
};

DnnlConv::DnnlConv() : st_(std::make_unique<State>()) {}
DnnlConv::~DnnlConv() = default;

bool DnnlConv::supports(const Conv2dShape& s, bool bias) {
  std::lock_guard lock(st_->ctx.mu);
  return st_->entry(s, bias).ok;
}

void DnnlConv::forward(const float* x, const float* w, const float* b, float* y, const Conv2dShape& s) {
  State& st = *st_;
  std::lock_guard lock(st.ctx.mu);
  Entry& e = st.entry(s, b != nullptr);
  if (!e.ok) throw std::logic_error("DnnlConv::forward: no oneDNN primitive for this shape (ask supports first)");
  std::unordered_map<int, memory> args;
  args[DNNL_ARG_SRC] = st.input(e.fsrc, x, 1);
  args[DNNL_ARG_WEIGHTS] = st.input(e.fwei, w, 2);
  if (b) args[DNNL_ARG_BIAS] = st.mem(e.bias_md, b);
  const memory out = st.output(e.fdst, y, 3);
  args[DNNL_ARG_DST] = out;
  args[DNNL_ARG_SCRATCHPAD] = st.scratchpad(e);
  e.fwd.execute(st.ctx.stream, args);
  st.finish(e.fdst, out, y);
  st.ctx.stream.wait();
}

void DnnlConv::backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db,
                        const Conv2dShape& s) {
  State& st = *st_;
  std::lock_guard lock(st.ctx.mu);
  Entry& e = st.entry(s, db != nullptr);
  if (!e.ok) throw std::logic_error("DnnlConv::backward: no oneDNN primitive for this shape (ask supports first)");
  const memory pad = st.scratchpad(e);
  // dy in the backward-data layout; the weights pass reuses it when it wants the same one.
  memory ddy;
  if (dx) {
    ddy = st.input(e.ddst, dy, 1);
    std::unordered_map<int, memory> args;
    args[DNNL_ARG_DIFF_DST] = ddy;
    args[DNNL_ARG_WEIGHTS] = st.input(e.dwei, w, 2);
    const memory out = st.output(e.dsrc, dx, 3);
    args[DNNL_ARG_DIFF_SRC] = out;
    args[DNNL_ARG_SCRATCHPAD] = pad;
    e.bwd_data.execute(st.ctx.stream, args);
    st.finish(e.dsrc, out, dx);
  }
  std::unordered_map<int, memory> args;
  args[DNNL_ARG_DIFF_DST] = dx && e.ddst.want == e.wddst.want ? ddy : st.input(e.wddst, dy, 1);
  args[DNNL_ARG_SRC] = st.input(e.wsrc, x, 2);
  // The weight gradient into scratch, then added into dw by wdiff's reorder (sum post-op).
  const memory gw = st.mem(e.wdiff.want, st.scratch[3].get(e.wdiff.want.get_size()));
  args[DNNL_ARG_DIFF_WEIGHTS] = gw;
  float* gb = nullptr;
  if (db) {
    gb = static_cast<float*>(st.scratch[4].get(static_cast<std::size_t>(s.out_channels) * sizeof(float)));
    args[DNNL_ARG_DIFF_BIAS] = st.mem(e.bias_md, gb);
  }
  args[DNNL_ARG_SCRATCHPAD] = pad;
  e.bwd_weights.execute(st.ctx.stream, args);
  st.finish(e.wdiff, gw, dw);
  st.ctx.stream.wait();
  if (db)
    for (std::int64_t o = 0; o < s.out_channels; ++o) db[o] += gb[o];
}

std::vector<std::int64_t> DnnlConv::scratch_bytes(const Conv2dShape& s, bool bias, bool backward) {
  std::lock_guard lock(st_->ctx.mu);
  const Entry& e = st_->entry(s, bias);
  if (!e.ok) return {};
  auto copy = [](const Port& p) -> std::size_t { return p.reorder ? p.want.get_size() : 0; };
  // The slots of forward and backward above: 1 the input (dy), 2 the weights (x), 3 the
  // output (dx, the weight gradient always), 4 the bias gradient.
  std::size_t slot1 = copy(e.fsrc), slot2 = copy(e.fwei), slot3 = copy(e.fdst), slot4 = 0;
  if (backward) {
    slot1 = std::max({slot1, copy(e.ddst), copy(e.wddst)});
    slot2 = std::max({slot2, copy(e.dwei), copy(e.wsrc)});
    slot3 = std::max({slot3, copy(e.dsrc), e.wdiff.want.get_size()});
    slot4 = bias ? static_cast<std::size_t>(s.out_channels) * sizeof(float) : 0;
  }
  std::vector<std::int64_t> out;
  for (std::size_t b : {std::max<std::size_t>(e.scratchpad, 64), slot1, slot2, slot3, slot4})
    out.push_back(static_cast<std::int64_t>(b));
  return out;
}

// ---- the backend's entry points (kernels/op_list.def) --------------------------------------

std::vector<std::int64_t> CpuBackend::conv2d_workspace(const Conv2dShape& s, bool bias, bool backward, Queue& q) {
  if (q.options().reference) return {};
  s.validate();
  return cpu_queue(q, "conv2d workspace").conv().scratch_bytes(s, bias, backward);
}


using namespace backend_detail;

void CpuBackend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, const Conv2dShape& s,
                                Queue& q) {
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

void CpuBackend::conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw, Tensor* db,
                                 const Conv2dShape& s, Queue& q) {
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

}  // namespace codistill::kernels::cpu
