#include "checkpoint/edit.hpp"

#include "checkpoint/error.hpp"
#include "checkpoint/hdf5/hdf5.hpp"

namespace codistill::checkpoint {

namespace {

template <class F>
auto guarded(const std::string& path, F&& f) {
  try {
    auto lock = h5::exclusive();
    return f();
  } catch (const std::exception& e) {
    throw CheckpointError(path, e.what());
  }
}

template <class T>
void replace_attribute(const std::string& path, const std::string& name, const T& value) {
  guarded(path, [&] {
    h5::Handle file = h5::open_file(path, true);
    if (h5::has_attr(file.get(), name.c_str()))
      h5::check(H5Adelete(file.get(), name.c_str()), "deleting an attribute");
    h5::write_attr(file.get(), name.c_str(), value);
    file.close("closing the file");
  });
}

}  // namespace

void delete_attribute(const std::string& path, const std::string& name) {
  guarded(path, [&] {
    h5::Handle file = h5::open_file(path, true);
    h5::check(H5Adelete(file.get(), name.c_str()), ("deleting attribute " + name).c_str());
    file.close("closing the file");
  });
}

void set_attribute(const std::string& path, const std::string& name, std::int64_t value) {
  replace_attribute(path, name, value);
}

void set_attribute(const std::string& path, const std::string& name, const std::string& value) {
  replace_attribute(path, name, value);
}

std::vector<StoredExtent> stored_extents(const std::string& path, const std::string& dataset) {
  return guarded(path, [&] {
    h5::Handle file = h5::open_file(path, false);
    h5::Handle d = h5::dataset(H5Dopen2(file.get(), dataset.c_str(), H5P_DEFAULT), ("opening " + dataset).c_str());
    h5::Handle dcpl = h5::plist(H5Dget_create_plist(d.get()), "reading dataset properties");
    std::vector<StoredExtent> out;
    if (H5Pget_layout(dcpl.get()) != H5D_CHUNKED) {
      haddr_t at = H5Dget_offset(d.get());
      if (at != HADDR_UNDEF) out.push_back({at, H5Dget_storage_size(d.get())});
      return out;
    }
    hsize_t n = 0;
    h5::Handle space = h5::space(H5Dget_space(d.get()), "reading a dataspace");
    h5::check(H5Dget_num_chunks(d.get(), space.get(), &n), "counting chunks");
    std::vector<hsize_t> offset(h5::dims_of(d.get()).size());
    for (hsize_t i = 0; i < n; ++i) {
      unsigned mask = 0;
      haddr_t addr = 0;
      hsize_t size = 0;
      h5::check(H5Dget_chunk_info(d.get(), space.get(), i, offset.data(), &mask, &addr, &size), "locating a chunk");
      out.push_back({addr, size});
    }
    return out;
  });
}

}  // namespace codistill::checkpoint
