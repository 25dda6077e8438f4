// The tokenizer's vocabulary file (docs/text-data.md, "Tokenizer file"): plain text, so
// that a person can read the merges and another program can parse it in a few lines.
//
//   codistill-bpe-tokenizer 1
//   pretokenizer chunks-v1
//   vocab_size 8192
//   end_of_document 256
//   merges 7935
//   32 116            one line per merge: left right (merge i makes token 257 + i)
//   ...
//   xxh64 0123456789abcdef      XXH64 (seed 0) of every byte before this line
#include <xxhash.h>

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "codistill/data/text/atomic_write.hpp"
#include "codistill/data/text/tokenizer/pretokenize.hpp"
#include "codistill/data/text/tokenizer/tokenizer.hpp"

namespace codistill::data::text {

namespace {

constexpr std::string_view kMagicLine = "codistill-bpe-tokenizer 1";

std::string hex64(std::uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

// Reads the text line by line, each error naming the file and the line number.
class Lines {
 public:
  Lines(std::string_view text, const std::string& name) : text_(text), name_(name) {}
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(name_ + ": line " + std::to_string(line_) + ": " + what);
  }
  // The next line without its '\n'; fails when the text ends first.
  std::string_view next(const char* expected) {
    if (pos_ >= text_.size()) {
      ++line_;
      fail(std::string("the file ends early: expected ") + expected);
    }
    std::size_t end = text_.find('\n', pos_);
    if (end == std::string_view::npos) {
      ++line_;
      fail(std::string("the last line has no newline (the file is cut off?): expected ") + expected);
    }
    std::string_view line = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    ++line_;
    return line;
  }
  std::size_t pos() const { return pos_; }

 private:
  std::string_view text_;
  std::string name_;
  std::size_t pos_ = 0;
  int line_ = 0;
};

// "key N" with N a decimal in [lo, hi].
std::int64_t keyed_number(Lines& in, const std::string& key, std::int64_t lo, std::int64_t hi) {
  std::string_view line = in.next(key.c_str());
  if (line.substr(0, key.size() + 1) != key + " ") in.fail("expected '" + key + " N', got '" + std::string(line) + "'");
  std::string digits(line.substr(key.size() + 1));
  std::int64_t v = 0;
  std::size_t used = 0;
  try {
    v = std::stoll(digits, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != digits.size() || digits[0] == '+' || digits[0] == ' ')
    in.fail("'" + key + "' must be followed by a decimal number, got '" + digits + "'");
  if (v < lo || v > hi)
    in.fail("'" + key + "' is " + std::to_string(v) + ", outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

}  // namespace

std::string Tokenizer::to_text() const {
  std::ostringstream os;
  os << kMagicLine << "\n"
     << "pretokenizer " << kPretokenizerName << "\n"
     << "vocab_size " << vocab_size() << "\n"
     << "end_of_document " << kEndOfDocument << "\n"
     << "merges " << merges_.size() << "\n";
  for (const Merge& m : merges_) os << m.left << ' ' << m.right << '\n';
  std::string body = os.str();
  return body + "xxh64 " + hex64(XXH64(body.data(), body.size(), 0)) + "\n";
}

Tokenizer Tokenizer::from_text(std::string_view text, const std::string& name) {
  Lines in(text, name);
  if (in.next("the header") != kMagicLine)
    in.fail("not a codistill tokenizer file (expected the first line '" + std::string(kMagicLine) + "')");
  std::string_view pre = in.next("pretokenizer");
  if (pre != "pretokenizer " + std::string(kPretokenizerName))
    in.fail("expected 'pretokenizer " + std::string(kPretokenizerName) + "' (the only one this version knows), got '" +
            std::string(pre) + "'");
  const std::int64_t vocab = keyed_number(in, "vocab_size", kFirstMergeToken, INT32_MAX);
  keyed_number(in, "end_of_document", kEndOfDocument, kEndOfDocument);
  const std::int64_t count = keyed_number(in, "merges", 0, INT32_MAX - kFirstMergeToken);
  if (vocab != kFirstMergeToken + count)
    in.fail("merges " + std::to_string(count) + " does not match vocab_size " + std::to_string(vocab) +
            " (vocab_size = 257 + merges)");
  std::vector<Merge> merges;
  merges.reserve(static_cast<std::size_t>(std::min<std::int64_t>(count, 1 << 20)));
  for (std::int64_t i = 0; i < count; ++i) {
    std::string line(in.next("a merge 'left right'"));
    long long l = -1, r = -1;
    int used = 0;
    if (std::sscanf(line.c_str(), "%lld %lld%n", &l, &r, &used) != 2 || used != static_cast<int>(line.size()) ||
        line.empty() || line[0] == ' ')
      in.fail("expected a merge 'left right' (two token ids), got '" + line + "'");
    const long long limit = kFirstMergeToken + i;
    if (l < 0 || r < 0 || l >= limit || r >= limit || l == kEndOfDocument || r == kEndOfDocument)
      in.fail("merge " + std::to_string(i) + " (" + std::to_string(l) + ", " + std::to_string(r) +
              ") must join bytes (0..255) or earlier merges' tokens (257.." + std::to_string(limit - 1) + ")");
    merges.push_back({static_cast<std::int32_t>(l), static_cast<std::int32_t>(r)});
  }
  const std::size_t body_end = in.pos();
  std::string_view sum = in.next("the checksum line 'xxh64 HEX'");
  const std::string want = hex64(XXH64(text.data(), body_end, 0));
  if (sum.substr(0, 6) != "xxh64 " || sum.size() != 22)
    in.fail("expected the checksum line 'xxh64 <16 hex digits>', got '" + std::string(sum) + "'");
  if (sum.substr(6) != want)
    in.fail("checksum mismatch: the file says " + std::string(sum.substr(6)) + ", its content hashes to " + want +
            " (the file was changed or damaged)");
  if (in.pos() != text.size()) in.fail("unexpected content after the checksum line");
  try {
    return Tokenizer(std::move(merges));
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(name + ": " + e.what());
  }
}

void Tokenizer::save(const std::string& path) const {
  const std::string text = to_text();
  write_file_atomically(path, [&](const ByteSink& sink) { sink(text.data(), text.size()); });
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open the tokenizer file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw std::runtime_error(path + ": read error");
  return from_text(ss.str(), path);
}

}  // namespace codistill::data::text
