// The subcommands of the lmtrain binary. Each registers its options on the CLI11 app and returns
// the callback that runs it; main() maps errors to exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace lmt {
class CheckpointHold;
}

namespace lmt::cli {

using Run = std::function<int()>;

Run add_train(CLI::App& app);
Run add_prepare(CLI::App& app);
Run add_generate(CLI::App& app);
Run add_bench(CLI::App& app);
Run add_tokenize(CLI::App& app);
Run add_tokenizer(CLI::App& app);
Run add_logits(CLI::App& app);
Run add_export(CLI::App& app);
Run add_init(CLI::App& app);
Run add_info(CLI::App& app);
Run add_plot(CLI::App& app);
Run add_check(CLI::App& app);
Run add_eval(CLI::App& app);

// The model directory a flag names: a directory with config.json (a checkpoint or a Hugging Face
// directory) as it is, or a run directory's newest checkpoint. `flag` names it in messages.
// The checkpoint is held (CheckpointHold) while `hold` lives, so a run's pruning leaves it be.
std::filesystem::path resolve_model_dir(const std::string& arg, const char* flag,
                                        CheckpointHold& hold);

// The tokenizer spec (load_tokenizer) of a model directory: a checkpoint's state.json says whether
// it was trained on bytes or on the tokenizer copied beside it; a Hugging Face directory's is its
// tokenizer.json / .model. Shared by generate and eval.
std::string tokenizer_spec(const std::filesystem::path& dir);

// 6738415616 -> "6,738,415,616"; 1234567 bytes -> "1.23 MB" (powers of 1000, as shard sizes).
std::string format_count(int64_t n);
std::string format_bytes(uint64_t bytes);

}  // namespace lmt::cli
