#include "codistill/data/text/tokenizer/regex_split.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdexcept>

namespace codistill::data::text {

struct RegexSplitter::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

RegexSplitter::RegexSplitter(const std::string& pattern) : pattern_(pattern) {
  int error = 0;
  PCRE2_SIZE at = 0;
  // UCP: \p{L}, \p{N} and friends by Unicode properties, as `tokenizers` (Oniguruma) does.
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &at, nullptr);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw std::invalid_argument("regular expression '" + pattern + "' does not compile at offset " +
                                std::to_string(at) + ": " + reinterpret_cast<const char*>(message));
  }
  // JIT makes the GPT-2 pattern several times faster; where it is unavailable the
  // interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  auto c = std::make_shared<Code>();
  c->code = code;
  code_ = std::move(c);
}

void RegexSplitter::split(std::string_view text, const std::function<void(std::string_view)>& f) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code_->code, nullptr), &pcre2_match_data_free);
  if (!md) throw std::bad_alloc();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t pos = 0, from = 0;
  while (from < text.size()) {
    const int rc = pcre2_match(code_->code, subject, text.size(), from, 0, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof message);
      throw std::runtime_error("regular expression '" + pattern_ + "': " + reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const std::size_t begin = ov[0], end = ov[1];
    if (end == begin) {  // an empty match splits nothing; move past one byte and look again
      from = begin + 1;
      continue;
    }
    if (begin > pos) f(text.substr(pos, begin - pos));
    f(text.substr(begin, end - begin));
    pos = from = end;
  }
  if (pos < text.size()) f(text.substr(pos));
}

}  // namespace codistill::data::text
