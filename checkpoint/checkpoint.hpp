#pragma once
// Checkpoint format v1 (DESIGN.md section 5, docs/checkpoint-format.md): one HDF5 file
// with root attributes and groups of named tensors, /params, /buffers (only when the
// model has non-trainable buffers), /optimizer and /state. write() publishes atomically;
// read() and verify() check everything the format promises (attributes, per-chunk
// fletcher32, content digest, finite parameters and buffers).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/error.hpp"
#include "checkpoint/hash.hpp"
#include "checkpoint/tensors.hpp"

namespace codistill::checkpoint {

inline constexpr const char* kFormatName = "codistill.checkpoint";
inline constexpr std::int64_t kFormatVersion = 1;

// A teacher in use when the checkpoint was taken: peer worker id and that peer's step.
// Stored as the 1-D compound attribute teacher_steps {worker: int64, step: int64}.
struct TeacherStep {
  std::int64_t worker = 0;
  std::int64_t step = 0;
  bool operator==(const TeacherStep&) const = default;
};

// The root attributes (format and format_version are implied).
struct CheckpointMeta {
  std::int64_t worker = 0;
  std::int64_t step = 0;
  std::int64_t examples_seen = 0;
  std::int64_t created_unix = 0;  // write(): 0 means "now"
  std::string model;              // the config's model section, YAML
  std::string model_fingerprint;  // hash of the ordered parameter names and shapes
  std::string config;             // the resolved config, YAML
  std::vector<TeacherStep> teacher_steps;
  std::string content_digest;  // read(): the stored (and verified) digest; write(): ignored
  // read(): the digest's algorithm, "xxh64" for files without the attribute (written
  // before 2026-11-24); write(): ignored (WriteOptions::digest_algorithm decides).
  std::string content_digest_algorithm = "xxh3-64";
  bool operator==(const CheckpointMeta&) const = default;
};

// `buffers` holds a model's non-trainable tensors (e.g. BatchNorm running statistics).
// It comes last in the enum only so that the older values keep their numbers; wherever
// sections are listed the order is kSections: params, buffers, optimizer, state.
enum class Section { params, optimizer, state, buffers };
inline constexpr Section kSections[] = {Section::params, Section::buffers, Section::optimizer, Section::state};
const char* section_group(Section s);  // "params", "buffers", "optimizer", "state"

// What write() takes. Names are paths under the section's group: params "fc1/weight",
// buffers "bn1/running_mean", optimizer "fc1/weight/momentum", state "rng/model_init".
// Params, buffers and optimizer slots must be float32; state may be float32, float64,
// int64 or uint64. With no buffers the file has no /buffers group at all (files of
// models without buffers are exactly what they were before buffers existed).
struct CheckpointView {
  CheckpointMeta meta;
  std::vector<TensorRef> params, buffers, optimizer, state;

  const std::vector<TensorRef>& section(Section s) const;
  std::vector<TensorRef>& section(Section s);
};

// What read() returns. bfloat16 datasets (teacher files) come widened to float32, exactly.
// Within each section tensors come in the file's creation order,
// depth first: the written order whenever names that share a prefix are written together
// (as a model's parameter list is). A file without a /buffers group (every file
// written before buffers existed) reads as one with no buffers.
struct CheckpointData {
  CheckpointMeta meta;
  std::vector<TensorValue> params, buffers, optimizer, state;
  // read(): bytes of dataset storage read from the file (chunks with their checksums,
  // contiguous data); the sections not returned count when the digest made them read.
  std::uint64_t bytes_read = 0;

  const std::vector<TensorValue>& section(Section s) const;
  std::vector<TensorValue>& section(Section s);
  // nullptr when absent.
  const TensorValue* find(Section s, const std::string& name) const;
  // Views of everything, e.g. to write the same content again.
  CheckpointView view() const;
};

// Owned deep copies of everything in a view (for an asynchronous write: the caller's
// tensors may change as soon as this returns).
CheckpointData snapshot(const CheckpointView& view);
// The same into an earlier snapshot's buffers when the layout matches (no allocation, no
// page faults: what makes a periodic snapshot cheap), else into new ones.
void snapshot_into(const CheckpointView& view, CheckpointData& reuse);
// The same without copying what lies in `blocks` (CPU tensors the caller will not change
// again, e.g. the state an out-of-place optimizer step read): a tensor of the view inside
// one of them, of its element type, becomes a view sharing it (and keeping it alive); the
// rest is copied. With `copies` (blocks laid out like `blocks`, holding the same bytes) the
// views are taken of copies[k] at the same place instead.
CheckpointData snapshot_sharing(const CheckpointView& view, const std::vector<kernels::Tensor>& blocks,
                                const std::vector<kernels::Tensor>* copies = nullptr);

struct WriteOptions {
  // Upper bound on the elements of one chunk (4 MiB of float32 by default).
  std::int64_t chunk_elements = std::int64_t{1} << 20;
  // fsync the file before the rename and the folder after it. Off only for tests of
  // other things or a scratch folder: a crash can then leave an empty published file.
  bool fsync = true;
  // true: the library checksums each chunk itself and hands it to H5Dwrite_chunk, one
  // memcpy per chunk. false: HDF5's filter pipeline (copies each chunk twice); the files
  // are identical, the option exists to cross-check the two.
  bool direct_chunk_io = true;
  // The content digest's algorithm; XXH64 only to reproduce files written before XXH3.
  DigestAlgorithm digest_algorithm = DigestAlgorithm::xxh3_64;
  // The element type /params and /buffers are stored in: f32, or bf16 (teacher files:
  // rounded to nearest even, chunk by chunk as they are written; the digest covers the
  // bf16 bytes).
  ElemType model_type = ElemType::f32;
  // (A test's injected failure of a write is armed by path: checkpoint/fault_seam.hpp.)
};

struct WriteResult {
  std::string path;
  std::uint64_t bytes = 0;  // size of the published file
  std::string content_digest;
};

// Writes `.<name>.tmp.<pid>` beside `path`, closes and fsyncs it, renames it to `path`
// (never replacing an existing file) and fsyncs the folder. On any failure the temp file
// is removed, `path` does not exist, and CheckpointError(path, reason) is thrown.
WriteResult write(const std::string& path, const CheckpointView& ckpt, const WriteOptions& options = {});

// A teacher file (docs/checkpoint-format.md, "Teacher files"): what a peer needs to use a
// checkpoint as a teacher and nothing more. The same root attributes as the checkpoint
// (content digest over what it holds), /params and /buffers stored as `type` (f32 or bf16),
// and empty /optimizer and /state groups, so any checkpoint reader reads it. Published like
// a checkpoint; a file already at `path` is a leftover of an earlier attempt at the same
// step (a crash between it and its checkpoint, a failed checkpoint write) and is replaced.
WriteResult write_teacher(const std::string& path, const CheckpointView& ckpt, ElemType type,
                          const WriteOptions& options = {});

struct ReadOptions {
  // When set, a file whose model_fingerprint differs is rejected.
  std::optional<std::string> expected_fingerprint;
  // Which sections to return; a teacher needs params and buffers only.
  bool params = true, buffers = true, optimizer = true, state = true;
  // Recompute the content digest. It covers every dataset, so the sections not returned
  // are still read (through a small buffer) when this is on.
  bool verify_digest = true;
  // Reject NaN or Inf in /params and /buffers (both feed a teacher's forward pass).
  bool check_finite = true;
  // true: raw chunks are read with H5Dread_chunk straight into the result and checked by
  // the library; false: HDF5's filter pipeline checks them (cross-check and fallback; it
  // is also used for any dataset this library did not lay out itself).
  bool direct_chunk_io = true;
};

// Reads and checks a checkpoint; throws CheckpointError(path, reason) when it is invalid.
CheckpointData read(const std::string& path, const ReadOptions& options = {});

// read() into `data`, reusing the storage of the tensors already there that have the same
// section, name, shape and type (a teacher reloaded every few hundred steps then
// allocates and page-faults nothing); others are allocated, those not in the file dropped.
// On failure `data` is cleared: half-overwritten tensors are never left behind.
void read_into(const std::string& path, CheckpointData& data, const ReadOptions& options = {});

// Attributes only (no dataset is read); throws CheckpointError. For listings.
CheckpointMeta read_meta(const std::string& path);

struct TensorInfo {
  Section section = Section::params;
  std::string name;
  kernels::Shape shape;
  ElemType type = ElemType::f32;
};
// The datasets of a checkpoint (section by section in kSections order, each in file
// order), without their data.
std::vector<TensorInfo> list_tensors(const std::string& path);

struct VerifyResult {
  bool valid = false;
  std::string reason;  // empty when valid
};
// The full check of read() (every byte), without keeping the data and without throwing.
VerifyResult verify(const std::string& path, const std::optional<std::string>& expected_fingerprint = {});

}  // namespace codistill::checkpoint
