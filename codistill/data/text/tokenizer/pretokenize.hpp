#pragma once
// Pre-splitting text into chunks before BPE (the idea of GPT-2's pattern, on bytes and
// without a regex engine). Merges never cross a chunk boundary, so a token is never a
// piece of a word glued to a piece of the next, and the trainer and encoder can count and
// cache whole chunks (natural text repeats the same few hundred thousand chunks).
//
// Byte classes: letter (A-Z, a-z, and every byte >= 0x80, so that UTF-8 words stay
// whole), digit (0-9), space (' '), other whitespace (\t \n \v \f \r), punctuation
// (every other byte). A chunk is, at each position:
//   - one space followed by a run of letters, of digits or of punctuation (" word",
//     " 42", " ::"), or such a run without the space;
//   - otherwise a run of whitespace, less its last byte when that is a space followed by
//     a letter, digit or punctuation byte (that space starts the next chunk: "\n    def"
//     is "\n   " and " def").
// A chunk longer than kMaxChunkBytes is cut every kMaxChunkBytes bytes, which bounds the
// encoder's work per chunk on any input (e.g. megabytes of one letter).
// Every byte belongs to exactly one chunk, in order: the chunks concatenate to the text.
// The rules are part of the tokenizer: changing them changes `kPretokenizerName`.
#include <cstddef>
#include <string_view>

namespace codistill::data::text {

inline constexpr std::size_t kMaxChunkBytes = 128;
inline constexpr std::string_view kPretokenizerName = "chunks-v1";

// End (exclusive) of the chunk starting at `begin` (< text.size()).
std::size_t chunk_end(std::string_view text, std::size_t begin);

// Calls f(chunk) for each chunk of text, in order.
template <class F>
void for_each_chunk(std::string_view text, F&& f) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t end = chunk_end(text, i);
    f(text.substr(i, end - i));
    i = end;
  }
}

}  // namespace codistill::data::text
