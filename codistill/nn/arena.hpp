#pragma once
// One parameter arena per model: every parameter, every gradient and every non-trainable
// buffer of the module tree in three flat tensors (values, grads, buffers), each entry at
// an offset aligned to 64 bytes (16 elements), with the modules' own tensors rebound as
// named views into them. So an optimizer step is one op over `values` and `grads`, zeroing
// the gradients one memset, a teacher load or a device move one copy per block, and a
// gradient all-reduce (a worker group's, train/group.cpp) one call. Padding between entries is zero and stays
// zero under every update (zero gradient, zero value).
#include <cstdint>
#include <string>
#include <vector>

#include "codistill/nn/module.hpp"

namespace codistill {

struct ArenaEntry {
  std::string path;  // "fc1/weight"
  kernels::Shape shape;
  std::int64_t offset = 0;  // in elements, of values() (or of matrices() where bf16)
  std::int64_t numel = 0;
  bool bf16 = false;  // held in the bf16 matrices block (to_bf16_matrices)
};

class ParamArena {
 public:
  // Lays out root's parameters and buffers (collect_params / collect_buffers order), copies
  // their current values in and rebinds every module's tensors as views. Parameters must
  // share one dtype and device. Grads start at zero; a parameter without a grad tensor
  // (none exist today) would get one. The values' dtype and device are the first
  // parameter's.
  void build(Module& root);

  // Converts/moves the three blocks (one copy each) and rebinds the views. `q` must be
  // idle (the caller synchronized the old queue).
  void to_dtype(Module& root, kernels::DType dtype);
  // copy = false: the new blocks are left uninitialized for the caller to fill (a teacher
  // uploading its values itself); on the device the blocks are already on, nothing changes.
  void to_device(Module& root, kernels::Device device, bool copy = true);
  // Forward-only use (teachers): the gradient block is released, grads become empty.
  void drop_grads(Module& root);
  // Forward-only use with bf16 matrices (a teacher, codistill.teacher_weights: bf16): every
  // rank-2 parameter (Linear weights, embedding tables, so a tied head's weight too) moves,
  // rounded to nearest even, into a bf16 block of its own, matrices(); the others (biases,
  // norm gains: under 1% of GPT-2's parameters) stay in a float32 values() block laid out
  // anew. Host only, after drop_grads (throws std::logic_error otherwise); the modules then
  // read bf16 weights, which only the ops that take them accept (kernels/op_list.def).
  void to_bf16_matrices(Module& root);
  // The bytes held: every block (values, grads, buffers, matrices).
  std::int64_t held_bytes() const;
  // What values, matrices and buffers would hold after to_bf16_matrices (memory plans).
  std::int64_t bf16_matrices_bytes() const;
  // Makes `values` (laid out like values(): shape, dtype, device) the value block and
  // rebinds the views; returns the block it replaces. An out-of-place optimizer step
  // (Optimizer::step_into) writes the new values there. Throws std::invalid_argument on
  // another layout, changing nothing.
  kernels::Tensor replace_values(Module& root, kernels::Tensor values);
  // Forward-only copies (teachers shared read-only between the ranks of a node,
  // teachers/teacher_sharing.hpp): values, buffers and matrices become `values`, `buffers`
  // and `matrices` (external storage, e.g. a read-only mapping, laid out like the blocks
  // they replace; an undefined one where the arena has none) and the views are rebound.
  // Throws std::logic_error while gradients exist (nothing may write into such storage),
  // std::invalid_argument on another layout, changing nothing.
  void adopt_blocks(Module& root, kernels::Tensor values, kernels::Tensor buffers, kernels::Tensor matrices);

  kernels::Tensor& values() { return values_; }
  kernels::Tensor& grads() { return grads_; }
  kernels::Tensor& buffers() { return buffers_; }  // empty (undefined) when there are none
  kernels::Tensor& matrices() { return matrices_; }  // bf16; empty unless to_bf16_matrices
  const std::vector<ArenaEntry>& param_entries() const { return params_; }
  const std::vector<ArenaEntry>& buffer_entries() const { return buffer_entries_; }
  // A flat block laid out like values() (an optimizer slot) seen as the entry's tensor.
  static kernels::Tensor view(const kernels::Tensor& flat, const ArenaEntry& e) { return flat.view(e.offset, e.shape); }
  std::int64_t num_params() const;  // without padding

 private:
  void rebind(Module& root);

  std::vector<ArenaEntry> params_, buffer_entries_;
  kernels::Tensor values_, grads_, buffers_, matrices_;
};

}  // namespace codistill
