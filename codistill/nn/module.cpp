#include "codistill/nn/module.hpp"

#include <stdexcept>

#include "codistill/nn/activation_plan.hpp"
#include "codistill/nn/buffer.hpp"
#include "codistill/nn/buffer_pool.hpp"
#include "codistill/util/rng.hpp"

namespace codistill {

using kernels::DType;
using kernels::Tensor;

namespace {

// The input must be where the module runs, in its parameters' dtype; whether the backend
// computes that dtype is checked by each op (require_support names the op).
void check_input(Module& m, const Tensor& x, const char* pass) {
  if (x.device() != m.device())
    throw std::invalid_argument(m.kind() + pass + ": input is on " + x.device().str() + " but the module runs on " +
                                m.device().str() + " (Model::to_device moves a model)");
  if (const auto fixed = m.input_dtype(); fixed && pass[0] == '\0') {
    if (x.dtype() != *fixed)
      throw std::invalid_argument(m.kind() + ": input is " + kernels::dtype_name(x.dtype()) + " but the module takes " +
                                  kernels::dtype_name(*fixed));
    return;
  }
  const auto params = m.params();
  // bf16 parameters are storage only (a forward-only model's matrices, ParamArena::
  // to_bf16_matrices): such a module computes in float32 and takes float32.
  const auto stored = params.empty() ? x.dtype() : params.front().value->dtype();
  if (stored == DType::bf16 && x.dtype() == DType::f32) return;
  if (!params.empty() && x.dtype() != params.front().value->dtype())
    throw std::invalid_argument(m.kind() + pass + ": input is " + kernels::dtype_name(x.dtype()) +
                                " but the parameters are " + kernels::dtype_name(params.front().value->dtype()) +
                                " (convert with to_dtype)");
}

}  // namespace

Tensor Module::forward(const Tensor& x, bool training) {
  check_input(*this, x, "");
  return releases(training) ? forward_recomputed(x, training) : do_forward(x, training);
}

Tensor Module::backward(const Tensor& dy, bool need_dx) {
  check_input(*this, dy, " backward");
  return recompute_ ? backward_recomputed(dy, need_dx) : do_backward(dy, need_dx);
}

namespace {

// The subtree's random streams (dropout masks), this module's own first, in tree order.
std::vector<Rng*> subtree_rngs(Module& m) {
  std::vector<Rng*> out;
  if (Rng* r = m.rng()) out.push_back(r);
  for (auto& [path, r] : collect_rngs(m)) out.push_back(r);
  return out;
}

std::vector<Rng::State> rng_states(Module& m) {
  std::vector<Rng::State> out;
  for (Rng* r : subtree_rngs(m)) out.push_back(r->state());
  return out;
}

void set_rng_states(Module& m, const std::vector<Rng::State>& states) {
  const std::vector<Rng*> rngs = subtree_rngs(m);
  if (rngs.size() != states.size())
    throw std::logic_error(m.kind() + ": recompute: the random streams changed between forward and backward");
  for (std::size_t i = 0; i < rngs.size(); ++i) rngs[i]->set_state(states[i]);
}

}  // namespace

// Keeps the input (shared, not copied: the module before returned it and does not touch it
// until the next step) and the random streams, so that backward can replay this forward.
Tensor Module::forward_recomputed(const Tensor& x, bool training) {
  if (!training && !recompute_) {
    // What a training forward left (another batch's shapes) goes back to the backend, not to
    // the pool: this forward then takes what the block before it let go, not fresh memory.
    const std::shared_ptr<nn::BufferPool> pool = pool_;
    set_pool(nullptr);
    release_activations();
    set_pool(pool);
  }
  recompute_input_ = training ? x : Tensor{};
  if (training) rng_before_ = rng_states(*this);
  if (pool_) pool_->use_for(x.dim(0));
  Tensor y = do_forward(x, training);
  if (training) rng_after_ = rng_states(*this);
  release_activations();  // y shares its buffer's storage: it outlives the member
  if (pool_) pool_->settle();
  return y;
}

// The rerun draws the same masks (the streams as they were before forward) and must not
// count its batch twice in non-trainable buffers (batch-norm running statistics): they are
// put back as the first forward left them, as are the streams.
Tensor Module::backward_recomputed(const Tensor& dy, bool need_dx) {
  if (!recompute_input_.defined())
    throw std::logic_error(kind() + ": recompute: backward without a training forward before it");
  std::vector<std::pair<kernels::Tensor*, Tensor>> kept;
  for (const NamedBuffer& b : collect_buffers(*this)) {
    Tensor copy = Tensor::empty(b.value->shape(), b.value->dtype(), b.value->device());
    queue().copy(copy, *b.value);
    kept.emplace_back(b.value, std::move(copy));
  }
  set_rng_states(*this, rng_before_);
  if (pool_) pool_->use_for(recompute_input_.dim(0));
  do_forward(recompute_input_, /*training=*/true);
  set_rng_states(*this, rng_after_);
  for (auto& [buffer, copy] : kept) queue().copy(*buffer, copy);
  Tensor dx = do_backward(dy, need_dx);
  release_activations();
  recompute_input_ = Tensor{};  // first: the input may then go to the pool with its last holder
  if (pool_) pool_->settle();
  return dx;
}

void Module::set_recompute(bool on, std::shared_ptr<nn::BufferPool> pool) {
  recompute_ = on;
  recompute_input_ = Tensor{};
  set_pool(on ? pool : nullptr);
}

void Module::release_activations() {
  for_each_child([](const std::string&, Module& child) { child.release_activations(); });
}

// Recomputed in training: the output stays (the next module's input, kept for its
// backward); the rest is held only while this module runs, and in backward beside the
// gradient handed to it. Without gradients nothing keeps a block's output past the next
// block, which holds it as its input while it runs: each block's internals with its input.
ActivationBytes Module::plan(const kernels::Shape& x, bool training, bool need_dx) {
  ActivationBytes a = plan_activations(x, training, need_dx);
  if (!releases(training)) return a;
  ActivationBytes r;
  r.output = a.output;
  r.workspace = a.workspace;
  if (training) {
    r.forward = nn::f32_bytes(a.output);
    r.transient = a.total() + nn::f32_bytes(a.output);
  } else {
    r.transient = a.total() + nn::f32_bytes(x);
  }
  return r;
}

void Module::set_queue(kernels::Queue& q) {
  queue_ = &q;
  for_each_child([&](const std::string&, Module& child) { child.set_queue(q); });
  queue_changed();
}

void Module::set_reference(bool reference) {
  if (!device().is_cpu()) throw std::logic_error(kind() + ": reference loops exist on the CPU only");
  set_queue(kernels::default_cpu_queue(reference));
}

void Module::to_dtype(DType dtype) {
  for (auto& p : params()) {
    if (p.value->defined()) *p.value = p.value->to(dtype);
    if (p.grad->defined()) *p.grad = p.grad->to(dtype);
  }
  for (auto& b : buffers())
    if (b.value->defined()) *b.value = b.value->to(dtype);
  for_each_child([&](const std::string&, Module& child) { child.to_dtype(dtype); });
}

bool Module::has_params() {
  if (!params().empty()) return true;
  bool any = false;
  for_each_child([&](const std::string&, Module& child) { any = any || child.has_params(); });
  return any;
}

Tensor& Module::ensure(Tensor& buf, const kernels::Shape& shape, DType dtype) {
  if (pool_ && !buf.defined()) buf = pool_->take(shape, dtype, device());
  return nn::ensure_buffer(buf, shape, dtype, queue());
}

void Module::drop(Tensor& buf) {
  if (pool_) pool_->drop(buf);
  buf = Tensor();
}

void Module::set_pool(const std::shared_ptr<nn::BufferPool>& pool) {
  pool_ = pool;
  for_each_child([&](const std::string&, Module& child) { child.set_pool(pool); });
}

namespace nn {
kernels::Shape batched_output(const Module& m, const kernels::Shape& x) {
  if (x.empty()) throw std::invalid_argument(m.kind() + ": a memory plan needs an input with a batch dimension");
  kernels::Shape out = m.output_shape(kernels::Shape(x.begin() + 1, x.end()));
  out.insert(out.begin(), x.front());
  return out;
}
}  // namespace nn

// A leaf's output buffer, and its input gradient where backward is asked for one.
ActivationBytes Module::plan_activations(const kernels::Shape& x, bool training, bool need_dx) {
  ActivationBytes a;
  a.output = nn::batched_output(*this, x);
  a.forward = nn::f32_bytes(a.output);
  if (training && need_dx) a.backward = nn::f32_bytes(x);
  return a;
}

DType Module::param_dtype() {
  auto p = params();
  if (p.empty()) return DType::f32;
  // bf16 parameters are storage (a forward-only copy's matrices): the module computes in float32.
  return p.front().value->dtype() == DType::bf16 ? DType::f32 : p.front().value->dtype();
}

namespace {

void visit(Module& m, const std::string& prefix, const std::function<void(const std::string&, Module&)>& fn) {
  m.for_each_child([&](const std::string& name, Module& child) {
    const std::string path = prefix.empty() ? name : prefix + "/" + name;
    fn(path, child);
    visit(child, path, fn);
  });
}

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "/" + name;
}

}  // namespace

void visit_modules(Module& root, const std::function<void(const std::string&, Module&)>& fn) { visit(root, "", fn); }

std::vector<NamedParam> collect_params(Module& root) {
  std::vector<NamedParam> out;
  for (auto& p : root.params()) out.push_back({p.name, p.value, p.grad});
  visit(root, "", [&](const std::string& path, Module& m) {
    for (auto& p : m.params()) out.push_back({join(path, p.name), p.value, p.grad});
  });
  return out;
}

std::vector<NamedBuffer> collect_buffers(Module& root) {
  std::vector<NamedBuffer> out;
  for (auto& b : root.buffers()) out.push_back({b.name, b.value});
  visit(root, "", [&](const std::string& path, Module& m) {
    for (auto& b : m.buffers()) out.push_back({join(path, b.name), b.value});
  });
  return out;
}

std::vector<std::pair<std::string, Rng*>> collect_rngs(Module& root) {
  std::vector<std::pair<std::string, Rng*>> out;
  visit(root, "", [&](const std::string& path, Module& m) {
    if (Rng* r = m.rng()) out.emplace_back(path, r);
  });
  return out;
}

}  // namespace codistill
