// The PJRT backend's compiled programs: one executable per distinct program text, compiled when
// first seen and kept for the process, and the running of an assembled program (its host data
// uploaded, its donated arguments consumed). Counters for the tests and the benchmark.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/pjrt/backend.h"
#include "backend/pjrt/runtime/client.h"
#include "backend/pjrt/runtime/compile_options.h"
#include "backend/pjrt/trace.h"

namespace lmt {

class PjrtPrograms {
 public:
  // A compiled program: its executable, XLA's memory plan, and its text (the cache's key).
  struct Compiled {
    PjrtExecutable exe;
    std::optional<ProgramMemory> memory;
    const std::string* text = nullptr;
  };

  PjrtPrograms(const PjrtClient& client, const CompileSettings& settings, bool compile_only)
      : client_(client), settings_(settings), compile_only_(compile_only) {}

  // Compiles p (or finds it compiled) and queues its run; returns its outputs in order (arrays
  // the device may still be computing), or nothing when the backend only compiles. The previous
  // run is waited for once this one is queued, so the host builds the next program while the
  // device runs this one, and an error of a run surfaces at the latest with the next.
  std::vector<PjrtBuffer> run(PjrtAssembled& p);
  // The program the last run() ran (stays valid: programs are kept for the process).
  Compiled* last() const { return last_; }
  // Runs a program compiled before on device arrays (a replay: replay.h), as run() does;
  // `arguments` names them for the report.
  std::vector<PjrtBuffer> run(Compiled& c, std::span<PjrtBuffer* const> args,
                              std::span<const int> donate,
                              std::span<const TensorSharding> out_shardings,
                              const std::vector<ProgramArgument>& arguments, bool replayed);

  // Compiles, runs and the last program (ProgramReport::attention is the backend's to fill).
  const ProgramReport& report() const { return report_; }
  bool compile_only() const { return compile_only_; }
  // When the newest run was queued (Backend::last_launch).
  std::optional<std::chrono::steady_clock::time_point> last_launch() const { return launched_; }

 private:
  Compiled& compiled(const std::string& text);
  void report(Compiled& c, const std::vector<ProgramArgument>& arguments);
  void dump(const std::string& text) const;

  const PjrtClient& client_;
  CompileSettings settings_;
  bool compile_only_;
  std::unordered_map<std::string, Compiled> programs_;
  ProgramReport report_;
  Compiled* last_ = nullptr;  // the program of the newest run
  std::optional<std::chrono::steady_clock::time_point> launched_;
  PjrtPendingRun pending_;  // the newest run, not waited for (destroyed first: waited for)
};

}  // namespace lmt
