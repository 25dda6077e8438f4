#include "codistill/data/text/tokenizer/byte_level.hpp"

#include <array>
#include <cstdint>

namespace codistill::data::text {

namespace {

bool stands_for_itself(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

std::string utf8(std::uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {  // the alphabet ends at U+0143: two bytes are enough
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

struct Alphabet {
  std::array<std::string, 256> chars;
  std::array<std::int16_t, 0x144> byte_of;  // code point -> byte, -1 outside the alphabet
  Alphabet() {
    byte_of.fill(-1);
    std::uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const std::uint32_t cp = stands_for_itself(b) ? static_cast<std::uint32_t>(b) : next++;
      chars[static_cast<std::size_t>(b)] = utf8(cp);
      byte_of[cp] = static_cast<std::int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

const std::string& byte_level_char(unsigned char b) { return alphabet().chars[b]; }

std::string byte_level_encode(std::string_view bytes) {
  std::string s;
  s.reserve(bytes.size() * 2);
  for (char c : bytes) s += byte_level_char(static_cast<unsigned char>(c));
  return s;
}

std::optional<std::string> byte_level_decode(std::string_view chars) {
  const Alphabet& a = alphabet();
  std::string out;
  for (std::size_t i = 0; i < chars.size();) {
    const auto c0 = static_cast<unsigned char>(chars[i]);
    std::uint32_t cp;
    if (c0 < 0x80) {
      cp = c0;
      i += 1;
    } else if ((c0 & 0xE0) == 0xC0 && i + 1 < chars.size() && (static_cast<unsigned char>(chars[i + 1]) & 0xC0) == 0x80) {
      cp = ((c0 & 0x1Fu) << 6) | (static_cast<unsigned char>(chars[i + 1]) & 0x3Fu);
      if (cp < 0x80) return std::nullopt;  // overlong
      i += 2;
    } else {
      return std::nullopt;  // three- and four-byte characters are all outside the alphabet
    }
    if (cp >= a.byte_of.size() || a.byte_of[cp] < 0) return std::nullopt;
    out += static_cast<char>(a.byte_of[cp]);
  }
  return out;
}

}  // namespace codistill::data::text
