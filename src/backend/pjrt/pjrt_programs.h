// The PJRT backend's compiled programs: one executable per distinct program text, compiled when
// first seen and kept for the process, and the running of an assembled program (its host data
// uploaded, its donated arguments consumed). Counters for the tests and the benchmark.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/pjrt/compile_options.h"
#include "backend/pjrt/pjrt_backend.h"
#include "backend/pjrt/pjrt_client.h"
#include "backend/pjrt/pjrt_trace.h"

namespace lmt {

class PjrtPrograms {
 public:
  PjrtPrograms(const PjrtClient& client, const CompileSettings& settings, bool compile_only)
      : client_(client), settings_(settings), compile_only_(compile_only) {}

  // Compiles p (or finds it compiled) and runs it; returns its outputs in order, or nothing when
  // the backend only compiles.
  std::vector<PjrtBuffer> run(PjrtAssembled& p);

  const PjrtBackendStats& stats() const { return stats_; }

 private:
  struct Compiled {
    PjrtExecutable exe;
    std::optional<PjrtProgramMemory> memory;
  };
  Compiled& compiled(const std::string& text);
  void dump(const std::string& text) const;

  const PjrtClient& client_;
  CompileSettings settings_;
  bool compile_only_;
  std::unordered_map<std::string, Compiled> programs_;
  PjrtBackendStats stats_;
};

}  // namespace lmt
