#pragma once
// Teachers shared read-only between the ranks of a worker group on one node
// (codistill.share_teachers, issue 37). Without it every rank of a group loads each
// teacher into its own memory: R ranks on a node hold R copies (GPT-2 124M: 250 MB each in
// bf16). With it one rank per node (the writer: the node's lowest rank) loads a teacher,
// writes its parameter blocks (values, buffers, bf16 matrices, as the teacher holds them)
// into a file of codistill.share_dir (teachers/shared_file.hpp) and maps it read-only as
// its own storage; the node's other ranks map the same file. The group orders it: the
// writers publish before a group barrier, the others map after it (train/training.cpp).
// A rank that cannot map a file (the writer could not write it: folder missing or full)
// loads its own copy and says why; the run never fails for it. Only host-memory teachers
// (the CPU backend) share: a device's teachers live in each rank's device memory.
#include <cstdint>
#include <memory>
#include <string>

#include "codistill/models/model.hpp"
#include "codistill/teachers/shared_file.hpp"

namespace codistill {

// This rank's part, set once by the trainer (train/group.hpp plan_teacher_sharing).
struct TeacherSharing {
  // The group takes part (share_teachers auto, 2 ranks or more): the same on every rank,
  // so that every rank enters the barrier between the writers and the readers.
  bool coordinated = false;
  bool enabled = false;  // this rank shares its teachers (writes or maps)
  bool writer = false;   // ... and writes its node's files
  std::string dir;       // codistill.share_dir
  // "<writer pid>.<run key>.w<worker>": with the peer, step and weights, a file's name
  // (unique per run, worker, peer and checkpoint; the writer's pid lets cleanup find files
  // of dead runs).
  long writer_pid = 0;
  std::string name;
};

// The file of peer `peer`'s teacher of `step` held as `weights` (float32 | bf16).
std::string shared_teacher_path(const TeacherSharing& s, int peer, std::int64_t step, const std::string& weights);

// What a shared file says of its teacher: enough to rebuild the model without its
// checkpoint (the model attribute) and to report where it came from.
struct SharedTeacherMeta {
  std::string model_yaml, fingerprint, source;  // source: the checkpoint or teacher file read
  bool teacher_file = false;
  std::int64_t step = 0;
};
std::string meta_text(const SharedTeacherMeta& m);
// Throws SharedFileError when the text is not a shared teacher's meta.
SharedTeacherMeta parse_meta(const std::string& text, const std::string& path);

// The writer: `model`'s blocks (forward-only: after drop_grads, and to_bf16_weights where
// the teacher holds bf16) into `path`, then the model's arena onto the read-only mapping
// (its private blocks freed). Returns the hold that removes the file when destroyed.
// Throws SharedFileError (the model unchanged) when the file cannot be written or mapped.
std::shared_ptr<SharedFileOwner> publish_teacher(Model& model, const std::string& path, const SharedTeacherMeta& meta);

// A reader: `model` (built from the meta's model attribute, forward-only, in the writer's
// layout) takes the mapping's blocks as its storage. Throws SharedFileError when the
// mapping's blocks are not laid out as the model's.
void adopt_shared(Model& model, const std::shared_ptr<SharedMapping>& mapping);

}  // namespace codistill
