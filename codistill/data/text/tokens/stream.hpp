#pragma once
// Token streams: what the window sampler cuts its training windows from and what the
// held-out evaluation reads whole. Two kinds: the documents of a prepared token file
// (DocumentStream, data.kind text) and token shards back to back (ShardStream in
// token_shard.hpp, data.kind tokens).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codistill/data/text/tokens/token_file.hpp"

namespace codistill::data::text {

class TokenStream {
 public:
  virtual ~TokenStream() = default;
  virtual std::int64_t size() const = 0;
  // Copies stream tokens [begin, begin + out.size()) into out; throws
  // std::out_of_range unless that range lies in [0, size()).
  virtual void copy(std::int64_t begin, std::span<std::int32_t> out) const = 0;
  // What the stream is made of, for the log ("12 of 40 documents, N tokens with
  // end-of-document tokens", "3 of 8 shards, N tokens").
  virtual std::string describe() const = 0;
  // Names the stream's source in messages (a file, or the first of several).
  virtual std::string origin() const = 0;
};

// A list of documents of a token file read as one stream: each document's tokens followed
// by the end-of-document token, in list order.
class DocumentStream final : public TokenStream {
 public:
  // Keeps a pointer to `file`, which must outlive the stream. `documents` are indices
  // into the file (throws std::out_of_range for one outside it).
  DocumentStream(const TokenFile& file, std::vector<std::int64_t> documents);

  // Tokens in the stream: the documents' tokens plus one end-of-document token each.
  std::int64_t size() const override { return starts_.back(); }
  const std::vector<std::int64_t>& documents() const { return docs_; }
  void copy(std::int64_t begin, std::span<std::int32_t> out) const override;
  std::string describe() const override;
  std::string origin() const override { return file_->path(); }

 private:
  const TokenFile* file_;
  std::vector<std::int64_t> docs_;
  std::vector<std::int64_t> starts_;  // stream position of each document; back() = size()
};

}  // namespace codistill::data::text
