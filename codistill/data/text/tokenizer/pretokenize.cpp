#include "codistill/data/text/tokenizer/pretokenize.hpp"

#include <algorithm>
#include <array>
#include <cstdint>

namespace codistill::data::text {

namespace {

enum Class : std::uint8_t { kLetter, kDigit, kSpace, kOtherSpace, kPunct };

constexpr std::array<std::uint8_t, 256> make_classes() {
  std::array<std::uint8_t, 256> c{};
  for (int b = 0; b < 256; ++b) {
    if ((b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z') || b >= 0x80)
      c[b] = kLetter;
    else if (b >= '0' && b <= '9')
      c[b] = kDigit;
    else if (b == ' ')
      c[b] = kSpace;
    else if (b == '\t' || b == '\n' || b == '\v' || b == '\f' || b == '\r')
      c[b] = kOtherSpace;
    else
      c[b] = kPunct;
  }
  return c;
}

constexpr std::array<std::uint8_t, 256> kClass = make_classes();

Class class_at(std::string_view s, std::size_t i) { return static_cast<Class>(kClass[static_cast<unsigned char>(s[i])]); }
bool is_space(Class c) { return c == kSpace || c == kOtherSpace; }

}  // namespace

std::size_t chunk_end(std::string_view text, std::size_t begin) {
  const std::size_t n = text.size();
  std::size_t i = begin;
  Class c = class_at(text, i);
  if (c == kSpace && i + 1 < n && !is_space(class_at(text, i + 1))) {
    ++i;  // the leading space of " word"
    c = class_at(text, i);
  }
  std::size_t end;
  if (!is_space(c)) {
    end = i + 1;
    while (end < n && class_at(text, end) == c) ++end;
  } else {
    end = i + 1;
    while (end < n && is_space(class_at(text, end))) ++end;
    // Leave a final space to the word that follows, as " word" (not when the run is that
    // one space: then it was taken above already, so here the run is longer than one).
    if (end < n && end - begin > 1 && text[end - 1] == ' ') --end;
  }
  return std::min(end, begin + kMaxChunkBytes);
}

}  // namespace codistill::data::text
