// worker_models: a mixed cohort in one run (worker 1 a ResNet beside MLP workers), each
// entry a whole model section bound like `model`, its errors named worker_models.ID.KEY.
#include <catch2/catch.hpp>

#include "codistill/config/config_loader.hpp"
#include "config_test_util.hpp"

using namespace codistill;
using namespace codistill::test;

namespace {
const char* kMixed = R"(run:
  workers: 3
model:
  kind: mlp
  hidden: [64]
worker_models:
  1:
    kind: resnet
    channels: [8, 16]
    hidden: []
  2:
    kind: cnn
)";
}  // namespace

TEST_CASE("worker_models gives chosen workers their own model section", "[config]") {
  const Config c = load_text(kMixed);
  REQUIRE(c.worker_models.size() == 2);
  CHECK(model_of(c, 0).kind == "mlp");
  CHECK(model_of(c, 0).hidden == std::vector<std::int64_t>{64});
  CHECK(model_of(c, 1).kind == "resnet");
  CHECK(model_of(c, 1).channels == std::vector<std::int64_t>{8, 16});
  CHECK(model_of(c, 1).hidden.empty());
  // A whole section: keys it leaves out take their defaults, not model's values.
  CHECK(model_of(c, 2).kind == "cnn");
  CHECK(model_of(c, 2).hidden == ModelConfig{}.hidden);
}

TEST_CASE("worker_models round-trips through to_yaml and counts as a difference", "[config]") {
  const Config c = load_text(kMixed);
  const std::string text = to_yaml(c);
  CHECK(text.find("worker_models:\n  1:\n    kind: resnet\n") != std::string::npos);
  const Config back = load_text(text);
  CHECK(config_differences(back, c).empty());
  CHECK(model_of(back, 1).channels == std::vector<std::int64_t>{8, 16});
  Config other = c;
  other.worker_models.at(2).kind = "mlp";
  CHECK(config_differences(other, c) == std::vector<std::string>{"worker_models"});
  CHECK(config_differences(load_text("run:\n  workers: 3\n"), c) ==
        std::vector<std::string>{"model.hidden", "worker_models"});
}

TEST_CASE("worker_models errors name the entry, key and line", "[config]") {
  const std::string head = "run:\n  workers: 2\nworker_models:\n";
  auto e = error_of(head + "  1:\n    kind: transformer\n");
  CHECK(e.key_path() == "worker_models.1.kind");
  CHECK(e.line() == 5);
  CHECK_THAT(e.detail(), Catch::Contains("mlp") && Catch::Contains("resnet"));
  e = error_of(head + "  1:\n    widths: [3]\n");
  CHECK(e.key_path() == "worker_models.1.widths");
  CHECK_THAT(e.detail(), Catch::Contains("unknown key"));
  e = error_of(head + "  2:\n    kind: cnn\n");
  CHECK(e.key_path() == "worker_models");
  CHECK(e.line() == 4);
  CHECK_THAT(e.detail(), Catch::Contains("[0, 2)") && Catch::Contains("'2'"));
  e = error_of(head + "  - kind: cnn\n");
  CHECK(e.key_path() == "worker_models");
  CHECK_THAT(e.detail(), Catch::Contains("mapping of worker ids"));
  // The id bound is run.workers after the command line's overrides.
  CHECK(load_text(head + "  2:\n    kind: cnn\n", {"run.workers=3"}).worker_models.count(2) == 1);
}

TEST_CASE("a worker_models entry may be a layer list", "[config]") {
  const std::string yaml = "run:\n  workers: 2\nworker_models:\n  1:\n    kind: layers\n    layers:\n"
                           "      - flatten: {}\n      - linear: {out: 10}\n";
  const Config c = load_text(yaml);
  REQUIRE(model_of(c, 1).layers.size() == 2);
  const Config back = load_text(to_yaml(c));
  CHECK(config_differences(back, c).empty());
  CHECK(model_of(back, 1).layers.size() == 2);
  auto e = error_of("run:\n  workers: 2\nworker_models:\n  1:\n    kind: layers\n    layers:\n"
                    "      - flatten: {}\n      - linear: {width: 10}\n");
  CHECK_THAT(e.key_path(), Catch::StartsWith("worker_models.1.layers[1]"));
  CHECK(e.line() == 8);
}

TEST_CASE("a worker_models entry has its own init_from, kept in config.yaml and the same-run check", "[config]") {
  const Config c = load_text(std::string(kMixed) + "    init_from: runs/pre/worker-002\n");
  CHECK(model_of(c, 2).init_from == "runs/pre/worker-002");
  CHECK(model_of(c, 1).init_from.empty());
  const Config back = load_text(to_yaml(c));
  CHECK(model_of(back, 2).init_from == "runs/pre/worker-002");
  CHECK(config_differences(back, c).empty());
  Config other = c;
  other.worker_models.at(2).init_from = "elsewhere";
  CHECK(config_differences(other, c) == std::vector<std::string>{"worker_models"});
}
