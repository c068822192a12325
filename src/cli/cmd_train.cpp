#include <fmt/core.h>

#include <csignal>

#include "cli/commands.h"
#include "core/error.h"
#include "io/config_yaml.h"
#include "train/run_config.h"
#include "train/trainer.h"

namespace lmt::cli {

Run add_train(CLI::App& app) {
  struct Opts {
    std::string config;
    std::vector<std::string> sets;
    std::string resume_from;
    bool help_config = false, allow_data_change = false;
  };
  auto o = std::make_shared<Opts>();
  auto* config = app.add_option("--config", o->config, "YAML config file");
  app.add_flag("--help-config", o->help_config, "list every config key with its default and help")
      ->excludes(config);
  app.add_option("--set", o->sets, "override a config key: section.key=value (repeatable)");
  auto* resume = app.add_option("--resume", o->resume_from,
                                "continue from the newest checkpoint in out_dir, or from the one "
                                "named (--resume step_0000400, or a checkpoint's path)")
                     ->expected(0, 1);
  app.add_flag("--allow-data-change", o->allow_data_change,
               "with --resume: continue on a token store or tokenizer other than the one the "
               "checkpoint trained on (refused without it)");
  return [o, resume]() {
    if (o->help_config) {
      RunConfig defaults;
      fmt::print("{}", format_config_keys(config_keys(defaults)));
      return 0;
    }
    if (o->config.empty()) throw UserError("train: --config FILE is required");
    RunConfig cfg = load_run_config(o->config, o->sets);
    const int64_t max_steps = cfg.train.max_steps;
    TrainResult r =
        train(std::move(cfg), resume->count() > 0, 0, o->resume_from, o->allow_data_change);
    // Stopped by a signal, after writing a checkpoint: the shell's code for that signal.
    if (r.interrupted) return train_exit_code(r);
    if (!r.writer) return 0;        // rank 0 of the processes says it
    if (r.steps == r.first_step) {  // resumed at (or past) max_steps: no step ran, no loss
      fmt::print(
          "nothing to do: the checkpoint is at step {} and train.max_steps is {} (raise "
          "train.max_steps to train on)\n",
          r.steps, max_steps);
      return 0;
    }
    fmt::print("done: {} steps, last loss {:.4f}", r.steps, r.last_loss);
    if (r.last_val_loss >= 0) fmt::print(", val loss {:.4f}", r.last_val_loss);
    fmt::print("\n");
    return 0;
  };
}

}  // namespace lmt::cli
