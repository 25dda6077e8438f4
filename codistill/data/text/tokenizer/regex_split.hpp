#pragma once
// Splitting text with a regular expression the way Hugging Face `tokenizers` pre-tokenizers
// do ("Isolated"): every match is a piece, and so is every stretch between two matches.
// PCRE2 (UTF and Unicode properties) is the engine; `pcre2.h` stays in the .cpp.
//
// Text that is not valid UTF-8 is matched around its invalid bytes (PCRE2's
// MATCH_INVALID_UTF): those bytes never match, so they end up in the stretches between
// matches. `tokenizers` cannot take such text at all (Python strings are Unicode).
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace codistill::data::text {

class RegexSplitter {
 public:
  // Throws std::invalid_argument naming the pattern and PCRE2's message.
  explicit RegexSplitter(const std::string& pattern);

  // Calls f(piece) for each piece of text, in order; the pieces concatenate to the text.
  // Thread-safe (each call has its own match state).
  void split(std::string_view text, const std::function<void(std::string_view)>& f) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::string pattern_;
  std::shared_ptr<const Code> code_;
};

}  // namespace codistill::data::text
