// lmtrain: one binary for training and fine-tuning decoder-only language models.
// Exit codes: 0 success, 2 a user error (bad config, missing file, ..., or out of memory), 3 a
// non-finite training step, 1 an internal error.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <new>
#include <string>

#include "backend/cuda/cuda_info.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) ends a process that writes past it with SIGXFSZ, no message;
  // ignored, the write fails with EFBIG and every writer names its file, as for a full disk.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"lmtrain: train and fine-tune decoder-only language models", "lmtrain"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("lmtrain ") + LMTRAIN_VERSION + " (" +
                                        lmt::cuda_device_summary() + ")");
  std::map<CLI::App*, lmt::cli::Run> runs;
  auto add = [&](auto adder, const char* name, const char* help) {
    CLI::App* sub = app.add_subcommand(name, help);
    runs[sub] = adder(*sub);
  };
  add(lmt::cli::add_prepare, "prepare",
      "read, tokenize and pack a config's data into a token store");
  add(lmt::cli::add_train, "train", "train a model from a YAML config");
  add(lmt::cli::add_generate, "generate", "continue a prompt with a trained checkpoint");
  add(lmt::cli::add_bench, "bench", "measure training throughput for a config");
  add(lmt::cli::add_tokenize, "tokenize", "encode text with a tokenizer (ids as JSON)");
  add(lmt::cli::add_tokenizer, "tokenizer", "tokenizer tools: train");
  add(lmt::cli::add_logits, "logits", "logits and loss of a Hugging Face model for a list of ids");
  add(lmt::cli::add_export, "export", "write a checkpoint as a Hugging Face model directory");
  add(lmt::cli::add_init, "init", "write a freshly initialised model of a family (Hugging Face)");
  add(lmt::cli::add_info, "info", "a model's family, parameters and training-step memory");
  add(lmt::cli::add_check, "check",
      "verify token stores, checkpoints and exports against the checksums lmtrain recorded");
  add(lmt::cli::add_eval, "eval",
      "score a model on held-out text and on lm-evaluation-harness tasks");
  add(lmt::cli::add_plot, "plot", "draw runs' metrics.jsonl (loss, lr, grad norm) as SVG or PNG");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : lmt::kExitUserError;
  }
  try {
    for (auto& [sub, run] : runs)
      if (sub->parsed()) return run();
  } catch (const lmt::UserError& e) {
    std::fprintf(stderr, "lmtrain: error: %s\n", e.what());
    return lmt::kExitUserError;
  } catch (const lmt::NonFiniteError& e) {
    std::fprintf(stderr, "lmtrain: stopped: %s\n", e.what());
    return lmt::kExitBadStep;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the user gave that the system refuses (a symbolic link loop, no permission, ...).
    std::fprintf(stderr, "lmtrain: error: %s\n", e.what());
    return lmt::kExitUserError;
  } catch (const std::bad_alloc&) {
    // Sizes are checked against the machine before the large allocations; what is left is an
    // input or a step that needs more memory than is free now.
    std::fprintf(stderr,
                 "lmtrain: error: out of memory (this machine has %s; other processes may hold "
                 "part of it): use a smaller input, model or batch, or a machine with more "
                 "memory\n",
                 lmt::gib_text(lmt::physical_memory_bytes()).c_str());
    return lmt::kExitUserError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lmtrain: internal error: %s\n", e.what());
    return 1;
  }
  return 1;
}
