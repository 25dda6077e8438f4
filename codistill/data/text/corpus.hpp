#pragma once
// The documents of a text corpus on disk and their split into training and held-out
// documents (docs/text-data.md).
#include <cstdint>
#include <string>
#include <vector>

namespace codistill::data::text {

struct CorpusDocument {
  std::string name;  // relative to the folder it was found in, or the file name given
  std::string path;
  std::uint64_t bytes = 0;
};

// Each input is a file (one document) or a folder, searched recursively for regular files
// whose names end with `suffix` ("" takes every file). The documents come sorted by name
// (byte order), so the list does not depend on the order a file system lists folders in.
// Throws std::invalid_argument for an input that does not exist, two documents of the same
// name, or no document at all (naming the inputs and the suffix).
std::vector<CorpusDocument> list_corpus(const std::vector<std::string>& inputs, const std::string& suffix);

// The file's bytes; throws std::runtime_error naming it when it cannot be read.
std::string read_document(const CorpusDocument& doc);

struct SplitAssignment {
  std::vector<std::size_t> train;  // indices into the document list, ascending
  std::vector<std::size_t> valid;
};

// Held-out split by document: the k = max(1, round(fraction * n)) documents whose names
// hash lowest (XXH64 of the name, with `seed`) are held out (k = 0 when fraction is 0).
// A document's side depends on its name and the seed, not on its position in the list, so
// adding files to a corpus moves few documents across. Throws std::invalid_argument for a
// fraction outside [0, 1) or a split that would leave no training document.
SplitAssignment split_heldout(const std::vector<CorpusDocument>& docs, double fraction, std::uint64_t seed);

}  // namespace codistill::data::text
