#include "checkpoint/hdf5/hdf5.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "checkpoint/hdf5/heap_guard.hpp"

namespace codistill::checkpoint::h5 {

namespace {

herr_t collect(unsigned, const H5E_error2_t* err, void* client) {
  auto* msgs = static_cast<std::vector<std::string>*>(client);
  std::string msg = err->desc ? err->desc : "";
  for (auto& c : msg)  // some HDF5 messages embed a ctime() line break
    if (c == '\n') c = ' ';
  char minor[160] = "";
  if (H5Eget_msg(err->min_num, nullptr, minor, sizeof minor) > 0 && msg.find(minor) == std::string::npos)
    msg += msg.empty() ? std::string(minor) : " (" + std::string(minor) + ")";
  if (!msg.empty() && (msgs->empty() || msgs->back() != msg)) msgs->push_back(std::move(msg));
  return 0;
}

// The operating system's message an HDF5 driver error carries ("..., errno = 28, error
// message = 'No space left on device', ..."), or "" if none does.
std::string os_message(const std::vector<std::string>& msgs) {
  const std::string key = "error message = '";
  for (auto it = msgs.rbegin(); it != msgs.rend(); ++it) {
    const auto at = it->find(key);
    if (at == std::string::npos) continue;
    const auto end = it->find('\'', at + key.size());
    if (end != std::string::npos) return it->substr(at + key.size(), end - at - key.size());
  }
  return "";
}

std::string error_stack() {
  std::vector<std::string> msgs;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect, &msgs);
  H5Eclear2(H5E_DEFAULT);
  // A failed system call (a full disk, a vanished file system): its message is the cause,
  // in one line; the driver's record of the call (time, descriptor, buffer, offsets) is not.
  if (const std::string os = os_message(msgs); !os.empty())
    return (msgs.empty() ? std::string() : msgs.front() + ": ") + os;
  // Top-level API message first, then the innermost causes, which say what went wrong
  // ("truncated file: eof = ...", "data error detected by Fletcher32 checksum").
  if (msgs.size() > 4) msgs.erase(msgs.begin() + 1, msgs.end() - 3);
  std::string out;
  for (const auto& m : msgs) out += (out.empty() ? "" : "; ") + m;
  return out.empty() ? "unknown HDF5 error" : out;
}

struct Pair {
  std::int64_t first, second;
};

Handle pair_type(const char* first, const char* second, hid_t member) {
  Handle t = type(H5Tcreate(H5T_COMPOUND, sizeof(Pair)), "creating a compound type");
  check(H5Tinsert(t.get(), first, HOFFSET(Pair, first), member), "building a compound type");
  check(H5Tinsert(t.get(), second, HOFFSET(Pair, second), member), "building a compound type");
  return t;
}

Handle open_attr(hid_t loc, const char* name) {
  if (!has_attr(loc, name)) throw Error(std::string("missing attribute ") + name);
  return attribute(H5Aopen(loc, name, H5P_DEFAULT), "opening an attribute");
}

}  // namespace

void init() {
  static std::once_flag once;
  std::call_once(once, [] {
#if !H5_VERSION_GE(1, 10, 7)
    // No H5Pset_file_locking before 1.10.7: the environment variable is read when the
    // library starts, so it must be set before H5open. A user's own setting wins.
    ::setenv("HDF5_USE_FILE_LOCKING", "FALSE", 0);
#endif
    // No library shutdown at exit: a file that HDF5 could not close (a create or flush that
    // failed on a full disk, with no handle left to retry) makes the shutdown spin or crash
    // in H5_term_library after a clean run. Every file this project writes or reads is
    // closed explicitly, so nothing is lost by skipping it.
    H5dont_atexit();
    H5open();
  });
  thread_local bool silenced = false;
  if (!silenced) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    silenced = true;
  }
}

std::unique_lock<std::recursive_mutex> exclusive() {
#ifdef H5_HAVE_THREADSAFE
  return {};
#else
  static std::recursive_mutex mu;
  return std::unique_lock(mu);
#endif
}

void fail(const std::string& what) { throw Error(what + ": " + error_stack()); }

void Handle::close(const char* what) {
  if (id_ < 0) return;
  // Released only once the close succeeded: after a failed H5Fclose (its flush could not
  // write) HDF5 still holds the file, and the owner may make room and close again.
  if (closer_(id_) < 0) fail(what);
  id_ = H5I_INVALID_HID;
}

Handle file_access() {
  Handle fapl = plist(H5Pcreate(H5P_FILE_ACCESS), "creating file access properties");
  check(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_V110), "setting format bounds");
#if H5_VERSION_GE(1, 10, 7)
  check(H5Pset_file_locking(fapl.get(), false, true), "switching file locking off");
#endif
  // The metadata block size stays at HDF5's default (2 KiB): larger blocks measured no
  // faster here (a checkpoint has little metadata: all datasets are created before any
  // data is written) and leave up to the block size unused in every file.
  return fapl;
}

Handle open_file(const std::string& path, bool writable) {
  init();
  Handle fapl = file_access();
  return file(H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl.get()),
              "cannot open as HDF5");
}

Handle create_file(const std::string& path) {
  init();
  Handle fapl = file_access();
  // The root group is created from the file creation properties, and HDF5 stamps every
  // object header with its modification time by default: two writes of the same
  // checkpoint a second apart would differ in those bytes. Groups and datasets switch
  // the times off where the writer creates them.
  Handle fcpl = plist(H5Pcreate(H5P_FILE_CREATE), "creating file creation properties");
  check(H5Pset_obj_track_times(fcpl.get(), false), "switching the root group's times off");
  return file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()), "cannot create HDF5 file");
}

void write_attr(hid_t loc, const char* name, std::int64_t value) {
  Handle s = space(H5Screate(H5S_SCALAR), "creating a dataspace");
  Handle a = attribute(H5Acreate2(loc, name, H5T_STD_I64LE, s.get(), H5P_DEFAULT, H5P_DEFAULT),
                       "creating an attribute");
  check(H5Awrite(a.get(), H5T_NATIVE_INT64, &value), "writing an attribute");
}

// Fixed-length strings, exactly as long as the text (an empty one is a single NUL): no
// global heap in the file, whose parsing in libhdf5 1.10 can hang on a damaged file
// (checkpoint/hdf5/heap_guard.hpp). Files written before 2026-11-24 hold variable-length
// strings; read_attr_string reads both.
void write_attr(hid_t loc, const char* name, const std::string& value) {
  Handle t = type(H5Tcopy(H5T_C_S1), "creating a string type");
  check(H5Tset_size(t.get(), std::max<std::size_t>(value.size(), 1)), "creating a string type");
  check(H5Tset_strpad(t.get(), H5T_STR_NULLPAD), "creating a string type");
  check(H5Tset_cset(t.get(), H5T_CSET_UTF8), "creating a string type");
  Handle s = space(H5Screate(H5S_SCALAR), "creating a dataspace");
  Handle a = attribute(H5Acreate2(loc, name, t.get(), s.get(), H5P_DEFAULT, H5P_DEFAULT), "creating an attribute");
  const std::string text = value.empty() ? std::string(1, '\0') : value;
  check(H5Awrite(a.get(), t.get(), text.data()), "writing an attribute");
}

void write_attr_pairs(hid_t loc, const char* name, const std::vector<std::pair<std::int64_t, std::int64_t>>& v,
                      const char* first, const char* second) {
  std::vector<Pair> rows;
  for (const auto& [a, b] : v) rows.push_back({a, b});
  Handle ftype = pair_type(first, second, H5T_STD_I64LE);
  Handle mtype = pair_type(first, second, H5T_NATIVE_INT64);
  hsize_t n = rows.size();
  Handle s = space(H5Screate_simple(1, &n, nullptr), "creating a dataspace");
  Handle a = attribute(H5Acreate2(loc, name, ftype.get(), s.get(), H5P_DEFAULT, H5P_DEFAULT),
                       "creating an attribute");
  Pair none{};  // HDF5 rejects a null buffer even for zero elements
  check(H5Awrite(a.get(), mtype.get(), rows.empty() ? &none : rows.data()), "writing an attribute");
}

bool has_attr(hid_t loc, const char* name) { return check_tri(H5Aexists(loc, name), "looking up an attribute"); }

std::int64_t read_attr_int(hid_t loc, const char* name) {
  Handle a = open_attr(loc, name);
  Handle t = type(H5Aget_type(a.get()), "reading an attribute's type");
  if (H5Tget_class(t.get()) != H5T_INTEGER)
    throw Error(std::string("attribute ") + name + " is not an integer (it is " + describe_type(t.get()) + ")");
  Handle s = space(H5Aget_space(a.get()), "reading an attribute's dataspace");
  if (H5Sget_simple_extent_npoints(s.get()) != 1) throw Error(std::string("attribute ") + name + " is not a scalar");
  std::int64_t v = 0;
  check(H5Aread(a.get(), H5T_NATIVE_INT64, &v), "reading an attribute");
  return v;
}

// Before libhdf5 parses a global heap (a variable-length string): checks every heap
// collection in the file, once per file version per thread (a file is read attribute by
// attribute).
static void guard_global_heaps(hid_t loc) {
  const ssize_t n = H5Fget_name(loc, nullptr, 0);
  if (n < 0) fail("finding the file of an attribute");
  std::string path(static_cast<std::size_t>(n), '\0');
  if (H5Fget_name(loc, path.data(), static_cast<std::size_t>(n) + 1) < 0) fail("finding the file of an attribute");
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) throw Error("cannot stat " + path + ": " + std::strerror(errno));
  using Key = std::array<std::int64_t, 5>;
  const Key key{static_cast<std::int64_t>(st.st_dev), static_cast<std::int64_t>(st.st_ino), st.st_size,
                st.st_mtim.tv_sec, st.st_mtim.tv_nsec};
  thread_local Key checked{};
  if (key == checked) return;
  try {
    check_global_heaps(path);
  } catch (const std::runtime_error& e) {
    throw Error(e.what());
  }
  checked = key;
}

std::string read_attr_string(hid_t loc, const char* name) {
  Handle a = open_attr(loc, name);
  Handle ftype = type(H5Aget_type(a.get()), "reading an attribute's type");
  if (H5Tget_class(ftype.get()) != H5T_STRING)
    throw Error(std::string("attribute ") + name + " is not a string (it is " + describe_type(ftype.get()) + ")");
  Handle s = space(H5Aget_space(a.get()), "reading an attribute's dataspace");
  if (H5Sget_simple_extent_npoints(s.get()) != 1) throw Error(std::string("attribute ") + name + " is not a scalar");
  Handle mtype = type(H5Tcopy(H5T_C_S1), "creating a string type");
  check(H5Tset_cset(mtype.get(), H5Tget_cset(ftype.get())), "creating a string type");
  if (check_tri(H5Tis_variable_str(ftype.get()), "inspecting a string type")) {
    guard_global_heaps(loc);
    check(H5Tset_size(mtype.get(), H5T_VARIABLE), "creating a string type");
    char* text = nullptr;
    check(H5Aread(a.get(), mtype.get(), &text), "reading an attribute");
    std::string out = text ? text : "";
    H5free_memory(text);
    return out;
  }
  // Fixed-length (what the writer makes): read, then cut at the first NUL.
  std::size_t size = H5Tget_size(ftype.get());
  check(H5Tset_size(mtype.get(), size), "creating a string type");
  // NULLPAD in memory: all `size` characters arrive (a NULLTERM buffer of the same size
  // would drop the last one for its terminator).
  check(H5Tset_strpad(mtype.get(), H5T_STR_NULLPAD), "creating a string type");
  std::string out(size, '\0');
  check(H5Aread(a.get(), mtype.get(), out.data()), "reading an attribute");
  return out.substr(0, out.find('\0'));
}

std::vector<std::pair<std::int64_t, std::int64_t>> read_attr_pairs(hid_t loc, const char* name, const char* first,
                                                                    const char* second) {
  Handle a = open_attr(loc, name);
  Handle ftype = type(H5Aget_type(a.get()), "reading an attribute's type");
  auto member_is_int = [&](const char* member) {
    int i = H5Tget_member_index(ftype.get(), member);
    return i >= 0 && H5Tget_member_class(ftype.get(), static_cast<unsigned>(i)) == H5T_INTEGER;
  };
  H5Eclear2(H5E_DEFAULT);  // a missing member leaves an entry; the message below says it
  if (H5Tget_class(ftype.get()) != H5T_COMPOUND || !member_is_int(first) || !member_is_int(second))
    throw Error(std::string("attribute ") + name + " is not a list of {" + first + ", " + second + "} integers");
  Handle s = space(H5Aget_space(a.get()), "reading an attribute's dataspace");
  if (H5Sget_simple_extent_ndims(s.get()) > 1) throw Error(std::string("attribute ") + name + " is not 1-D");
  hssize_t n = H5Sget_simple_extent_npoints(s.get());
  std::vector<Pair> rows(static_cast<std::size_t>(std::max<hssize_t>(n, 0)));
  Handle mtype = pair_type(first, second, H5T_NATIVE_INT64);
  if (!rows.empty()) check(H5Aread(a.get(), mtype.get(), rows.data()), "reading an attribute");
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (const Pair& r : rows) out.emplace_back(r.first, r.second);
  return out;
}

namespace {

// bfloat16 as HDF5 describes a custom float: 16 bits, sign at 15, an 8-bit exponent at 7
// (bias 127), a 7-bit mantissa at 0, little-endian: the type ml_dtypes' bfloat16 has when
// h5py writes it, and the one h5py reads back (as float32, converted by HDF5). Created
// once and never closed (like HDF5's predefined types).
hid_t bf16_type() {
  static const hid_t t = [] {
    init();
    hid_t id = check_id(H5Tcopy(H5T_IEEE_F32LE), "creating the bfloat16 type");
    check(H5Tset_fields(id, 15, 7, 8, 0, 7), "creating the bfloat16 type");
    check(H5Tset_precision(id, 16), "creating the bfloat16 type");
    check(H5Tset_size(id, 2), "creating the bfloat16 type");
    check(H5Tset_ebias(id, 127), "creating the bfloat16 type");
    return id;
  }();
  return t;
}

bool is_bf16(hid_t t, H5T_order_t order) {
  if (H5Tget_class(t) != H5T_FLOAT || H5Tget_size(t) != 2 || H5Tget_order(t) != order) return false;
  std::size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  if (H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) < 0) {
    H5Eclear2(H5E_DEFAULT);
    return false;
  }
  return spos == 15 && epos == 7 && esize == 8 && mpos == 0 && msize == 7 && H5Tget_ebias(t) == 127;
}

}  // namespace

hid_t file_type(ElemType t) {
  switch (t) {
    case ElemType::f32: return H5T_IEEE_F32LE;
    case ElemType::f64: return H5T_IEEE_F64LE;
    case ElemType::i64: return H5T_STD_I64LE;
    case ElemType::u64: return H5T_STD_U64LE;
    case ElemType::bf16: return bf16_type();
  }
  throw std::logic_error("file_type: bad element type");
}

hid_t memory_type(ElemType t) {
  switch (t) {
    case ElemType::f32: return H5T_NATIVE_FLOAT;
    case ElemType::f64: return H5T_NATIVE_DOUBLE;
    case ElemType::i64: return H5T_NATIVE_INT64;
    case ElemType::u64: return H5T_NATIVE_UINT64;
    case ElemType::bf16: return bf16_type();  // raw bits, as stored (little-endian hosts only)
  }
  throw std::logic_error("memory_type: bad element type");
}

std::optional<ElemType> elem_type(hid_t t) {
  for (ElemType e : {ElemType::f32, ElemType::f64, ElemType::i64, ElemType::u64})
    if (H5Tequal(t, file_type(e)) > 0) return e;
  if (is_bf16(t, H5T_ORDER_LE)) return ElemType::bf16;
  // Big-endian forms are accepted too (HDF5 converts them when reading); a big-endian
  // bfloat16 is not (nothing writes one, and the reader reads bfloat16 bits as they are).
  if (H5Tequal(t, H5T_IEEE_F32BE) > 0) return ElemType::f32;
  if (H5Tequal(t, H5T_IEEE_F64BE) > 0) return ElemType::f64;
  if (H5Tequal(t, H5T_STD_I64BE) > 0) return ElemType::i64;
  if (H5Tequal(t, H5T_STD_U64BE) > 0) return ElemType::u64;
  return std::nullopt;
}

std::string describe_type(hid_t t) {
  std::string bits = std::to_string(H5Tget_size(t) * 8);
  switch (H5Tget_class(t)) {
    case H5T_INTEGER: return (H5Tget_sign(t) == H5T_SGN_NONE ? "uint" : "int") + bits;
    case H5T_FLOAT: return "float" + bits;
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ARRAY: return "array";
    case H5T_ENUM: return "enum";
    default: return "type class " + std::to_string(static_cast<int>(H5Tget_class(t)));
  }
}

std::vector<hsize_t> dims_of(hid_t dataset) {
  Handle s = space(H5Dget_space(dataset), "reading a dataspace");
  int rank = H5Sget_simple_extent_ndims(s.get());
  if (rank < 0) fail("reading a dataspace's rank");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(s.get(), dims.data(), nullptr) < 0) fail("reading a dataspace's extent");
  return dims;
}

}  // namespace codistill::checkpoint::h5
