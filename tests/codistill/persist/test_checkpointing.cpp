// The asynchronous checkpoint of a CPU worker (persist/checkpointing.hpp): its state is kept by
// the next step's out-of-place update instead of a copy. Each checkpoint must hold the state
// of its own step, exactly what a synchronous write of that step holds, and training must go
// on as it would without checkpoints in between, whatever the optimizer (with slots or
// none), with buffers (BatchNorm), with a checkpoint after every step (blocks reused while a
// write is in flight), with writes skipped (on_busy: skip) or failing, and for the final
// checkpoint, which no update follows (copied into the spare blocks).
#include <catch2/catch.hpp>

#include <cstring>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/fault_seam.hpp"
#include "checkpoint/store.hpp"
#include "codistill/train/training.hpp"
#include "support/process.hpp"
#include "support/small_run.hpp"

using namespace codistill;

namespace {

Config small_config(const std::string& run_dir, const std::string& model_kind, const std::string& optimizer,
                    double momentum = 0.9) {
  test::SmallRun s;
  s.model = model_kind;
  s.seed = 5;
  s.batch = 16;
  s.train_examples = 256;
  s.test_examples = 64;
  s.hidden = 16;
  s.steps = 8;
  s.log_every = 100;
  Config c = test::small_run_config(run_dir, s);
  c.optimizer.kind = optimizer;
  c.optimizer.lr = optimizer == "adamw" ? 1e-3 : 0.05;
  c.optimizer.momentum = momentum;
  c.checkpoint.keep = 100;
  return c;
}

// Every tensor of the sections that hold state (not the attributes: the config differs).
void require_same_tensors(const checkpoint::CheckpointData& a, const checkpoint::CheckpointData& b) {
  for (auto s : {checkpoint::Section::params, checkpoint::Section::buffers, checkpoint::Section::optimizer,
                 checkpoint::Section::state}) {
    INFO("section " << checkpoint::section_group(s));
    REQUIRE(a.section(s).size() == b.section(s).size());
    for (std::size_t i = 0; i < a.section(s).size(); ++i) {
      const auto &x = a.section(s)[i], &y = b.section(s)[i];
      INFO(x.name);
      REQUIRE(x.name == y.name);
      REQUIRE(x.nbytes() == y.nbytes());
      CHECK(std::memcmp(x.data(), y.data(), x.nbytes()) == 0);
    }
  }
}

std::vector<float> final_params(Trainer& t) {
  std::vector<float> out;
  for (auto& p : t.model().params()) {
    const float* v = p.value->data<float>();
    out.insert(out.end(), v, v + p.value->numel());
  }
  return out;
}

}  // namespace

TEST_CASE("asynchronous checkpoints hold their step's state and leave training unchanged", "[persist][checkpoint]") {
  struct Variant {
    std::string model, optimizer;
    double momentum;
    std::int64_t every;
  };
  // 8 steps: an odd number of periodic checkpoints (those before step 8) each followed by an
  // out-of-place update, so the run ends on the other value block than it started with.
  for (const Variant& v : {Variant{"mlp", "sgd", 0.9, 2}, Variant{"mlp", "adamw", 0.0, 1},
                           Variant{"resnet", "sgd", 0.9, 5}, Variant{"mlp", "sgd", 0.0, 2}}) {
    DYNAMIC_SECTION(v.model << " " << v.optimizer << " momentum " << v.momentum << " every " << v.every) {
      test::TempDir dir;
      TrainOptions opts;
      opts.console = false;
      Config plain = small_config(dir.str("plain"), v.model, v.optimizer, v.momentum);
      plain.checkpoint.every = 0;  // the end only
      Trainer p(plain, opts);
      p.run();
      Config sync = small_config(dir.str("sync"), v.model, v.optimizer, v.momentum), async = sync;
      sync.checkpoint.every = async.checkpoint.every = v.every;
      sync.checkpoint.async = false;
      async.run.dir = dir.str("async");
      Trainer s(sync, opts), a(async, opts);
      s.run();
      const void* first_block = a.model().arena().values().raw();
      a.run();
      CHECK(a.model().arena().values().raw() != first_block);  // the out-of-place path ran
      CHECK(final_params(a) == final_params(p));
      CHECK(final_params(s) == final_params(p));
      checkpoint::RunStore sync_store(sync.run.dir), async_store(async.run.dir);
      const auto sync_files = sync_store.checkpoints(0), async_files = async_store.checkpoints(0);
      REQUIRE(async_files.size() == static_cast<std::size_t>(7 / v.every + 1));
      REQUIRE(async_files.size() == sync_files.size());
      for (std::size_t i = 0; i < async_files.size(); ++i) {
        INFO(async_files[i].path);
        REQUIRE(async_files[i].step == sync_files[i].step);
        require_same_tensors(checkpoint::read(async_files[i].path), checkpoint::read(sync_files[i].path));
      }
    }
  }
}

TEST_CASE("an asynchronous checkpoint whose write fails, or which finds no memory, leaves training as it was",
          "[persist][checkpoint]") {
  test::TempDir dir;
  Config async = small_config(dir.str("async"), "mlp", "sgd"), sync = async;
  async.checkpoint.every = sync.checkpoint.every = 2;
  sync.checkpoint.async = false;
  sync.run.dir = dir.str("sync");
  TrainOptions opts;
  opts.console = false;
  fault_seam::Plan faults;
  faults.fail_checkpoint_steps = {4};  // part-way, as on a full disk
  // No memory for the update after step 6's checkpoint: written synchronously instead.
  faults.no_memory_steps = {6};
  Trainer a(async, opts), s(sync, opts);
  {
    const fault_seam::ScopedPlan planned(faults);
    a.run();
  }
  s.run();
  CHECK(final_params(a) == final_params(s));
  const auto files = checkpoint::RunStore(async.run.dir).checkpoints(0);
  std::vector<std::int64_t> steps;
  for (const auto& f : files) steps.push_back(f.step);
  CHECK(steps == std::vector<std::int64_t>{2, 6, 8});
  const std::string log = test::read_text(dir.str("async/worker-000/train.log"));
  CHECK_THAT(log, Catch::Matchers::Contains("checkpoint at step 6: no memory for an out-of-place update"));
  for (const auto& f : files) {
    INFO(f.path);
    require_same_tensors(checkpoint::read(f.path),
                         checkpoint::read(checkpoint::RunStore(sync.run.dir).checkpoint_path(0, f.step)));
  }
}

TEST_CASE("asynchronous checkpoints that skip while a write is in flight still hold their step's state",
          "[persist][checkpoint]") {
  test::TempDir dir;
  TrainOptions opts;
  opts.console = false;
  Config async = small_config(dir.str("async"), "mlp", "sgd"), sync = async;
  async.checkpoint.every = sync.checkpoint.every = 1;
  async.checkpoint.on_busy = "skip";
  sync.checkpoint.async = false;
  sync.run.dir = dir.str("sync");
  Trainer a(async, opts), s(sync, opts);
  a.run();
  s.run();
  CHECK(final_params(a) == final_params(s));
  checkpoint::RunStore async_store(async.run.dir);
  const auto files = async_store.checkpoints(0);
  REQUIRE_FALSE(files.empty());
  for (const auto& f : files) {
    INFO(f.path);
    require_same_tensors(checkpoint::read(f.path), checkpoint::read(checkpoint::RunStore(sync.run.dir)
                                                                        .checkpoint_path(0, f.step)));
  }
}
