// Where a ResNet-8 CPU training step goes, op by op: the layers of configs/fmnist_resnet8.yaml
// (channels 16/32/64, one block per stage, batch 128, 28x28 inputs) run through the CPU
// backend's fast queue as the model runs them: convolution forward and backward (the
// backend's path, and for comparison the im2col + GEMM path of kernels/cpu/image/conv2d.cpp),
// batch norm, relu (after the stem's and each block's first batch norm, and after each
// residual add, as the model has them), the residual adds, global average pooling and one SGD
// update of the parameters. Prints milliseconds per step per op class and the share of the
// total.
//   bench_resnet_ops [--threads N] [--reps R] [--batch B] [--cpu] [--nhwc] [--fuse]
//   (--cpu: process CPU time, not wall; --nhwc: channels-last maps, as the trainer's resnet
//   runs on the CPU by default: convolutions NHWC, batch norm as [B*H*W, C] rows, pooling
//   per pixel; --fuse: batch norm + relu and add + relu as one op each
//   (Op::batchnorm_activation, Op::add_activation), as the model's containers fuse them where
//   the backend has them)
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/image/conv2d.hpp"
#include "kernels/cpu/impl.hpp"

namespace k = codistill::kernels;

namespace {

k::Tensor filled(k::Shape shape, float scale) {
  k::Tensor t = k::Tensor::empty(std::move(shape));
  float* p = t.data<float>();
  unsigned s = 12345;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = scale * (static_cast<float>(s >> 8) / 16777216.0f - 0.5f);
  }
  return t;
}

k::Conv2dShape conv(std::int64_t b, std::int64_t c, std::int64_t hw, std::int64_t o, std::int64_t kk,
                    std::int64_t stride) {
  k::Conv2dShape s;
  s.batch = b, s.in_channels = c, s.height = hw, s.width = hw, s.out_channels = o;
  s.kernel_h = s.kernel_w = kk, s.stride_h = s.stride_w = stride, s.pad_h = s.pad_w = kk / 2;
  return s;
}

// Wall time, or with --cpu the process's CPU time: on a shared, loaded machine CPU time at
// one thread is the steadier measure of the work itself (it leaves out time preempted).
double now_ms(bool cpu) {
  timespec ts{};
  clock_gettime(cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

struct Timer {
  bool cpu = false;
  std::map<std::string, double> ms;
  void run(const std::string& what, const std::function<void()>& f) {
    const double t0 = now_ms(cpu);
    f();
    ms[what] += now_ms(cpu) - t0;
  }
};

// Where a unit's relu is: after its batch norm (the stem, a block's first), after the
// residual add that follows its batch norm (a block's second), or none (a projection).
enum class Relu { after_bn, after_add, none };

// One conv + BN (+ relu) unit with its tensors.
struct Unit {
  k::Conv2dShape s;
  bool first;  // the stem: no input gradient
  Relu relu = Relu::none;
  k::Tensor x, w, y, dy, dx, dw, gamma, beta, rm, rv, sm, si, z, dz, dbn, dgamma, dbeta;
  explicit Unit(k::Conv2dShape sh, bool is_first) : s(sh), first(is_first) {
    x = filled({s.batch, s.in_channels, s.height, s.width}, 2);
    w = filled({s.out_channels, s.in_channels, s.kernel_h, s.kernel_w}, 0.2f);
    const k::Shape ys{s.batch, s.out_channels, s.out_height(), s.out_width()};
    y = k::Tensor::empty(ys), dy = filled(ys, 0.01f), z = k::Tensor::empty(ys), dz = k::Tensor::empty(ys);
    dbn = k::Tensor::empty(ys);  // kept apart from dy so that repeated steps see the same data
    dx = k::Tensor::empty(x.shape()), dw = k::Tensor::zeros(w.shape());
    gamma = k::Tensor::full({s.out_channels}, 1.0), beta = k::Tensor::zeros({s.out_channels});
    rm = k::Tensor::zeros({s.out_channels}), rv = k::Tensor::full({s.out_channels}, 1.0);
    sm = k::Tensor::empty({s.out_channels}), si = k::Tensor::empty({s.out_channels});
    dgamma = k::Tensor::zeros({s.out_channels}), dbeta = k::Tensor::zeros({s.out_channels});
  }
  k::BatchNormShape bn() const {
    k::BatchNormShape b;
    b.batch = s.batch, b.channels = s.out_channels, b.spatial = s.out_height() * s.out_width();
    if (s.channels_last) b.batch *= b.spatial, b.spatial = 1;
    return b;
  }
};

struct Options {
  int threads = 2, reps = 30;
  std::int64_t B = 128;
  bool cpu_time = false, nhwc = false, fuse = false;
};

// False (after the usage line) on an unknown argument.
bool parse_options(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; i += 2) {
    if (!std::strcmp(argv[i], "--cpu") || !std::strcmp(argv[i], "--nhwc") || !std::strcmp(argv[i], "--fuse")) {
      (argv[i][2] == 'c' ? o.cpu_time : argv[i][2] == 'n' ? o.nhwc : o.fuse) = true, --i;
      continue;
    }
    if (i + 1 >= argc) break;
    if (!std::strcmp(argv[i], "--threads")) o.threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps")) o.reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--batch")) o.B = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: bench_resnet_ops [--threads N] [--reps R] [--batch B] [--cpu] [--nhwc] [--fuse]\n");
      return false;
    }
  }
  return true;
}

// The convolutions of ResNet-8 (16/32/64, one block per stage): stem, 2 per block, and the
// 1x1 stride-2 projections of stages 2 and 3.
std::vector<Unit> resnet8_units(std::int64_t B, bool nhwc) {
  std::vector<Unit> units;
  units.emplace_back(conv(B, 1, 28, 16, 3, 1), true);
  units.emplace_back(conv(B, 16, 28, 16, 3, 1), false);
  units.emplace_back(conv(B, 16, 28, 16, 3, 1), false);
  units.emplace_back(conv(B, 16, 28, 32, 3, 2), false);
  units.emplace_back(conv(B, 32, 14, 32, 3, 1), false);
  units.emplace_back(conv(B, 16, 28, 32, 1, 2), false);
  units.emplace_back(conv(B, 32, 14, 64, 3, 2), false);
  units.emplace_back(conv(B, 64, 7, 64, 3, 1), false);
  units.emplace_back(conv(B, 32, 14, 64, 1, 2), false);
  for (Unit& u : units) u.s.channels_last = nhwc;
  for (int i : {0, 1, 3, 6}) units[static_cast<std::size_t>(i)].relu = Relu::after_bn;
  for (int i : {2, 4, 7}) units[static_cast<std::size_t>(i)].relu = Relu::after_add;
  return units;
}

// The step's forward ops: each unit's convolution, batch norm and relu, then the three
// residual adds, each followed by its relu (--fuse: one op, Op::add_activation).
void forward(k::Backend& be, k::Queue& q, std::vector<Unit>& units, Timer& t, bool fuse) {
  for (Unit& u : units) {
    t.run("conv forward", [&] { be.conv2d_forward(u.x, u.w, nullptr, u.y, u.s, q); });
    t.run("conv forward (im2col)", [&] {
      k::cpu::conv2d_forward<float>(u.x.data<float>(), u.w.data<float>(), nullptr, u.y.data<float>(), u.s);
    });
    const k::BatchNormShape bs = u.bn();
    if (fuse && u.relu == Relu::after_bn) {
      t.run("batchnorm forward", [&] {
        be.batchnorm_activation_forward(u.y, u.gamma, u.beta, u.rm, u.rv, u.z, u.sm, u.si, true,
                                        k::Activation::relu, bs, q);
      });
      continue;
    }
    t.run("batchnorm forward", [&] {
      be.batchnorm_forward(u.y, u.gamma, u.beta, u.rm, u.rv, u.z, u.sm, u.si, true, bs, q);
    });
    if (u.relu == Relu::after_bn)
      t.run("relu forward", [&] { be.activation_forward(u.z, u.z, k::Activation::relu, q); });
  }
  for (int i : {2, 4, 7}) {
    Unit& u = units[static_cast<std::size_t>(i)];
    if (fuse) {
      t.run("add", [&] { be.add_activation(u.z, u.z, u.z, k::Activation::relu, q); });
      continue;
    }
    t.run("add", [&] { be.add(u.z, u.z, u.z, q); });
    t.run("relu forward", [&] { be.activation_forward(u.z, u.z, k::Activation::relu, q); });
  }
}

// The step's backward ops, units in reverse: relu, batch norm, convolution.
void backward(k::Backend& be, k::Queue& q, std::vector<Unit>& units, Timer& t, bool fuse) {
  for (int i = static_cast<int>(units.size()) - 1; i >= 0; --i) {
    Unit& u = units[static_cast<std::size_t>(i)];
    if (fuse && u.relu == Relu::after_bn) {
      t.run("batchnorm backward", [&] {
        be.batchnorm_activation_backward(u.y, u.z, u.gamma, u.sm, u.si, u.dy, &u.dbn, u.dgamma, u.dbeta, true,
                                         k::Activation::relu, u.bn(), q);
      });
    } else {
      const k::Tensor* d = &u.dy;
      if (u.relu != Relu::none) {
        t.run("relu backward", [&] { be.activation_backward(u.z, u.dy, u.dz, k::Activation::relu, q); });
        d = &u.dz;
      }
      t.run("batchnorm backward", [&] {
        be.batchnorm_backward(u.y, u.gamma, u.sm, u.si, *d, &u.dbn, u.dgamma, u.dbeta, true, u.bn(), q);
      });
    }
    k::Tensor* dx = u.first ? nullptr : &u.dx;
    t.run("conv backward", [&] { be.conv2d_backward(u.x, u.w, u.dy, dx, u.dw, nullptr, u.s, q); });
    t.run("conv backward (im2col)", [&] {
      k::cpu::conv2d_backward<float>(u.x.data<float>(), u.w.data<float>(), u.dy.data<float>(),
                                     dx ? dx->data<float>() : nullptr, u.dw.data<float>(), nullptr, u.s, true);
    });
  }
}

void print_report(const Options& o, const Timer& t) {
  double total = 0;
  for (const auto& [what, ms] : t.ms)
    if (what.find("im2col") == std::string::npos) total += ms;
  std::printf("ResNet-8 step ops, batch %lld, %d threads, %s, %s maps%s, mean of %d steps (im2col rows: the old "
              "path, not in the total)\n",
              static_cast<long long>(o.B), o.threads, o.cpu_time ? "CPU time" : "wall time", o.nhwc ? "NHWC" : "NCHW",
              o.fuse ? ", relu fused into batch norm and add" : "", o.reps);
  for (const auto& [what, ms] : t.ms)
    std::printf("%-24s %8.2f ms  %5.1f%%\n", what.c_str(), ms / o.reps,
                what.find("im2col") == std::string::npos ? 100 * ms / total : 0.0);
  std::printf("%-24s %8.2f ms  -> %.0f examples/s for these ops alone\n", "total", total / o.reps,
              o.B * 1000.0 * o.reps / total);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse_options(argc, argv, o)) return 2;
  const std::int64_t B = o.B;
  k::cpu::set_num_threads(o.threads);
  k::Backend& be = k::backend_for(k::DeviceKind::cpu);
  auto q = be.make_queue(k::Device::cpu());
  std::vector<Unit> units = resnet8_units(B, o.nhwc);
  std::int64_t params = 0;
  for (const Unit& u : units) params += u.w.numel() + 2 * u.s.out_channels;
  k::Tensor pv = filled({params}, 0.1f), pg = filled({params}, 0.01f), pm = k::Tensor::zeros({params});
  k::Tensor pooled = k::Tensor::empty({B, 64}), dpooled = filled({B, 64}, 0.01f);
  k::SgdScalars sgd;
  sgd.lr = 0.1, sgd.momentum = 0.9, sgd.nesterov = true, sgd.weight_decay = 5e-4;

  Timer t;
  t.cpu = o.cpu_time;
  for (int r = -3; r < o.reps; ++r) {
    if (r == 0) t.ms.clear();
    forward(be, *q, units, t, o.fuse);
    t.run("global avgpool", [&] {
      if (o.nhwc) {
        be.global_avgpool_forward(units[7].z, pooled, B, 49, 64, *q);
        be.global_avgpool_backward(dpooled, units[7].dz, B, 49, 64, *q);
      } else {
        be.global_avgpool_forward(units[7].z, pooled, B * 64, 49, 1, *q);
        be.global_avgpool_backward(dpooled, units[7].dz, B * 64, 49, 1, *q);
      }
    });
    backward(be, *q, units, t, o.fuse);
    t.run("sgd update", [&] { be.sgd_update(pv, pg, &pm, sgd, {}, *q); });
  }
  print_report(o, t);
  return 0;
}
