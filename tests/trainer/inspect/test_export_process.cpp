// Process-level tests of scripts/export_model.py: an mlp, a cnn, a resnet and a layers model briefly trained by the
// real codistill-train, exported to TorchScript, ONNX and safetensors, must predict on the
// Fashion-MNIST test set what `codistill-inspect eval --predictions` says (same argmax,
// probabilities within 1e-5); bad input is refused with one line and a non-zero exit.
// The exports run in the tools environment (.venv-tools, scripts/setup.sh --tools). Where it
// is missing the tests say "skipped: no Python tools" (CTest shows them skipped), except
// under scripts/run_tests.sh, which sets CODISTILL_REQUIRE_TOOLS: there it is a failure.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/edit.hpp"
#include "support/process.hpp"
#include "support/short_run.hpp"

using namespace codistill::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kSource = CODISTILL_SOURCE_DIR;
const std::string kData = "/usr/share/datasets/fashion-mnist";

std::string inspect_exe() { return std::string(CODISTILL_BINARY_DIR) + "/trainer/codistill-inspect"; }

std::string tools_python() {
  const char* env = std::getenv("CODISTILL_TOOLS_PYTHON");
  return env && *env ? env : kSource + "/.venv-tools/bin/python";
}

// False (after saying so) when the tests cannot run here; fails where they must run.
bool have_tools() {
  if (::access(tools_python().c_str(), X_OK) == 0) return true;
  if (std::getenv("CODISTILL_REQUIRE_TOOLS"))
    FAIL(tools_python() << " is missing (scripts/setup.sh --tools creates it) and CODISTILL_REQUIRE_TOOLS is set");
  std::cout << "skipped: no Python tools (" << tools_python() << "; scripts/setup.sh --tools)\n";
  return false;
}

std::string export_cmd(const std::string& ckpt, const std::string& format, const std::string& out) {
  return tools_python() + " " + kSource + "/scripts/export_model.py " + ckpt + " --format " + format + " -o " + out;
}

std::size_t lines(const std::string& s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }

// Exports ckpt three ways and compares each with inspect's predictions.
void check_exports(const TempDir& dir, const std::string& name, const std::string& ckpt) {
  const std::string csv = dir.str(name + ".csv");
  auto ev = run_command(inspect_exe() + " eval " + ckpt + " --predictions " + csv + " --json", dir);
  INFO(ev.out << ev.err);
  REQUIRE(ev.exit_code == 0);
  const json doc = json::parse(ev.out);
  CHECK(doc["predictions"] == csv);
  CHECK(doc["data"]["examples"] == 10000);

  for (const std::string format : {"torch", "onnx", "safetensors"}) {
    auto r = run_command(export_cmd(ckpt, format, dir.str(name + "." + format)), dir);
    INFO(format << ": " << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::Contains(format + " export of " + ckpt));
  }
  auto check = run_command(tools_python() + " " + kSource + "/tests/trainer/inspect/check_export.py --checkpoint " + ckpt +
                               " --predictions " + csv + " --images " + kData + "/t10k-images-idx3-ubyte.gz --labels " +
                               kData + "/t10k-labels-idx1-ubyte.gz --torch " + dir.str(name + ".torch") + " --onnx " +
                               dir.str(name + ".onnx") + " --safetensors " + dir.str(name + ".safetensors"),
                           dir);
  INFO(check.out << check.err);
  REQUIRE(check.exit_code == 0);
  const json rep = json::parse(check.out);
  std::cout << name << ": max |p - p_inspect| over " << rep["examples"] << " test examples: torch "
            << rep["torch"]["max_abs_diff"] << ", onnx " << rep["onnx"]["max_abs_diff"] << ", safetensors "
            << rep["safetensors"]["max_abs_diff"] << "\n";
  CHECK(rep["examples"] == 10000);
  CHECK(rep["labels_match"] == true);  // the CSV is in the test set's order
  CHECK(rep["reference_accuracy"].get<double>() == doc["results"][0]["accuracy"].get<double>());
  for (const char* format : {"torch", "onnx", "safetensors"}) {
    INFO(format);
    CHECK(rep[format]["argmax_mismatches"] == 0);
    CHECK(rep[format]["max_abs_diff"].get<double>() <= 1e-5);
  }
  CHECK(rep["torch"]["metadata_step"] == "30");
  CHECK(rep["onnx"]["metadata_step"] == "30");
  const json& st = rep["safetensors"];
  CHECK(st["names_match"] == true);
  CHECK(st["values_identical"] == true);
  CHECK(st["normalization_identical"] == true);
  CHECK(st["metadata_model_identical"] == true);
  CHECK(st["fingerprint_matches"] == true);
}

}  // namespace

TEST_CASE("exported mlp, cnn, resnet and layers models predict what codistill-inspect eval predicts",
          "[process][export]") {
  if (!have_tools()) return;
  TempDir dir;
  SECTION("mlp (gelu, dropout)") {
    check_exports(dir, "mlp",
                  short_training_run(dir, "mlp", "fmnist_mlp.yaml",
                        "--set model.hidden=[64,32] --set model.activation=gelu --set model.dropout=0.1"));
  }
  SECTION("cnn") {
    check_exports(dir, "cnn",
                  short_training_run(dir, "cnn", "fmnist_cnn.yaml",
                        "--set model.channels=[16,32] --set model.kernel_size=3 --set model.hidden=[64]"));
  }
  SECTION("resnet (batch normalization with its running statistics, projection shortcuts)") {
    check_exports(dir, "resnet",
                  short_training_run(dir, "resnet", "fmnist_resnet.yaml", "--set model.channels=[8,16] --set model.blocks=1"));
  }
  SECTION("layers (the shipped list, and a residual list with both shortcuts, layernorm, gelu)") {
    check_exports(dir, "layers", short_training_run(dir, "layers", "fmnist_layers.yaml", ""));
    check_exports(
        dir, "layers_residual",
        short_training_run(dir, "layers_residual", "fmnist_layers.yaml",
              "--set 'model.layers=[{conv2d: {out_channels: 8, kernel: 3, stride: 2, padding: 1}}, {batchnorm: {}}, "
              "{gelu: {}}, {residual: {layers: [{conv2d: {out_channels: 8, kernel: 3, padding: 1}}, {relu: {}}]}}, "
              "{residual: {layers: [{conv2d: {out_channels: 16, kernel: 3, stride: 2, padding: 1}}]}}, "
              "{global_avg_pool: {}}, {layernorm: {eps: 0.001}}, "
              "{residual: {layers: [{linear: {out: 12}}], shortcut: [{linear: {out: 12, bias: false}}]}}, "
              "{dropout: {p: 0.1}}, {linear: {out: 10}}]'"));
  }
}

TEST_CASE("export refuses bad input with one line and a non-zero exit", "[process][export]") {
  if (!have_tools()) return;
  TempDir dir;
  const std::string ckpt = short_training_run(dir, "mlp", "fmnist_mlp.yaml", "--set model.hidden=[16] --set data.test_limit=50");
  auto refused = [&](const std::string& cmd, int code, const std::string& says) {
    auto r = run_command(cmd, dir);
    INFO(cmd << "\n" << r.out << r.err);
    CHECK(r.exit_code == code);
    CHECK(lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains(says));
  };
  SECTION("not a checkpoint") {
    write_text(dir.str("text.h5"), "not HDF5\n");
    refused(export_cmd(dir.str("text.h5"), "torch", dir.str("m.pt")), 1, "not a codistill checkpoint (not an HDF5 file)");
    refused(export_cmd(dir.str("absent.h5"), "torch", dir.str("m.pt")), 1, "absent.h5: no such file");
    fs::copy_file(ckpt, dir.str("noformat.h5"));
    codistill::checkpoint::delete_attribute(dir.str("noformat.h5"), "format");
    refused(export_cmd(dir.str("noformat.h5"), "onnx", dir.str("m.onnx")), 1,
            "not a codistill checkpoint (missing attribute format)");
  }
  SECTION("unknown model kind") {
    fs::copy_file(ckpt, dir.str("gpt.h5"));
    codistill::checkpoint::set_attribute(dir.str("gpt.h5"), "model",
                                         std::string("kind: gpt\ninput_shape: [1, 28, 28]\nclasses: 10\n"));
    refused(export_cmd(dir.str("gpt.h5"), "safetensors", dir.str("m.st")), 1, "unknown model kind 'gpt' (valid: cnn, layers, mlp, resnet)");
  }
  SECTION("unknown format") {
    refused(export_cmd(ckpt, "tflite", dir.str("m.tflite")), 2, "unknown format 'tflite' (valid: torch, onnx, safetensors)");
  }
  SECTION("an existing output is replaced only with --force") {
    write_text(dir.str("m.onnx"), "keep me");
    refused(export_cmd(ckpt, "onnx", dir.str("m.onnx")), 1, "m.onnx: exists (use --force to replace it)");
    CHECK(read_text(dir.str("m.onnx")) == "keep me");
    auto forced = run_command(export_cmd(ckpt, "onnx", dir.str("m.onnx")) + " --force", dir);
    INFO(forced.err);
    CHECK(forced.exit_code == 0);
    CHECK(fs::file_size(dir.str("m.onnx")) > 1000);
  }
  // No temp file is left behind by a refusal or a success.
  for (const auto& entry : fs::directory_iterator(dir.path()))
    CHECK(entry.path().filename().string().find(".tmp.") == std::string::npos);
}
