// Evaluation of a language model (codistill/eval/evaluate_text.hpp) with its logits formed
// a chunk of rows at a time: the loss, accuracy and predictions of the whole [B*T, V]
// logits at once (as evaluate_text formed them before), at chunks of one row, of rows that
// do not divide the batch, and of the whole batch; the chunk's rows.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <vector>

#include "codistill/data/text/tokens/token_file.hpp"
#include "codistill/data/text/tokens/window_sampler.hpp"
#include "codistill/eval/evaluate_text.hpp"
#include "codistill/models/model.hpp"
#include "codistill/util/rng.hpp"
#include "support/process.hpp"
#include "support/training_setup.hpp"

using namespace codistill;
using kernels::DType;
using kernels::Tensor;
namespace text = codistill::data::text;

namespace {

// The token file's vocabulary holds the 256 bytes and end-of-document (256) at least.
constexpr std::int64_t kV = 320, kT = 16;

// The metrics from each batch's whole logits (model.forward), as evaluate_text once did.
EvalResult whole_logits(Model& m, const text::EvalWindows& ew, std::int64_t batch, std::vector<std::int32_t>& pred) {
  kernels::Queue& q = kernels::default_cpu_queue();
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(ew.count() * (kT + 1)));
  ew.windows(0, tokens);
  EvalResult r;
  double loss = 0;
  std::int64_t correct = 0;
  for (std::int64_t first = 0; first < ew.count(); first += batch) {
    const std::int64_t n = std::min(batch, ew.count() - first);
    Tensor x = Tensor::empty({n, kT}, DType::i32), y = Tensor::empty({n * kT}, DType::i32);
    for (std::int64_t b = 0; b < n; ++b)
      for (std::int64_t t = 0; t < kT; ++t) {
        x.data<std::int32_t>()[b * kT + t] = tokens[static_cast<std::size_t>((first + b) * (kT + 1) + t)];
        y.data<std::int32_t>()[b * kT + t] = tokens[static_cast<std::size_t>((first + b) * (kT + 1) + t + 1)];
      }
    const Tensor z = m.forward(x, false);
    loss += q.backend().distill_loss(z, {}, y, nullptr, {}, q).ce * static_cast<double>(n * kT);
    for (std::int64_t i = 0; i < n * kT; ++i) {
      const float* zr = z.data<float>() + i * kV;
      const auto tok = static_cast<std::int32_t>(std::max_element(zr, zr + kV) - zr);
      correct += tok == y.data<std::int32_t>()[i];
      pred.push_back(tok);
    }
    r.examples += n * kT;
  }
  r.loss = loss / static_cast<double>(r.examples);
  r.accuracy = static_cast<double>(correct) / static_cast<double>(r.examples);
  return r;
}

}  // namespace

TEST_CASE("text evaluation in chunks of logit rows gives the metrics of the whole logits", "[eval][text]") {
  test::TempDir dir;
  text::TokenDocuments docs;
  Rng rng(3);
  for (int d = 0; d < 3; ++d) {
    std::vector<std::int32_t> doc(40);
    for (auto& t : doc) t = static_cast<std::int32_t>(rng.below(256));
    docs.add(doc);
  }
  text::write_token_file(dir.str("valid.tokens"), docs, static_cast<std::uint32_t>(kV), 1);
  const text::TokenFile valid(dir.str("valid.tokens"));
  const text::EvalWindows ew(valid, kT);
  REQUIRE(ew.count() >= 5);
  Rng init(4);
  Model m = build_model(test::tiny_gpt(2, 32, 2, kT, kV), init);
  std::vector<std::int32_t> want_pred;
  const EvalResult want = whole_logits(m, ew, 3, want_pred);  // batches of 3 windows, the last short
  // One row, 5 rows (not dividing a batch's 48), the default (the whole batch).
  for (const std::int64_t bytes : {std::int64_t{1}, 5 * kV * 4, kEvalLogitChunkBytes}) {
    INFO("chunks of " << bytes << " bytes");
    std::vector<std::int32_t> pred;
    const EvalResult r = evaluate_text(m, ew, 3, 0, &pred, bytes);
    CHECK(r.examples == want.examples);
    CHECK(r.loss == Approx(want.loss).epsilon(1e-6));
    CHECK(r.accuracy == want.accuracy);
    CHECK(pred == want_pred);
  }
  CHECK(eval_logit_rows(48, kV, 5 * kV * 4) == 5);
  CHECK(eval_logit_rows(48, kV, 1) == 1);
  CHECK(eval_logit_rows(48, kV) == 48);
  CHECK(eval_logit_rows(65536, 50304) == 333);  // 64 MiB of GPT-2's logits instead of 12.3 GiB
}
