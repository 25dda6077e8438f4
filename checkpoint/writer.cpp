// write(): validation, HDF5 layout, chunks checksummed here and written by a helper
// thread, then the atomic publish (DESIGN.md section 5).
#include <algorithm>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <unordered_set>

#include <signal.h>
#include <unistd.h>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/fault_seam.hpp"
#include "checkpoint/fsutil.hpp"
#include "checkpoint/hash.hpp"
#include "checkpoint/hdf5/hdf5.hpp"
#include "checkpoint/layout.hpp"
#include "checkpoint/hdf5/pipeline.hpp"

namespace codistill::checkpoint {

namespace {

namespace fs = std::filesystem;
using layout::Dims;

void validate_section(Section s, const std::vector<TensorRef>& tensors) {
  std::unordered_set<std::string> names;
  for (const auto& t : tensors) {
    std::string where = std::string(section_group(s)) + " tensor '" + t.name + "'";
    if (auto problem = layout::name_problem(t.name); !problem.empty())
      throw std::invalid_argument(std::string(section_group(s)) + ": " + problem);
    if (!names.insert(t.name).second) throw std::invalid_argument("duplicate " + where);
    if (s != Section::state && t.type != ElemType::f32)
      throw std::invalid_argument(where + " is " + elem_name(t.type) +
                                  (s == Section::buffers ? "; buffers are float32"
                                                         : "; params and optimizer slots are float32"));
    for (auto d : t.shape)
      if (d < 0) throw std::invalid_argument(where + " has a negative dimension");
    if (t.numel() > 0 && t.data == nullptr) throw std::invalid_argument(where + " has no data");
  }
  // HDF5 cannot have "a" as a dataset and as the group holding "a/b".
  for (const auto& t : tensors)
    for (auto at = t.name.find('/'); at != std::string::npos; at = t.name.find('/', at + 1))
      if (names.count(t.name.substr(0, at)))
        throw std::invalid_argument(std::string(section_group(s)) + " tensor '" + t.name.substr(0, at) +
                                    "' is also the group of '" + t.name + "'");
}

struct Entry {
  const TensorRef* ref = nullptr;
  ElemType type = ElemType::f32;  // in the file: ref->type, or WriteOptions::model_type
  std::string path;  // "/params/fc1/weight"
  Dims dims;
  std::optional<layout::ChunkPlan> plan;
  h5::Handle dataset;
};

// Groups are created one by one (not with intermediate-group creation) so that each one
// tracks the creation order of its links: readers list tensors in the order written.
class Groups {
 public:
  explicit Groups(hid_t file) : file_(file) {
    gcpl_ = h5::plist(H5Pcreate(H5P_GROUP_CREATE), "creating group properties");
    h5::check(H5Pset_link_creation_order(gcpl_.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED),
              "tracking link creation order");
    h5::check(H5Pset_obj_track_times(gcpl_.get(), false), "switching object times off");
  }
  // Creates the groups of every prefix of `path` ("/params/fc1/weight": /params, /params/fc1).
  void make_parents(const std::string& path) {
    for (auto at = path.find('/', 1); at != std::string::npos; at = path.find('/', at + 1)) {
      std::string g = path.substr(0, at);
      if (made_.insert(g).second)
        h5::group(H5Gcreate2(file_, g.c_str(), H5P_DEFAULT, gcpl_.get(), H5P_DEFAULT), "creating a group");
    }
  }

 private:
  hid_t file_;
  h5::Handle gcpl_;
  std::set<std::string> made_;
};

h5::Handle create_dataset(hid_t file, Entry& e) {
  std::vector<hsize_t> dims(e.dims.begin(), e.dims.end());
  h5::Handle space = dims.empty() ? h5::space(H5Screate(H5S_SCALAR), "creating a dataspace")
                                  : h5::space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                                              "creating a dataspace");
  h5::Handle dcpl = h5::plist(H5Pcreate(H5P_DATASET_CREATE), "creating dataset properties");
  // No modification times in object headers: equal content gives equal files.
  h5::check(H5Pset_obj_track_times(dcpl.get(), false), "switching object times off");
  if (e.plan) {
    std::vector<hsize_t> chunk(e.plan->chunk_dims.begin(), e.plan->chunk_dims.end());
    h5::check(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()), "setting the chunk shape");
    h5::check(H5Pset_fletcher32(dcpl.get()), "adding the fletcher32 filter");
  }
  return h5::dataset(H5Dcreate2(file, e.path.c_str(), h5::file_type(e.type), space.get(), H5P_DEFAULT,
                                dcpl.get(), H5P_DEFAULT),
                     ("creating dataset " + e.path).c_str());
}

// What the I/O side does with one piece: write a prepared chunk (offset set), or a whole
// dataset from the caller's memory (contiguous layout, or HDF5's filter pipeline), or
// close a dataset once written (which flushes HDF5's chunk cache in file order, so that
// both write paths give byte-identical files).
struct WriteTask {
  Entry* entry = nullptr;
  std::vector<hsize_t> offset;
  const unsigned char* buf = nullptr;
  std::size_t bytes = 0;
  bool close = false;
};

// Prepares chunks on the calling thread (copy, pad, fletcher32, digest) while a helper
// hands the previous ones to HDF5 (see pipeline.hpp).
class DataWriter {
 public:
  static constexpr std::size_t kDepth = 2;

  DataWriter(const WriteOptions& opt, std::optional<fault_seam::WriteFault> fault, std::size_t max_chunk_bytes,
             bool threaded, int fd)
      : opt_(opt), fault_(fault), fd_(fd), io_([this](WriteTask& t) { io(t); }, threaded, kDepth) {
    // Round robin over depth + 2 buffers: one being filled, one being written, `depth`
    // queued; a buffer comes round again only after its chunk has been written.
    buffers_.resize(threaded ? kDepth + 2 : 1);
    for (auto& b : buffers_) b = std::make_unique_for_overwrite<unsigned char[]>(max_chunk_bytes + 4);
  }

  void write(Entry& e) {
    const TensorRef& t = *e.ref;
    const bool narrow = e.type != t.type;  // float32 stored as bf16
    std::string header = layout::digest_header(e.path, e.type, e.dims);
    digest_.update(header.data(), header.size());
    auto src = static_cast<const unsigned char*>(t.data);
    if (!e.plan || !opt_.direct_chunk_io) {
      std::size_t bytes = t.nbytes();
      if (narrow) {  // kept until finish(): the helper writes from it
        auto& b = narrowed_.emplace_back(static_cast<std::size_t>(t.numel()) * elem_size(e.type));
        layout::to_bf16(static_cast<const float*>(t.data), b.data(), static_cast<std::uint64_t>(t.numel()));
        src = b.data();
        bytes = b.size();
      }
      charge(bytes);
      digest_.update(src, bytes);
      io_.push({&e, {}, src, bytes});
      io_.push({&e, {}, nullptr, 0, true});
      return;
    }
    const std::size_t esize = elem_size(e.type), full = e.plan->chunk_elements() * esize;
    for (std::uint64_t k = 0; k < e.plan->count(); ++k) {
      auto piece = e.plan->piece(k, e.dims);
      std::size_t n = piece.elements * esize;
      unsigned char* buf = buffers_[next_++ % buffers_.size()].get();
      if (narrow)
        layout::to_bf16(static_cast<const float*>(t.data) + piece.first, buf, piece.elements);
      else
        std::memcpy(buf, src + piece.first * esize, n);
      std::memset(buf + n, 0, full - n);  // HDF5 stores edge chunks whole
      digest_.update(buf, n);             // from the copy, while it is in cache
      std::uint32_t sum = fletcher32(buf, full);
      std::memcpy(buf + full, &sum, 4);  // little-endian, as HDF5's filter stores it
      charge(full + 4);
      io_.push({&e, std::vector<hsize_t>(piece.offset.begin(), piece.offset.end()), buf, full + 4});
    }
    io_.push({&e, {}, nullptr, 0, true});
  }

  // Waits for the last write (rethrowing its failure) and returns the content digest.
  std::uint64_t finish() {
    io_.stop();
    return digest_.digest();
  }

 private:
  void charge(std::uint64_t bytes) {
    if (fault_ && written_ + bytes > static_cast<std::uint64_t>(fault_->after_bytes)) {
      if (fault_->kill) ::kill(::getpid(), SIGKILL);
      throw std::runtime_error("injected write failure after " + std::to_string(written_) +
                               " bytes (checkpoint/fault_seam.hpp)");
    }
    written_ += bytes;
  }

  void io(WriteTask& t) {
    h5::init();  // the helper thread's own HDF5 error settings
    Entry& e = *t.entry;
    if (t.close) return e.dataset.close(("closing dataset " + e.path).c_str());
    if (t.offset.empty()) {
      if (t.bytes > 0)
        h5::check(H5Dwrite(e.dataset.get(), h5::memory_type(e.type), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.buf),
                  ("writing " + e.path).c_str());
    } else {
      h5::check(H5Dwrite_chunk(e.dataset.get(), H5P_DEFAULT, 0, t.offset.data(), t.bytes, t.buf),
                ("writing a chunk of " + e.path).c_str());
    }
    unflushed_ += t.bytes;
    if (opt_.fsync && unflushed_ >= (32u << 20)) {
      fsutil::start_writeback(fd_);
      unflushed_ = 0;
    }
  }

  const WriteOptions& opt_;
  const std::optional<fault_seam::WriteFault> fault_;  // a test's, armed for this file
  int fd_;                       // the file's descriptor inside HDF5, for early writeback
  ContentDigest digest_{opt_.digest_algorithm};  // caller's thread only
  std::uint64_t written_ = 0;    // caller's thread only
  std::uint64_t unflushed_ = 0;  // helper only
  std::vector<std::unique_ptr<unsigned char[]>> buffers_;
  std::vector<std::vector<unsigned char>> narrowed_;  // whole bf16 datasets (no direct chunk I/O)
  std::size_t next_ = 0;
  Pipeline<WriteTask> io_;  // last: destroyed (joined) first, while the buffers still exist
};

// The file's descriptor inside HDF5's sec2 driver (-1 if it cannot be had).
int descriptor(hid_t file) {
  void* handle = nullptr;  // the sec2 driver's handle is its int file descriptor
  return H5Fget_vfd_handle(file, H5P_DEFAULT, &handle) >= 0 && handle ? *static_cast<int*>(handle) : -1;
}

std::string fill_file(hid_t root, int fd, const CheckpointView& c, const WriteOptions& opt,
                      std::optional<fault_seam::WriteFault> fault);

// A failed write (a full disk) leaves dirty metadata that H5Fclose must flush, and a close
// that cannot flush leaves the file open inside HDF5, to crash the library's termination at
// exit. The temp file is doomed anyway: truncating it through its descriptor gives its
// blocks back, so the close's small metadata flush has room and every handle is released.
std::string write_file(const std::string& tmp, const CheckpointView& c, const WriteOptions& opt,
                       std::optional<fault_seam::WriteFault> fault) {
  h5::Handle file = h5::create_file(tmp);
  const int fd = descriptor(file.get());
  try {
    std::string hex = fill_file(file.get(), fd, c, opt, fault);
    file.close("closing (and flushing) the file");
    return hex;
  } catch (...) {
    if (fd >= 0 && ::ftruncate(fd, 0) != 0) {
      // nothing more to do: the close below reports nothing either way
    }
    H5Eclear2(H5E_DEFAULT);
    if (file.valid() && H5Fclose(file.get()) >= 0) file.release();
    H5Eclear2(H5E_DEFAULT);
    throw;
  }
}

std::string fill_file(hid_t root, int fd, const CheckpointView& c, const WriteOptions& opt,
                      std::optional<fault_seam::WriteFault> fault) {
  h5::write_attr(root, "format", std::string(kFormatName));
  h5::write_attr(root, "format_version", kFormatVersion);
  h5::write_attr(root, "worker", c.meta.worker);
  h5::write_attr(root, "step", c.meta.step);
  h5::write_attr(root, "examples_seen", c.meta.examples_seen);
  h5::write_attr(root, "created_unix",
                 c.meta.created_unix != 0 ? c.meta.created_unix : static_cast<std::int64_t>(std::time(nullptr)));
  h5::write_attr(root, "model", c.meta.model);
  h5::write_attr(root, "model_fingerprint", c.meta.model_fingerprint);
  h5::write_attr(root, "config", c.meta.config);
  std::vector<std::pair<std::int64_t, std::int64_t>> teachers;
  for (const auto& t : c.meta.teacher_steps) teachers.emplace_back(t.worker, t.step);
  h5::write_attr_pairs(root, "teacher_steps", teachers, "worker", "step");

  // Datasets are created in the caller's order (the order readers list them in) and
  // filled in the canonical order of the digest (so the file's data follows it too).
  Groups groups(root);
  std::vector<Entry> entries;
  std::size_t max_chunk_bytes = 0;
  for (Section s : kSections) {
    const auto& list = c.section(s);
    // The section group, even when empty; except /buffers, which exists only with buffers
    // in it, so that a model without buffers writes the same file as before they existed.
    if (s != Section::buffers || !list.empty()) groups.make_parents(layout::full_path(s, "x"));
    for (const auto& t : list) {
      Entry e;
      e.ref = &t;
      e.type = s == Section::params || s == Section::buffers ? opt.model_type : t.type;
      e.path = layout::full_path(s, t.name);
      for (auto d : t.shape) e.dims.push_back(static_cast<std::uint64_t>(d));
      e.plan = layout::plan_chunks(e.dims, static_cast<std::uint64_t>(std::max<std::int64_t>(opt.chunk_elements, 1)));
      if (e.plan) max_chunk_bytes = std::max(max_chunk_bytes, e.plan->chunk_elements() * elem_size(e.type));
      groups.make_parents(e.path);
      e.dataset = create_dataset(root, e);
      entries.push_back(std::move(e));
    }
  }
  std::vector<Entry*> order;
  for (auto& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) { return a->path < b->path; });

  std::uint64_t total = 0;
  for (const Entry* e : order) total += e->ref->nbytes() / elem_size(e->ref->type) * elem_size(e->type);
  DataWriter w(opt, fault, max_chunk_bytes, total >= (8u << 20), fd);  // a thread only pays off for big files
  for (Entry* e : order) w.write(*e);
  std::string hex = hex64(w.finish());
  h5::write_attr(root, "content_digest", hex);
  h5::write_attr(root, "content_digest_algorithm", std::string(digest_algorithm_name(opt.digest_algorithm)));
  return hex;
}

}  // namespace

WriteResult write(const std::string& path, const CheckpointView& ckpt, const WriteOptions& options) {
  fs::path final_path(path);
  std::string dir = final_path.has_parent_path() ? final_path.parent_path().string() : ".";
  // Appended piecewise: `"." + std::string` trips a GCC 12 -Wrestrict false positive.
  std::string tmp_name = ".";
  tmp_name += final_path.filename().string();
  tmp_name += ".tmp.";
  tmp_name += std::to_string(fsutil::this_pid());
  std::string tmp = (fs::path(dir) / tmp_name).string();
  try {
    if (options.model_type != ElemType::f32 && options.model_type != ElemType::bf16)
      throw std::invalid_argument(std::string("params and buffers cannot be stored as ") +
                                  elem_name(options.model_type) + " (valid: float32, bfloat16)");
    for (Section s : kSections) validate_section(s, ckpt.section(s));
  } catch (const std::invalid_argument& e) {
    throw CheckpointError(path, e.what());
  }
  std::error_code ec;
  if (fs::exists(final_path, ec)) throw CheckpointError(path, "already exists (checkpoints are never overwritten)");

  WriteResult result;
  result.path = path;
  const auto fault = fault_seam::take_write(path);
  try {
    h5::init();
    auto lock = h5::exclusive();
    result.content_digest = write_file(tmp, ckpt, options, fault);
    lock = {};
    if (options.fsync) fsutil::fsync_file(tmp);
    fsutil::rename_no_replace(tmp, path);
  } catch (...) {
    // All HDF5 handles are closed by now (they lived inside write_file), so the file can go.
    std::error_code ignored;
    fs::remove(tmp, ignored);
    try {
      throw;
    } catch (const std::exception& e) {
      throw CheckpointError(path, e.what());
    }
  }
  if (options.fsync) {
    try {
      fsutil::fsync_dir(dir);
    } catch (const std::exception& e) {
      throw CheckpointError(path, std::string("published, but the folder could not be synced: ") + e.what());
    }
  }
  result.bytes = fs::file_size(path, ec);
  return result;
}

WriteResult write_teacher(const std::string& path, const CheckpointView& ckpt, ElemType type,
                          const WriteOptions& options) {
  CheckpointView teacher;
  teacher.meta = ckpt.meta;
  teacher.params = ckpt.params;
  teacher.buffers = ckpt.buffers;
  WriteOptions o = options;
  o.model_type = type;
  try {
    fsutil::remove_if_exists(path);  // a leftover of the same step (see checkpoint.hpp)
  } catch (const std::exception& e) {
    throw CheckpointError(path, std::string("removing a leftover teacher file: ") + e.what());
  }
  return write(path, teacher, o);
}

}  // namespace codistill::checkpoint
