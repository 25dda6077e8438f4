// Writing a BpeModel as a Hugging Face tokenizer.json (tokenizer_json.hpp). The layout is
// the one `tokenizers` itself saves, so that any version since 0.13 loads it.
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "codistill/data/text/atomic_write.hpp"
#include "codistill/data/text/tokenizer/byte_level.hpp"
#include "codistill/data/text/tokenizer/tokenizer_json.hpp"

namespace codistill::data::text {

namespace {

using ojson = nlohmann::ordered_json;

ojson byte_level_json(bool prefix, bool regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", prefix}, {"trim_offsets", true}, {"use_regex", regex}};
}

ojson split_json(std::string_view pattern) {
  return {{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}};
}

ojson pre_tokenizer_json(const BpeModelSpec& s) {
  switch (s.pre_tokenizer) {
    case PreTokenizer::kGpt2:
      return byte_level_json(s.add_prefix_space, true);
    case PreTokenizer::kNone:
      return byte_level_json(s.add_prefix_space, false);
    case PreTokenizer::kChunksV1:
      break;
  }
  // ByteLevel first: the chunks are cut in bytes, which the Split then sees one per character.
  return {{"type", "Sequence"}, {"pretokenizers", ojson::array({byte_level_json(false, false), split_json(kChunksV1Pattern)})}};
}

}  // namespace

std::string tokenizer_json_text(const BpeModel& model) {
  const BpeModelSpec& s = model.spec();
  std::vector<const std::string*> token(static_cast<std::size_t>(model.vocab_size()), nullptr);
  for (const auto& [str, id] : s.vocab) token[static_cast<std::size_t>(id)] = &str;
  ojson added = ojson::array();
  for (const AddedToken& a : s.added)
    added.push_back({{"id", a.id}, {"content", a.content}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", a.normalized}, {"special", a.special}});
  ojson vocab = ojson::object();
  for (std::size_t id = 0; id < token.size(); ++id)
    if (token[id]) vocab[*token[id]] = id;
  if (vocab.size() != s.vocab.size())
    throw std::invalid_argument("tokenizer.json: two ids have the same token string, which the file cannot hold");
  ojson merges = ojson::array();
  for (const auto& m : s.merges) merges.push_back(*token[static_cast<std::size_t>(m.left)] + " " + *token[static_cast<std::size_t>(m.right)]);
  ojson model_json = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                      {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}};
  if (s.ignore_merges) model_json["ignore_merges"] = true;  // older `tokenizers` do not know the key
  model_json["vocab"] = std::move(vocab);
  model_json["merges"] = std::move(merges);
  ojson j = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", std::move(added)},
             {"normalizer", nullptr}, {"pre_tokenizer", pre_tokenizer_json(s)}, {"post_processor", nullptr},
             {"decoder", byte_level_json(false, false)}, {"model", std::move(model_json)}};
  return j.dump(-1) + "\n";  // compact, as the file is for programs
}

void save_tokenizer_json(const BpeModel& model, const std::string& path) {
  const std::string text = tokenizer_json_text(model);
  write_file_atomically(path, [&](const ByteSink& sink) { sink(text.data(), text.size()); });
}

}  // namespace codistill::data::text
