// The subcommands of the lmtrain binary. Each registers its options on the CLI11 app and returns
// the callback that runs it; main() maps errors to exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace lmt::cli {

using Run = std::function<int()>;

Run add_train(CLI::App& app);
Run add_prepare(CLI::App& app);
Run add_generate(CLI::App& app);
Run add_bench(CLI::App& app);
Run add_tokenize(CLI::App& app);
Run add_tokenizer(CLI::App& app);
Run add_logits(CLI::App& app);

}  // namespace lmt::cli
