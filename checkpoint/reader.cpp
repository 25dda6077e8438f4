// read(), read_meta(), list_tensors(), verify(): every check of the format, in the order
// cheapest first (attributes, fingerprint) so that a wrong file fails before its data is read.
// The attributes and the listing of the datasets are here; their data is read and checked by
// DataReader (data_reader.hpp).
#include <algorithm>
#include <filesystem>
#include <map>
#include <unordered_map>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/hdf5/data_reader.hpp"
#include "checkpoint/fsutil.hpp"
#include "checkpoint/hash.hpp"
#include "checkpoint/hdf5/hdf5.hpp"
#include "checkpoint/layout.hpp"

namespace codistill::checkpoint {

namespace {

using data::DataReader;
using data::DatasetInfo;
using data::finite_checked;
using data::inspect;
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

// Storage for a dataset: the caller's old tensor of the same section, name, shape and
// type when there is one (no allocation, no page faults), else a new one.
TensorValue take_or_allocate(std::map<std::pair<Section, std::string>, TensorValue>& pool, Section s,
                             const std::string& name, const Dims& dims, ElemType type) {
  kernels::Shape shape(dims.begin(), dims.end());
  if (type == ElemType::bf16) type = ElemType::f32;  // widened as it is read
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
  if (const std::string gone = fsutil::vanished_reason(path); !gone.empty()) throw h5::Error(gone);
  std::error_code ec;
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
  out.bytes_read = reader.bytes_read();
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
    // A file removed or replaced by its writer while it was read fails in whatever layer
    // noticed first (HDF5's open, a read, the heap guard's stat), and on a network file
    // system with ESTALE: name it as vanished, so callers fall back without calling it corrupt.
    const std::string gone = fsutil::vanished_reason(path);
    throw CheckpointError(path, gone.empty() ? std::string(e.what()) : gone);
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
