// Teacher (teachers.hpp): one peer's model, forward only; whether a checkpoint's model can
// teach this worker's.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "codistill/config/config_loader.hpp"
#include "codistill/util/run_errors.hpp"
#include "codistill/teachers/teachers.hpp"

namespace codistill {

checkpoint::ReadOptions teacher_read_options() {
  checkpoint::ReadOptions o;
  o.optimizer = false;  // a teacher only runs forward
  o.state = false;
  return o;
}

std::string Teacher::label() const {
  return peer >= 0 ? std::to_string(peer) : "fixed-" + std::to_string(-peer - 1);
}

void check_teacher_fits(const std::string& teacher_model_yaml, const ModelConfig& student, const std::string& who) {
  ModelConfig t;
  try {
    t = model_from_yaml(teacher_model_yaml, who + " model attribute");
  } catch (const std::exception& e) {
    throw TrainingError(fmt::format("{}: its model attribute cannot be read: {}", who, e.what()));
  }
  // Language models (data.kind text: inputs are [T] token windows): the teacher reads the
  // student's [B, T] batch, so it must take windows of T tokens (a gpt takes exactly its
  // model.seq_len) and predict the same vocabulary. Said in those words.
  if (t.input_shape.size() == 1 && student.input_shape.size() == 1 && student.vocab_size > 0) {
    const std::int64_t context = student.input_shape[0], takes = t.input_shape[0];
    if (t.classes != student.classes || context != takes)
      throw TrainingError(fmt::format("{} cannot teach this worker: its model ({}) predicts a vocabulary of {} from "
                                      "windows of {} tokens; this worker's model ({}) predicts {} from windows of "
                                      "data.context = {} tokens",
                                      who, t.kind, t.classes, takes, student.kind, student.classes, context));
    return;
  }
  // What the student's loss consumes is the teacher's logits of the student's batch: the
  // input shape and the classes must agree; depth, width and kind may differ.
  if (t.input_shape != student.input_shape || t.classes != student.classes)
    throw TrainingError(fmt::format("{} cannot teach this worker: its model ({}) takes inputs of shape [{}] and "
                                    "predicts {} classes, this worker's model ({}) takes [{}] and predicts {}",
                                    who, t.kind, fmt::join(t.input_shape, ", "), t.classes, student.kind,
                                    fmt::join(student.input_shape, ", "), student.classes));
}

Teacher::~Teacher() {
  try {
    model.synchronize();
  } catch (...) {  // a destructor must not throw; a failed device fails the run elsewhere
  }
}

namespace {

// Runs fwd on the teacher's queue once input_ready has happened, keeps its output in
// t.logits and records t.forward_done after it (the student's loss waits on that event).
template <class F>
const kernels::Tensor& forward_on_queue(Teacher& t, kernels::Event* input_ready, F&& fwd) {
  kernels::Queue& q = t.model.queue();
  if (input_ready) q.wait(*input_ready);
  t.logits = fwd();
  if (!t.forward_done) t.forward_done = q.make_event();
  q.record(*t.forward_done);
  return t.logits;
}

}  // namespace

const kernels::Tensor& Teacher::forward(const kernels::Tensor& x, kernels::Event* input_ready) {
  return forward_on_queue(*this, input_ready, [&] { return model.forward(x, /*training=*/false); });
}

const kernels::Tensor& Teacher::forward_features(const kernels::Tensor& x, kernels::Event* input_ready) {
  return forward_on_queue(*this, input_ready, [&] { return model.forward_features(x, /*training=*/false); });
}

}  // namespace codistill
