#include "checkpoint/array_file.hpp"

#include "checkpoint/error.hpp"
#include "checkpoint/hdf5/hdf5.hpp"

namespace codistill::checkpoint {
namespace {

// NumPy's name for the file's element type; "" when the arrays loader cannot take it.
std::string numpy_name(hid_t t) {
  const std::size_t size = H5Tget_size(t);
  switch (H5Tget_class(t)) {
    case H5T_INTEGER:
      if (size == 1 || size == 2 || size == 4 || size == 8)
        return (H5Tget_sign(t) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(size * 8);
      return "";
    case H5T_FLOAT: {
      std::size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
      if (H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) < 0) return "";
      if (size == 2 && esize == 5 && msize == 10) return "float16";
      if (size == 2 && esize == 8 && msize == 7) return "bfloat16";
      if (size == 4 && esize == 8 && msize == 23) return "float32";
      if (size == 8 && esize == 11 && msize == 52) return "float64";
      return "";
    }
    default: return "";
  }
}

// Where the dataset's bytes lie in the file, when they lie there as they are: one
// contiguous block, unfiltered, not external, in little-endian (or single-byte) order.
std::int64_t mappable_offset(hid_t dset, hid_t ftype) {
  h5::Handle dcpl = h5::plist(H5Dget_create_plist(dset), "reading a dataset's creation properties");
  if (H5Pget_layout(dcpl.get()) != H5D_CONTIGUOUS || H5Pget_nfilters(dcpl.get()) != 0 ||
      H5Pget_external_count(dcpl.get()) != 0)
    return -1;
  if (H5Tget_size(ftype) > 1 && H5Tget_order(ftype) != H5T_ORDER_LE) return -1;
  const haddr_t at = H5Dget_offset(dset);
  return at == HADDR_UNDEF ? -1 : static_cast<std::int64_t>(at);
}

herr_t collect_dataset(hid_t loc, const char* name, const H5L_info_t*, void* out) {
  H5O_info_t info{};
  if (H5Oget_info_by_name(loc, name, &info, H5P_DEFAULT) >= 0 && info.type == H5O_TYPE_DATASET)
    static_cast<std::vector<std::string>*>(out)->emplace_back(name);
  return 0;
}

}  // namespace

std::vector<std::string> h5_array_names(const std::string& path) {
  auto lock = h5::exclusive();
  try {
    h5::Handle f = h5::open_file(path, false);
    std::vector<std::string> names;
    h5::check(H5Literate(f.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_dataset, &names),
              "listing the root group");
    return names;
  } catch (const h5::Error& e) {
    throw CheckpointError(path, e.what());
  }
}

H5Array read_h5_array(const std::string& path, const std::string& name, bool read) {
  auto lock = h5::exclusive();
  try {
    h5::Handle f = h5::open_file(path, false);
    if (!h5::check_tri(H5Lexists(f.get(), name.c_str(), H5P_DEFAULT), "looking up a dataset"))
      throw h5::Error("no dataset '" + name + "'");
    h5::Handle d = h5::dataset(H5Dopen2(f.get(), name.c_str(), H5P_DEFAULT), "opening a dataset");
    h5::Handle ftype = h5::type(H5Dget_type(d.get()), "reading a dataset's type");
    H5Array a;
    a.dtype = numpy_name(ftype.get());
    a.supported = !a.dtype.empty();
    if (a.dtype.empty()) a.dtype = h5::describe_type(ftype.get());
    for (hsize_t n : h5::dims_of(d.get())) a.shape.push_back(static_cast<std::int64_t>(n));
    if (!a.supported) return a;
    a.file_offset = mappable_offset(d.get(), ftype.get());
    if (a.file_offset >= 0 || !read) return a;
    std::size_t n = H5Tget_size(ftype.get());
    for (std::int64_t s : a.shape) n *= static_cast<std::size_t>(s);
    a.bytes.resize(n);
    h5::Handle mtype = h5::type(H5Tcopy(ftype.get()), "copying a dataset's type");
    if (H5Tget_size(ftype.get()) > 1) h5::check(H5Tset_order(mtype.get(), H5T_ORDER_LE), "setting byte order");
    if (n > 0) h5::check(H5Dread(d.get(), mtype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, a.bytes.data()),
                         "reading a dataset");
    return a;
  } catch (const h5::Error& e) {
    throw CheckpointError(path, "dataset '" + name + "': " + e.what());
  }
}

}  // namespace codistill::checkpoint
