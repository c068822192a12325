// Training throughput of a config on random tokens: tokens/s, step time, MFU against the
// measured GEMM peak of this machine, the share of the step spent in GEMMs, and peak memory.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "backend/devices.h"
#include "train/run_config.h"

namespace lmt {

// Runs one warm-up step and then `steps` timed optimizer steps. Returns one JSON object.
// compile_only (backend pjrt): builds and compiles the step without running it or initialising
// the weights, and reports the memory XLA planned for it (arguments, outputs, temporaries): what
// a step needs of a device that is not at hand.
// `target`: compiles for that GPU through the CUDA plugin without one (compile_only, whatever
// train.backend says), and reports beside the memory whether it fits the device and the kernels
// one step launches.
nlohmann::json run_bench(RunConfig cfg, int64_t steps, bool compile_only = false,
                         const std::optional<CompileTarget>& target = std::nullopt);

// What XLA planned for one run of a program, as both benchmarks report it.
nlohmann::json program_memory(const ProgramMemory& m);

// The output head and its loss alone, forward and backward (Backend::head_loss), on the config's
// head (model.vocab_size x model.hidden_size) for micro_batch_size x seq_len tokens of random
// hidden states and labels, the config's loss: mode "full" (every token's logits at once),
// "chunked" (train.loss_chunk_tokens rows at a time) or "cut" (tiles of loss.vocab_tile ids too).
// Reports the time per call, tokens/s and memory: on pjrt what XLA planned (arguments and
// temporaries) and the device's peak where the plugin keeps it; on the CPU the scratch and the
// growth of the process's peak RSS. compile_only as run_bench's.
nlohmann::json run_head_loss_bench(const RunConfig& cfg, const std::string& mode, int64_t steps,
                                   bool compile_only = false);

}  // namespace lmt
