// Teacher files published by a worker's checkpoints (persist/checkpointing.hpp,
// checkpoint.teacher_dtype / teacher_every): beside every k-th checkpoint and the last one,
// holding the checkpoint's parameters and buffers (float32: bit for bit; bf16: rounded),
// deleted with their checkpoints by retention; with the writer thread or without.
#include <catch2/catch.hpp>

#include <cstring>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/store.hpp"
#include "codistill/train/training.hpp"
#include "kernels/cpu/bf16.hpp"
#include "support/process.hpp"
#include "support/small_run.hpp"

using namespace codistill;

namespace {

std::vector<std::int64_t> steps_of(const std::vector<checkpoint::CheckpointFile>& files) {
  std::vector<std::int64_t> out;
  for (const auto& f : files) out.push_back(f.step);
  return out;
}

// The teacher file holds the checkpoint's params and buffers (rounded to bf16 if so).
void require_teacher_of(const std::string& teacher, const std::string& ckpt, bool bf16) {
  const checkpoint::CheckpointData t = checkpoint::read(teacher), c = checkpoint::read(ckpt);
  CHECK(t.meta.step == c.meta.step);
  CHECK(t.meta.model_fingerprint == c.meta.model_fingerprint);
  CHECK(t.optimizer.empty());
  CHECK(t.state.empty());
  for (auto s : {checkpoint::Section::params, checkpoint::Section::buffers}) {
    REQUIRE(t.section(s).size() == c.section(s).size());
    for (std::size_t i = 0; i < c.section(s).size(); ++i) {
      const auto &x = t.section(s)[i], &y = c.section(s)[i];
      INFO(y.name);
      REQUIRE(x.name == y.name);
      const auto xv = x.values<float>(), yv = y.values<float>();
      REQUIRE(xv.size() == yv.size());
      std::size_t wrong = 0;
      for (std::size_t k = 0; k < yv.size(); ++k)
        wrong += xv[k] != (bf16 ? kernels::cpu::bf16_rounded(yv[k]) : yv[k]);
      CHECK(wrong == 0);
    }
  }
}

}  // namespace

TEST_CASE("teacher files are published beside every k-th and the last checkpoint, retained with them",
          "[persist][checkpoint][teacher_files]") {
  for (bool async : {true, false}) {
    for (const std::string dtype : {"float32", "bf16"}) {
      DYNAMIC_SECTION((async ? "async " : "sync ") << dtype) {
        test::TempDir dir;
        test::SmallRun s;
        s.model = "resnet";  // with buffers (BatchNorm)
        s.batch = 16;
        s.train_examples = 256;
        s.test_examples = 64;
        s.hidden = 16;
        s.steps = 9;
        s.log_every = 100;
        Config c = test::small_run_config(dir.str("run"), s);
        c.optimizer.kind = "adamw";
        c.optimizer.lr = 1e-3;
        c.checkpoint.every = 1;
        c.checkpoint.keep = 4;
        c.checkpoint.async = async;
        c.checkpoint.teacher_dtype = dtype;
        c.checkpoint.teacher_every = 3;
        TrainOptions opts;
        opts.console = false;
        Trainer(c, opts).run();
        checkpoint::RunStore store(c.run.dir);
        // Checkpoints 6..9 kept; teacher files at 3, 6, 9 were written, 3 went with its
        // checkpoint. Step 9 (the last) is a k-th here; see below for one that is not.
        CHECK(steps_of(store.checkpoints(0)) == std::vector<std::int64_t>{6, 7, 8, 9});
        CHECK(steps_of(store.teacher_files(0)) == std::vector<std::int64_t>{6, 9});
        for (std::int64_t step : {6, 9}) {
          INFO("step " << step);
          CHECK(checkpoint::verify(store.teacher_path(0, step)).valid);
          require_teacher_of(store.teacher_path(0, step), store.checkpoint_path(0, step), dtype == "bf16");
        }
        // What a teacher reads of one: a fraction of an AdamW checkpoint (params + 2 slots;
        // the files' sizes are mostly attributes at this size).
        const double ckpt_read = static_cast<double>(checkpoint::read(store.checkpoint_path(0, 9)).bytes_read);
        const double teacher_read = static_cast<double>(checkpoint::read(store.teacher_path(0, 9)).bytes_read);
        CHECK(ckpt_read / teacher_read >= (dtype == "bf16" ? 5.0 : 2.5));
        auto events = test::read_events(std::filesystem::path(store.worker_dir(0)) / "metrics.jsonl", "checkpoint");
        std::vector<std::int64_t> with_teacher;
        for (const auto& e : events)
          if (e.contains("teacher_bytes")) with_teacher.push_back(e.at("step").get<std::int64_t>());
        CHECK(with_teacher == std::vector<std::int64_t>{3, 6, 9});
      }
    }
  }
}

TEST_CASE("the last checkpoint of a run gets a teacher file, and teacher_dtype none writes none",
          "[persist][checkpoint][teacher_files]") {
  test::TempDir dir;
  test::SmallRun s;
  s.steps = 8;
  s.log_every = 100;
  Config c = test::small_run_config(dir.str("run"), s);
  c.checkpoint.every = 1;
  c.checkpoint.keep = 2;
  c.checkpoint.teacher_every = 3;
  TrainOptions opts;
  opts.console = false;
  Trainer(c, opts).run();
  checkpoint::RunStore store(c.run.dir);
  CHECK(steps_of(store.teacher_files(0)) == std::vector<std::int64_t>{8});  // 3 and 6 went with theirs
  require_teacher_of(store.teacher_path(0, 8), store.checkpoint_path(0, 8), false);

  c.run.dir = dir.str("none");
  c.checkpoint.teacher_dtype = "none";
  Trainer(c, opts).run();
  CHECK(checkpoint::RunStore(c.run.dir).teacher_files(0).empty());
  CHECK(checkpoint::RunStore(c.run.dir).checkpoints(0).size() == 2);
}
