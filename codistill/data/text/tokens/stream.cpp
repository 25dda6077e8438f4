#include "codistill/data/text/tokens/stream.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "codistill/data/text/tokenizer/tokenizer.hpp"

namespace codistill::data::text {

DocumentStream::DocumentStream(const TokenFile& file, std::vector<std::int64_t> documents)
    : file_(&file), docs_(std::move(documents)) {
  starts_.reserve(docs_.size() + 1);
  starts_.push_back(0);
  for (std::int64_t d : docs_) starts_.push_back(starts_.back() + file.document_size(d) + 1);
}

void DocumentStream::copy(std::int64_t begin, std::span<std::int32_t> out) const {
  const std::int64_t n = static_cast<std::int64_t>(out.size());
  if (begin < 0 || n > size() || begin > size() - n)
    throw std::out_of_range("DocumentStream: tokens [" + std::to_string(begin) + ", " + std::to_string(begin + n) +
                            ") outside the stream of " + std::to_string(size()) + " tokens");
  // The document holding `begin`: the last one that starts at or before it.
  std::size_t k = static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin()) - 1;
  std::int64_t pos = begin, i = 0;
  while (i < n) {
    const std::int64_t d = docs_[k], offset = pos - starts_[k], length = file_->document_size(d);
    if (offset < length) {
      const std::int64_t take = std::min(length - offset, n - i);
      file_->copy_tokens(file_->document_begin(d) + offset, take, out.data() + i);
      i += take;
      pos += take;
    } else {
      out[static_cast<std::size_t>(i++)] = static_cast<std::int32_t>(file_->info().end_of_document);
      ++pos;
      ++k;
    }
  }
}

std::string DocumentStream::describe() const {
  return std::to_string(docs_.size()) + " of " + std::to_string(file_->documents()) + " documents, " +
         std::to_string(size()) + " tokens with end-of-document tokens";
}

}  // namespace codistill::data::text
