#include "codistill/data/text/corpus.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace codistill::data::text {

namespace fs = std::filesystem;

std::vector<CorpusDocument> list_corpus(const std::vector<std::string>& inputs, const std::string& suffix) {
  if (inputs.empty()) throw std::invalid_argument("corpus: no input folder or file given");
  std::vector<CorpusDocument> docs;
  auto ends_with = [&](const std::string& s) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (const std::string& input : inputs) {
    std::error_code ec;
    const fs::file_status st = fs::status(input, ec);
    if (ec || !fs::exists(st)) throw std::invalid_argument("corpus: " + input + " does not exist");
    if (fs::is_regular_file(st)) {
      docs.push_back({fs::path(input).filename().string(), input, fs::file_size(input)});
      continue;
    }
    if (!fs::is_directory(st)) throw std::invalid_argument("corpus: " + input + " is neither a file nor a folder");
    for (const auto& e : fs::recursive_directory_iterator(input, fs::directory_options::follow_directory_symlink)) {
      if (!e.is_regular_file() || !ends_with(e.path().filename().string())) continue;
      docs.push_back({fs::relative(e.path(), input).string(), e.path().string(), e.file_size()});
    }
  }
  std::sort(docs.begin(), docs.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (std::size_t i = 1; i < docs.size(); ++i)
    if (docs[i].name == docs[i - 1].name)
      throw std::invalid_argument("corpus: two documents are named " + docs[i].name + " (" + docs[i - 1].path + " and " +
                                  docs[i].path + "): give inputs whose files have distinct relative names");
  if (docs.empty()) {
    std::string list;
    for (const auto& i : inputs) list += (list.empty() ? "" : ", ") + i;
    throw std::invalid_argument("corpus: no files ending in '" + suffix + "' under " + list);
  }
  return docs;
}

std::string read_document(const CorpusDocument& doc) {
  std::ifstream in(doc.path, std::ios::binary);
  if (!in) throw std::runtime_error(doc.path + ": cannot open the document");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw std::runtime_error(doc.path + ": read error");
  return ss.str();
}

SplitAssignment split_heldout(const std::vector<CorpusDocument>& docs, double fraction, std::uint64_t seed) {
  if (!(fraction >= 0.0 && fraction < 1.0))
    throw std::invalid_argument("held-out fraction must be in [0, 1), got " + std::to_string(fraction));
  const std::size_t n = docs.size();
  std::size_t k = 0;
  if (fraction > 0.0) k = std::max<std::size_t>(1, static_cast<std::size_t>(std::llround(fraction * static_cast<double>(n))));
  if (k >= n)
    throw std::invalid_argument("held-out fraction " + std::to_string(fraction) + " of " + std::to_string(n) +
                                " documents leaves no training document");
  std::vector<std::pair<std::uint64_t, std::size_t>> keyed(n);
  for (std::size_t i = 0; i < n; ++i) keyed[i] = {XXH64(docs[i].name.data(), docs[i].name.size(), seed), i};
  std::sort(keyed.begin(), keyed.end());  // names are distinct: ties of the hash go by index
  SplitAssignment s;
  for (std::size_t j = 0; j < n; ++j) (j < k ? s.valid : s.train).push_back(keyed[j].second);
  std::sort(s.train.begin(), s.train.end());
  std::sort(s.valid.begin(), s.valid.end());
  return s;
}

}  // namespace codistill::data::text
