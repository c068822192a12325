// Kernel launches of a program compiled for a GPU, read from the files XLA writes with
// xla_dump_to: the thunk sequence (one line a thunk; a loop's condition and body indented below
// it, a fused thunk's parts below that), the thunks' metadata (which HLO instruction each thunk
// is) and the optimized HLO (each loop's known trip count). What counts is defined with
// KernelLaunches (backend/devices.h). Plain text in, numbers out: no plugin needed.
#pragma once

#include <filesystem>
#include <string>

#include "backend/devices.h"

namespace lmt {

// From the three files' texts.
KernelLaunches kernel_launches(const std::string& thunk_sequence, const std::string& thunk_metadata,
                               const std::string& optimized_hlo);

// From a dump directory holding one compiled module's files (*.thunk_sequence.txt,
// *.thunk_metadata.txt, *_gpu_after_optimizations.txt). UserError naming the directory when one
// is missing.
KernelLaunches kernel_launches_in(const std::filesystem::path& dump_dir);

// The kind a launching thunk is counted under (KernelLaunches::by_kind), from its thunk kind
// ("kCustomKernel") and name ("loop_convert_fusion_7").
std::string launch_kind(const std::string& thunk_kind, const std::string& name);

}  // namespace lmt
