// Training throughput of a config on random tokens: tokens/s, step time, MFU against the
// measured GEMM peak of this machine, the share of the step spent in GEMMs, and peak memory.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "train/run_config.h"

namespace lmt {

// Runs one warm-up step and then `steps` timed optimizer steps. Returns one JSON object.
// compile_only (backend pjrt): builds and compiles the step without running it or initialising
// the weights, and reports the memory XLA planned for it (arguments, outputs, temporaries): what
// a step needs of a device that is not at hand.
nlohmann::json run_bench(RunConfig cfg, int64_t steps, bool compile_only = false);

}  // namespace lmt
