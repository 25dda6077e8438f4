// codistill-prepare-text: turns a folder of text documents into the tokenizer and the
// token files a language model trains on (docs/text-data.md).
// Exit codes: 0 done; 2 usage error (bad option, no documents, output already prepared
// without --force); 1 runtime failure (unreadable file, full disk, ...).
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "codistill/data/text/prepare.hpp"
#include "trainer/cli.hpp"

namespace po = boost::program_options;
namespace text = codistill::data::text;
using codistill::cli::kExitOk, codistill::cli::kExitUsage;

namespace {

const char* kUsage =
    "usage: codistill-prepare-text --corpus DIR|FILE [--corpus ...] --out DIR [--vocab-size N | --tokenizer FILE]\n"
    "                              [--heldout-fraction F] [--seed S] [--suffix SUFFIX] [--llmc] [--force] [--json]\n";

// Returns false after printing help. Throws po::error on bad usage.
bool parse_args(const codistill::cli::Command& cmd, int argc, char** argv, text::PrepareOptions& o, bool& json) {
  po::options_description opts("options");
  opts.add_options()
      ("help,h", "show this help")
      ("corpus", po::value<std::vector<std::string>>(&o.corpus)->required()->composing(),
       "a folder (searched recursively for files ending in --suffix) or a file; repeatable")
      ("suffix", po::value<std::string>(&o.suffix)->default_value(o.suffix),
       "take the files of a folder whose names end with this (\"\": every file)")
      ("out", po::value<std::string>(&o.out)->required(),
       "output folder: tokenizer.bpe, tokenizer.json, train.tokens, valid.tokens, prepare.json")
      ("vocab-size", po::value<std::int32_t>(&o.vocab_size)->default_value(o.vocab_size),
       "BPE vocabulary size, including the 256 bytes and the end-of-document token")
      ("tokenizer", po::value<std::string>(&o.tokenizer),
       "encode with this Hugging Face tokenizer.json (byte-level BPE, GPT-2's format) instead of training one")
      ("heldout-fraction", po::value<double>(&o.heldout_fraction)->default_value(o.heldout_fraction, "0.05"),
       "fraction of the documents held out for validation, in [0, 1)")
      ("seed", po::value<std::uint64_t>(&o.seed)->default_value(o.seed), "seed of the held-out split")
      ("llmc", "also write the splits as llm.c token shards, train.bin and valid.bin (data.kind tokens)")
      ("force", "replace the files of an earlier preparation in --out")
      ("json", "print the summary as one JSON object");
  po::variables_map vm;
  if (!cmd.store_or_help(argc, argv, opts, vm)) return false;
  if (vm.count("tokenizer") && !vm["vocab-size"].defaulted())
    throw po::error("--vocab-size and --tokenizer exclude each other: the file's vocabulary is used as it is");
  o.force = vm.count("force") > 0;
  o.llmc = vm.count("llmc") > 0;
  json = vm.count("json") > 0;
  return true;
}

void print_summary(const text::PrepareSummary& s) {
  auto ratio = [](const text::SplitSummary& x) { return x.tokens > 0 ? double(x.bytes) / double(x.tokens) : 0.0; };
  std::printf("documents   %lld (%lld empty files skipped)\n", (long long)s.documents, (long long)s.empty_skipped);
  std::printf("vocabulary  %d tokens%s\n", s.vocab_size, s.vocab_stopped_early ? " (stopped early: no pair left twice)" : "");
  if (!s.tokenizer_json_skipped.empty()) std::printf("no tokenizer.json: %s\n", s.tokenizer_json_skipped.c_str());
  for (auto [name, x] : {std::pair{"train", &s.train}, std::pair{"valid", &s.valid}})
    std::printf("%-6s      %lld documents, %lld bytes, %lld tokens, %.3f bytes/token, file %lld bytes\n", name,
                (long long)x->documents, (long long)x->bytes, (long long)x->tokens, ratio(*x), (long long)x->file_bytes);
  const double mb = double(s.train.bytes + s.valid.bytes) / 1e6;
  std::printf("seconds     read %.2f, bpe %.2f, encode %.2f (%.1f MB/s), write %.2f, total %.2f\n", s.read_s, s.bpe_s,
              s.encode_s, s.encode_s > 0 ? mb / s.encode_s : 0.0, s.write_s, s.total_s);
}

}  // namespace

int main(int argc, char** argv) {
  const codistill::cli::Command cmd("codistill-prepare-text", kUsage);
  text::PrepareOptions opts;
  bool json = false;
  if (auto done = cmd.parse([&] { return parse_args(cmd, argc, argv, opts, json); })) return *done;
  try {
    const text::PrepareSummary s = text::prepare_text(opts);
    if (json)
      std::cout << s.json() << "\n";
    else
      print_summary(s);
    return kExitOk;
  } catch (const text::PrepareUsageError& e) {
    return cmd.fail(e.what(), kExitUsage);
  } catch (const std::exception& e) {
    return cmd.error(e.what());
  }
}
