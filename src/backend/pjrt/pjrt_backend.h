// The PJRT backend: the kernel interface (backend/backend.h) implemented by building StableHLO
// instead of computing. Each kernel call appends its lowering (backend/pjrt/lowering.h) to a
// pending program; the program is compiled (once per distinct text) and run on the plugin's
// device when the host needs a result: to_host of a buffer the program touches, or
// synchronize(). The model and the optimizer are the same code the CPU backend runs, so a
// training step that reads nothing back before its end is one program.
//
// Addresses: alloc() hands out addresses in a range no real memory uses, so the model's pointer
// arithmetic (one arena for activations, one flat buffer for parameters) works unchanged; a
// pointer is resolved to its allocation and byte offset. Within a program each allocation is a
// set of disjoint byte ranges, each holding the value last written there (a flat tensor), so an
// op reading what another op wrote is connected to it directly, without copying the allocation.
// Between programs an allocation lives on the device as one flat array.
//
// Values that change every step and would otherwise be constants of the program are runtime
// arguments instead, so one compiled step serves every step: the AdamW step's learning rate and
// bias corrections, cross-entropy's gradient scale, dropout's seed and stream, and the document
// starts of packed sequences.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"

namespace lmt {

// The PJRT backend on the plugin at plugin_path ("" = resolve_pjrt_plugin_path's default). A
// build without PJRT throws UserError saying how to get it.
std::unique_ptr<Backend> make_pjrt_backend(const std::string& plugin_path);

// Counters of a PJRT backend (for tests and the benchmark); zeros for any other backend.
struct PjrtBackendStats {
  int64_t programs_run = 0;       // executions
  int64_t programs_compiled = 0;  // distinct program texts compiled
  double compile_seconds = 0;
  size_t last_program_chars = 0;  // size of the last program's text
};
PjrtBackendStats pjrt_backend_stats(const Backend& backend);

}  // namespace lmt
