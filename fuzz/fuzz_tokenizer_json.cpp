// libFuzzer target: the Hugging Face tokenizer.json reader (codistill/data/text/
// tokenizer_json.cpp) on arbitrary bytes, and the model it accepts on the same bytes as
// text. A file must load or end in a std::runtime_error naming the problem, never a crash,
// a hang or a huge allocation; a model that loads must give ids inside its vocabulary and,
// without added tokens (whose content may differ from their vocabulary token's bytes, and
// the end of document decodes to nothing), decode back to the text.
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string_view>

#include "codistill/data/text/tokenizer/tokenizer_json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto model = codistill::data::text::parse_tokenizer_json(text, "fuzz.json");
    const auto ids = model.encode(text.substr(0, 4096));
    for (std::int32_t id : ids)
      if (id < 0 || id >= model.vocab_size()) std::abort();
    if (model.spec().added.empty() && model.decode(ids) != text.substr(0, 4096)) std::abort();
  } catch (const std::runtime_error&) {
  }
  return 0;
}
