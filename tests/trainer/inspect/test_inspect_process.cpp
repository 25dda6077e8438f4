// Process-level tests of codistill-inspect: real checkpoints of briefly trained models,
// the real executable, its output and exit codes.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "codistill/train/training.hpp"
#include "codistill/inspect/tiny_worker.hpp"  // tests/codistill/inspect: the checkpoints to inspect
#include "support/process.hpp"

using namespace codistill::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string inspect_exe() { return std::string(CODISTILL_BINARY_DIR) + "/trainer/codistill-inspect"; }

struct Inspect {
  ProcessResult r;
  json doc;
};

// Runs codistill-inspect ARGS --json and parses stdout.
Inspect inspect_json(const std::string& args, const TempDir& dir) {
  Inspect i{run_command(inspect_exe() + " " + args + " --json", dir), {}};
  INFO(i.r.out << i.r.err);
  REQUIRE_NOTHROW(i.doc = json::parse(i.r.out));
  return i;
}

}  // namespace

TEST_CASE("inspect list: workers, steps, sizes, validity, temp files", "[process][inspect]") {
  TempDir dir;
  const fs::path run = dir.path() / "run";
  TinyWorker w0(synthetic_config(), 0), w1(synthetic_config(), 1);
  w0.train(5);
  w0.write(run / "worker-000" / "ckpt-000000005.h5");
  w0.train(5);
  w0.write(run / "worker-000" / "ckpt-000000010.h5");
  w1.train(10);
  w1.write(run / "worker-001" / "ckpt-000000010.h5");
  w1.train(10);
  corrupt(w1.write(run / "worker-001" / "ckpt-000000020.h5"));
  // A temp file of a writer that cannot exist (beyond any pid_max), one of a live one.
  write_text(run / "worker-001" / ".ckpt-000000030.h5.tmp.2147483646", "partial");
  write_text(run / "worker-000" / (".ckpt-000000015.h5.tmp." + std::to_string(::getpid())), "x");

  auto [r, doc] = inspect_json("list " + run.string(), dir);
  REQUIRE(r.exit_code == 0);
  CHECK(doc["command"] == "list");
  REQUIRE(doc["workers"].size() == 2);
  const json& a = doc["workers"][0];
  const json& b = doc["workers"][1];
  CHECK(a["worker"] == 0);
  REQUIRE(a["checkpoints"].size() == 2);
  CHECK(a["checkpoints"][0]["step"] == 5);
  CHECK(a["checkpoints"][1]["valid"] == true);
  CHECK(a["checkpoints"][1]["bytes"].get<std::uint64_t>() == fs::file_size(run / "worker-000" / "ckpt-000000010.h5"));
  CHECK(a["checkpoints"][1]["examples_seen"] == 10 * 64);
  CHECK(a["checkpoints"][1]["age_s"].get<double>() >= 0);
  CHECK(a["freshest_valid_step"] == 10);
  REQUIRE(a["temp_files"].size() == 1);
  CHECK(a["temp_files"][0]["writer_alive"] == true);

  REQUIRE(b["checkpoints"].size() == 2);
  CHECK(b["checkpoints"][0]["valid"] == true);
  CHECK(b["checkpoints"][1]["valid"] == false);
  CHECK_THAT(b["checkpoints"][1]["reason"].get<std::string>(),
             Catch::Contains("fletcher32") && Catch::Contains("/params/fc1/weight"));
  CHECK(b["freshest_valid_step"] == 10);  // falls back past the damaged newest file
  REQUIRE(b["temp_files"].size() == 1);
  CHECK(b["temp_files"][0]["pid"] == 2147483646);
  CHECK(b["temp_files"][0]["writer_alive"] == false);

  auto text = run_command(inspect_exe() + " list " + run.string(), dir);
  INFO(text.out << text.err);
  CHECK(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("2 worker(s), 4 checkpoint(s), 1 invalid") &&
                           Catch::Contains("INVALID: corrupt data") && Catch::Contains("stray: pid 2147483646") &&
                           Catch::Contains("ckpt-000000005.h5"));

  auto quick = inspect_json("list --no-verify " + run.string(), dir);
  CHECK(quick.doc["workers"][1]["checkpoints"][1]["valid"].is_null());  // not checked
}

TEST_CASE("inspect show: metadata and tensor statistics", "[process][inspect]") {
  TempDir dir;
  TinyWorker w(synthetic_config(), 0);
  w.train(3);
  const std::string path = w.write(dir.path() / "ckpt-000000003.h5");

  auto [r, doc] = inspect_json("show " + path, dir);
  REQUIRE(r.exit_code == 0);
  CHECK(doc["step"] == 3);
  CHECK(doc["worker"] == 0);
  CHECK(doc["examples_seen"] == 3 * 64);
  CHECK(doc["model_fingerprint"] == w.model.fingerprint());
  CHECK(doc["content_digest"].get<std::string>().size() == 16);
  CHECK(doc["teacher_steps"].empty());
  CHECK(doc["model"] == codistill::model_yaml(w.mc));
  CHECK(doc["parameters"] == w.model.num_params());
  CHECK(doc["normalization"]["shift"].get<double>() == w.splits.train.normalization.shift);
  CHECK(doc["normalization"]["scale"].get<double>() == w.splits.train.normalization.scale);
  REQUIRE(doc["tensors"].size() == w.model.params().size());  // params only by default
  const json& t = doc["tensors"][0];
  CHECK(t["path"] == "/params/fc1/weight");
  CHECK(t["shape"] == json::array({32, 64}));
  CHECK(t["dtype"] == "float32");
  // The same statistics computed here from the live model.
  const auto* p = w.model.params()[0].value;
  const float* x = p->data<float>();
  double sum = 0, lo = x[0], hi = x[0];
  for (std::int64_t i = 0; i < p->numel(); ++i) {
    sum += x[i];
    lo = std::min(lo, static_cast<double>(x[i]));
    hi = std::max(hi, static_cast<double>(x[i]));
  }
  CHECK(t["mean"].get<double>() == Approx(sum / static_cast<double>(p->numel())).epsilon(1e-9));
  CHECK(t["min"].get<double>() == lo);
  CHECK(t["max"].get<double>() == hi);
  CHECK(t["std"].get<double>() > 0);

  auto all = inspect_json("show --all " + path, dir);
  std::vector<std::string> paths;
  for (const auto& e : all.doc["tensors"]) paths.push_back(e["path"]);
  CHECK(std::count(paths.begin(), paths.end(), "/optimizer/fc1/weight/momentum") == 1);
  CHECK(std::count(paths.begin(), paths.end(), "/state/data/normalization") == 1);

  auto text = run_command(inspect_exe() + " show " + path, dir);
  INFO(text.out << text.err);
  CHECK(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("fingerprint   " + w.model.fingerprint()) &&
                           Catch::Contains("TENSOR") && Catch::Contains("/params/fc2/bias") &&
                           Catch::Contains("[32, 64]") && Catch::Contains("kind: mlp"));
}

TEST_CASE("inspect verify: OK for good files, exit 1 naming the damage", "[process][inspect]") {
  TempDir dir;
  TinyWorker w(synthetic_config(), 0);
  w.train(2);
  const std::string good = w.write(dir.path() / "good" / "ckpt-000000002.h5");
  auto ok = run_command(inspect_exe() + " verify " + good, dir);
  INFO(ok.out << ok.err);
  CHECK(ok.exit_code == 0);
  CHECK_THAT(ok.out, Catch::StartsWith("STATUS") && Catch::Contains("OK") && Catch::Contains("1 of 1"));

  const std::string flipped = w.write(dir.path() / "flipped" / "ckpt-000000002.h5");
  corrupt(flipped);
  const std::string cut = w.write(dir.path() / "cut" / "ckpt-000000002.h5");
  fs::resize_file(cut, fs::file_size(cut) / 2);
  // A sound file under another step's name is what RunStore refuses to load.
  const std::string renamed = (dir.path() / "ckpt-000000009.h5").string();
  fs::copy_file(good, renamed);

  auto bad = inspect_json("verify " + good + " " + flipped + " " + cut + " " + renamed, dir);
  CHECK(bad.r.exit_code == 1);
  REQUIRE(bad.doc["results"].size() == 4);
  CHECK(bad.doc["valid"] == 1);
  CHECK(bad.doc["invalid"] == 3);
  CHECK(bad.doc["results"][0]["valid"] == true);
  CHECK(bad.doc["results"][0]["step"] == 2);
  CHECK_THAT(bad.doc["results"][1]["reason"].get<std::string>(), Catch::Contains("fletcher32 checksum mismatch"));
  CHECK_THAT(bad.doc["results"][2]["reason"].get<std::string>(), Catch::Contains("truncated"));
  CHECK_THAT(bad.doc["results"][3]["reason"].get<std::string>(), Catch::Contains("disagrees with the file name"));

  auto text = run_command(inspect_exe() + " verify " + good + " " + flipped, dir);
  CHECK(text.exit_code == 1);
  CHECK_THAT(text.out, Catch::Contains("INVALID") && Catch::Contains("1 of 2 checkpoint(s) valid"));
}

TEST_CASE("inspect diff: L2 and cosine per parameter, refusing different models", "[process][inspect]") {
  TempDir dir;
  TinyWorker w0(synthetic_config(), 0), w1(synthetic_config(), 1), other(synthetic_config({16}), 0);
  const std::string a = w0.write(dir.path() / "a.h5");
  w0.train(5);
  const std::string a5 = w0.write(dir.path() / "a5.h5");
  const std::string b = w1.write(dir.path() / "b.h5");
  const std::string c = other.write(dir.path() / "c.h5");

  auto self = inspect_json("diff " + a + " " + a, dir);
  REQUIRE(self.r.exit_code == 0);
  REQUIRE(self.doc["params"].size() == 4);
  for (const auto& p : self.doc["params"]) {
    CHECK(p["l2"] == 0.0);
    CHECK(p["norm_a"] == p["norm_b"]);
    if (!p["cosine"].is_null()) CHECK(p["cosine"].get<double>() == Approx(1.0).epsilon(1e-12));
  }
  CHECK(self.doc["total"]["cosine"].get<double>() == Approx(1.0).epsilon(1e-12));

  // Training moves the weights a little; a differently seeded initialization is unrelated.
  auto trained = inspect_json("diff " + a + " " + a5, dir);
  auto seeded = inspect_json("diff " + a + " " + b, dir);
  const json& moved = trained.doc["params"][0];
  CHECK(moved["name"] == "fc1/weight");
  CHECK(moved["l2"].get<double>() > 0);
  CHECK(moved["relative_l2"].get<double>() == Approx(moved["l2"].get<double>() / moved["norm_a"].get<double>()));
  CHECK(moved["cosine"].get<double>() > 0.9);
  CHECK(seeded.doc["params"][0]["cosine"].get<double>() < 0.5);
  CHECK(seeded.doc["total"]["l2"].get<double>() > trained.doc["total"]["l2"].get<double>());

  auto refused = run_command(inspect_exe() + " diff " + a + " " + c, dir);
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.err, Catch::Contains("different models") && Catch::Contains(other.model.fingerprint()));
}

TEST_CASE("inspect eval and churn match in-process evaluation", "[process][inspect]") {
  TempDir dir;
  TinyWorker w0(synthetic_config(), 0), w1(synthetic_config(), 1);
  w0.train(30);
  w1.train(30);
  const std::string a = w0.write(dir.path() / "a.h5"), b = w1.write(dir.path() / "b.h5");
  std::vector<std::int32_t> pred_a, pred_b;
  const auto ea = codistill::evaluate(w0.model, w0.splits.test, 200, &pred_a);
  const auto eb = codistill::evaluate(w1.model, w1.splits.test, 200, &pred_b);
  REQUIRE(ea.accuracy > 0.3);  // trained: chance is 0.1

  auto one = inspect_json("eval " + a, dir);
  REQUIRE(one.r.exit_code == 0);
  CHECK(one.doc["data"]["examples"] == 512);
  CHECK(one.doc["batch_size"] == 200);
  REQUIRE(one.doc["results"].size() == 1);
  CHECK(one.doc["results"][0]["accuracy"].get<double>() == ea.accuracy);
  CHECK(one.doc["results"][0]["loss"].get<double>() == Approx(ea.loss).epsilon(1e-12));
  CHECK(one.doc["ensemble"].is_null());

  // An ensemble of one model with itself is that model.
  auto twice = inspect_json("eval " + a + " " + a, dir);
  CHECK(twice.doc["ensemble"]["members"] == 2);
  CHECK(twice.doc["ensemble"]["accuracy"].get<double>() == ea.accuracy);
  CHECK(twice.doc["ensemble"]["loss"].get<double>() == Approx(ea.loss).epsilon(1e-5));

  auto pair = inspect_json("eval " + a + " " + b, dir);
  CHECK(pair.doc["results"][1]["accuracy"].get<double>() == eb.accuracy);
  CHECK(pair.doc["ensemble"]["accuracy"].get<double>() > 0.3);

  auto limited = inspect_json("eval " + a + " --limit 100 --batch 64", dir);
  CHECK(limited.doc["data"]["examples"] == 100);
  CHECK(limited.doc["batch_size"] == 64);

  auto same = inspect_json("churn " + a + " " + a, dir);
  REQUIRE(same.r.exit_code == 0);
  CHECK(same.doc["churn"] == 0.0);
  CHECK(same.doc["differ"] == 0);

  std::int64_t differ = 0;
  for (std::size_t i = 0; i < pred_a.size(); ++i) differ += pred_a[i] != pred_b[i];
  auto between = inspect_json("churn " + a + " " + b, dir);
  CHECK(between.doc["differ"] == differ);
  CHECK(between.doc["churn"].get<double>() > 0);
  CHECK(between.doc["churn"].get<double>() == static_cast<double>(differ) / 512);

  auto text = run_command(inspect_exe() + " eval " + a + " " + b, dir);
  INFO(text.out << text.err);
  CHECK(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("synthetic/test, 512 examples") && Catch::Contains("ensemble of 2"));
  auto churn_text = run_command(inspect_exe() + " churn " + a + " " + b + " --data train", dir);
  CHECK(churn_text.exit_code == 0);
  CHECK_THAT(churn_text.out, Catch::Contains("synthetic/train, 2048 examples") && Catch::Contains("churn: "));

  // Another architecture of the same inputs and classes joins an ensemble (a mixed
  // cohort); other inputs are refused before any data is read.
  TinyWorker other(synthetic_config({16}), 0);
  const std::string c = other.write(dir.path() / "c.h5");
  auto mixed = inspect_json("eval " + a + " " + c, dir);
  CHECK(mixed.doc["ensemble"]["members"] == 2);
  CHECK(mixed.doc["results"].size() == 2);
  codistill::Config wide = synthetic_config();
  wide.data.synthetic_shape = {1, 6, 6};
  TinyWorker small(wide, 0);
  const std::string d = small.write(dir.path() / "d.h5");
  auto refused = run_command(inspect_exe() + " eval " + a + " " + d, dir);
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.err, Catch::Contains("different inputs or classes") && Catch::Contains("[1, 6, 6]"));
}

TEST_CASE("inspect eval of MNIST-format files applies the stored normalization", "[process][inspect]") {
  TempDir dir;
  write_idx_split(dir.path(), "train", 600, 1);
  write_idx_split(dir.path(), "test", 150, 2);
  codistill::Config cfg = synthetic_config({16});
  cfg.data.kind = "idx";
  cfg.data.path = dir.str();
  cfg.data.train_images = "train-images";
  cfg.data.train_labels = "train-labels";
  cfg.data.test_images = "test-images";
  cfg.data.test_labels = "test-labels";
  cfg.data.batch_size = 32;
  TinyWorker w(cfg, 0);
  REQUIRE(w.splits.train.normalization.kind == "standard");
  REQUIRE(w.splits.train.normalization.shift > 10);  // far from raw: forgetting it would show
  w.train(40);
  const std::string a = w.write(dir.path() / "a.h5");
  const auto expected = codistill::evaluate(w.model, w.splits.test, 200);
  REQUIRE(expected.accuracy > 0.5);  // chance is 1/3

  auto from_files = inspect_json("eval " + a + " --data idx:" + dir.str("test-images") + "," + dir.str("test-labels"),
                                 dir);
  REQUIRE(from_files.r.exit_code == 0);
  CHECK(from_files.doc["data"]["examples"] == 150);
  CHECK(from_files.doc["results"][0]["accuracy"].get<double>() == expected.accuracy);
  CHECK(from_files.doc["results"][0]["loss"].get<double>() == Approx(expected.loss).epsilon(1e-12));
  CHECK(from_files.doc["results"][0]["normalization"]["source"] == "checkpoint");

  auto from_config = inspect_json("eval " + a, dir);
  CHECK(from_config.doc["results"][0]["accuracy"] == from_files.doc["results"][0]["accuracy"]);

  // Files of another shape than the model's inputs: a clear runtime error.
  TinyWorker synthetic(synthetic_config(), 0);
  const std::string s = synthetic.write(dir.path() / "s.h5");
  auto wrong = run_command(
      inspect_exe() + " eval " + s + " --data idx:" + dir.str("test-images") + "," + dir.str("test-labels"), dir);
  CHECK(wrong.exit_code == 1);
  CHECK_THAT(wrong.err, Catch::Contains("[1, 8, 8]") && Catch::Contains("[1, 4, 4]"));
}

TEST_CASE("inspect usage: help exits 0, usage errors exit 2, runtime errors exit 1", "[process][inspect]") {
  TempDir dir;
  auto run = [&](const std::string& args) { return run_command(inspect_exe() + " " + args, dir); };
  SECTION("help") {
    auto top = run("--help");
    CHECK(top.exit_code == 0);
    CHECK_THAT(top.out, Catch::Contains("usage: codistill-inspect SUBCOMMAND") && Catch::Contains("churn A B"));
    auto sub = run("eval --help");
    CHECK(sub.exit_code == 0);
    CHECK_THAT(sub.out, Catch::Contains("usage: codistill-inspect eval CKPT...") && Catch::Contains("--data"));
  }
  SECTION("no subcommand") {
    auto r = run("");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("missing subcommand") && Catch::Contains("usage:"));
  }
  SECTION("unknown subcommand lists the valid ones") {
    auto r = run("frobnicate x");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("unknown subcommand 'frobnicate'") &&
                          Catch::Contains("list, show, verify, diff, eval, churn"));
  }
  SECTION("wrong number of arguments") {
    auto r = run("diff only-one.h5");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("diff takes A B") && Catch::Contains("usage: codistill-inspect diff"));
    CHECK(run("verify").exit_code == 2);
    CHECK(run("show a.h5 b.h5").exit_code == 2);
  }
  SECTION("unknown option or bad value") {
    CHECK(run("show a.h5 --bogus").exit_code == 2);
    CHECK(run("eval a.h5 --batch lots").exit_code == 2);
    CHECK(run("list --all run").exit_code == 2);  // --all belongs to show
  }
  SECTION("bad data spec, before any file is opened") {
    auto r = run("eval absent.h5 --data mnist");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("unknown data spec 'mnist'") && Catch::Contains("idx:IMAGES,LABELS"));
    CHECK(run("churn a.h5 b.h5 --data idx:only-images").exit_code == 2);
  }
  SECTION("runtime errors") {
    auto missing = run("show " + dir.str("absent.h5"));
    CHECK(missing.exit_code == 1);
    CHECK_THAT(missing.err, Catch::Contains("absent.h5") && Catch::Contains("no such file"));
    auto as_json = run("show " + dir.str("absent.h5") + " --json");
    CHECK(as_json.exit_code == 1);
    json doc = json::parse(as_json.out);
    CHECK(doc["command"] == "show");
    CHECK_THAT(doc["error"].get<std::string>(), Catch::Contains("no such file"));
    auto no_run = run("list " + dir.str("no-run"));
    CHECK(no_run.exit_code == 1);
    CHECK_THAT(no_run.err, Catch::Contains("not a folder"));
  }
}

TEST_CASE("inspect reads codistill-train's own checkpoints and reproduces its final eval", "[process][inspect]") {
  TempDir dir;
  write_text(dir.path() / "c.yaml",
                              "run: {seed: 3, threads: 2}\n"
                              "data: {kind: synthetic, batch_size: 64, synthetic_train: 2048, synthetic_test: 512}\n"
                              "model: {kind: mlp, hidden: [32]}\n"
                              "train: {steps: 60, eval_every: 0, log_every: 30}\n"
                              "checkpoint: {every: 30}\n");
  for (const char* w : {"0", "1"}) {
    auto t = run_command(train_exe() + " --config " + dir.str("c.yaml") + " --run-dir " +
                             dir.str("run") + " --workers 2 --worker " + w,
                         dir);
    INFO(t.out << t.err);
    REQUIRE(t.exit_code == 0);
  }
  auto list = inspect_json("list " + dir.str("run"), dir);
  REQUIRE(list.doc["workers"].size() == 2);
  for (const auto& w : list.doc["workers"]) CHECK(w["freshest_valid_step"] == 60);

  const auto done = read_events(dir.path() / "run" / "worker-000" / "metrics.jsonl", "done");
  REQUIRE(done.size() == 1);
  auto ev = inspect_json("eval " + dir.str("run/worker-000/ckpt-000000060.h5") + " " +
                             dir.str("run/worker-001/ckpt-000000060.h5"),
                         dir);
  REQUIRE(ev.r.exit_code == 0);
  CHECK(ev.doc["results"][0]["accuracy"] == done[0]["accuracy"]);
  CHECK(ev.doc["results"][0]["loss"].get<double>() == Approx(done[0]["loss"].get<double>()).epsilon(1e-12));
  CHECK(ev.doc["ensemble"]["accuracy"].get<double>() > 0.3);
}
