// The collectives of a compiled program, read from XLA's optimized program as text (what
// xla_dump_to writes as *after_optimizations.txt): per kind, how often one run performs it and
// the bytes it writes on each device, an instruction in a loop's body counted as often as the
// loop runs. What counts is defined with Collectives (backend/devices.h). Plain text in, numbers
// out: no plugin needed.
#pragma once

#include <filesystem>
#include <string>

#include "backend/devices.h"

namespace lmt {

// From the optimized HLO module's text.
Collectives collectives(const std::string& optimized_hlo);

// From a dump directory: the largest *after_optimizations.txt there (a compile may dump helper
// modules beside the program's). UserError naming the directory where there is none.
Collectives collectives_in(const std::filesystem::path& dump_dir);

// The bytes of an HLO shape ("bf16[4,128]{1,0}", a tuple "(f32[2], s32[])"): its arrays' sum.
int64_t hlo_shape_bytes(const std::string& shape);

}  // namespace lmt
