#pragma once
// GPT-2's byte-level alphabet, which Hugging Face `tokenizer.json` files of the GPT-2
// family write their vocabularies and merges in: each of the 256 bytes stands for one
// printable Unicode character (printable ASCII and most of Latin-1 for themselves, the
// other 68 bytes for U+0100..U+0143 in byte order), so that every token, whatever its
// bytes, is a readable string without spaces or control characters.
#include <optional>
#include <string>
#include <string_view>

namespace codistill::data::text {

// The UTF-8 encoding of the character that stands for byte b.
const std::string& byte_level_char(unsigned char b);

// The bytes a byte-level string stands for, or nothing when it holds a character outside
// the alphabet (or is not UTF-8).
std::optional<std::string> byte_level_decode(std::string_view chars);

// The byte-level string of some bytes.
std::string byte_level_encode(std::string_view bytes);

}  // namespace codistill::data::text
