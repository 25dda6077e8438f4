// A Trainer's set-up, phase by phase (trainer_setup.hpp; training.cpp runs them in order).
#include "codistill/train/trainer_setup.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <span>

#include <boost/filesystem/operations.hpp>
#include <fmt/format.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "codistill/config/config_loader.hpp"
#include "codistill/data/feed/batch_loader.hpp"
#include "codistill/persist/data_record.hpp"
#include "codistill/persist/membership.hpp"
#include "codistill/util/run_errors.hpp"
#include "codistill/teachers/fixed_teachers.hpp"
#include "codistill/train/group.hpp"
#include "codistill/teachers/precision.hpp"
#include "codistill/util/openmp_env.hpp"
#include "codistill/util/rng.hpp"
#include "kernels/backend.hpp"

namespace codistill::setup {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Random streams of one worker, one per purpose, so that adding a use of randomness in
// one place never shifts another.
enum RngPurpose : std::uint64_t { kModelInit = 1 };

// The device a config names, checked against the registry: a device its backend cannot
// use here (a build without it, no hardware, an index beyond the visible ones) throws
// TrainingError (exit code 1) saying which, before anything is written.
kernels::Device usable_device(const std::string& name) {
  const kernels::Device d = kernels::Device::parse(name);
  const kernels::Backend& b = kernels::backend_for(d);
  const int n = b.device_count();
  if (n == 0) throw TrainingError(fmt::format("device '{}': {} - use --device cpu", name, b.unavailable_reason()));
  if (d.index >= n)
    throw TrainingError(fmt::format("device '{}': only {} {} device(s) are visible ({}:0 .. {}:{})", name, n, b.name(),
                                    b.name(), b.name(), n - 1));
  return d;
}

// Where the config names the worker's model: its worker_models entry, or model.
std::string model_section(const Config& c, const char* key) {
  return c.worker_models.count(c.run.worker) ? fmt::format("worker_models.{}{}", c.run.worker, key)
                                             : fmt::format("model{}", key);
}

}  // namespace

void choose_device(Trainer::State& s) {
  const Config& c = s.cfg;
  s.learner.device = usable_device(c.device);  // before anything is written
  kernels::backend_for(kernels::DeviceKind::cpu).set_threads(c.run.threads);
  // A worker group's ranks (docs/architecture.md section 5): rank 0 leads (the worker's
  // files, evaluation); the others only train. One process is a "single" group of one.
  if (s.opts.group) {
    s.group = s.opts.group;
  } else {
    dist::GroupOptions single = group_options(c.group);
    single.kind = "single";
    s.group = dist::make_process_group(single);
  }
  dist::ProcessGroup& group = *s.group;
  // A group that all-reduces device memory (nccl) chose this rank's device when it was made
  // (its local rank modulo the visible GPUs): `device: cuda` without an index means that
  // one; any other device is refused (exit 2) rather than reduced through the wrong memory.
  if (group.reduces_device_memory()) {
    const kernels::Device chosen = kernels::Device::parse(group.device());
    if (c.device.find(':') == std::string::npos && s.learner.device.kind == chosen.kind) {
      s.learner.device = usable_device(group.device());
      s.cfg.device = s.learner.device.str();  // what the rest reads (teachers go to this device too)
    }
    try {
      check_group_device(group, s.learner.device);
    } catch (const std::invalid_argument& e) {
      throw ConfigError(c.device == "cpu" ? "group.kind" : "device", "", 0, e.what());
    }
  }
  // A channels-last request the device's backend cannot honour: the model's device move
  // would refuse it too, but later (after the run directory is made) and as a runtime error,
  // while it is the config's key that is wrong.
  if (model_of(c, c.run.worker).memory_format == "nhwc" && !kernels::backend_for(s.learner.device).supports_channels_last())
    throw ConfigError("model.memory_format", "", 0,
                      fmt::format("nhwc: the {} backend has no channels-last image ops (use auto or nchw)",
                                  kernels::backend_for(s.learner.device).name()));
  // Flash attention where the device's backend has no kernel for it: the first forward would
  // refuse it, but after the run directory is made and as a runtime error, while it is the
  // config's key that is wrong. Under bf16 a backend whose tiles compute in float32 (CUDA's,
  // Backend::op_computes) still runs them: more precise than asked, and without the T x T
  // probabilities the materialized attention would keep.
  if (const kernels::Backend& b = kernels::backend_for(s.learner.device);
      model_of(c, c.run.worker).kind == "gpt" && model_of(c, c.run.worker).attention == "flash" &&
      !b.supports(kernels::Op::flash_attention, kernels::DType::f32))
    throw ConfigError(model_section(c, ".attention"), "", 0,
                      fmt::format("flash: the {} backend has no flash_attention kernel (use materialized)", b.name()));
  // A precision the device's backend cannot compute in: refused here, naming the key, rather
  // than by to_device (later, and whose other refusals are not about precision).
  for (const auto& [key, compute] : {std::pair{"train.precision", student_compute(c)},
                                     std::pair{"codistill.teacher_precision", teacher_compute(c)}}) {
    const kernels::Backend& backend = kernels::backend_for(s.learner.device);
    if (!backend.supports_compute(compute))
      throw ConfigError(key, "", 0,
                        fmt::format("the {} backend cannot compute GEMMs in {}", backend.name(),
                                    kernels::compute_name(compute)));
  }
  check_teacher_weights(c, kernels::backend_for(s.learner.device));
  s.lead = group.rank() == 0;
}

void make_logger(Trainer::State& s) {
  const Config& c = s.cfg;
  // The console first; train.log joins once the run directory is known to be ours. Ranks
  // other than 0 say only what goes wrong, on stderr.
  std::vector<spdlog::sink_ptr> sinks;
  if (s.lead && s.opts.console) sinks.push_back(std::make_shared<spdlog::sinks::stdout_sink_mt>());
  if (!s.lead) sinks.push_back(std::make_shared<spdlog::sinks::stderr_sink_mt>());
  s.log = std::make_shared<spdlog::logger>(fmt::format("worker-{}", c.run.worker), sinks.begin(), sinks.end());
  s.log->set_pattern(s.lead ? fmt::format("[%H:%M:%S] [w{}] %v", c.run.worker)
                            : fmt::format("[%H:%M:%S] [w{} rank {}] %v", c.run.worker, s.group->rank()));
  if (!s.lead) s.log->set_level(spdlog::level::warn);
  s.log->flush_on(spdlog::level::info);
}

void load_data_and_model(Trainer::State& s, Pending& p) {
  const Config& c = s.cfg;
  const auto t0 = Clock::now();
  p.mc = model_of(c, c.run.worker);
  s.learner.modality = make_modality(c, s.group->rank());
  s.learner.modality->load(p.mc, model_section(c, ""));
  p.data_identity = identify_data(s.learner.modality->data());
  p.load_s = seconds_since(t0);
  Rng init_rng(c.run.seed, static_cast<std::uint64_t>(c.run.worker), kModelInit);
  s.learner.model = s.opts.model_factory ? s.opts.model_factory(p.mc, init_rng) : build_model(p.mc, init_rng);
  // A property of the student's module tree, set before the memory plan reads it; teachers
  // are models of their own and only run forward.
  try {
    s.learner.model.set_recompute(c.train.recompute);
  } catch (const std::invalid_argument& e) {
    throw ConfigError("train.recompute", "", 0, fmt::format("{} (model.kind {})", e.what(), p.mc.kind));
  }
}

void find_resume_point(Trainer::State& s, Pending& p) {
  const Config& c = s.cfg;
  auto& resume_from = p.resume_from;
  // A retired worker (persist/retirement.hpp) has left the cohort for good: like a finished
  // one, it says so and touches nothing.
  if (auto r = read_marker(run_paths(c).worker_dir, kRetiredMarker))
    throw WorkerFinished(fmt::format("worker {} of {} has retired{} ({}): nothing to do; remove that file to let "
                                     "it train again",
                                     c.run.worker, c.run.dir, r->step >= 0 ? fmt::format(" at step {}", r->step) : "",
                                     marker_path(run_paths(c).worker_dir, kRetiredMarker)));
  // Rank 0 picks the checkpoint to resume from (cleaning up dead writers' temp files); the
  // others read that very file, so every rank starts from the same state.
  if (s.lead) {
    s.checkpoints = std::make_unique<CheckpointManager>(c, s.log);
    resume_from = s.checkpoints->find_resume_point(s.opts.resume, s.learner.model.fingerprint());
  }
  std::vector<std::int64_t> resume_step = {resume_from ? resume_from->data.meta.step : -1};
  broadcast_values(*s.group, resume_step);
  if (!s.lead && resume_step[0] >= 0) {
    checkpoint::ReadOptions read_options;
    read_options.expected_fingerprint = s.learner.model.fingerprint();
    checkpoint::LoadedCheckpoint loaded;
    loaded.file.path = checkpoint::RunStore(c.run.dir).checkpoint_path(c.run.worker, resume_step[0]);
    loaded.file.step = resume_step[0];
    loaded.data = checkpoint::read(loaded.file.path, read_options);
    resume_from = std::move(loaded);
  }
  // Checked before the run directory is prepared or any log line written: nothing changes
  // (a different run in the directory is refused first, as prepare_run_dir would).
  if (resume_from && s.lead) check_same_run(c);
  if (resume_from && s.lead) check_recorded_data(run_paths(c).worker_dir, p.data_identity);
  if (resume_from && resume_from->data.meta.step >= c.train.steps)
    throw WorkerFinished("worker " + std::to_string(c.run.worker) + " of " + c.run.dir +
                         " has finished: its checkpoint " + resume_from->file.path + " is at step " +
                         std::to_string(resume_from->data.meta.step) + " of train.steps " +
                         std::to_string(c.train.steps) + "; nothing to do");
  // A group's batch is R x data.batch_size, so another rank count would silently continue
  // another run: the checkpoint's examples_seen (step x B x R when it was written) says R.
  const int ranks = s.group->size();
  if (resume_from && resume_from->data.meta.step > 0) {
    const std::int64_t per_step_rank = resume_from->data.meta.step * c.data.batch_size;
    const std::int64_t seen = resume_from->data.meta.examples_seen;
    if (seen % per_step_rank == 0 && seen / per_step_rank != ranks)
      throw RunDirError(fmt::format("worker {}'s checkpoint {} was written by a group of {} rank(s) ({} examples in {} "
                                    "steps of {} per rank); this one has {}: resume with -np {}",
                                    c.run.worker, resume_from->file.path, seen / per_step_rank, seen,
                                    resume_from->data.meta.step, c.data.batch_size, ranks, seen / per_step_rank));
  }
}

void apply_init_from(Trainer::State& s, Pending& p) {
  // Fine-tuning: loaded before anything is written, so a bad model.init_from (exit 2)
  // leaves no trace. A resumed run's own checkpoint wins.
  if (!p.mc.init_from.empty() && !p.resume_from)
    p.init_source =
        init_model_from(s.learner.model, p.mc, p.mc.init_from, s.cfg.run.worker, s.cfg.run.dir,
                        model_section(s.cfg, ".init_from"));
  if (p.init_source && p.init_source->join && p.init_source->step >= s.cfg.train.steps)
    throw WorkerFinished(fmt::format("worker {} would join {} at step {} ({}), which is not before train.steps {}: "
                                     "nothing to do",
                                     s.cfg.run.worker, s.cfg.run.dir, p.init_source->step, p.init_source->path,
                                     s.cfg.train.steps));
  // A directory init_from names may gain a checkpoint between the ranks' reads: rank 0's
  // parameters and buffers are the group's.
  if (p.init_source && s.group->size() > 1) {
    ParamArena& arena = s.learner.model.arena();
    auto send = [&](kernels::Tensor& block) {
      if (block.defined() && block.numel() > 0)
        s.group->broadcast(std::span<float>(block.data<float>(), static_cast<std::size_t>(block.numel())), 0);
    };
    send(arena.values());
    send(arena.buffers());
  }
}

void claim_run_dir(Trainer::State& s, const Pending& p) {
  const Config& c = s.cfg;
  if (!s.lead) {
    s.files.paths = run_paths(c);
    s.files.metrics = std::make_unique<MetricsWriter>();  // disabled: rank 0 writes the worker's metrics
    return;
  }
  const bool had_metrics = boost::filesystem::exists(run_paths(c).metrics);
  // One process per worker: claimed before anything in its folder is written.
  {
    boost::system::error_code ec;
    boost::filesystem::create_directories(run_paths(c).worker_dir, ec);
    if (ec) throw RunDirError("cannot create " + run_paths(c).worker_dir + ": " + ec.message());
    s.files.owner = std::make_unique<WorkerOwner>(run_paths(c).worker_dir);
  }
  s.files.paths = prepare_run_dir(c, s.opts.resume);
  s.log->sinks().push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(s.files.paths.log));
  // A log line that cannot be written (a full disk) is lost from train.log but still reaches
  // the console; say so once instead of once per line. Training goes on: metrics.jsonl, whose
  // write failures stop the worker, is the run's record.
  s.log->set_error_handler([path = s.files.paths.log](const std::string& msg) {
    static std::once_flag once;
    std::call_once(once, [&] {
      std::fprintf(stderr, "codistill-train: %s cannot be written (%s): log lines go to the "
                   "console only\n", path.c_str(), msg.c_str());
    });
  });
  s.files.metrics = std::make_unique<MetricsWriter>(s.files.paths.metrics);
  s.checkpoints->set_metrics(s.files.metrics.get());
  record_data(s.files.paths.worker_dir, p.data_identity);
  if (!p.resume_from && had_metrics)
    s.log->warn("{} holds an earlier start of this worker but no checkpoint: starting from step 0, "
                "appending to its metrics.jsonl", s.files.paths.worker_dir);
}

void log_start(Trainer::State& s, Pending& p) {
  const Config& c = s.cfg;
  s.learner.modality->log_data(*s.log, p.load_s);
  s.log->info("data path {} (shard {}): {} file(s), fingerprint {:016x} (recorded in worker's data.json)",
              p.data_identity.path, s.learner.modality->data().shard, p.data_identity.files.size(),
              p.data_identity.fingerprint);
  s.log->info("model {} ({} parameters, fingerprint {}):\n{}", p.mc.kind, s.learner.model.num_params(),
              s.learner.model.fingerprint(), s.learner.model.summary());
  if (p.init_source)
    s.log->info("model initialized from {} (worker {}, step {}): parameters and buffers only; the optimizer, step "
                "count and data order start fresh",
                p.init_source->path, p.init_source->worker, p.init_source->step);
  else if (!p.mc.init_from.empty())
    s.log->info("model.init_from ({}) ignored: resuming from this worker's own checkpoint", p.mc.init_from);
  const int ranks = s.group->size();
  if (ranks > 1)
    s.log->info("worker group: {} ranks ({} process group), {} examples per rank and step, {} per step in all",
                ranks, s.group->kind(), c.data.batch_size, ranks * c.data.batch_size);
}

void make_batch_source(Trainer::State& s, Pending& p) {
  // Phase 1's source (data/feed/batch_source.hpp). Every rank draws the group's whole batch
  // and trains on its own slice of it.
  p.source = s.learner.modality->make_source(RankSlice{s.group->rank(), s.group->size()}, s.learner.device, *s.log, p.prefetch);
  s.log->info("data shard: {}", p.source->describe());
}

void restore_and_place(Trainer::State& s, Pending& p) {
  const Config& c = s.cfg;
  WorkerState& w = s.learner.worker;
  w.model = &s.learner.model;
  w.optimizer = s.learner.optimizer.get();
  w.source = p.source.get();
  w.normalization = s.learner.modality->normalization();
  w.worker = c.run.worker;
  w.model_yaml = model_yaml(p.mc);
  w.config_yaml = to_yaml(c);
  if (p.resume_from) {
    restore_state(w, p.resume_from->data);
    s.log->info("resuming from {} at step {}", p.resume_from->file.path, w.step);
  } else if (p.init_source && p.init_source->join) {
    // Joining a running run: its step count, so that the schedule and the exchanges line up
    // with the peers'; the optimizer and the data order start fresh.
    w.step = p.init_source->step;
    s.log->info("joining the run at step {} with the weights of worker {} ({})", w.step, p.init_source->worker,
                p.init_source->path);
    // Before the first step: sync-mode peers stop waiting for this worker's earlier steps.
    if (s.lead) write_marker(s.files.paths.worker_dir, kJoinedMarker, c.run.worker, Membership{w.step, p.init_source->path});
    s.files.metrics->emit("cohort", w.step,
                    {{"joined", std::vector<int>{c.run.worker}}, {"from_worker", p.init_source->worker},
                     {"from", p.init_source->path}});
  }
  // Built, initialized and restored on the host (bit for bit a CPU run's start), then
  // moved (a no-op on the CPU); optimizer slots follow the parameters on their next use.
  kernels::QueueOptions queue_options;
  queue_options.allow_tf32 = c.train.allow_tf32;
  queue_options.compute = student_compute(c);
  s.learner.model.to_device(s.learner.device, queue_options);
  s.log->info("device {} ({} backend{}{})", s.learner.device.str(), s.learner.model.queue().backend().name(),
              c.train.allow_tf32 ? ", TF32 allowed" : "",
              queue_options.compute == kernels::Compute::bf16 ? ", bf16 mixed precision" : "");
  s.log->info("OpenMP: {} threads, {}", kernels::backend_for(kernels::DeviceKind::cpu).threads(),
              openmp_spin_summary());
  const int ranks = s.group->size();
  if (c.group.sync_batchnorm && ranks > 1) {  // one process: its statistics are the group's already
    try {
      const int layers = synchronize_batchnorm(*s.group, s.learner.model);
      s.log->info("synchronized BatchNorm over the {} ranks: {} layer(s)", ranks, layers);
    } catch (const std::invalid_argument& e) {
      throw ConfigError("group.sync_batchnorm", "", 0, e.what());
    }
  }
}

void make_step(Trainer::State& s, Pending& p) {
  const Config& c = s.cfg;
  kernels::DistillLossParams loss_params;
  loss_params.temperature = c.codistill.temperature;
  loss_params.weight = c.codistill.weight;
  const bool distills = c.codistill.enabled || !c.codistill.fixed_teachers.empty();
  loss_params.hard_weight = distills ? c.codistill.hard_weight : 1.0;
  s.learner.step = std::make_unique<TrainStep>(s.learner.model, std::move(p.source), c.data.batch_size, loss_params,
                                       c.train.micro_batches, /*double_buffer=*/p.prefetch);
  s.learner.step->set_teacher_compute(teacher_compute(c));
  if (c.train.fused_head) {
    try {
      s.learner.step->set_fused_head(true);
    } catch (const std::invalid_argument& e) {
      throw ConfigError("train.fused_head", "", 0, e.what());
    }
  }
  s.learner.modality->emit_first(*s.files.metrics, s.learner.worker.step);  // what "learning" means for this data, where it says
}

void start_teachers(Trainer::State& s, const Pending& p) {
  const Config& c = s.cfg;
  WorkerState& w = s.learner.worker;
  if (s.checkpoints) s.checkpoints->prepare(w);
  if (c.codistill.enabled || !c.codistill.fixed_teachers.empty())
    s.teachers = std::make_unique<TeacherPool>(s.cfg, p.mc, s.log, /*follower=*/!s.lead, s.opts.model_factory);
  // codistill.share_teachers: before any teacher loads (rank 0's resume, the first follow).
  if (s.teachers && c.codistill.enabled) start_teacher_sharing(c, *s.group, s.learner.device, *s.teachers, *s.log);
  // The teacher gate scores fixed teachers when a worker starts (every rank, so that a
  // refusal stops them all alike) and each peer checkpoint rank 0 loads; the teachers a
  // resumed worker takes back were accepted already, so it is set after those are loaded.
  auto set_gate = [&] {
    if (!s.teachers || !c.codistill.gate.enabled || s.teachers->has_gate()) return;
    GateConfig gate = c.codistill.gate;
    if (gate.probe == 0) gate.probe = s.learner.modality->probe_rows();
    s.teachers->set_gate(std::make_unique<TeacherGate>(
        gate, [m = s.learner.modality.get(), rows = gate.probe](Model& model) { return m->probe(model, rows); }, s.learner.model));
  };
  if (!p.resume_from) set_gate();
  if (!c.codistill.fixed_teachers.empty()) {
    // Chosen once per worker (recorded beside its checkpoints); a resumed worker takes the
    // recorded files again, even where a teacher run has published newer ones since. In a
    // group rank 0 chooses and records them; the others take the record.
    const std::string record = s.files.paths.worker_dir + "/fixed_teachers.json";
    std::vector<FixedTeacherFile> files;
    if (s.lead) {
      files = p.resume_from ? read_fixed_record(record) : std::vector<FixedTeacherFile>{};
      if (files.empty()) {
        files = resolve_fixed_teachers(c.codistill.fixed_teachers);
        write_fixed_record(record, files);
      }
    }
    if (s.group->size() > 1) s.group->barrier();  // the record is written
    if (!s.lead) files = read_fixed_record(record);
    s.teachers->load_fixed(files, s.learner.modality->normalization(), s.files.metrics.get(), w.step);
  }
  if (c.codistill.enabled && s.lead) s.teachers->resume(w.teacher_steps, s.files.metrics.get(), w.step);
  set_gate();
}

}  // namespace codistill::setup
