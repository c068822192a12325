// PjrtPrograms: the compile cache and the running of programs (see programs.h).
#include "backend/pjrt/programs.h"

#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "core/timer.h"

namespace lmt {

PjrtPrograms::Compiled& PjrtPrograms::compiled(const std::string& text) {
  auto found = programs_.find(text);
  if (found != programs_.end()) return found->second;
  dump(text);
  Timer t;
  Compiled c{client_.compile(text, settings_), std::nullopt};
  report_.compile_seconds += t.seconds();
  ++report_.compiled;
  if (const std::optional<CompiledMemory> m = c.exe.compiled_memory()) {
    c.memory = ProgramMemory{m->argument, m->output, m->alias, m->temp};
    auto need = [](const ProgramMemory& x) { return x.argument + x.temp; };
    if (!report_.largest_memory || need(*c.memory) > need(*report_.largest_memory))
      report_.largest_memory = c.memory;
  }
  auto [it, added] = programs_.emplace(text, std::move(c));
  it->second.text = &it->first;
  return it->second;
}

std::vector<PjrtBuffer> PjrtPrograms::run(PjrtAssembled& p) {
  Compiled& c = compiled(p.text);
  if (compile_only_) {
    report(c, p.described_args);
    return {};
  }
  std::vector<PjrtBuffer> uploads;
  uploads.reserve(p.args.size());
  std::vector<PjrtBuffer*> args;
  for (const PjrtAssembled::Arg& a : p.args) {
    if (a.dev) {
      args.push_back(a.dev);
    } else {
      uploads.push_back(client_.to_device(a.host->data(), a.dtype, a.dims, a.sharding));
      args.push_back(&uploads.back());
    }
  }
  return run(c, args, p.donate, p.out_shardings, p.described_args, false);
}

std::vector<PjrtBuffer> PjrtPrograms::run(Compiled& c, std::span<PjrtBuffer* const> args,
                                          std::span<const int> donate,
                                          std::span<const TensorSharding> out_shardings,
                                          const std::vector<ProgramArgument>& arguments,
                                          bool replayed) {
  report(c, arguments);
  launched_ = std::chrono::steady_clock::now();
  std::vector<PjrtBuffer> results = c.exe.execute(args, donate, out_shardings, &pending_);
  ++report_.run;
  report_.replayed += replayed;
  return results;
}

// The report's last program: copied when it changes (a step's text is megabytes).
void PjrtPrograms::report(Compiled& c, const std::vector<ProgramArgument>& arguments) {
  if (last_ == &c) return;
  last_ = &c;
  report_.last_chars = c.text->size();
  report_.last_text = *c.text;
  report_.last_arguments = arguments;
  report_.last_memory = c.memory;
  report_.last_launches = c.exe.launches();
  report_.last_collectives = c.exe.collectives();
}

// LMTRAIN_PJRT_DUMP=DIR writes each program compiled to DIR/program_N.mlir (for reading, or for
// compiling elsewhere).
void PjrtPrograms::dump(const std::string& text) const {
  const char* dir = std::getenv("LMTRAIN_PJRT_DUMP");
  if (!dir || !*dir) return;
  static int count = 0;  // per process: several backends may dump to one directory
  const std::string path = std::string(dir) + "/program_" + std::to_string(count++) + ".mlir";
  std::FILE* f = std::fopen(path.c_str(), "w");
  LMT_CHECK(f, "LMTRAIN_PJRT_DUMP: cannot write " + path);
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
}

}  // namespace lmt
