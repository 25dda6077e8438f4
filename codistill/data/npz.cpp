#include "codistill/data/npz.hpp"

#include <unzip.h>

#include <algorithm>
#include <stdexcept>

#include "codistill/data/mapped_file.hpp"
#include "codistill/data/npy.hpp"

namespace codistill::data {

struct NpzFile::Impl {
  std::string path;
  unzFile zip = nullptr;
  std::shared_ptr<MappedFile> map;  // made on the first stored member
  std::vector<std::string> names;   // every member, in the archive's order

  [[noreturn]] void fail(const std::string& what) const { throw std::runtime_error(path + ": " + what); }
};

NpzFile::NpzFile(const std::string& path) : impl_(std::make_unique<Impl>()) {
  Impl& z = *impl_;
  z.path = path;
  z.zip = unzOpen64(path.c_str());
  if (!z.zip) {
    MappedFile probe(path);  // throws the system's reason for a missing or unreadable file
    z.fail("not a zip archive (an .npz is what numpy.savez writes)");
  }
  for (int rc = unzGoToFirstFile(z.zip); rc == UNZ_OK; rc = unzGoToNextFile(z.zip)) {
    char name[1024];
    unz_file_info64 info{};
    if (unzGetCurrentFileInfo64(z.zip, &info, name, sizeof name, nullptr, 0, nullptr, 0) != UNZ_OK)
      z.fail("corrupt zip directory");
    z.names.emplace_back(name);
  }
}

NpzFile::~NpzFile() {
  if (impl_ && impl_->zip) unzClose(impl_->zip);
}

std::vector<std::string> NpzFile::keys() const {
  std::vector<std::string> out;
  for (const std::string& n : impl_->names)
    out.push_back(n.size() > 4 && n.ends_with(".npy") ? n.substr(0, n.size() - 4) : n);
  return out;
}

bool NpzFile::has(const std::string& key) const {
  return std::find(impl_->names.begin(), impl_->names.end(), key + ".npy") != impl_->names.end();
}

RawArray NpzFile::array(const std::string& key) {
  Impl& z = *impl_;
  const std::string member = key + ".npy", origin = z.path + ": " + key;
  if (unzLocateFile(z.zip, member.c_str(), 1) != UNZ_OK) {
    std::string have;
    for (const std::string& k : keys()) have += (have.empty() ? "" : ", ") + k;
    z.fail("no key '" + key + "' (the archive holds: " + (have.empty() ? "nothing" : have) + ")");
  }
  unz_file_info64 info{};
  if (unzGetCurrentFileInfo64(z.zip, &info, nullptr, 0, nullptr, 0, nullptr, 0) != UNZ_OK ||
      unzOpenCurrentFile(z.zip) != UNZ_OK)
    throw std::runtime_error(origin + ": corrupt zip member");
  if (info.compression_method == 0) {
    // Stored: the .npy image lies in the archive as it is; view it through a map.
    const ZPOS64_T at = unzGetCurrentFileZStreamPos64(z.zip);
    unzCloseCurrentFile(z.zip);
    if (!z.map) z.map = std::make_shared<MappedFile>(z.path);
    if (at > z.map->size() || info.uncompressed_size > z.map->size() - at)
      throw std::runtime_error(origin + ": truncated archive (the member runs past the end of the file)");
    RawArray a = npy_array(z.map->bytes().subspan(at, info.uncompressed_size), z.map, origin);
    a.mapped = true;
    return a;
  }
  // Deflated: inflate the whole member; the zip's CRC is checked at the close.
  // deflate expands at most 1032-fold: a larger claim is a corrupt directory, not a reason
  // to allocate it.
  if (info.uncompressed_size > info.compressed_size * 1032 + 1024)
    throw std::runtime_error(origin + ": corrupt member (" + std::to_string(info.uncompressed_size) +
                             " bytes claimed from " + std::to_string(info.compressed_size) + " compressed)");
  auto buf = std::make_shared<std::vector<std::uint8_t>>(info.uncompressed_size);
  std::uint64_t done = 0;
  while (done < buf->size()) {
    const unsigned chunk = static_cast<unsigned>(std::min<std::uint64_t>(buf->size() - done, 1u << 30));
    const int got = unzReadCurrentFile(z.zip, buf->data() + done, chunk);
    if (got <= 0) {
      unzCloseCurrentFile(z.zip);
      throw std::runtime_error(origin + ": corrupt or truncated compressed member");
    }
    done += static_cast<std::uint64_t>(got);
  }
  if (unzCloseCurrentFile(z.zip) != UNZ_OK) throw std::runtime_error(origin + ": CRC mismatch (corrupt member)");
  return npy_array(*buf, buf, origin);
}

}  // namespace codistill::data
