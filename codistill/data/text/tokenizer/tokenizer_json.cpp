#include "codistill/data/text/tokenizer/tokenizer_json.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "codistill/data/text/atomic_write.hpp"

namespace codistill::data::text {

namespace {

using nlohmann::json;

// Reading one file: every error names it and the field.
struct Reader {
  std::string name;
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(name + ": " + what + " (codistill reads byte-level BPE tokenizers of the GPT-2 "
                                                  "family only, and refuses what it could not tokenize exactly as "
                                                  "`tokenizers` does)");
  }
  // A field that must be absent, null, or one of the given harmless values.
  void require_unset(const json& j, const std::string& key, const std::string& field, const json& ok = nullptr) const {
    if (!j.contains(key) || j[key].is_null() || j[key] == ok) return;
    fail(field + " is " + j[key].dump() + ": not supported");
  }
  bool flag(const json& j, const std::string& key, bool fallback, const std::string& field) const {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_boolean()) fail(field + " must be true or false, not " + j[key].dump());
    return j[key].get<bool>();
  }
  std::string type_of(const json& j, const std::string& field) const {
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) fail(field + " has no \"type\"");
    return j["type"].get<std::string>();
  }
};

// A ByteLevel pre-tokenizer: whether it splits with GPT-2's regex, and adds a prefix space.
std::pair<bool, bool> byte_level(const Reader& r, const json& j, const std::string& field) {
  return {r.flag(j, "use_regex", true, field + ".use_regex"), r.flag(j, "add_prefix_space", true, field + ".add_prefix_space")};
}

std::string split_regex(const Reader& r, const json& j, const std::string& field) {
  if (j.value("behavior", "") != "Isolated" || r.flag(j, "invert", false, field + ".invert"))
    r.fail(field + ": only a Split with \"behavior\": \"Isolated\" and \"invert\": false is supported");
  if (!j.contains("pattern") || !j["pattern"].is_object() || !j["pattern"].contains("Regex") ||
      !j["pattern"]["Regex"].is_string())
    r.fail(field + ".pattern must be {\"Regex\": ...}");
  return j["pattern"]["Regex"].get<std::string>();
}

void read_pre_tokenizer(const Reader& r, const json& pre, BpeModelSpec& spec) {
  const std::string field = "pre_tokenizer";
  if (pre.is_null()) r.fail("pre_tokenizer is null: not a byte-level tokenizer");
  const std::string type = r.type_of(pre, field);
  if (type == "ByteLevel") {
    auto [regex, prefix] = byte_level(r, pre, field);
    spec.pre_tokenizer = regex ? PreTokenizer::kGpt2 : PreTokenizer::kNone;
    spec.add_prefix_space = prefix;
    return;
  }
  const json& list = pre.value("pretokenizers", json::array());
  if (type != "Sequence" || list.size() != 2)
    r.fail("pre_tokenizer " + pre.dump().substr(0, 200) +
           ": supported are ByteLevel, and Sequence [Split (GPT-2's regex), ByteLevel without regex] or "
           "[ByteLevel without regex, Split (chunks-v1)]");
  const std::string t0 = r.type_of(list[0], field + "[0]"), t1 = r.type_of(list[1], field + "[1]");
  const bool split_first = t0 == "Split" && t1 == "ByteLevel", split_last = t0 == "ByteLevel" && t1 == "Split";
  if (!split_first && !split_last) r.fail("pre_tokenizer: a Sequence of " + t0 + " and " + t1 + " is not supported");
  const json& bl = split_first ? list[1] : list[0];
  auto [regex, prefix] = byte_level(r, bl, field + ".ByteLevel");
  if (regex || prefix) r.fail("pre_tokenizer: the ByteLevel beside a Split must have use_regex and add_prefix_space false");
  const std::string pattern = split_regex(r, split_first ? list[0] : list[1], field + ".Split");
  if (split_first && pattern == kGpt2SplitPattern)
    spec.pre_tokenizer = PreTokenizer::kGpt2;
  else if (split_last && pattern == kChunksV1Pattern)
    spec.pre_tokenizer = PreTokenizer::kChunksV1;
  else
    r.fail("pre_tokenizer: the Split pattern '" + pattern + "' is not one codistill reproduces (GPT-2's before ByteLevel, "
           "chunks-v1 after it)");
}

void read_model(const Reader& r, const json& m, BpeModelSpec& spec, std::unordered_map<std::string, std::int32_t>& ids) {
  if (!m.is_object()) r.fail("no \"model\" object");
  if (m.contains("type") && m["type"] != "BPE") r.fail("model.type is " + m["type"].dump() + ": only BPE models are supported");
  if (m.contains("dropout") && m["dropout"].is_number() && m["dropout"].get<double>() > 0)
    r.fail("model.dropout is " + m["dropout"].dump() + ": BPE dropout is random, its ids cannot be reproduced");
  r.require_unset(m, "continuing_subword_prefix", "model.continuing_subword_prefix", "");
  r.require_unset(m, "end_of_word_suffix", "model.end_of_word_suffix", "");
  if (r.flag(m, "byte_fallback", false, "model.byte_fallback")) r.fail("model.byte_fallback is true: not supported");
  spec.ignore_merges = r.flag(m, "ignore_merges", false, "model.ignore_merges");
  if (!m.contains("vocab") || !m["vocab"].is_object()) r.fail("model.vocab must be an object (token -> id)");
  for (const auto& [token, id] : m["vocab"].items()) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= INT32_MAX)
      r.fail("model.vocab[\"" + token + "\"] is " + id.dump() + ", not an id");
    spec.vocab.emplace_back(token, id.get<std::int32_t>());
    ids[token] = id.get<std::int32_t>();
  }
  if (!m.contains("merges") || !m["merges"].is_array()) r.fail("model.merges must be an array");
  const json& merges = m["merges"];
  for (std::size_t i = 0; i < merges.size(); ++i) {
    std::string a, b;
    const json& e = merges[i];
    const std::string s = e.is_string() ? e.get<std::string>() : std::string();
    if (e.is_string() && std::count(s.begin(), s.end(), ' ') == 1) {
      a = s.substr(0, s.find(' '));
      b = s.substr(s.find(' ') + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      r.fail("model.merges[" + std::to_string(i) + "] is " + e.dump() + ", not \"left right\" or [left, right]");
    }
    for (const std::string& part : {a, b, a + b})
      if (!ids.count(part))
        r.fail("model.merges[" + std::to_string(i) + "] (" + a + " " + b + "): '" + part + "' is not in model.vocab");
    spec.merges.push_back({ids[a], ids[b], ids[a + b]});
  }
}

// Added tokens, checked against the ids `tokenizers` gives them when it loads the file:
// the vocabulary's id when the content is a token, else the next free one after the model's.
void read_added(const Reader& r, const json& list, BpeModelSpec& spec, const std::unordered_map<std::string, std::int32_t>& ids) {
  if (list.is_null()) return;
  if (!list.is_array()) r.fail("added_tokens must be an array");
  std::unordered_map<std::string, std::int32_t> given;
  std::int64_t largest = -1;
  const auto model_size = static_cast<std::int64_t>(ids.size());
  for (std::size_t i = 0; i < list.size(); ++i) {
    const json& t = list[i];
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("content") || !t["content"].is_string() || !t.contains("id") ||
        !t["id"].is_number_integer() || t["id"].get<std::int64_t>() < 0 || t["id"].get<std::int64_t>() >= INT32_MAX)
      r.fail(field + " needs \"id\" (an id) and \"content\"");
    for (const char* key : {"single_word", "lstrip", "rstrip"})
      if (r.flag(t, key, false, field + "." + key)) r.fail(field + "." + key + " is true: not supported");
    AddedToken a{t["content"].get<std::string>(), t["id"].get<std::int32_t>(), false, false};
    a.special = r.flag(t, "special", false, field + ".special");
    a.normalized = r.flag(t, "normalized", !a.special, field + ".normalized");
    std::int64_t expect;
    if (auto it = ids.find(a.content); it != ids.end())
      expect = it->second;
    else if (auto g = given.find(a.content); g != given.end())
      expect = g->second;
    else
      expect = largest < 0 ? model_size : (largest >= model_size ? largest + 1 : model_size);
    if (a.id != expect)
      r.fail(field + " ('" + a.content + "') has id " + std::to_string(a.id) + ", but `tokenizers` would give it " +
             std::to_string(expect));
    given[a.content] = a.id;
    largest = std::max<std::int64_t>(largest, a.id);
    spec.added.push_back(a);
  }
}

}  // namespace

BpeModel parse_tokenizer_json(std::string_view text, const std::string& name) {
  const Reader r{name};
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    r.fail(std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) r.fail("not a JSON object");
  r.require_unset(j, "normalizer", "normalizer");
  r.require_unset(j, "truncation", "truncation");
  r.require_unset(j, "padding", "padding");
  if (j.contains("post_processor") && !j["post_processor"].is_null() && r.type_of(j["post_processor"], "post_processor") != "ByteLevel")
    r.fail("post_processor " + j["post_processor"].value("type", "?") + " adds or changes ids: only ByteLevel or null");
  BpeModelSpec spec;
  read_pre_tokenizer(r, j.value("pre_tokenizer", json()), spec);
  std::unordered_map<std::string, std::int32_t> ids;
  read_model(r, j.value("model", json()), spec, ids);
  read_added(r, j.value("added_tokens", json()), spec, ids);
  int specials = 0;
  for (const AddedToken& a : spec.added) {
    if (a.content == "<|endoftext|>") spec.end_of_document = a.id;
    specials += a.special;
  }
  if (spec.end_of_document < 0 && specials == 1)
    for (const AddedToken& a : spec.added)
      if (a.special) spec.end_of_document = a.id;
  try {
    return BpeModel(std::move(spec));
  } catch (const std::invalid_argument& e) {
    r.fail(e.what());
  }
}

BpeModel load_tokenizer_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open the tokenizer file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw std::runtime_error(path + ": read error");
  return parse_tokenizer_json(ss.str(), path);
}

}  // namespace codistill::data::text
