#include <fmt/core.h>

#include "cli/commands.h"
#include "core/error.h"
#include "train/bench.h"
#include "train/run_config.h"

namespace lmt::cli {

Run add_bench(CLI::App& app) {
  struct Opts {
    std::string config;
    std::vector<std::string> sets;
    int64_t steps = 5;
    bool compile_only = false;
    std::string head_loss, target;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("--config", o->config, "YAML config file (model and train sections are used)")
      ->required();
  app.add_option("--set", o->sets, "override a config key: section.key=value (repeatable)");
  app.add_option("--steps", o->steps, "timed optimizer steps")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{100000}));
  app.add_flag("--compile-only", o->compile_only,
               "backend pjrt: compile the step and report the memory XLA plans for it (arguments, "
               "outputs, temporaries) without running it");
  app.add_option("--target", o->target,
                 "compile the step for hardware that is not here (implies --compile-only and "
                 "backend pjrt): GPUs through XLA's CUDA PJRT plugin (h100, h200, h100x8 on a "
                 "host, 2xh100x8 on two, or a file holding XLA's GpuTargetConfigProto as text), "
                 "TPU slices through libtpu (v4-8, v5e-8, v5p-64, v6e-8, v5e:2x2, v4:2x2x1, ...); "
                 "reports the memory per device against the device's, the collectives and, for "
                 "GPUs, the kernels one step launches");
  app.add_option("--head-loss", o->head_loss,
                 "time the output head and its loss alone (forward and backward) instead of the "
                 "step: full (every token's logits at once), chunked or cut")
      ->check(CLI::IsMember({"full", "chunked", "cut"}));
  return [o]() {
    // A target compiles on pjrt whatever the config runs on (before the config is checked: a
    // mesh needs pjrt).
    if (!o->target.empty()) o->sets.push_back("train.backend=pjrt");
    RunConfig cfg = load_run_config(o->config, o->sets);
    if (!o->head_loss.empty()) {
      fmt::print("{}\n", run_head_loss_bench(cfg, o->head_loss, o->steps, o->compile_only).dump());
      return 0;
    }
    std::optional<CompileTarget> target;
    if (!o->target.empty()) target = compile_target(o->target, "--target");
    const nlohmann::json j = run_bench(std::move(cfg), o->steps, o->compile_only, target);
    // A step that does not fit its target is the answer, not a report: one line, exit 2.
    if (target && j.contains("pjrt") && j["pjrt"].contains("device_fit") &&
        j["pjrt"]["device_fit"].contains("verdict"))
      throw UserError("--target " + target->name + ": " +
                      j["pjrt"]["device_fit"]["verdict"].get<std::string>());
    fmt::print("{}\n", j.dump());
    // The host's part of a step, as a person reads it (stderr: stdout is the one JSON object).
    if (j.contains("host_ms") && j["host_ms"].is_number()) {
      fmt::print(stderr,
                 "host time per step: median {:.3f} ms, mean {:.3f} ms (from a step's start to its "
                 "launch; {} of the {} timed steps replayed, after {} warm-up steps)\n",
                 j["host_ms_median"].get<double>(), j["host_ms"].get<double>(),
                 j.at("steps_replayed").get<int64_t>(), o->steps,
                 j.at("warmup_steps").get<int64_t>());
    }
    return 0;
  };
}

}  // namespace lmt::cli
