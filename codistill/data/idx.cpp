#include "codistill/data/idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>

namespace codistill::data {

namespace {

constexpr std::uint32_t kImagesMagic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr std::uint32_t kLabelsMagic = 0x00000801;  // unsigned bytes, 1 dimension
// Refuse headers that declare more than this before allocating anything: a corrupt
// dimension must give a clear error, not an attempt to allocate petabytes.
constexpr std::uint64_t kMaxDataBytes = std::uint64_t{1} << 36;  // 64 GiB

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", static_cast<unsigned>(v));
  return buf;
}

std::string hex8(unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", v & 0xFFu);
  return buf;
}

// Sequential reader of a file's bytes, gunzipping on the fly when the file starts with
// the gzip magic 1f 8b. Streaming (rather than inflating the whole file up front) lets
// the IDX header be validated before its data is allocated, and lets the data be
// inflated straight into its final buffer.
class ByteReader {
 public:
  explicit ByteReader(const std::string& path) : path_(path) {
    file_ = std::fopen(path.c_str(), "rb");
    if (!file_) fail(path, std::string("cannot open file: ") + std::strerror(errno));
    // A constructor that throws gets no destructor: close the file on the way out (the
    // fuzzer found the descriptor leaked by every rejected file).
    try {
      check_header(path);
    } catch (...) {
      std::fclose(file_);
      throw;
    }
  }
  ~ByteReader() {
    if (gzip_) inflateEnd(&zs_);
    std::fclose(file_);
  }
  ByteReader(const ByteReader&) = delete;
  ByteReader& operator=(const ByteReader&) = delete;

 private:
  void check_header(const std::string& path) {
    unsigned char head[2] = {0, 0};
    std::size_t got = std::fread(head, 1, 2, file_);
    if (std::ferror(file_)) fail_io();
    if (got == 0) fail(path, "file is empty (0 bytes)");
    gzip_ = got == 2 && head[0] == 0x1F && head[1] == 0x8B;
    if (!gzip_ && (head[0] != 0 || (got == 2 && head[1] != 0))) {
      std::string msg = "neither a gzip file (starts with 1f 8b) nor an IDX file (starts with 00 00): first bytes are ";
      msg += hex8(head[0]);
      if (got == 2) msg.append(" ").append(hex8(head[1]));
      fail(path, msg);
    }
    if (std::fseek(file_, 0, SEEK_SET) != 0) fail_io();
    if (gzip_) {
      std::memset(&zs_, 0, sizeof zs_);
      // 16 + MAX_WBITS: gzip wrapper only (header and CRC-32 trailer checked by zlib).
      if (inflateInit2(&zs_, 16 + MAX_WBITS) != Z_OK) throw std::bad_alloc();
      in_.resize(1 << 16);
    }
  }

 public:
  // Reads up to n bytes into dst; fewer only when the content ends. Throws on I/O errors
  // and corrupt gzip data. A gzip stream that is cut off ends the content early and is
  // recorded in cut_off() so that the caller can say so next to its own diagnosis.
  std::size_t read(void* dst, std::size_t n) {
    if (!gzip_) {
      std::size_t got = std::fread(dst, 1, n, file_);
      if (std::ferror(file_)) fail_io();
      return got;
    }
    zs_.next_out = static_cast<Bytef*>(dst);
    // zlib counts in uInt; reads here are far below 4 GiB per call (see read_exact).
    zs_.avail_out = static_cast<uInt>(n);
    while (zs_.avail_out > 0 && !cut_off_) {
      if (zs_.avail_in == 0) {
        std::size_t got = std::fread(in_.data(), 1, in_.size(), file_);
        if (std::ferror(file_)) fail_io();
        if (got == 0) {
          if (member_done_) break;  // clean end of the last gzip member
          cut_off_ = true;          // the file ends inside a gzip member
          break;
        }
        zs_.next_in = in_.data();
        zs_.avail_in = static_cast<uInt>(got);
      }
      if (member_done_) {
        // gzip(1) allows several members back to back; anything else is garbage.
        if (zs_.next_in[0] != 0x1F) fail(path_, "trailing bytes after the end of the gzip stream");
        inflateReset(&zs_);
        member_done_ = false;
        extra_member_ = true;
      }
      uLong before = zs_.total_out;
      int rc = inflate(&zs_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        member_done_ = true;
      } else if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT || rc == Z_STREAM_ERROR) {
        if (extra_member_ && before == 0 && zs_.total_out == 0)
          fail(path_, "trailing bytes after the end of the gzip stream");
        fail(path_, std::string("corrupt gzip data: ") + (zs_.msg ? zs_.msg : "inflate failed"));
      } else if (rc == Z_MEM_ERROR) {
        throw std::bad_alloc();
      } else if (rc == Z_BUF_ERROR && zs_.avail_in > 0) {
        // Input and output space both available, yet no progress: never loop on it.
        fail(path_, "corrupt gzip data: inflate made no progress");
      }
      // Z_OK and Z_BUF_ERROR (needs more input) simply continue the loop.
    }
    return n - zs_.avail_out;
  }

  bool gzip() const { return gzip_; }
  bool cut_off() const { return cut_off_; }
  // Appended to messages about short content.
  std::string cut_off_note() const {
    return cut_off_ ? " (the gzip stream is cut off: the file is incomplete)" : "";
  }

 private:
  [[noreturn]] void fail_io() const { fail(path_, std::string("read error: ") + std::strerror(errno)); }

  std::string path_;
  std::FILE* file_ = nullptr;
  bool gzip_ = false;
  z_stream zs_{};
  std::vector<unsigned char> in_;
  bool member_done_ = false;
  bool extra_member_ = false;
  bool cut_off_ = false;
};

std::uint32_t be32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

const char* describe_magic(std::uint32_t magic) {
  switch (magic) {
    case kImagesMagic: return "IDX images: unsigned bytes, 3 dimensions";
    case kLabelsMagic: return "IDX labels: unsigned bytes, 1 dimension";
    default: return nullptr;
  }
}

// Reads and checks the magic and the dimensions; returns the dimensions.
std::vector<std::uint64_t> read_header(ByteReader& r, const std::string& path, std::uint32_t expected) {
  const int ndims = static_cast<int>(expected & 0xFF);
  const std::size_t header_bytes = 4 + 4 * static_cast<std::size_t>(ndims);
  unsigned char buf[4 + 4 * 3];
  std::size_t got = r.read(buf, 4);
  if (got < 4)
    fail(path, "truncated header: expected " + std::to_string(header_bytes) + " bytes, got " +
                   std::to_string(got) + r.cut_off_note());
  std::uint32_t magic = be32(buf);
  if (magic != expected) {
    std::string msg = "wrong magic " + hex32(magic) + ", expected " + hex32(expected) + " (" +
                      describe_magic(expected) + ")";
    if (const char* found = describe_magic(magic)) msg += "; the file holds " + std::string(found);
    fail(path, msg);
  }
  got += r.read(buf + 4, header_bytes - 4);
  if (got < header_bytes)
    fail(path, "truncated header: expected " + std::to_string(header_bytes) + " bytes, got " +
                   std::to_string(got) + r.cut_off_note());
  std::vector<std::uint64_t> dims(ndims);
  for (int i = 0; i < ndims; ++i) dims[i] = be32(buf + 4 + 4 * i);
  if (dims[0] == 0) fail(path, "the file holds zero examples");
  return dims;
}

// Reads exactly n data bytes (growing the buffer as bytes arrive, so that a header that
// overstates the size yields "truncated" rather than a huge allocation), then checks
// that nothing follows them.
std::vector<std::uint8_t> read_data(ByteReader& r, const std::string& path, std::uint64_t n,
                                    const std::string& what) {
  std::vector<std::uint8_t> out;
  std::size_t have = 0;
  while (have < n) {
    std::size_t want = std::min<std::uint64_t>(n, std::max<std::size_t>(2 * have, std::size_t{1} << 20));
    out.resize(want);
    std::size_t chunk = std::min<std::size_t>(want - have, std::size_t{1} << 30);
    std::size_t got = r.read(out.data() + have, chunk);
    have += got;
    if (got < chunk) break;
  }
  if (have < n)
    fail(path, "truncated data: expected " + std::to_string(n) + " bytes of " + what + " after the header, got " +
                   std::to_string(have) + r.cut_off_note());
  std::uint64_t extra = 0;
  unsigned char sink[4096];
  for (std::size_t got; (got = r.read(sink, sizeof sink)) > 0;) extra += got;
  if (extra > 0)
    fail(path, std::to_string(extra) + " trailing bytes after the " + std::to_string(n) + " bytes of " + what +
                   " that the header declares");
  // Data complete but the gzip trailer (CRC, size) is missing: still an incomplete file.
  if (r.cut_off()) fail(path, "the gzip stream is cut off after the data (missing gzip trailer)");
  return out;
}

}  // namespace

IdxImages read_idx_images(const std::string& path) {
  ByteReader r(path);
  auto dims = read_header(r, path, kImagesMagic);
  if (dims[1] == 0 || dims[2] == 0)
    fail(path, "zero-sized images (" + std::to_string(dims[1]) + " x " + std::to_string(dims[2]) + ")");
  // Each dimension is below 2^32, so the per-image size cannot overflow; the total can.
  std::uint64_t per_image = dims[1] * dims[2];
  if (dims[0] > kMaxDataBytes / per_image)
    fail(path, "implausible header: " + std::to_string(dims[0]) + " images of " + std::to_string(dims[1]) + " x " +
                   std::to_string(dims[2]) + " exceed 64 GiB");
  IdxImages img;
  img.count = static_cast<std::int64_t>(dims[0]);
  img.rows = static_cast<std::int64_t>(dims[1]);
  img.cols = static_cast<std::int64_t>(dims[2]);
  img.pixels = read_data(r, path, dims[0] * per_image, "pixels");
  return img;
}

std::vector<std::uint8_t> read_idx_labels(const std::string& path) {
  ByteReader r(path);
  auto dims = read_header(r, path, kLabelsMagic);
  if (dims[0] > kMaxDataBytes) fail(path, "implausible header: " + std::to_string(dims[0]) + " labels");
  return read_data(r, path, dims[0], "labels");
}

Dataset read_idx_dataset(const std::string& images_path, const std::string& labels_path, std::int64_t classes,
                         const std::string& name) {
  if (classes < 0) throw std::invalid_argument("read_idx_dataset: negative number of classes");
  IdxImages img = read_idx_images(images_path);
  std::vector<std::uint8_t> lab = read_idx_labels(labels_path);
  if (static_cast<std::int64_t>(lab.size()) != img.count)
    throw std::runtime_error(name + ": image/label count mismatch: " + images_path + " holds " +
                             std::to_string(img.count) + " images but " + labels_path + " holds " +
                             std::to_string(lab.size()) + " labels");
  std::int64_t max_label = *std::max_element(lab.begin(), lab.end());
  if (classes > 0 && max_label >= classes) {
    auto at = std::find_if(lab.begin(), lab.end(), [&](std::uint8_t l) { return l >= classes; });
    fail(labels_path, "label " + std::to_string(*at) + " at index " + std::to_string(at - lab.begin()) +
                          " is out of range for " + std::to_string(classes) + " classes");
  }

  Dataset d;
  d.name = name;
  d.classes = classes > 0 ? classes : max_label + 1;
  d.labels.assign(lab.begin(), lab.end());
  d.images = allocate_images({img.count, 1, img.rows, img.cols});
  float* dst = d.images.data<float>();
  const std::uint8_t* src = img.pixels.data();
  const std::size_t total = img.pixels.size();
  for (std::size_t i = 0; i < total; ++i) dst[i] = static_cast<float>(src[i]);
  return d;
}

}  // namespace codistill::data
