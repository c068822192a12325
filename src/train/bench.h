// Training throughput of a config on random tokens: tokens/s, step time, MFU against the
// measured GEMM peak of this machine, the share of the step spent in GEMMs, and peak memory.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "train/run_config.h"

namespace lmt {

// Runs one warm-up step and then `steps` timed optimizer steps. Returns one JSON object.
nlohmann::json run_bench(RunConfig cfg, int64_t steps);

}  // namespace lmt
