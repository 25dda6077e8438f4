#pragma once
// A thin RAII layer over the HDF5 C API. INTERNAL to checkpoint/*.cpp: it includes
// <hdf5.h>, which must never reach a public header (HDF5 is a private dependency).
//
// Every failing call throws h5::Error with what was being done and the messages of
// HDF5's error stack; the public entry points add the file path (CheckpointError).
#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/tensors.hpp"

namespace codistill::checkpoint::h5 {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Call before any HDF5 use, on every thread: switches off HDF5's printing of errors to
// stderr (a per-thread setting in thread-safe builds) and, for HDF5 < 1.10.7 which lacks
// H5Pset_file_locking, sets HDF5_USE_FILE_LOCKING=FALSE before the library starts.
void init();

// HDF5 built without thread safety may be entered by one thread at a time only (an
// AsyncWriter writing while the trainer loads a teacher): then each top-level operation
// (one write, one read) holds this process-wide lock. Thread-safe builds (Debian's) lock
// internally, and the returned lock is empty.
std::unique_lock<std::recursive_mutex> exclusive();

// Throws Error("<what>: <HDF5 error stack>") and clears the stack.
[[noreturn]] void fail(const std::string& what);
inline hid_t check_id(hid_t id, const char* what) {
  if (id < 0) fail(what);
  return id;
}
inline void check(herr_t status, const char* what) {
  if (status < 0) fail(what);
}
inline bool check_tri(htri_t status, const char* what) {
  if (status < 0) fail(what);
  return status > 0;
}

// An owned hid_t, closed by the matching H5?close when the handle goes.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer, const char* what) : id_(check_id(id, what)), closer_(closer) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), closer_(o.closer_) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      closer_ = o.closer_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now and reports failure; H5Fclose flushes the file, so its errors matter and
  // must not be lost in a destructor.
  void close(const char* what);
  void reset() noexcept {
    if (id_ >= 0 && closer_) closer_(id_);
    id_ = H5I_INVALID_HID;
  }
  // Forgets the id without closing it (it was closed by other means).
  void release() noexcept { id_ = H5I_INVALID_HID; }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

inline Handle file(hid_t id, const char* what) { return Handle(id, H5Fclose, what); }
inline Handle group(hid_t id, const char* what) { return Handle(id, H5Gclose, what); }
inline Handle dataset(hid_t id, const char* what) { return Handle(id, H5Dclose, what); }
inline Handle space(hid_t id, const char* what) { return Handle(id, H5Sclose, what); }
inline Handle attribute(hid_t id, const char* what) { return Handle(id, H5Aclose, what); }
inline Handle plist(hid_t id, const char* what) { return Handle(id, H5Pclose, what); }
inline Handle type(hid_t id, const char* what) { return Handle(id, H5Tclose, what); }
inline Handle object(hid_t id, const char* what) { return Handle(id, H5Oclose, what); }

// File access for checkpoints: file locking off (files are immutable once published and
// flock fails on NFS), and the HDF5 1.10 object formats (fixed-array chunk index: one
// lookup per chunk; readable by HDF5 >= 1.10, e.g. any h5py of the last years).
Handle file_access();
Handle open_file(const std::string& path, bool writable);
Handle create_file(const std::string& path);  // truncates

// Scalar and small attributes on an object (the root group of a checkpoint).
void write_attr(hid_t loc, const char* name, std::int64_t value);
void write_attr(hid_t loc, const char* name, const std::string& value);  // UTF-8, variable length
void write_attr_pairs(hid_t loc, const char* name, const std::vector<std::pair<std::int64_t, std::int64_t>>& v,
                      const char* first, const char* second);  // 1-D compound {first, second}

// Reading checks presence and type class and throws Error with a plain reason:
// "missing attribute X", "attribute X is not an integer", ...
bool has_attr(hid_t loc, const char* name);
std::int64_t read_attr_int(hid_t loc, const char* name);
std::string read_attr_string(hid_t loc, const char* name);
std::vector<std::pair<std::int64_t, std::int64_t>> read_attr_pairs(hid_t loc, const char* name, const char* first,
                                                                    const char* second);

// Element types: the little-endian file type, the native memory type, and the reverse
// mapping of a dataset's type (nullopt for anything but float32/64 and int64/uint64).
hid_t file_type(ElemType t);
hid_t memory_type(ElemType t);
std::optional<ElemType> elem_type(hid_t type);
std::string describe_type(hid_t type);  // "int32", "float16", "string", ... for messages

std::vector<hsize_t> dims_of(hid_t dataset);

}  // namespace codistill::checkpoint::h5
