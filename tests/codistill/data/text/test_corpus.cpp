// Listing a corpus folder and the held-out split by document name.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>

#include "codistill/data/text/corpus.hpp"
#include "support/process.hpp"
#include "text_test_util.hpp"

using namespace codistill::data::text;
using codistill::test::text::write_bytes;
namespace fs = std::filesystem;

TEST_CASE("a corpus folder lists its files by name, filtered by suffix", "[text][corpus]") {
  codistill::test::TempDir dir;
  fs::create_directories(dir.path() / "b" / "c");
  write_bytes(dir.str("z.rst.txt"), "zz");
  write_bytes(dir.str("b/c/a.rst.txt"), "a");
  write_bytes(dir.str("b/skip.html"), "<p>");
  write_bytes(dir.str("a.rst.txt"), "");
  const auto docs = list_corpus({dir.str()}, ".rst.txt");
  REQUIRE(docs.size() == 3);
  CHECK(docs[0].name == "a.rst.txt");
  CHECK(docs[0].bytes == 0);
  CHECK(docs[1].name == "b/c/a.rst.txt");
  CHECK(docs[2].name == "z.rst.txt");
  CHECK(docs[2].bytes == 2);
  CHECK(read_document(docs[2]) == "zz");
  CHECK(list_corpus({dir.str()}, "").size() == 4);
  // A file given directly is named by its file name; a clash of names is refused.
  CHECK(list_corpus({dir.str("b/skip.html")}, ".rst.txt").at(0).name == "skip.html");
  CHECK_THROWS_WITH(list_corpus({dir.str(), dir.str("z.rst.txt")}, ".rst.txt"), Catch::Contains("two documents are named z.rst.txt"));
  CHECK_THROWS_WITH(list_corpus({dir.str("nope")}, ""), Catch::Contains("nope does not exist"));
  CHECK_THROWS_WITH(list_corpus({dir.str()}, ".md"), Catch::Contains("no files ending in '.md'"));
}

TEST_CASE("the held-out split is by document name: deterministic, disjoint, sized by the fraction", "[text][corpus]") {
  std::vector<CorpusDocument> docs;
  for (int i = 0; i < 200; ++i) docs.push_back({"doc" + std::to_string(i), "", 1});
  const auto s = split_heldout(docs, 0.05, 1);
  CHECK(s.valid.size() == 10);
  CHECK(s.train.size() == 190);
  std::set<std::size_t> all(s.train.begin(), s.train.end());
  all.insert(s.valid.begin(), s.valid.end());
  CHECK(all.size() == 200);
  CHECK(split_heldout(docs, 0.05, 1).valid == s.valid);
  CHECK(split_heldout(docs, 0.05, 2).valid != s.valid);
  // Adding documents keeps held-out ones held out unless a new name hashes lower.
  auto more = docs;
  more.push_back({"doc-extra", "", 1});
  const auto s2 = split_heldout(more, 0.05, 1);
  std::size_t kept = 0;
  for (std::size_t v : s.valid) kept += std::count(s2.valid.begin(), s2.valid.end(), v);
  CHECK(kept >= 9);
  // At least one held out when the fraction is positive; none at 0.
  CHECK(split_heldout(std::vector<CorpusDocument>(docs.begin(), docs.begin() + 3), 0.01, 1).valid.size() == 1);
  CHECK(split_heldout(docs, 0.0, 1).valid.empty());
  CHECK_THROWS_WITH(split_heldout(std::vector<CorpusDocument>(docs.begin(), docs.begin() + 1), 0.5, 1),
                    Catch::Contains("leaves no training document"));
  CHECK_THROWS_WITH(split_heldout(docs, 1.0, 1), Catch::Contains("in [0, 1)"));
}
