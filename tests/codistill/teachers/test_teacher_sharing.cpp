// A teacher's parameters shared through a file (teachers/teacher_sharing.hpp): the writer's
// model and a reader's model built with other random values both run on the mapping, and
// their logits are bit-identical to the unshared teacher's, for float32 and bf16 weights; a
// file of another layout is refused, leaving the model as it was.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "codistill/teachers/teacher_sharing.hpp"
#include "codistill/util/rng.hpp"
#include "kernels/backend.hpp"
#include "support/process.hpp"
#include "support/training_setup.hpp"

using namespace codistill;
using kernels::DType;
using kernels::Tensor;

namespace {

// A forward-only teacher as TeacherPool makes one, from `seed`'s initial values.
Model teacher(const ModelConfig& mc, std::uint64_t seed, bool bf16) {
  Rng rng(seed);
  Model m = build_model(mc, rng);
  if (bf16) m.to_bf16_weights();
  else m.drop_grads();
  return m;
}

void place(Model& m, bool bf16) {
  kernels::QueueOptions o;
  o.compute = bf16 ? kernels::Compute::bf16 : kernels::Compute::f32;
  o.frozen_params = true;
  m.to_device(kernels::Device::cpu(), o);
}

std::vector<float> logits(Model& m) {
  Tensor ids = Tensor::empty({3, 16}, DType::i32);
  for (std::int64_t i = 0; i < ids.numel(); ++i) ids.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 37 + 11) % 64);
  const Tensor y = m.forward(ids, false);
  m.synchronize();
  return {y.data<float>(), y.data<float>() + y.numel()};
}

SharedTeacherMeta meta_of(Model& m) {
  return {"kind: gpt\n", m.fingerprint(), "/runs/a/worker-001/ckpt-000000010.h5", false, 10};
}

}  // namespace

TEST_CASE("teacher sharing: writer and reader run on one mapping, logits bit-identical to the unshared teacher's",
          "[teachers][share]") {
  for (bool bf16 : {false, true}) {
    INFO("bf16 weights " << bf16);
    const ModelConfig mc = test::tiny_gpt(2, 32, 2, 16, 64);
    test::TempDir dir;
    Model unshared = teacher(mc, 7, bf16);
    place(unshared, bf16);
    const auto want = logits(unshared);

    Model writer = teacher(mc, 7, bf16);
    const std::string path = dir.str("codistill-teacher.1.t");
    auto owner = publish_teacher(writer, path, meta_of(writer));
    place(writer, bf16);
    Model reader = teacher(mc, 99, bf16);  // other values: all it computes with must come from the file
    place(reader, bf16);
    CHECK(logits(reader) != want);
    auto mapping = SharedMapping::open(path);
    adopt_shared(reader, mapping);
    CHECK(logits(writer) == want);
    CHECK(logits(reader) == want);
    // One copy: both arenas' blocks are the file's pages (the writer's own blocks freed).
    CHECK(writer.arena().values().raw() != reader.arena().values().raw());  // two mappings of it...
    CHECK(mapping->block(0).data() == reinterpret_cast<const std::byte*>(reader.arena().values().raw()));
    if (bf16) CHECK(mapping->block(2).data() == reinterpret_cast<const std::byte*>(reader.arena().matrices().raw()));
    const SharedTeacherMeta m = parse_meta(mapping->meta(), path);
    CHECK(m.fingerprint == writer.fingerprint());
    CHECK(m.step == 10);
    CHECK(m.source == "/runs/a/worker-001/ckpt-000000010.h5");
    owner.reset();  // the writer's teacher replaced: the file goes, the mappings stay
    CHECK_FALSE(std::filesystem::exists(path));
    CHECK(logits(reader) == want);
  }
}

TEST_CASE("teacher sharing: a file of another layout is refused and the model keeps its own values",
          "[teachers][share]") {
  const ModelConfig mc = test::tiny_gpt(1, 32, 2, 16, 64);
  test::TempDir dir;
  Model bf16 = teacher(mc, 7, true);
  const std::string path = dir.str("codistill-teacher.1.u");
  auto owner = publish_teacher(bf16, path, meta_of(bf16));
  Model f32 = teacher(mc, 7, false);
  place(f32, false);
  const auto before = logits(f32);
  CHECK_THROWS_WITH(adopt_shared(f32, SharedMapping::open(path)), Catch::Contains("codistill.teacher_weights"));
  CHECK(logits(f32) == before);
  CHECK_THROWS_AS(parse_meta("{\"model\": 3}", path), SharedFileError);
  // A model that still trains (gradients) never runs on read-only storage.
  Rng rng(1);
  Model trains = build_model(mc, rng);
  CHECK_THROWS_AS(publish_teacher(trains, dir.str("codistill-teacher.1.v"), meta_of(trains)), std::logic_error);
}

TEST_CASE("teacher sharing: file names are unique per writer, run, worker, peer, step and weights", "[teachers][share]") {
  TeacherSharing s;
  s.dir = "/dev/shm";
  s.writer_pid = 4242;
  s.name = "00ab.w3";
  CHECK(shared_teacher_path(s, 1, 200, "bf16") == "/dev/shm/codistill-teacher.4242.00ab.w3.p1.s200.bf16");
  CHECK(shared_teacher_path(s, 2, 200, "bf16") != shared_teacher_path(s, 1, 200, "bf16"));
  CHECK(shared_teacher_path(s, 1, 200, "float32") != shared_teacher_path(s, 1, 200, "bf16"));
}
