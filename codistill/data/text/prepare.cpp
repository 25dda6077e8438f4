#include "codistill/data/text/prepare.hpp"

#include <chrono>
#include <fstream>
#include <iterator>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "codistill/data/text/atomic_write.hpp"
#include "codistill/data/text/corpus.hpp"
#include "codistill/data/text/tokenizer/bpe_trainer.hpp"
#include "codistill/data/text/tokenizer/tokenizer.hpp"
#include "codistill/data/text/tokenizer/tokenizer_json.hpp"
#include "codistill/data/text/tokens/token_file.hpp"
#include "codistill/data/text/tokens/token_shard.hpp"

namespace codistill::data::text {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

nlohmann::json split_json(const SplitSummary& s) {
  return {{"documents", s.documents}, {"bytes", s.bytes}, {"tokens", s.tokens}, {"file_bytes", s.file_bytes}};
}

void check_options(const PrepareOptions& o) {
  if (o.out.empty()) throw PrepareUsageError("--out: an output folder is required");
  if (o.vocab_size < kFirstMergeToken)
    throw PrepareUsageError("--vocab-size must be at least 257 (256 bytes + end-of-document), got " +
                            std::to_string(o.vocab_size));
  if (!(o.heldout_fraction >= 0.0 && o.heldout_fraction < 1.0))
    throw PrepareUsageError("--heldout-fraction must be in [0, 1), got " + std::to_string(o.heldout_fraction));
  if (o.force) return;
  std::string found;
  for (const char* name : {kTokenizerFile, kTokenizerJsonFile, kTrainFile, kValidFile, kManifestFile})
    if (fs::exists(fs::path(o.out) / name)) found += (found.empty() ? "" : ", ") + std::string(name);
  if (!found.empty())
    throw PrepareUsageError(o.out + " already holds a prepared corpus (" + found +
                            "): choose another --out or pass --force to replace it");
}

}  // namespace

std::string PrepareSummary::json() const {
  nlohmann::json j = {{"documents", documents}, {"empty_skipped", empty_skipped},
                      {"vocab_size", vocab_size}, {"vocab_stopped_early", vocab_stopped_early},
                      {"tokenizer_file_bytes", tokenizer_file_bytes}, {"train", split_json(train)},
                      {"tokenizer_json_skipped", tokenizer_json_skipped},
                      {"valid", split_json(valid)},
                      {"seconds", {{"read", read_s}, {"bpe", bpe_s}, {"encode", encode_s}, {"write", write_s}, {"total", total_s}}}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

// The corpus's documents that hold text; the empty ones are counted in sum and left out.
std::vector<CorpusDocument> usable_documents(const PrepareOptions& o, PrepareSummary& sum) {
  std::vector<CorpusDocument> listed;
  try {
    listed = list_corpus(o.corpus, o.suffix);
  } catch (const std::invalid_argument& e) {
    throw PrepareUsageError(e.what());
  }
  std::vector<CorpusDocument> docs;
  for (auto& d : listed) {
    if (d.bytes == 0) {
      ++sum.empty_skipped;  // nothing to learn from, and a window could not tell it apart
    } else {
      docs.push_back(d);
      ++sum.documents;
    }
  }
  return docs;
}

// A split as llm.c's scripts write a shard: each document led by the end-of-document token.
std::vector<std::int32_t> eod_led_stream(const TokenDocuments& docs, std::uint32_t eod) {
  std::vector<std::int32_t> out;
  out.reserve(docs.tokens.size() + docs.documents());
  for (std::uint64_t d = 0; d < docs.documents(); ++d) {
    out.push_back(static_cast<std::int32_t>(eod));
    out.insert(out.end(), docs.tokens.begin() + static_cast<std::ptrdiff_t>(docs.offsets[d]),
               docs.tokens.begin() + static_cast<std::ptrdiff_t>(docs.offsets[d + 1]));
  }
  return out;
}

// The folder's manifest: the summary, the options and which document went to which split.
void write_manifest(const PrepareOptions& o, const PrepareSummary& sum, const std::vector<CorpusDocument>& docs,
                    const SplitAssignment& split, const fs::path& dir) {
  nlohmann::json manifest = nlohmann::json::parse(sum.json());
  nlohmann::json inputs = nlohmann::json::array();
  for (const auto& c : o.corpus) inputs.push_back(fs::absolute(c).string());
  manifest["options"] = {{"corpus", inputs}, {"suffix", o.suffix}, {"vocab_size", o.vocab_size}, {"llmc", o.llmc},
                         {"heldout_fraction", o.heldout_fraction}, {"seed", o.seed}};
  if (!o.tokenizer.empty()) manifest["options"]["tokenizer"] = fs::absolute(o.tokenizer).string();
  for (auto [key, which] : {std::pair{"train_documents", &split.train}, std::pair{"valid_documents", &split.valid}}) {
    nlohmann::json names = nlohmann::json::array();
    for (std::size_t i : *which) names.push_back(docs[i].name);
    manifest[key] = names;
  }
  // File names need not be UTF-8: such bytes are written as U+FFFD rather than failing.
  const std::string body = manifest.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  write_file_atomically((dir / kManifestFile).string(), [&](const ByteSink& sink) { sink(body.data(), body.size()); });
}

// The trained tokenizer as a BpeModel for tokenizer.json, unless a file cannot hold it (two
// tokens of the same bytes, which the project's training may make and a file cannot name).
std::optional<BpeModel> shared_model(const Tokenizer& tok, PrepareSummary& sum) {
  try {
    return BpeModel::from_tokenizer(tok);
  } catch (const std::invalid_argument& e) {
    sum.tokenizer_json_skipped = e.what();
    return std::nullopt;
  }
}

// --tokenizer: a file this cannot reproduce, or without an end-of-document token, is a usage error.
BpeModel given_model(const std::string& path) {
  std::optional<BpeModel> m;
  try {
    m.emplace(load_tokenizer_json(path));
  } catch (const std::runtime_error& e) {
    throw PrepareUsageError(std::string("--tokenizer: ") + e.what());
  }
  if (m->end_of_document() < 0)
    throw PrepareUsageError("--tokenizer: " + path + " has no <|endoftext|> and not exactly one special token: "
                            "no token to put between documents");
  return std::move(*m);
}

void copy_file_atomically(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in && !in.eof()) throw std::runtime_error(from + ": read error");
  write_file_atomically(to, [&](const ByteSink& sink) { sink(bytes.data(), bytes.size()); });
}

// The output folder's files but prepare.json (prepare.hpp), and their sizes into `sum`.
void write_outputs(const PrepareOptions& o, const std::optional<Tokenizer>& tok, const std::optional<BpeModel>& model,
                   const TokenDocuments& train, const TokenDocuments& valid, PrepareSummary& sum) {
  fs::create_directories(o.out);
  const fs::path dir(o.out);
  if (tok) tok->save((dir / kTokenizerFile).string());
  if (!o.tokenizer.empty())
    copy_file_atomically(o.tokenizer, (dir / kTokenizerJsonFile).string());
  else if (model)
    save_tokenizer_json(*model, (dir / kTokenizerJsonFile).string());
  const auto vocab = static_cast<std::uint32_t>(sum.vocab_size);
  const std::uint64_t digest = tok ? tok->digest() : model->digest();
  const auto eod = static_cast<std::uint32_t>(model ? model->end_of_document() : kEndOfDocument);
  write_token_file((dir / kTrainFile).string(), train, vocab, digest, eod);
  write_token_file((dir / kValidFile).string(), valid, vocab, digest, eod);
  if (o.llmc) {
    write_llmc_shard((dir / "train.bin").string(), eod_led_stream(train, eod));
    write_llmc_shard((dir / "valid.bin").string(), eod_led_stream(valid, eod));
  }
  sum.tokenizer_file_bytes = static_cast<std::int64_t>(fs::file_size(dir / (tok ? kTokenizerFile : kTokenizerJsonFile)));
  sum.train.file_bytes = static_cast<std::int64_t>(fs::file_size(dir / kTrainFile));
  sum.valid.file_bytes = static_cast<std::int64_t>(fs::file_size(dir / kValidFile));
}

}  // namespace

PrepareSummary prepare_text(const PrepareOptions& o) {
  const auto start = Clock::now();
  check_options(o);
  PrepareSummary sum;
  const std::vector<CorpusDocument> docs = usable_documents(o, sum);
  SplitAssignment split;
  try {
    split = split_heldout(docs, o.heldout_fraction, o.seed);
  } catch (const std::invalid_argument& e) {
    throw PrepareUsageError(e.what());
  }

  auto t = Clock::now();
  std::vector<std::string> text(docs.size());
  for (std::size_t i = 0; i < docs.size(); ++i) text[i] = read_document(docs[i]);
  sum.read_s = since(t);

  // The vocabulary sees the training documents only: nothing of the held-out text leaks
  // into it. A given tokenizer.json replaces the training.
  t = Clock::now();
  std::optional<Tokenizer> tok;
  std::optional<BpeModel> model;
  if (o.tokenizer.empty()) {
    ChunkCounts counts;
    for (std::size_t i : split.train) counts.add_text(text[i]);
    BpeResult bpe = train_bpe(counts, {o.vocab_size, 2});
    tok.emplace(std::move(bpe.merges));
    sum.vocab_stopped_early = bpe.stopped_early;
    model = shared_model(*tok, sum);
  } else {
    model = given_model(o.tokenizer);
    tok = model->as_project_tokenizer();
  }
  sum.bpe_s = since(t);
  sum.vocab_size = model ? model->vocab_size() : tok->vocab_size();

  t = Clock::now();
  // The project's tokenizer has its own encoder; a given file's model encodes as `tokenizers`.
  std::optional<Encoder> enc;
  std::optional<BpeEncoder> given;
  if (o.tokenizer.empty())
    enc.emplace(*tok);
  else
    given.emplace(*model);
  std::vector<std::int32_t> scratch;
  auto encode_split = [&](const std::vector<std::size_t>& which, SplitSummary& s) {
    TokenDocuments out;
    for (std::size_t i : which) {
      scratch.clear();
      given ? given->encode(text[i], scratch) : enc->encode(text[i], scratch);
      out.add(scratch);
      s.bytes += static_cast<std::int64_t>(text[i].size());
    }
    s.documents = static_cast<std::int64_t>(which.size());
    s.tokens = static_cast<std::int64_t>(out.tokens.size());
    return out;
  };
  TokenDocuments train = encode_split(split.train, sum.train);
  TokenDocuments valid = encode_split(split.valid, sum.valid);
  sum.encode_s = since(t);

  t = Clock::now();
  write_outputs(o, tok, model, train, valid, sum);
  sum.write_s = since(t);
  sum.total_s = since(start);

  write_manifest(o, sum, docs, split, fs::path(o.out));
  return sum;
}

}  // namespace codistill::data::text
