#pragma once
// Reader for NumPy's .npz archives (numpy.savez / savez_compressed): a zip file whose
// members are .npy images named "<key>.npy". Read through minizip.
//
// A stored member (numpy.savez) is viewed in place through a memory map of the archive, as
// a .npy file is; a deflated one (savez_compressed) is inflated into memory and its CRC
// checked. Errors are std::runtime_error naming the archive and the member.
#include <memory>
#include <string>
#include <vector>

#include "codistill/data/raw_array.hpp"

namespace codistill::data {

class NpzFile {
 public:
  explicit NpzFile(const std::string& path);  // throws when it is not a readable zip archive
  ~NpzFile();
  NpzFile(const NpzFile&) = delete;
  NpzFile& operator=(const NpzFile&) = delete;

  std::vector<std::string> keys() const;  // the members' names without ".npy"
  bool has(const std::string& key) const;
  RawArray array(const std::string& key);  // throws naming the keys there are when missing

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace codistill::data
