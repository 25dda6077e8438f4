// A resnet on the CPU fuses each BatchNorm -> ReLU pair (the stem's and every block's first)
// and each block with the relu after its sum: the fused model computes what its unfused twin
// computes (logits in training and eval, parameter gradients, running statistics), on both
// memory formats, and checkpoints do not see the difference (names, fingerprint).
#include <string>
#include <vector>

#include "codistill/models/model.hpp"
#include "codistill/nn/layers/activation.hpp"
#include "codistill/nn/layers/batchnorm.hpp"
#include "codistill/nn/blocks/residual.hpp"
#include "codistill/nn/blocks/sequential.hpp"
#include "codistill/util/rng.hpp"
#include "model_test_util.hpp"
#include "support/test_util.hpp"

using namespace codistill;
using codistill::kernels::Activation;
using codistill::kernels::Tensor;
using namespace codistill::model_test;

namespace {

ModelConfig resnet(std::vector<std::int64_t> channels, std::int64_t blocks, const std::string& memory_format) {
  ModelConfig cfg;
  cfg.kind = "resnet";
  cfg.channels = std::move(channels);
  cfg.blocks = blocks;
  cfg.hidden = {};
  cfg.input_shape = {1, 12, 12};
  cfg.classes = 10;
  cfg.memory_format = memory_format;
  return cfg;
}

// Undoes the containers' BatchNorm -> ReLU and Residual -> ReLU fusions below m (by hand: the
// CPU backend would fuse again on a queue change); returns how many it undid.
int unfuse(Module& m) {
  int n = 0;
  if (auto* seq = dynamic_cast<Sequential*>(&m)) {
    const auto& ch = seq->children();
    for (std::size_t i = 0; i + 1 < ch.size(); ++i) {
      auto* bn = dynamic_cast<BatchNorm*>(ch[i].second.get());
      auto* res = dynamic_cast<Residual*>(ch[i].second.get());
      if (bn && bn->fused_activation() != Activation::none) bn->set_fused_activation(Activation::none);
      else if (res && res->fused_activation() != Activation::none) res->set_fused_activation(Activation::none);
      else continue;
      dynamic_cast<ActivationLayer&>(*ch[i + 1].second).set_passthrough(false);
      ++n;
    }
  }
  m.for_each_child([&](const std::string&, Module& child) { n += unfuse(child); });
  return n;
}

}  // namespace

// Tolerance: none. The fused op computes relu of the value the unfused batch norm writes and
// masks dy before the same sums, so the two models agree bit for bit (float32, fast path).
TEST_CASE("a resnet with BatchNorm+ReLU fused computes what its unfused twin computes", "[models]") {
  for (const char* format : {"nhwc", "nchw"}) {
    const auto seed = test::fresh_seed();
    INFO("seed " << seed << ", memory format " << format);
    const ModelConfig cfg = resnet({16, 32}, 2, format);
    Rng ra(seed), rb(seed);
    Model fused = build_model(cfg, ra), plain = build_model(cfg, rb);
    // Batch norms: the stem's and each block's first (1 + 2 stages x 2 blocks); each block.
    CHECK(unfuse(plain.root()) == 5 + 4);
    CHECK(fused.fingerprint() == plain.fingerprint());
    REQUIRE(fused.params().size() == plain.params().size());
    for (std::size_t i = 0; i < fused.params().size(); ++i) CHECK(fused.params()[i].path == plain.params()[i].path);

    const Tensor dlogits = random_input({6, 10}, seed + 2);
    for (int step = 0; step < 2; ++step) {  // twice: the second from updated running statistics
      const Tensor x = random_input({6, 1, 12, 12}, seed + 10 + static_cast<std::uint64_t>(step));
      fused.zero_grad(), plain.zero_grad();
      CHECK(values(fused.forward(x, true)) == values(plain.forward(x, true)));
      fused.backward(dlogits), plain.backward(dlogits);
      auto pa = fused.params(), pb = plain.params();
      for (std::size_t i = 0; i < pa.size(); ++i) {
        INFO(pa[i].path);
        CHECK(values(*pa[i].grad) == values(*pb[i].grad));
      }
      auto ba = fused.buffers(), bb = plain.buffers();
      REQUIRE(ba.size() == bb.size());
      for (std::size_t i = 0; i < ba.size(); ++i) {
        INFO(ba[i].path);
        CHECK(values(*ba[i].value) == values(*bb[i].value));
      }
      CHECK(values(fused.forward(x, false)) == values(plain.forward(x, false)));
    }
  }
}
