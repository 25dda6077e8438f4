#pragma once
// What an optimizer updates (codistill/optim): a parameter arena, the module tree whose
// parameter views it backs, and the queue its work runs on. A Model is one (models/model.hpp);
// the optimizer sees only this, so that optim sits beside models on the ladder
// (scripts/lib/check_includes.py), not above it. The queue is asked for at each use: it
// changes when the model moves to another device after the optimizer was made.
#include "codistill/nn/arena.hpp"
#include "codistill/nn/module.hpp"
#include "kernels/backend.hpp"

namespace codistill {

class Trainable {
 public:
  virtual ParamArena& arena() = 0;
  virtual Module& root() = 0;
  virtual kernels::Queue& queue() const = 0;
  // Host waits for everything queued on queue().
  virtual void synchronize() const = 0;

 protected:
  ~Trainable() = default;
};

}  // namespace codistill
