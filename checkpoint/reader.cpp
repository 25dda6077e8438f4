// read(), read_meta(), list_tensors(), verify(): every check of the format, in the order
// cheapest first (attributes, fingerprint) so that a wrong file fails before its data is read.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <unordered_map>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/hash.hpp"
#include "checkpoint/hdf5.hpp"
#include "checkpoint/layout.hpp"
#include "checkpoint/pipeline.hpp"

namespace codistill::checkpoint {

namespace {

using layout::Dims;

CheckpointMeta read_attributes(hid_t root) {
  CheckpointMeta m;
  std::string format = h5::read_attr_string(root, "format");
  if (format != kFormatName)
    throw h5::Error("not a codistill checkpoint (format is '" + format + "', expected '" + kFormatName + "')");
  std::int64_t version = h5::read_attr_int(root, "format_version");
  if (version != kFormatVersion) throw h5::Error("unsupported format_version " + std::to_string(version));
  m.worker = h5::read_attr_int(root, "worker");
  m.step = h5::read_attr_int(root, "step");
  m.examples_seen = h5::read_attr_int(root, "examples_seen");
  m.created_unix = h5::read_attr_int(root, "created_unix");
  m.model = h5::read_attr_string(root, "model");
  m.model_fingerprint = h5::read_attr_string(root, "model_fingerprint");
  m.config = h5::read_attr_string(root, "config");
  for (auto [w, s] : h5::read_attr_pairs(root, "teacher_steps", "worker", "step")) m.teacher_steps.push_back({w, s});
  m.content_digest = h5::read_attr_string(root, "content_digest");
  // Absent in files written before XXH3 replaced XXH64 (2026-11-24).
  m.content_digest_algorithm =
      h5::has_attr(root, "content_digest_algorithm") ? h5::read_attr_string(root, "content_digest_algorithm") : "xxh64";
  try {
    parse_digest_algorithm(m.content_digest_algorithm);
  } catch (const std::invalid_argument& e) {
    throw h5::Error(std::string("attribute content_digest_algorithm: ") + e.what());
  }
  return m;
}

// Sections whose values feed a model's forward pass: NaN or Inf there is rejected
// (ReadOptions::check_finite).
bool finite_checked(Section s) { return s == Section::params || s == Section::buffers; }

struct Found {
  Section section;
  std::string name;  // relative to the section group
};

herr_t collect_link(hid_t, const char* name, const H5L_info_t* info, void* out) {
  auto* names = static_cast<std::vector<std::pair<std::string, bool>>*>(out);
  names->emplace_back(name, info->type == H5L_TYPE_HARD);
  return 0;
}

// Depth first, each group in link creation order when it tracks it (ours do), else by name.
void list_group(hid_t group, const std::string& where, Section s, const std::string& prefix, std::vector<Found>& out) {
  h5::Handle gcpl = h5::plist(H5Gget_create_plist(group), "reading group properties");
  unsigned flags = 0;
  h5::check(H5Pget_link_creation_order(gcpl.get(), &flags), "reading group properties");
  H5_index_t index = (flags & H5P_CRT_ORDER_TRACKED) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
  std::vector<std::pair<std::string, bool>> links;
  h5::check(H5Literate(group, index, H5_ITER_INC, nullptr, collect_link, &links), ("listing " + where).c_str());
  for (const auto& [name, hard] : links) {
    std::string path = where + "/" + name;
    if (!hard) throw h5::Error("unexpected soft or external link " + path);
    h5::Handle obj = h5::object(H5Oopen(group, name.c_str(), H5P_DEFAULT), ("opening " + path).c_str());
    H5I_type_t t = H5Iget_type(obj.get());
    if (t == H5I_GROUP)
      list_group(obj.get(), path, s, prefix + name + "/", out);
    else if (t == H5I_DATASET)
      out.push_back({s, prefix + name});
    else
      throw h5::Error("unexpected object " + path + " (neither group nor dataset)");
  }
}

std::vector<Found> list_datasets(hid_t file) {
  std::vector<Found> out;
  for (Section s : kSections) {
    std::string where = std::string("/") + section_group(s);
    if (!h5::check_tri(H5Lexists(file, where.c_str(), H5P_DEFAULT), "looking up a group")) {
      // /buffers is written only by models that have buffers (and by no file older than
      // them): its absence means an empty section. The other groups always exist.
      if (s == Section::buffers) continue;
      throw h5::Error("missing group " + where);
    }
    h5::Handle g = h5::group(H5Gopen2(file, where.c_str(), H5P_DEFAULT), ("opening " + where).c_str());
    list_group(g.get(), where, s, "", out);
  }
  return out;
}

struct DatasetInfo {
  ElemType type;
  Dims dims;
  bool little_endian;
};

DatasetInfo inspect(hid_t dset, const std::string& path, Section s) {
  h5::Handle t = h5::type(H5Dget_type(dset), ("reading the type of " + path).c_str());
  auto e = h5::elem_type(t.get());
  if (!e || (s != Section::state && *e != ElemType::f32))
    throw h5::Error("dataset " + path + " has type " + h5::describe_type(t.get()) + ", expected " +
                    (s == Section::state ? "float32, float64, int64 or uint64" : "float32"));
  auto dims = h5::dims_of(dset);
  return {*e, Dims(dims.begin(), dims.end()), H5Tequal(t.get(), h5::file_type(*e)) > 0};
}

// The row-block plan of a dataset whose only filter is fletcher32, i.e. one this library
// can read chunk by chunk itself; nullopt sends it through HDF5's pipeline.
std::optional<layout::ChunkPlan> direct_plan(hid_t dset, const Dims& dims) {
  h5::Handle dcpl = h5::plist(H5Dget_create_plist(dset), "reading dataset properties");
  if (H5Pget_layout(dcpl.get()) != H5D_CHUNKED || H5Pget_nfilters(dcpl.get()) != 1) return std::nullopt;
  unsigned flags = 0, config = 0;
  std::size_t nvalues = 0;
  if (H5Pget_filter2(dcpl.get(), 0, &flags, &nvalues, nullptr, 0, nullptr, &config) != H5Z_FILTER_FLETCHER32)
    return std::nullopt;
  std::vector<hsize_t> chunk(dims.size());
  if (H5Pget_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()) != static_cast<int>(dims.size()))
    return std::nullopt;
  return layout::plan_from_chunk_dims(dims, Dims(chunk.begin(), chunk.end()));
}

// One chunk read by the caller's thread, for the helper to check (fletcher32, finite
// values), hash, and move into the result when it was read into a staging buffer.
struct ReadTask {
  std::string header;  // digest header, on the first task of a dataset
  const std::string* path = nullptr;
  const std::string* name = nullptr;  // set when the finite check applies
  Section section = Section::params;  // for the finite check's message
  ElemType type = ElemType::f32;
  std::uint64_t chunk = 0, first = 0;  // chunk index, index of its first element
  const unsigned char* buf = nullptr;
  std::size_t full = 0, n = 0;  // chunk bytes (checksummed), data bytes
  std::uint32_t stored = 0;     // its checksum, copied out before the next read can land on it
  unsigned char* dest = nullptr;  // where the data belongs; null: discard
};

class DataReader {
 public:
  static constexpr std::size_t kDepth = 2;

  DataReader(const ReadOptions& opt, DigestAlgorithm algorithm, bool threaded)
      : opt_(opt), digest_(algorithm), check_([this](ReadTask& t) { check(t); }, threaded, kDepth) {
    stages_.resize(threaded ? kDepth + 2 : 1);  // round robin, as in the writer
  }

  // Reads one dataset into dest (nullptr: only check and hash it).
  void read(hid_t dset, const std::string& path, Section s, const std::string& name, const DatasetInfo& info,
            unsigned char* dest) {
    const std::size_t esize = elem_size(info.type);
    std::uint64_t numel = 1;
    for (auto d : info.dims) numel *= d;
    ReadTask base;
    base.header = opt_.verify_digest ? layout::digest_header(path, info.type, info.dims) : std::string();
    base.path = &path;
    base.name = finite_checked(s) && opt_.check_finite ? &name : nullptr;
    base.section = s;
    base.type = info.type;
    auto plan = opt_.direct_chunk_io && info.little_endian ? direct_plan(dset, info.dims) : std::nullopt;
    if (!plan) {  // HDF5 reads (and checks) it whole; then it is checked here like a chunk
      check_.drain();
      std::vector<unsigned char> scratch(dest ? 0 : numel * esize);
      unsigned char* buf = dest ? dest : scratch.data();
      if (numel > 0 && H5Dread(dset, h5::memory_type(info.type), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
        h5::fail("corrupt or unreadable dataset " + path);
      base.buf = base.dest = buf;
      base.n = numel * esize;
      check(base);  // on this thread: the helper is idle and scratch dies here
      return;
    }
    const std::size_t full = plan->chunk_elements() * esize, total = numel * esize;
    std::vector<hsize_t> offset(info.dims.size());
    for (std::uint64_t k = 0; k < plan->count(); ++k) {
      auto piece = plan->piece(k, info.dims);
      std::copy(piece.offset.begin(), piece.offset.end(), offset.begin());
      hsize_t stored = 0;
      h5::check(H5Dget_chunk_storage_size(dset, offset.data(), &stored), ("locating chunk of " + path).c_str());
      if (stored != full + 4)
        throw h5::Error("corrupt data: chunk " + std::to_string(k) + " of " + path + " holds " +
                        std::to_string(stored) + " bytes, expected " + std::to_string(full + 4));
      // A whole chunk goes straight into the result. Its 4 checksum bytes land on the start
      // of the next chunk's range, which is read afterwards; so the last chunk (whose
      // checksum would fall past the end) and partial ones go through a staging buffer.
      std::size_t at = piece.first * esize, n = piece.elements * esize;
      unsigned char* buf = dest && n == full && at + full + 4 <= total ? dest + at : stage(full + 4);
      std::uint32_t mask = 0;
      h5::check(H5Dread_chunk(dset, H5P_DEFAULT, offset.data(), &mask, buf), ("reading a chunk of " + path).c_str());
      if (mask != 0)
        throw h5::Error("corrupt data: chunk " + std::to_string(k) + " of " + path +
                        " was stored without its fletcher32 checksum");
      ReadTask t = base;
      if (k > 0) t.header.clear();
      t.chunk = k;
      t.first = piece.first;
      t.buf = buf;
      t.full = full;
      t.n = n;
      std::memcpy(&t.stored, buf + full, 4);
      t.dest = dest ? dest + at : nullptr;
      check_.push(std::move(t));
    }
  }

  // Waits for the checks of everything read; returns the digest.
  std::uint64_t finish() {
    check_.stop();
    return digest_.digest();
  }

 private:
  unsigned char* stage(std::size_t bytes) {
    auto& b = stages_[next_++ % stages_.size()];
    if (b.size() < bytes) b.resize(bytes);
    return b.data();
  }

  void check(ReadTask& t) {
    if (t.full > 0) {
      std::uint32_t got = fletcher32(t.buf, t.full);
      // HDF5 also accepts the checksum with the bytes of each half swapped (1.6 files).
      std::uint32_t swapped = ((got & 0x00ff00ffu) << 8) | ((got >> 8) & 0x00ff00ffu);
      if (t.stored != got && t.stored != swapped)
        throw h5::Error("corrupt data: fletcher32 checksum mismatch in chunk " + std::to_string(t.chunk) + " of " +
                        *t.path);
    }
    if (t.name) {
      const std::size_t esize = elem_size(t.type);
      std::int64_t i = layout::first_non_finite(t.buf, t.n / esize, t.type);
      if (i >= 0) {
        float v;
        std::memcpy(&v, t.buf + static_cast<std::size_t>(i) * esize, sizeof v);
        throw h5::Error(std::string(t.section == Section::buffers ? "buffer " : "parameter ") + *t.name + " holds " +
                        (std::isnan(v) ? "NaN" : "Inf") + " at index " +
                        std::to_string(t.first + static_cast<std::uint64_t>(i)));
      }
    }
    if (opt_.verify_digest) {
      digest_.update(t.header.data(), t.header.size());
      digest_.update(t.buf, t.n);
    }
    if (t.dest && t.dest != t.buf) std::memcpy(t.dest, t.buf, t.n);
  }

  const ReadOptions& opt_;
  ContentDigest digest_;  // helper only (or the caller's thread while the helper is idle)
  std::vector<std::vector<unsigned char>> stages_;
  std::size_t next_ = 0;
  Pipeline<ReadTask> check_;  // last: joined first, while the stages still exist
};

// Storage for a dataset: the caller's old tensor of the same section, name, shape and
// type when there is one (no allocation, no page faults), else a new one.
TensorValue take_or_allocate(std::map<std::pair<Section, std::string>, TensorValue>& pool, Section s,
                             const std::string& name, const Dims& dims, ElemType type) {
  kernels::Shape shape(dims.begin(), dims.end());
  if (auto it = pool.find({s, name}); it != pool.end() && it->second.shape == shape && it->second.type == type) {
    TensorValue v = std::move(it->second);
    pool.erase(it);
    return v;
  }
  TensorValue v;
  v.name = name;
  v.type = type;
  v.shape = std::move(shape);
  if (type == ElemType::f32 || type == ElemType::f64)
    v.real = kernels::Tensor::empty(v.shape, type == ElemType::f32 ? kernels::DType::f32 : kernels::DType::f64);
  else if (type == ElemType::i64)
    v.int64.resize(static_cast<std::size_t>(v.numel()));
  else
    v.uint64.resize(static_cast<std::size_t>(v.numel()));
  return v;
}

void read_impl(const std::string& path, CheckpointData& out, const ReadOptions& opt) {
  auto lock = h5::exclusive();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw h5::Error("no such file");
  std::uint64_t file_bytes = std::filesystem::file_size(path, ec);
  h5::Handle file = h5::open_file(path, false);
  out.meta = read_attributes(file.get());
  if (opt.expected_fingerprint && *opt.expected_fingerprint != out.meta.model_fingerprint)
    throw h5::Error("model fingerprint mismatch: file has " + out.meta.model_fingerprint + ", expected " +
                    *opt.expected_fingerprint);

  auto keep = [&](Section s) {
    switch (s) {
      case Section::params: return opt.params;
      case Section::buffers: return opt.buffers;
      case Section::optimizer: return opt.optimizer;
      case Section::state: return opt.state;
    }
    return true;
  };
  struct Job {
    Found found;
    std::string path;
  };
  std::vector<Found> found = list_datasets(file.get());
  std::vector<Job> jobs;
  for (const auto& f : found) {
    if (!keep(f.section) && !opt.verify_digest && !(finite_checked(f.section) && opt.check_finite)) continue;
    jobs.push_back({f, layout::full_path(f.section, f.name)});
  }
  std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) { return a.path < b.path; });

  std::map<std::pair<Section, std::string>, TensorValue> pool;
  for (Section s : kSections) {
    for (auto& t : out.section(s)) pool.emplace(std::pair{s, t.name}, std::move(t));
    out.section(s).clear();
  }
  // A thread only pays off for big files.
  DataReader reader(opt, parse_digest_algorithm(out.meta.content_digest_algorithm), file_bytes >= (8u << 20));
  for (auto& job : jobs) {
    h5::Handle dset = h5::dataset(H5Dopen2(file.get(), job.path.c_str(), H5P_DEFAULT), ("opening " + job.path).c_str());
    DatasetInfo info = inspect(dset.get(), job.path, job.found.section);
    unsigned char* dest = nullptr;
    if (keep(job.found.section)) {
      auto& list = out.section(job.found.section);
      list.push_back(take_or_allocate(pool, job.found.section, job.found.name, info.dims, info.type));
      dest = static_cast<unsigned char*>(list.back().data());
    }
    reader.read(dset.get(), job.path, job.found.section, job.found.name, info, dest);
  }
  std::string computed = hex64(reader.finish());
  if (opt.verify_digest && computed != out.meta.content_digest)
    throw h5::Error("content digest mismatch: stored " + out.meta.content_digest + ", computed " + computed);
  // Back to the file's order (jobs ran in digest order).
  std::unordered_map<std::string, std::size_t> rank;
  for (std::size_t i = 0; i < found.size(); ++i) rank[layout::full_path(found[i].section, found[i].name)] = i;
  for (Section s : kSections) {
    std::sort(out.section(s).begin(), out.section(s).end(), [&](const TensorValue& a, const TensorValue& b) {
      return rank.at(layout::full_path(s, a.name)) < rank.at(layout::full_path(s, b.name));
    });
  }
}

template <class F>
auto guarded(const std::string& path, F&& f) {
  try {
    return f();
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError(path, e.what());
  }
}

}  // namespace

CheckpointData read(const std::string& path, const ReadOptions& options) {
  CheckpointData data;
  read_into(path, data, options);
  return data;
}

void read_into(const std::string& path, CheckpointData& data, const ReadOptions& options) {
  try {
    guarded(path, [&] { read_impl(path, data, options); });
  } catch (...) {
    data = CheckpointData();  // half-overwritten tensors must not be mistaken for a model
    throw;
  }
}

CheckpointMeta read_meta(const std::string& path) {
  return guarded(path, [&] {
    auto lock = h5::exclusive();
    h5::Handle file = h5::open_file(path, false);
    return read_attributes(file.get());
  });
}

std::vector<TensorInfo> list_tensors(const std::string& path) {
  return guarded(path, [&] {
    auto lock = h5::exclusive();
    h5::Handle file = h5::open_file(path, false);
    std::vector<TensorInfo> out;
    for (const auto& f : list_datasets(file.get())) {
      std::string p = layout::full_path(f.section, f.name);
      h5::Handle dset = h5::dataset(H5Dopen2(file.get(), p.c_str(), H5P_DEFAULT), ("opening " + p).c_str());
      DatasetInfo info = inspect(dset.get(), p, f.section);
      out.push_back({f.section, f.name, kernels::Shape(info.dims.begin(), info.dims.end()), info.type});
    }
    return out;
  });
}

VerifyResult verify(const std::string& path, const std::optional<std::string>& expected_fingerprint) {
  ReadOptions opt;
  opt.expected_fingerprint = expected_fingerprint;
  opt.params = opt.buffers = opt.optimizer = opt.state = false;
  try {
    read(path, opt);
    return {true, {}};
  } catch (const CheckpointError& e) {
    return {false, e.reason()};
  } catch (const std::exception& e) {
    return {false, e.what()};
  }
}

}  // namespace codistill::checkpoint
