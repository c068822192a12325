// The PJRT backend: the kernel interface (backend/backend.h) implemented by building StableHLO
// instead of computing. Each kernel call appends its lowering (hlo/lowering.h) to a pending
// program (trace.h); the program is compiled (once per distinct text, programs.h) and run on the
// plugin's devices (runtime/) when the host needs a result: to_host of a buffer the program
// touches, or synchronize(). The model and the optimizer are the same code the CPU backend runs,
// so a training step that reads nothing back before its end is one program.
//
// Memory (tensors.h): alloc() hands out addresses in a range no real memory uses, so the model's
// pointer arithmetic (one arena for activations, one flat buffer for parameters) works unchanged.
// What the model describes (Backend::describe: every parameter, gradient, optimizer moment and
// batch array) is its own typed device array and its own argument and output of the programs,
// donated from one step to the next; activations are the program's own values.
//
// Values that change every step and would otherwise be constants of the program are tensors the
// host writes instead (the batch, the gradient scale, dropout's key, the optimizer's factors), so
// one compiled step serves every step, and a step built once is replayed with each step's writes
// (Backend::record and replay: replay.h). LMTRAIN_PJRT_TRACE_EVERY_STEP=1 builds every step.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace lmt {

struct PjrtOptions {
  // Compile every program but run none: the values a program would write are unspecified (read
  // as zeros). For what a step needs of the device's memory, without the device.
  bool compile_only = false;
  // Ask XLA for deterministic ops (xla_gpu_exclude_nondeterministic_ops: no atomic scatter-adds
  // or reductions on GPUs), so that a run and its resume give the same bits there too.
  bool deterministic = false;
  // Several devices: the mesh, the plugin's device ids it uses (empty: the first mesh.size()),
  // and where several processes exchange the plugin's keys (BackendOptions).
  Mesh mesh;
  std::vector<int64_t> devices;
  std::shared_ptr<DirectoryStore> store;
  std::function<TensorSharding(const std::string& name, const std::vector<int64_t>& dims)> sharding;
  // Compile for this GPU target through the CUDA plugin, without the device (compile_only).
  std::optional<CompileTarget> target;
};

// The PJRT backend on the plugin at plugin_path ("" = resolve_pjrt_plugin_path's default). A
// build without PJRT throws UserError saying how to get it.
std::unique_ptr<Backend> make_pjrt_backend(const std::string& plugin_path,
                                           const PjrtOptions& options = {});

}  // namespace lmt
