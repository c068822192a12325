// lmtrain bench: the training step of a config (the model as train builds it, the step as train
// runs it) on random tokens, timed (or, with --compile-only, only compiled), reported as one JSON
// object.
#include "train/bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"
#include "core/timer.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "train/flops.h"
#include "train/memory_check.h"
#include "train/mesh_plan.h"
#include "train/model_builder.h"
#include "train/run_processes.h"
#include "train/train_step.h"

namespace lmt {

nlohmann::json program_memory(const ProgramMemory& m) {
  return {{"argument_bytes", m.argument},
          {"output_bytes", m.output},
          {"alias_bytes", m.alias},
          {"temp_bytes", m.temp},
          {"argument_plus_temp_bytes", m.argument + m.temp}};
}

namespace {

nlohmann::json launches_json(const KernelLaunches& l) {
  return {{"total", l.total},
          {"static_thunks", l.static_thunks},
          {"loops_without_trip_count", l.loops_without_trip_count},
          {"by_kind", l.by_kind}};
}

nlohmann::json collectives_json(const Collectives& c) {
  nlohmann::json kinds = nlohmann::json::object();
  for (const auto& [kind, k] : c.by_kind)
    kinds[kind] = {{"count", k.count},
                   {"bytes", k.bytes},
                   {"sent_bytes", k.sent_bytes},
                   {"static_count", k.static_count}};
  return {{"by_kind", kinds}, {"loops_without_trip_count", c.loops_without_trip_count}};
}

// The step's shape as the mesh plan takes it (train/mesh_plan.h).
StepShape plan_shape(const RunConfig& cfg) {
  StepShape s;
  s.micro_batch = cfg.train.micro_batch_size;
  s.seq_len = cfg.data.seq_len;
  s.checkpointing = cfg.train.activation_checkpointing;
  s.bf16 = cfg.train.precision == "bf16";
  s.optimizer = cfg.optimizer.name;
  s.loss_chunk = cfg.train.loss_chunk_tokens;
  s.vocab_tile = cfg.loss.head_vocab_tile();
  return s;
}

// Where a compiled step does not fit its target: the plan's smallest mesh (fsdp x tensor, as many
// sequences a device as this run has) whose step fits the share of the device the allocator
// takes; found false where the device is not in the table or no mesh fits.
MeshFit plan_fit(const RunConfig& cfg, const DeviceInfo& d, int64_t allocatable,
                 int64_t per_device) {
  const DeviceSpec* spec = d.spec ? d.spec : device_spec_of_kind(d.kind);
  if (!spec) return {};
  DeviceSpec limit = *spec;
  limit.memory = static_cast<uint64_t>(allocatable);
  return smallest_fitting_mesh(cfg.model, plan_shape(cfg), per_device, limit);
}

// Bytes as a person reads them: GiB from 1 GiB up, else MiB.
std::string bytes_text(int64_t b) {
  const double v = static_cast<double>(b);
  return v >= 1024.0 * 1024 * 1024 ? fmt::format("{:.2f} GiB", v / (1024.0 * 1024 * 1024))
                                   : fmt::format("{:.1f} MiB", v / (1024.0 * 1024));
}

// A compile target's memory against the step's: what XLA planned (arguments, temporaries and
// the outputs not written into donated arguments) beside the share of the device the plugin's
// allocator takes; where it does not fit, by how much and the plan's smallest mesh that does.
nlohmann::json device_fit(const RunConfig& cfg, const DeviceInfo& d, const ProgramMemory& m) {
  const int64_t need = m.argument + m.temp + m.output - m.alias;
  const auto allocatable =
      static_cast<int64_t>(static_cast<double>(d.memory_bytes) * d.allocator_fraction);
  nlohmann::json j = {{"device_bytes", d.memory_bytes},
                      {"allocator_fraction", d.allocator_fraction},
                      {"allocator_bytes", allocatable},
                      {"step_bytes", need},
                      {"fits", need <= allocatable}};
  if (need <= allocatable) return j;
  const int64_t per_device =
      cfg.train.micro_batch_size / std::max<int64_t>(cfg.parallel.data * cfg.parallel.fsdp, 1);
  const MeshFit fit = plan_fit(cfg, d, allocatable, per_device);
  std::string smallest = "the plan finds no mesh of fsdp x tensor that fits";
  if (fit.found) {
    j["smallest_fitting_mesh"] = {{"fsdp", fit.mesh.axis_size("fsdp")},
                                  {"tensor", fit.mesh.axis_size("tensor")},
                                  {"devices", fit.mesh.size()},
                                  {"planned_bytes", fit.memory.total_bytes()}};
    smallest = fmt::format(
        "the smallest mesh that fits by the plan (info --mesh --fit, {} sequence{} a device): "
        "fsdp {} x tensor {} = {} devices, {} planned a device",
        per_device, per_device == 1 ? "" : "s",
        fit.mesh.axis_size("fsdp"), fit.mesh.axis_size("tensor"), fit.mesh.size(),
        bytes_text(static_cast<int64_t>(fit.memory.total_bytes())));
  }
  j["verdict"] = fmt::format(
      "the step does not fit {}: it needs {} a device, {} over the {} its allocator takes ({:.0f}% "
      "of {}); {}",
      d.kind.empty() ? d.platform : d.kind, bytes_text(need),
      bytes_text(need - allocatable),
      bytes_text(allocatable), 100 * d.allocator_fraction,
      bytes_text(d.memory_bytes), smallest);
  return j;
}

// What a compiling backend counted: compiles, the step program's planned memory, the device's
// peak; for a compile target, whether the step fits, its collectives and (GPUs) the kernels it
// launches.
nlohmann::json program_report(const RunConfig& cfg, const DeviceInfo& d) {
  const ProgramReport& p = d.programs;
  nlohmann::json j = {{"platform", d.platform},       {"device_kind", d.kind},
                      {"attention", p.attention},     {"programs_compiled", p.compiled},
                      {"programs_run", p.run},        {"compile_seconds", p.compile_seconds},
                      {"program_chars", p.last_chars}};
  j["step_memory"] = p.last_memory ? program_memory(*p.last_memory) : nlohmann::json("n/a");
  j["device_peak_bytes"] = d.peak_bytes ? nlohmann::json(*d.peak_bytes) : nlohmann::json("n/a");
  if (d.memory_bytes > 0 && p.last_memory) j["device_fit"] = device_fit(cfg, d, *p.last_memory);
  if (p.last_launches) j["launches"] = launches_json(*p.last_launches);
  if (p.last_collectives) j["collectives"] = collectives_json(*p.last_collectives);
  return j;
}

nlohmann::json shape_of(const RunConfig& cfg) {
  const ModelConfig& mc = cfg.model;
  return {{"vocab_size", mc.vocab_size},
          {"hidden_size", mc.hidden_size},
          {"intermediate_size", mc.intermediate_size},
          {"num_hidden_layers", mc.num_hidden_layers},
          {"num_attention_heads", mc.num_attention_heads},
          {"num_key_value_heads", mc.kv_heads()},
          {"seq_len", cfg.data.seq_len},
          {"micro_batch_size", cfg.train.micro_batch_size},
          {"grad_accum_steps", cfg.train.grad_accum_steps},
          {"activation_checkpointing", cfg.train.activation_checkpointing},
          {"activation_bits", cfg.train.activation_bits}};
}

struct Timing {
  double first_s = 0, mean_s = 0, median_s = 0, total_s = 0;
  // The host's part of a timed step (StepReport::host_seconds): mean and median; none where the
  // backend computes in its calls.
  std::optional<double> host_mean_s, host_median_s;
  int64_t warmup = 1, replayed = 0;  // steps before the timed ones; timed steps replayed
};

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x.empty() ? 0 : x[x.size() / 2];
}

// grad_accum_steps micro-batches of random tokens, each row one document, the labels the ids
// shifted by one over the whole step.
std::vector<Batch> random_micro_batches(const RunConfig& cfg) {
  const int64_t B = cfg.train.micro_batch_size, N = B * cfg.data.seq_len;
  const int64_t accum = cfg.train.grad_accum_steps;
  Rng rng(static_cast<uint64_t>(cfg.train.seed), 99);
  std::vector<int32_t> ids(static_cast<size_t>(N * accum));
  for (auto& x : ids)
    x = static_cast<int32_t>(rng.below(static_cast<uint64_t>(cfg.model.vocab_size)));
  std::vector<int32_t> labels(ids.begin() + 1, ids.end());
  labels.push_back(ids.front());
  std::vector<Batch> batches(static_cast<size_t>(accum));
  for (int64_t a = 0; a < accum; ++a) {
    Batch& b = batches[static_cast<size_t>(a)];
    b.ids.assign(ids.begin() + a * N, ids.begin() + (a + 1) * N);
    b.labels.assign(labels.begin() + a * N, labels.begin() + (a + 1) * N);
    b.doc_starts.assign(static_cast<size_t>(B), {0});
  }
  return batches;
}

// Warm-up steps, then `steps` timed ones, each the trainer's step (TrainStep), queued one ahead as
// training queues them (the host builds step s + 1 while the device runs step s); a step's time
// is from the previous step's report to its own. The warm-up is the first step, and on a backend
// that replays a step it built before (Backend::replay) every step until one has been replayed,
// as a run's first steps are: on pjrt four (step 0, which allocates, and the next step of each
// report slot are built; step 3 is the first replayed), at most kMaxWarmup.
Timing time_steps(Backend& be, TrainStep& train_step, const RunConfig& cfg, int64_t steps) {
  const std::vector<Batch> batches = random_micro_batches(cfg);
  size_t next_batch = 0;
  auto next = [&]() -> const Batch& { return batches[next_batch++ % batches.size()]; };
  Timing t;
  Timer first;
  // Warm-up: plans the arena, touches every page (and compiles, on pjrt).
  StepReport r = train_step.run(0, next);
  t.first_s = first.seconds();
  constexpr int64_t kMaxWarmup = 6;
  while (steps > 0 && r.host_seconds && !r.replayed && t.warmup < kMaxWarmup)
    r = train_step.run(t.warmup++, next);
  be.reset_gemm_seconds();
  std::vector<double> times, host;
  Timer all, one;
  const int64_t end = t.warmup + steps;
  for (int64_t s = t.warmup; s < end; ++s) {
    r = train_step.advance(s, next, [&](int64_t n) { return n < end; });
    times.push_back(one.seconds());
    if (r.host_seconds) host.push_back(*r.host_seconds);
    t.replayed += r.replayed;
    one.reset();
  }
  t.total_s = all.seconds();
  t.mean_s = times.empty() ? 0 : t.total_s / static_cast<double>(times.size());
  t.median_s = median(times);
  if (!host.empty() && host.size() == times.size()) {
    double sum = 0;
    for (double h : host) sum += h;
    t.host_mean_s = sum / static_cast<double>(host.size());
    t.host_median_s = median(host);
  }
  return t;
}

// The GEMM peak of each precision the backend computes in here, and the fraction of it the
// step's achieved FLOP/s reached: the compute dtype's is MFU's; the other's is measured too on
// a backend that computes in its calls (nominal where the table knows the device) unless
// train.peak_tflops gave the peak.
// A precision the backend cannot compute in says why.
nlohmann::json gemm_peaks(Backend* be, DType compute, const PeakFlops& peak, double given_tflops,
                          double achieved) {
  nlohmann::json out;
  for (const DType dt : {DType::f32, DType::bf16}) {
    const std::string name(dtype_name(dt));
    if (const std::string why = be->unsupported(dt); !why.empty()) {
      out[name] = {{"unsupported", why}};
      continue;
    }
    PeakFlops p = peak;
    if (dt != compute) {
      const DeviceInfo d = be->device();  // a compiled GEMM costs a compile
      const bool cheap = !d.compiles || nominal_peak(d.spec, dt).has_value();
      if (given_tflops > 0 || !cheap) continue;
      p = mfu_peak(be, dt, 0);
    }
    out[name] = {{"flops", p.flops}, {"source", p.source}, {"fraction", achieved / p.flops}};
  }
  return out;
}

}  // namespace

nlohmann::json run_bench(RunConfig cfg, int64_t steps, bool compile_only,
                         const std::optional<CompileTarget>& target) {
  set_threads(cfg.train.threads);
  if (target) {  // the CUDA plugin compiles it, whatever the config runs on
    cfg.train.backend = "pjrt";
    compile_only = true;
  }
  if (compile_only && cfg.train.backend != "pjrt")
    throw UserError("bench --compile-only: train.backend is '" + cfg.train.backend +
                    "'; only pjrt compiles its step");
  if (!compile_only) check_training_memory(cfg, physical_memory_bytes());
  const RunProcesses processes(cfg);  // under a launcher: met in parallel.coordination_dir
  const BuiltModel built = build_model(cfg, {compile_only ? StartFrom::nothing : StartFrom::seed,
                                             compile_only, "", target, processes.store()});
  Backend* be = built.backend.get();
  Transformer& model = *built.model;
  const PeakFlops peak =
      compile_only ? PeakFlops{} : mfu_peak(be, model.compute_dtype(), cfg.train.peak_tflops);
  TrainStep train_step(model, *built.optimizer, cfg);
  const Timing t = time_steps(*be, train_step, cfg, compile_only ? 0 : steps);

  nlohmann::json j;
  j["backend"] = be->name();
  if (const std::string k = be->kernels(); !k.empty()) j["kernels"] = k;
  j["shape"] = shape_of(cfg);
  j["params"] = model.num_params();
  j["optimizer"] = built.optimizer->name();
  j["precision"] = cfg.train.precision;
  if (cfg.lora.rank > 0)
    j["lora"] = {{"rank", cfg.lora.rank},
                 {"target_modules", cfg.lora.target_modules},
                 {"base_dtype", cfg.lora.base_dtype},
                 {"trainable_params", model.lora_num_params()}};
  j["activation_bytes"] = model.activation_bytes(cfg.train.micro_batch_size, cfg.data.seq_len);
  j["peak_rss_bytes"] = peak_rss_bytes();
  // Under the backend's name ("pjrt", the one that compiles).
  if (const DeviceInfo d = be->device(); d.compiles) j[be->name()] = program_report(cfg, d);
  if (compile_only) return j;
  const double tokens = static_cast<double>(cfg.train.micro_batch_size * cfg.data.seq_len *
                                            cfg.train.grad_accum_steps);
  const double fpt = train_flops_per_token(model, cfg.data.seq_len), tps = tokens / t.mean_s;
  j["steps"] = steps;
  j["tokens_per_s"] = tps;
  j["step_ms"] = t.mean_s * 1e3;
  j["step_ms_median"] = t.median_s * 1e3;
  j["first_step_ms"] = t.first_s * 1e3;
  // From a step's start to its program's launch: the host's work per step (a compiling backend).
  auto ms = [](const std::optional<double>& s) {
    return s ? nlohmann::json(*s * 1e3) : nlohmann::json("n/a");
  };
  j["host_ms"] = ms(t.host_mean_s);
  j["host_ms_median"] = ms(t.host_median_s);
  j["warmup_steps"] = t.warmup;
  j["steps_replayed"] = t.replayed;  // of the timed steps (Backend::replay)
  j["flops_per_token"] = fpt;
  j["achieved_flops"] = fpt * tps;
  j["peak_flops"] = peak.flops;
  j["peak_flops_source"] = peak.source;
  j["mfu"] = fpt * tps / peak.flops;
  j["gemm_share"] = be->gemm_seconds() / t.total_s;
  j["gemm_peaks"] = gemm_peaks(be, model.compute_dtype(), peak, cfg.train.peak_tflops, fpt * tps);
  return j;
}

}  // namespace lmt
