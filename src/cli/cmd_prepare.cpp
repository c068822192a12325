// lmtrain prepare: the data section of a config -> a token store (data/prepare.h).
#include <fmt/core.h>

#include "cli/commands.h"
#include "core/error.h"
#include "data/prepare.h"
#include "train/run_config.h"
#include "train/trainer.h"

namespace lmt::cli {

Run add_prepare(CLI::App& app) {
  struct Opts {
    std::string config, out;
    std::vector<std::string> sets;
    bool quiet = false;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("--config", o->config, "YAML config file (its data section)")->required();
  app.add_option("--set", o->sets, "override a config key: section.key=value (repeatable)");
  app.add_option("--out", o->out, "the store directory (default: data.store)");
  app.add_flag("--quiet", o->quiet, "no progress lines");
  return [o]() {
    RunConfig cfg = load_run_config(o->config, o->sets);
    const std::string out = o->out.empty() ? cfg.data.store : o->out;
    if (out.empty())
      throw UserError("prepare: say where the store goes: set data.store in " + o->config +
                      " or pass --out DIR");
    if (cfg.data.sources.empty()) throw UserError("data.sources: at least one source is needed");
    set_threads(cfg.train.threads);
    PrepareOptions opt = prepare_options(cfg.data, out);
    opt.progress = !o->quiet;
    Manifest m = prepare_store(opt);
    fmt::print("{}\nstore: {}\n", manifest_summary(m), out);
    return 0;
  };
}

}  // namespace lmt::cli
