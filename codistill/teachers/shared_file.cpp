#include "codistill/teachers/shared_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

namespace codistill {

namespace {

constexpr char kMagic[8] = {'C', 'D', 'S', 'H', 'A', 'R', 'E', '1'};
constexpr std::size_t kPage = 4096;
constexpr const char* kPrefix = "codistill-teacher.";

std::size_t round_up(std::size_t n) { return (n + kPage - 1) / kPage * kPage; }

std::string sys_error(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// The header's words: magic, header size, meta length, block count, (offset, size) each.
std::vector<std::uint64_t> header_words(const std::string& meta, const std::vector<std::span<const std::byte>>& blocks,
                                        std::size_t& header_size) {
  header_size = round_up(sizeof(kMagic) + 8 * (3 + 2 * blocks.size()) + meta.size());
  std::vector<std::uint64_t> words = {header_size, meta.size(), blocks.size()};
  std::size_t at = header_size;
  for (const auto& b : blocks) {
    words.push_back(at);
    words.push_back(b.size());
    at = round_up(at + b.size());
  }
  return words;
}

// write() until all of `bytes` is out (tmpfs may write short near its limit).
void write_all(int fd, const void* data, std::size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw SharedFileError(sys_error("cannot write", path));
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

void write_file(int fd, const std::string& path, const std::string& meta,
                const std::vector<std::span<const std::byte>>& blocks) {
  std::size_t header_size = 0;
  const auto words = header_words(meta, blocks, header_size);
  std::vector<char> header(header_size, 0);
  std::memcpy(header.data(), kMagic, sizeof(kMagic));
  std::memcpy(header.data() + sizeof(kMagic), words.data(), words.size() * 8);
  std::memcpy(header.data() + sizeof(kMagic) + words.size() * 8, meta.data(), meta.size());
  write_all(fd, header.data(), header.size(), path);
  std::size_t at = header_size;
  for (const auto& b : blocks) {
    write_all(fd, b.data(), b.size(), path);
    at += b.size();
    const std::size_t pad = round_up(at) - at;  // the next block starts on a page
    if (pad) {
      const std::vector<char> zeros(pad, 0);
      write_all(fd, zeros.data(), pad, path);
      at += pad;
    }
  }
}

// The pid in "codistill-teacher.<pid>.<rest>" or ".codistill-teacher.<pid>.<rest>.tmp"; -1 else.
long writer_pid(std::string name) {
  if (!name.empty() && name[0] == '.') name.erase(0, 1);
  if (name.rfind(kPrefix, 0) != 0) return -1;
  const std::string rest = name.substr(std::strlen(kPrefix));
  const auto dot = rest.find('.');
  // At most 9 digits: any pid fits, and stol cannot overflow on a stranger's name.
  if (dot == 0 || dot > 9 || dot == std::string::npos || rest.find_first_not_of("0123456789") < dot) return -1;
  return std::stol(rest.substr(0, dot));
}

}  // namespace

void publish_shared_file(const std::string& path, const std::string& meta,
                         const std::vector<std::span<const std::byte>>& blocks) {
  const std::filesystem::path final_path(path);
  const std::string temp = (final_path.parent_path() / ("." + final_path.filename().string() + ".tmp")).string();
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw SharedFileError(sys_error("cannot create", temp));
  try {
    write_file(fd, temp, meta, blocks);
  } catch (...) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  // A tmpfs file needs no fsync (it is memory); close reports the last write errors.
  if (::close(fd) != 0 || ::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string why = sys_error("cannot publish", path);
    ::unlink(temp.c_str());
    throw SharedFileError(why);
  }
}

std::shared_ptr<SharedMapping> SharedMapping::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw SharedFileError(sys_error("cannot open", path));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string why = sys_error("cannot stat", path);
    ::close(fd);
    throw SharedFileError(why);
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  void* base = size ? ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  ::close(fd);  // the mapping keeps the file
  if (base == MAP_FAILED) throw SharedFileError(size ? sys_error("cannot map", path) : "empty shared file " + path);
  std::shared_ptr<SharedMapping> m(new SharedMapping());
  m->path_ = path;
  m->base_ = base;
  m->size_ = size;
  const auto* bytes = static_cast<const std::byte*>(base);
  auto bad = [&](const std::string& why) { return SharedFileError("shared file " + path + ": " + why); };
  std::uint64_t w[3];
  if (size < sizeof(kMagic) + sizeof(w) || std::memcmp(bytes, kMagic, sizeof(kMagic)) != 0)
    throw bad("not a codistill shared file");
  std::memcpy(w, bytes + sizeof(kMagic), sizeof(w));
  const std::uint64_t header_size = w[0], meta_len = w[1], count = w[2];
  if (header_size > size || count > (header_size / 16) || sizeof(kMagic) + 8 * (3 + 2 * count) + meta_len > header_size)
    throw bad("its header is damaged");
  std::vector<std::uint64_t> spans(2 * count);
  std::memcpy(spans.data(), bytes + sizeof(kMagic) + sizeof(w), spans.size() * 8);
  m->meta_.assign(reinterpret_cast<const char*>(bytes) + sizeof(kMagic) + 8 * (3 + 2 * count), meta_len);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t at = spans[2 * i], n = spans[2 * i + 1];
    if (at < header_size || at > size || n > size - at) throw bad("block " + std::to_string(i) + " lies past its end");
    m->blocks_.emplace_back(bytes + at, n);
  }
  return m;
}

SharedMapping::~SharedMapping() {
  if (base_) ::munmap(base_, size_);
}

SharedFileOwner::SharedFileOwner(std::string path) : path_(std::move(path)) {
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0) {
    device_ = st.st_dev;
    inode_ = st.st_ino;
  }
}

SharedFileOwner::~SharedFileOwner() {
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && st.st_dev == device_ && st.st_ino == inode_) ::unlink(path_.c_str());
}

std::string shared_file_path(const std::string& dir, long writer_pid, const std::string& rest) {
  if (rest.find('/') != std::string::npos) throw std::invalid_argument("shared file name part holds '/': " + rest);
  return (std::filesystem::path(dir) / (kPrefix + std::to_string(writer_pid) + "." + rest)).string();
}

std::vector<std::string> remove_stale_shared_files(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const auto& entry = *it;
    const long pid = writer_pid(entry.path().filename().string());
    if (pid <= 0) continue;
    // kill(pid, 0) fails with ESRCH only where no such process exists; EPERM is a live
    // process of another user (its files are not ours to judge).
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code gone;
    if (std::filesystem::remove(entry.path(), gone)) removed.push_back(entry.path().string());
  }
  return removed;
}

}  // namespace codistill
