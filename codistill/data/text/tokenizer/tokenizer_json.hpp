#pragma once
// Hugging Face `tokenizer.json` files of the byte-level BPE family (GPT-2's format), read
// into a BpeModel and written from one (docs/text-data.md, "Tokenizers people share").
//
// Only what codistill reproduces id for id is read: a BPE model over the byte-level
// alphabet (no dropout, byte fallback, subword prefix or word suffix), no normalizer, a
// ByteLevel pre-tokenizer (GPT-2's regex, none, or the project's chunks-v1 as a Split),
// added tokens without lstrip/rstrip/single_word, no template post-processor, padding or
// truncation. Anything else is refused with an error naming the file and the field, rather
// than tokenized differently from `tokenizers`.
#include <string>
#include <string_view>

#include "codistill/data/text/tokenizer/bpe_model.hpp"

namespace codistill::data::text {

inline constexpr const char* kTokenizerJsonFile = "tokenizer.json";

// chunks-v1 (pretokenize.hpp) as a regular expression over the byte-level alphabet, applied
// after ByteLevel (so each character is one byte and chunks may be cut inside a UTF-8
// character, as the project's are every 128 bytes). W: \t \n \v \f \r and the space (Ġ);
// L: A-Z a-z and every byte >= 0x80; D: 0-9; the rest is punctuation.
inline constexpr std::string_view kChunksV1Pattern =
    "Ġ[A-Za-z¡-¬®-ÿĢ-Ń]{1,127}|[A-Za-z¡-¬®-ÿĢ-Ń]{1,128}|Ġ[0-9]{1,127}|[0-9]{1,128}"
    "|Ġ[^ĉ-čĠA-Za-z¡-¬®-ÿĢ-Ń0-9]{1,127}|[^ĉ-čĠA-Za-z¡-¬®-ÿĢ-Ń0-9]{1,128}"
    "|[ĉ-čĠ]{1,127}(?=Ġ[^ĉ-čĠ])|[ĉ-čĠ]{1,128}";

// GPT-2's pattern as `tokenizers` writes it in a Split pre-tokenizer.
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Throws std::runtime_error "<name>: <what>" for anything this cannot reproduce exactly.
// The end of document is the added token <|endoftext|>, else the only special token, else
// none (-1).
BpeModel parse_tokenizer_json(std::string_view text, const std::string& name);
BpeModel load_tokenizer_json(const std::string& path);

// The model as a tokenizer.json (compact JSON) that `tokenizers` loads and encodes to the
// same ids. Throws
// std::invalid_argument for a model a file cannot describe (two tokens of the same bytes).
std::string tokenizer_json_text(const BpeModel& model);
void save_tokenizer_json(const BpeModel& model, const std::string& path);  // atomically

}  // namespace codistill::data::text
