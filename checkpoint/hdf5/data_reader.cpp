// DataReader (data_reader.hpp): a dataset's chunks read on the caller's thread and checked
// on the helper's, or the whole dataset through HDF5's pipeline and checked here.
#include "checkpoint/hdf5/data_reader.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

namespace codistill::checkpoint::data {

using layout::Dims;

DatasetInfo inspect(hid_t dset, const std::string& path, Section s) {
  h5::Handle t = h5::type(H5Dget_type(dset), ("reading the type of " + path).c_str());
  auto e = h5::elem_type(t.get());
  // bfloat16 only where a teacher file puts it: parameters and buffers.
  const bool ok = e && (s == Section::state    ? *e != ElemType::bf16
                        : finite_checked(s) ? *e == ElemType::f32 || *e == ElemType::bf16
                                            : *e == ElemType::f32);
  if (!ok)
    throw h5::Error("dataset " + path + " has type " + h5::describe_type(t.get()) + ", expected " +
                    (s == Section::state  ? "float32, float64, int64 or uint64"
                     : finite_checked(s) ? "float32 or bfloat16"
                                         : "float32"));
  auto dims = h5::dims_of(dset);
  return {*e, Dims(dims.begin(), dims.end()), H5Tequal(t.get(), h5::file_type(*e)) > 0};
}

namespace {

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

}  // namespace

void DataReader::read(hid_t dset, const std::string& path, Section s, const std::string& name,
                      const DatasetInfo& info, unsigned char* dest) {
  const std::size_t esize = elem_size(info.type);
  // bfloat16 is widened into float32 storage by check(): its chunks always go through a
  // staging buffer, and their place in `dest` is counted in float32 elements.
  const bool widen = info.type == ElemType::bf16;
  const std::size_t dest_esize = widen ? sizeof(float) : esize;
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
    std::vector<unsigned char> scratch(dest && !widen ? 0 : numel * esize);
    unsigned char* buf = dest && !widen ? dest : scratch.data();
    if (numel > 0 && H5Dread(dset, h5::memory_type(info.type), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
      h5::fail("corrupt or unreadable dataset " + path);
    bytes_read_ += H5Dget_storage_size(dset);
    base.buf = buf;
    base.dest = dest;
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
    unsigned char* buf = dest && !widen && n == full && at + full + 4 <= total ? dest + at : stage(full + 4);
    bytes_read_ += stored;
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
    t.dest = dest ? dest + piece.first * dest_esize : nullptr;
    check_.push(std::move(t));
  }
}

unsigned char* DataReader::stage(std::size_t bytes) {
  auto& b = stages_[next_++ % stages_.size()];
  if (b.size() < bytes) b.resize(bytes);
  return b.data();
}

void DataReader::check(ReadTask& t) {
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
      if (t.type == ElemType::bf16)
        layout::from_bf16(t.buf + static_cast<std::size_t>(i) * esize, &v, 1);
      else
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
  if (t.dest && t.type == ElemType::bf16)
    layout::from_bf16(t.buf, reinterpret_cast<float*>(t.dest), t.n / 2);
  else if (t.dest && t.dest != t.buf)
    std::memcpy(t.dest, t.buf, t.n);
}

}  // namespace codistill::checkpoint::data
