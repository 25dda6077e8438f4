#include "checkpoint/hdf5/heap_guard.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace codistill::checkpoint {

namespace {

// The on-disk layout (HDF5 file format spec, "Global Heap"), with 8-byte lengths and
// offsets (all this project's files): "GCOL", version 1, 3 reserved bytes, the
// collection's size (including this 16-byte header); then objects, each a 16-byte header
// (index u16, reference count u16, 4 reserved bytes, size u64) and its data padded to 8
// bytes. Object 0 is the free space: its size counts its header.
constexpr std::size_t kHeader = 16, kObjectHeader = 16;

std::uint64_t le64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct File {
  int fd = -1;
  explicit File(const std::string& path) : fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  }
  ~File() { ::close(fd); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  // Reads exactly n bytes at off; false at end of file.
  bool read(std::uint64_t off, void* out, std::size_t n) const {
    auto* p = static_cast<unsigned char*>(out);
    while (n > 0) {
      ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw std::runtime_error(std::string("read failed: ") + std::strerror(errno));
      if (r == 0) return false;
      p += r, off += static_cast<std::uint64_t>(r), n -= static_cast<std::size_t>(r);
    }
    return true;
  }
};

[[noreturn]] void corrupt(std::uint64_t at, const std::string& what) {
  throw std::runtime_error("corrupt global heap collection at offset " + std::to_string(at) + ": " + what);
}

// Walks one collection's objects as libhdf5's H5HG cache callback does.
void check_collection(const File& f, std::uint64_t at, std::uint64_t file_size) {
  unsigned char head[kHeader];
  if (!f.read(at, head, kHeader) || head[4] != 1) return;  // not a collection libhdf5 would load
  const std::uint64_t size = le64(head + 8);
  if (size < kHeader || size > file_size - at)
    corrupt(at, "its size " + std::to_string(size) + " does not fit the file (" + std::to_string(file_size) +
                    " bytes)");
  std::vector<unsigned char> c(size);
  f.read(at, c.data(), size);
  std::uint64_t p = kHeader;
  while (p < size) {
    if (size - p < kObjectHeader) break;  // a tail too small for a header is free space
    const unsigned index = c[p] | (c[p + 1] << 8u);
    const std::uint64_t object = le64(&c[p + 8]);
    std::uint64_t need = object;  // the free-space object's size counts its header
    if (index > 0) {
      if (object > size)
        corrupt(at, "object " + std::to_string(index) + " (" + std::to_string(object) + " bytes, at offset " +
                        std::to_string(at + p) + ") overruns the collection");
      need = kObjectHeader + ((object + 7) & ~std::uint64_t{7});
    }
    if (need == 0)
      corrupt(at, "an object of size 0 at offset " + std::to_string(at + p) + " (libhdf5 would loop forever on it)");
    if (need > size - p)
      corrupt(at, "object " + std::to_string(index) + " (" + std::to_string(object) + " bytes, at offset " +
                      std::to_string(at + p) + ") overruns the collection");
    p += need;
  }
}

}  // namespace

int check_global_heaps(const std::string& path) {
  File f(path);
  struct stat st{};
  if (::fstat(f.fd, &st) != 0) throw std::runtime_error("cannot stat " + path + ": " + std::strerror(errno));
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  constexpr char kSig[4] = {'G', 'C', 'O', 'L'};
  constexpr std::size_t kBlock = std::size_t{1} << 20;
  std::vector<char> buf(kBlock + sizeof kSig);
  int checked = 0;
  std::size_t carry = 0;  // bytes kept from the previous block, so a split signature is seen
  for (std::uint64_t off = 0; off < file_size;) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(kBlock, file_size - off));
    if (!f.read(off, buf.data() + carry, want)) break;
    const std::size_t n = carry + want;
    const std::uint64_t base = off - carry;
    for (const char* p = buf.data(); (p = static_cast<const char*>(::memmem(p, n - static_cast<std::size_t>(p - buf.data()), kSig, sizeof kSig)));
         ++p) {
      check_collection(f, base + static_cast<std::uint64_t>(p - buf.data()), file_size);
      ++checked;
    }
    carry = std::min<std::size_t>(n, sizeof kSig - 1);
    std::memmove(buf.data(), buf.data() + n - carry, carry);
    off += want;
  }
  return checked;
}

}  // namespace codistill::checkpoint
