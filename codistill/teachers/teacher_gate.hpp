#pragma once
// The teacher gate (codistill.gate): a peer that diverged, was misconfigured or trained on
// broken data still publishes checkpoints that pass every integrity check, and a worker
// that distilled from it would be wrecked (an fmnist_mlp worker taught by a peer with a
// corrupted classifier fell from 88% to 14% test accuracy). So before a checkpoint
// teaches, its model is scored on a small fixed probe of this worker's own held-out data
// (the first `probe` label rows of the test split, or of the held-out windows for text),
// and refused unless its mean cross-entropy there is finite and within the bounds of
// GateConfig, which compare it with the student's own probe loss measured at that step.
//
// A refused checkpoint does not teach: the worker keeps the teacher it held from that peer
// (if any), and the peer stays refused until it publishes a newer checkpoint, which is
// scored in turn. Scoring is a pure function of the two models and the probe, so sync
// mode stays reproducible bit for bit. Fixed teachers are scored once, when a worker
// starts; a refused one is a configuration error naming its file.
#include <cstdint>
#include <functional>
#include <string>

#include "codistill/config/config.hpp"
#include "codistill/eval/evaluate.hpp"
#include "codistill/models/model.hpp"

namespace codistill {

// A model's measure on the probe (the modality's: Modality::probe).
using ProbeFn = std::function<EvalResult(Model&)>;

struct GateVerdict {
  bool accepted = true;
  double loss = 0;      // the teacher's mean cross-entropy on the probe (nats)
  double own_loss = 0;  // the student's, at the same step
  double ms = 0;        // the probe forwards this verdict cost (the student's only when measured for it)
  std::string reason;   // why it was refused; empty when accepted
};

// Why a teacher with probe loss `loss` is refused against a student at `own_loss`, or ""
// when it is accepted (the rule of GateConfig, without running anything).
std::string gate_refusal(const GateConfig& cfg, double loss, double own_loss);

class TeacherGate {
 public:
  // `student` must outlive the gate; the probe runs inference forwards of it and of each
  // teacher on their own queues.
  TeacherGate(GateConfig cfg, ProbeFn probe, Model& student);

  // Scores `teacher` against the student at own step `step` (the student's probe loss is
  // measured once per step, however many teachers are judged at it).
  GateVerdict judge(Model& teacher, std::int64_t step);
  const GateConfig& config() const { return cfg_; }

 private:
  GateConfig cfg_;
  ProbeFn probe_;
  Model& student_;
  std::int64_t own_step_ = -1;
  double own_loss_ = 0;
};

}  // namespace codistill
