#pragma once
// A list of documents of a token file read as one stream: each document's tokens followed
// by the end-of-document token, in list order. The sampler cuts its training windows from
// such a stream, and the held-out evaluation reads one whole.
#include <cstdint>
#include <span>
#include <vector>

#include "codistill/data/text/token_file.hpp"

namespace codistill::data::text {

class DocumentStream {
 public:
  // Keeps a pointer to `file`, which must outlive the stream. `documents` are indices
  // into the file (throws std::out_of_range for one outside it).
  DocumentStream(const TokenFile& file, std::vector<std::int64_t> documents);

  // Tokens in the stream: the documents' tokens plus one end-of-document token each.
  std::int64_t size() const { return starts_.back(); }
  const std::vector<std::int64_t>& documents() const { return docs_; }
  // Copies stream tokens [begin, begin + out.size()) into out; throws
  // std::out_of_range unless that range lies in [0, size()).
  void copy(std::int64_t begin, std::span<std::int32_t> out) const;

 private:
  const TokenFile* file_;
  std::vector<std::int64_t> docs_;
  std::vector<std::int64_t> starts_;  // stream position of each document; back() = size()
};

}  // namespace codistill::data::text
