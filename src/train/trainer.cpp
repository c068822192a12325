#include "train/trainer.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <atomic>
#include <csignal>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <new>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "core/output_lock.h"
#include "core/path_json.h"
#include "core/threads.h"
#include "core/timer.h"
#include "data/loader.h"
#include "data/mixture.h"
#include "data/prepare.h"
#include "data/tokenizer/tokenizer.h"
#include "eval/evaluate.h"
#include "io/checkpoint_names.h"
#include "io/text_file.h"
#include "model/transformer.h"
#include "train/checkpoint.h"
#include "train/flops.h"
#include "train/generation.h"
#include "train/loss_watch.h"
#include "train/memory_check.h"
#include "train/metrics.h"
#include "train/model_builder.h"
#include "train/run_processes.h"
#include "train/run_schedule.h"
#include "train/train_data.h"

namespace lmt {

static_assert(kNoLabel == Transformer::kIgnoreIndex, "the loader's and the model's ignore label");

namespace fs = std::filesystem;

namespace {

std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int sig) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig);  // the first signal is the one reported
}

// SIGINT, SIGTERM or SIGHUP (a closed terminal) during a run: finish the step in flight, or stop
// an evaluation after its batch in flight, write the checkpoint of the last finished step, return.
// Every signal counts (the first one's number is kept); none is lost while evaluating or saving.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal.store(0);
    for (size_t i = 0; i < std::size(kSignals); ++i)
      old_[i] = std::signal(kSignals[i], on_stop_signal);
  }
  ~StopSignals() {
    for (size_t i = 0; i < std::size(kSignals); ++i) std::signal(kSignals[i], old_[i]);
  }
  int received() const { return g_stop_signal.load(); }

 private:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
  void (*old_[std::size(kSignals)])(int);
};

// The run directory and what every checkpoint of the run records of its config.
struct RunDir {
  fs::path path;
  std::string config_yaml, config_hash;
  // What the run trains on (CheckpointState's fields of the same names).
  std::string data_store, data_fingerprint, tokenizer_fingerprint;
};

fs::path make_run_dir(const std::string& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw UserError("train.out_dir: cannot create '" + out_dir + "': " + ec.message());
  return out_dir;
}

// Leftovers of a process killed while writing this run directory: unfinished checkpoint saves and
// deletions, and the NAME.tmp-PID files of write_text_file (config.yaml, metrics.jsonl). The
// caller holds the directory's lock, so no live process owns them. A store being prepared in
// <run_dir>/data is prepare's to clean (it checks the writer's pid).
void remove_run_dir_leftovers(const fs::path& run_dir) {
  remove_checkpoint_leftovers(run_dir.string());
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    const std::string name = e.path().filename().string();
    const size_t at = name.rfind(".tmp-");
    if (at != std::string::npos && at + 5 < name.size() && e.is_regular_file() &&
        name.find_first_not_of("0123456789", at + 5) == std::string::npos)
      fs::remove(e.path(), ec);
  }
}

// The checkpoint to resume from: --resume NAME, else the newest; none without --resume.
std::optional<std::string> resume_point(const fs::path& run_dir, bool resume,
                                        const std::string& resume_from) {
  if (!resume) return std::nullopt;
  if (!resume_from.empty()) return find_checkpoint(run_dir.string(), resume_from);
  std::optional<std::string> ckpt = find_latest_checkpoint(run_dir.string());
  if (!ckpt)
    throw UserError("--resume: no complete checkpoint in '" + (run_dir / "checkpoints").string() +
                    "'");
  return ckpt;
}

// The loss sum and labelled tokens over the evaluation batches, each a global batch of B rows of
// which this process feeds its own (the loader's rank slice; the labelled tokens summed over the
// ranks). Stops early (a partial sum) once a stop signal has arrived.
LossSum evaluate(Transformer& model, LossSums& sums, EvalLoader& loader, int64_t batches, int64_t B,
                 int64_t T, bool masking, RunProcesses& processes) {
  loader.reset();
  std::vector<int32_t> ids(static_cast<size_t>(B * T)), labels(ids.size(), kNoLabel),
      starts(ids.size()), pos(ids.size());
  const size_t at = static_cast<size_t>(processes.first_row(B) * T);
  LossSum total;
  for (int64_t i = 0; i < batches && g_stop_signal.load() == 0; ++i) {
    loader.next(&ids[at], &labels[at], &starts[at], &pos[at]);
    const Transformer::Packing packing{pos.data(), starts.data()};
    sums.zero();
    const int64_t tokens = processes.sum(
        "labelled tokens of an evaluation batch",
        model.forward_loss(ids.data(), labels.data(), B, T, sums, masking ? &packing : nullptr));
    const LossSum s = sums.read(tokens);
    total.sum += s.ce;  // the evaluation is the plain cross-entropy, whatever the objective
    total.tokens += s.tokens;
  }
  return total;
}

double mean(const LossSum& s) {
  return s.tokens ? s.sum / static_cast<double>(s.tokens) : 0.0;
}

// The validation loss at the run's evaluation points (none without validation samples). With
// several sources, each one's validation samples are evaluated on their own too (the same number
// of batches, or one pass over a smaller source), named as data.sources names them.
class Evaluation {
 public:
  Evaluation(const RunConfig& cfg, const TrainData& data, Transformer& model,
             RunProcesses& processes)
      : tc_(cfg.train),
        T_(cfg.data.seq_len),
        model_(model),
        processes_(processes),
        sums_(model.make_loss_sums()) {
    load_tasks(cfg, processes);
    const SampleSet& val = *data.validation;
    if ((tc_.eval_every <= 0 && tc_.eval_steps <= 0) || val.num_samples() == 0) return;
    const int rank = processes.group().rank, count = processes.group().count;
    const int64_t rows = processes.rows(tc_.micro_batch_size);
    all_ = std::make_unique<EvalLoader>(val, rows, rank, count);
    if (val.num_sources() <= 1) return;
    const std::vector<std::string> names =
        static_cast<int>(cfg.data.sources.size()) == val.num_sources() ? source_names(cfg.data)
                                                                       : std::vector<std::string>{};
    for (int i = 0; i < val.num_sources(); ++i)
      if (val.source_samples(i) > 0)
        sources_.emplace_back(
            names.empty() ? "source" + std::to_string(i) : names[static_cast<size_t>(i)],
            std::make_unique<EvalLoader>(val, rows, i, rank, count));
  }

  // Logs the evaluation at `step` and keeps its loss in result.last_val_loss. A stop signal ends
  // it after the batch in flight, with nothing logged.
  void run(Metrics& metrics, int64_t step, TrainResult& result) {
    run_tasks(metrics, step);
    if (!all_ || g_stop_signal.load() != 0) return;
    const int64_t B = tc_.micro_batch_size;
    const int64_t batches = tc_.eval_steps > 0 ? tc_.eval_steps : all_->batches_per_pass();
    result.last_val_loss =
        mean(evaluate(model_, sums_, *all_, batches, B, T_, tc_.document_masking, processes_));
    std::vector<SourceEval> sources;
    for (auto& [name, loader] : sources_) {
      const LossSum s =
          evaluate(model_, sums_, *loader, std::min(batches, loader->batches_per_pass()), B, T_,
                   tc_.document_masking, processes_);
      sources.push_back({name, mean(s), s.tokens});
    }
    if (g_stop_signal.load() != 0) return;  // cut short: not an evaluation
    metrics.log_eval(step, result.last_val_loss, batches * B * T_, sources);
  }

 private:
  // eval.tasks, read and checked before the first step (a bad task file costs no training).
  void load_tasks(const RunConfig& cfg, const RunProcesses& processes) {
    const EvalConfig& ec = cfg.eval;
    if (ec.tasks.empty()) return;
    if (processes.group().count > 1)
      throw UserError(
          "eval.tasks: a run across processes does not score tasks yet (score its checkpoints "
          "with lmtrain eval)");
    tokenizer_ = load_tokenizer(cfg.data.tokenizer);
    for (const std::string& file : ec.tasks)
      tasks_.push_back(eval::load_task(
          file, ec.num_fewshot >= 0 ? std::optional<int64_t>(ec.num_fewshot) : std::nullopt,
          ec.limit > 0 ? std::optional<int64_t>(ec.limit) : std::nullopt));
    task_batch_ = ec.batch;
  }

  // Every task of eval.tasks scored on the model as it is (lmtrain eval's numbers), logged.
  void run_tasks(Metrics& metrics, int64_t step) {
    if (tasks_.empty() || g_stop_signal.load() != 0) return;
    std::vector<TaskScore> scores;
    eval::HarnessLM lm(model_, *tokenizer_, task_batch_);
    for (const eval::EvalTask& t : tasks_) {
      const eval::TaskResult r = eval::evaluate_task(lm, t);
      if (g_stop_signal.load() != 0) return;  // cut short: nothing logged
      for (const auto& [name, a] : r.metrics) scores.push_back({t.name, name, a.value, a.stderr_});
    }
    metrics.log_tasks(step, scores);
  }

  const TrainConfig& tc_;
  const int64_t T_;
  Transformer& model_;
  RunProcesses& processes_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<eval::EvalTask> tasks_;
  int64_t task_batch_ = 8;
  LossSums sums_;  // of the batches of one evaluation
  std::unique_ptr<EvalLoader> all_;
  std::vector<std::pair<std::string, std::unique_ptr<EvalLoader>>> sources_;
};

// The run's opening lines: its data, model, where the weights came from, MFU's ceiling.
void log_run_start(Metrics& metrics, const RunConfig& cfg, const TrainData& data,
                   const BuiltModel& built, const PeakFlops& peak, double flops_per_token) {
  metrics.log_line(fmt::format("data: store {}{}", data.dir,
                               data.prepared_now ? " (prepared now)"
                               : data.megatron   ? " (a Megatron-LM indexed dataset: it does not "
                                                   "name its tokenizer, so data.tokenizer must be "
                                                   "the one that made it; no validation split)"
                                                 : ""));
  metrics.log_line(manifest_summary(data.manifest));
  metrics.log_line(fmt::format("samples of {} tokens: train {}, validation {}", cfg.data.seq_len,
                               data.train->num_samples(), data.validation->num_samples()));
  if (data.train->num_sources() > 1) {
    std::vector<int64_t> sizes;
    std::vector<double> weights;
    for (int i = 0; i < data.train->num_sources(); ++i) {
      sizes.push_back(data.train->source_samples(i));
      weights.push_back(data.train->weight(i));
    }
    const std::vector<int64_t> drawn = mixture_counts(sizes, weights);
    std::string mix = "mixture per epoch:";
    for (size_t i = 0; i < sizes.size(); ++i)
      mix += fmt::format(" source {} weight {} draws {} of its {} samples;", i, weights[i],
                         drawn[i], sizes[i]);
    mix.pop_back();
    metrics.log_line(mix);
  }
  metrics.log_line(fmt::format(
      "model: {} parameters, {} layers, hidden {}; backend {}; {} threads; precision {}",
      built.model->num_params(), cfg.model.num_hidden_layers, cfg.model.hidden_size,
      built.backend->name(), thread_count(),
      cfg.train.precision == "bf16"
          ? "bf16 (bf16 compute; f32 master weights, gradients, moments, loss)"
          : "f32"));
  if (const std::string k = built.backend->kernels(); !k.empty()) metrics.log_line("kernels: " + k);
  if (!built.init_line.empty()) metrics.log_line(built.init_line);
  if (const std::string a = built.optimizer->assignment(); !a.empty()) metrics.log_line(a);
  metrics.log_line(
      fmt::format("MFU against {}; {:.3g} training FLOPs per token", peak.source, flops_per_token));
  if (!metrics.tensorboard_path().empty())
    metrics.log_line("tensorboard: " + metrics.tensorboard_path() + " (tensorboard --logdir " +
                     (fs::path(cfg.train.out_dir) / "tb").string() + ")");
  if (const std::string w = metrics.wandb_dir(); !w.empty())
    metrics.log_line("wandb: " + w + " (an offline run; upload it with: wandb sync " + w + ")");
}

// A resumed run's line; a resume from an older checkpoint than the newest (--resume NAME) sets the
// newer ones aside.
void log_resume(Metrics& metrics, const fs::path& run_dir, const std::string& ckpt, int64_t step,
                bool named) {
  metrics.log_line(fmt::format("resumed from {} at step {}", ckpt, step));
  std::error_code ec;
  if (!named || !fs::equivalent(fs::path(ckpt).parent_path(), run_dir / "checkpoints", ec)) return;
  const std::vector<std::string> aside = set_aside_newer_checkpoints(run_dir.string(), step);
  if (!aside.empty())
    metrics.log_line(fmt::format(
        "set aside {} newer checkpoint(s) of the run resumed from an older point: {} (now in {})",
        aside.size(), fmt::join(aside, ", "), (run_dir / "checkpoints" / "abandoned").string()));
}

// The process's and the device's memory now, into a step's metrics (what is unknown stays absent).
void measure_memory(StepMetrics& m, const Backend& backend) {
  const ProcessMemory p = process_memory();
  if (p.rss_bytes > 0) m.rss_bytes = p.rss_bytes;
  if (p.peak_rss_bytes > 0) m.rss_peak_bytes = p.peak_rss_bytes;
  if (const std::optional<DeviceMemoryUse> d = backend.device_memory()) {
    m.device_bytes_in_use = d->bytes_in_use;
    m.device_peak_bytes = d->peak_bytes;
  }
}

// Tokens/s, MFU and step time over the steps since the last logged one; the ETA over the run.
class StepLog {
 public:
  StepLog(int64_t first_step, int64_t max_steps, double flops_per_token, double peak_flops)
      : first_step_(first_step),
        max_steps_(max_steps),
        flops_per_token_(flops_per_token),
        peak_flops_(peak_flops) {}

  void add(double seconds, int64_t tokens) {
    seconds_ += seconds;
    tokens_ += tokens;
    ++steps_;
  }

  // The metrics of the step just done (`step` steps and `tokens` tokens so far); a new window.
  StepMetrics take(int64_t step, int64_t tokens, const StepReport& r) {
    StepMetrics m;
    m.step = step;
    m.max_steps = max_steps_;
    m.loss = r.loss;
    m.lr = r.lr;
    m.grad_norm = r.grad_norm;
    m.tokens_per_s = tokens_ / seconds_;
    m.mfu = flops_per_token_ * m.tokens_per_s / peak_flops_;
    m.step_ms = seconds_ / static_cast<double>(steps_) * 1e3;
    m.eta_s = since_start_.seconds() / static_cast<double>(step - first_step_) *
              static_cast<double>(max_steps_ - step);
    m.tokens = tokens;
    seconds_ = 0;
    tokens_ = steps_ = 0;
    return m;
  }

 private:
  const int64_t first_step_, max_steps_;
  const double flops_per_token_, peak_flops_;
  Timer since_start_;
  double seconds_ = 0;
  int64_t tokens_ = 0, steps_ = 0;
};

// A checkpoint of the run after `step` steps and `tokens` tokens; returns its directory.
std::string save(const RunDir& dir, const RunConfig& cfg, const BuiltModel& built,
                 const Loader& loader, const LossWatch& watch, int64_t step, int64_t tokens) {
  CheckpointState st;
  st.loss_watch = watch.state();
  st.step = step;
  st.optimizer_step = built.optimizer->step_count();
  st.tokens = tokens;
  st.loader = loader.get_state();
  st.config_hash = dir.config_hash;
  st.tokenizer = cfg.data.tokenizer;
  st.data_store = dir.data_store;
  st.data_fingerprint = dir.data_fingerprint;
  st.tokenizer_fingerprint = dir.tokenizer_fingerprint;
  st.lora = cfg.lora.rank > 0;
  st.base_init_from = cfg.train.init_from;
  st.base_hash = built.base_hash;
  st.optimizer = built.optimizer->name();
  return save_checkpoint(dir.path.string(), *built.model, built.optimizer->state(), st,
                         dir.config_yaml, cfg.train.keep_last);
}

// The end-of-run sample: train.sample_tokens after train.sample_prompt, on a CPU copy of the model
// where the backend does not decode a token at a time.
void log_sample(Metrics& metrics, const RunConfig& cfg, Transformer& model) {
  const TrainConfig& tc = cfg.train;
  GenerateOptions g;
  g.max_new_tokens = tc.sample_tokens;
  g.sampling.temperature = 0.8;
  g.seed = static_cast<uint64_t>(tc.seed);
  std::unique_ptr<Tokenizer> tok = load_tokenizer(cfg.data.tokenizer);
  g.stop_id = tok->eos_id();
  g.num_ids = tok->vocab_size();
  const std::string prompt = tc.sample_prompt.empty() ? std::string("\n") : tc.sample_prompt;
  std::vector<int32_t> in = tok->special_prefix();
  for (int32_t id : tok->encode(prompt)) in.push_back(id);
  std::unique_ptr<Backend> cpu;
  std::unique_ptr<Transformer> copy;
  if (!model.backend()->incremental_decoding()) {
    cpu = make_backend("cpu");
    copy = model.clone(cpu.get());
  }
  std::vector<int32_t> out = generate_ids(copy ? *copy : model, in, g);
  metrics.log_line("sample:\n" + prompt + tok->decode(out));
}

// Whether the run's metrics.jsonl holds an evaluation at `step`.
bool eval_logged(const fs::path& run_dir, int64_t step) {
  std::ifstream f(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("val_loss") && j.value("step", int64_t{-1}) == step)
      return true;
  }
  return false;
}

// The newest checkpoint of the run with a step at most `step`.
std::optional<std::string> newest_checkpoint_at_most(const fs::path& run_dir, int64_t step) {
  for (const auto& [s, d] : checkpoint_dirs(run_dir / "checkpoints"))  // newest first
    if (s <= step) return d.string();
  return std::nullopt;
}

// Where the run starts: step 0, or the checkpoint's step, tokens and loader position.
struct Position {
  int64_t step = 0, tokens = 0;
  bool config_changed = false;  // since the checkpoint resumed from was written
};

// A resumed run trains on the data and tokenizer its checkpoint trained on: a store prepared
// again from other data, or another tokenizer of the same vocabulary size, would go on quietly
// (the loader's position indexing other samples, ids meaning other text). Returns what differs
// ("" when nothing does, or the checkpoint is from before this was recorded); a UserError unless
// `allow`.
std::string check_same_data(const CheckpointState& was, const RunDir& dir, const RunConfig& cfg,
                            const std::string& ckpt, bool allow) {
  if (was.data_fingerprint.empty()) return "";
  std::string what;
  if (was.data_fingerprint != dir.data_fingerprint)
    what = fmt::format(
        "it trained on token store '{}' (content {}), and the store '{}' holds other tokens now "
        "({})",
        was.data_store, was.data_fingerprint, dir.data_store, dir.data_fingerprint);
  if (was.tokenizer_fingerprint != dir.tokenizer_fingerprint)
    what += fmt::format("{}it trained with tokenizer '{}' ({}), and data.tokenizer '{}' is {}",
                        what.empty() ? "" : "; ", was.tokenizer, was.tokenizer_fingerprint,
                        cfg.data.tokenizer, dir.tokenizer_fingerprint);
  if (!what.empty() && !allow)
    throw UserError("--resume: checkpoint " + ckpt + " cannot continue on this data: " + what +
                    ". Point data.store / data.tokenizer at what it trained on, or pass "
                    "--allow-data-change to continue on this data on purpose");
  return what;
}

Position resume_position(const BuiltModel& built, Loader& loader, const RunDir& dir,
                         const std::optional<std::string>& ckpt) {
  Position at;
  if (!built.resumed) return at;
  at.step = built.resumed->step;
  at.tokens = built.resumed->tokens;
  loader.set_state(built.resumed->loader.get<LoaderState>());
  at.config_changed = built.resumed->config_hash != dir.config_hash;
  if (at.config_changed)
    fmt::print("note: the config differs from the one checkpoint {} was written with\n", *ckpt);
  return at;
}

}  // namespace

namespace {

// The exit code lmtrain's main (src/cli/main.cpp) gives an exception that ends a run.
int exit_code_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const NonFiniteError&) {
    return kExitBadStep;
  } catch (const UserError&) {
    return kExitUserError;
  } catch (const fs::filesystem_error&) {
    return kExitUserError;
  } catch (const std::bad_alloc&) {
    return kExitUserError;
  } catch (...) {
    return 1;
  }
}

TrainResult run_training(RunConfig cfg, bool resume, int64_t stop_after,
                         const std::string& resume_from, bool allow_data_change,
                         std::unique_ptr<Metrics>& metrics_out) {
  const TrainConfig& tc = cfg.train;
  set_threads(tc.threads);
  check_training_memory(cfg, physical_memory_bytes());  // before any allocation
  RunDir dir{make_run_dir(tc.out_dir), run_config_record(cfg), run_config_hash(cfg), {}, {}, {}};
  // Several processes (a launcher's): rank 0 writes, every rank feeds its rows (run_processes.h).
  RunProcesses processes(cfg);
  const bool writer = processes.writer();
  const RunDirLock lock(dir.path.string(), processes.group().rank);  // held until train() returns
  // Rank 0 tidies the directory and chooses the checkpoint; the others take its choice.
  const std::string chosen = processes.by_writer("choice of the checkpoint to resume from", [&] {
    remove_run_dir_leftovers(dir.path);
    return resume_point(dir.path, resume, resume_from).value_or("");
  });
  const std::optional<std::string> ckpt =
      chosen.empty() ? std::nullopt : std::optional<std::string>(chosen);

  // Rank 0 opens the data first: it prepares <out_dir>/data when data.store is empty, which the
  // others then open as it is.
  std::optional<TrainData> data_of_writer;
  processes.by_writer("data", [&] {
    data_of_writer = open_train_data(cfg, resume);
    return std::string();
  });
  TrainData data = writer ? std::move(*data_of_writer) : open_train_data(cfg, true);
  dir.data_store = fs::absolute(data.dir).string();
  dir.data_fingerprint = data.fingerprint;
  dir.tokenizer_fingerprint = tokenizer_fingerprint(cfg.data.tokenizer);
  Loader loader(*data.train, processes.rows(tc.micro_batch_size), static_cast<uint64_t>(tc.seed),
                processes.group().rank, processes.group().count);
  const BuiltModel built = build_model(
      cfg, {.start = StartFrom::run, .resume = ckpt.value_or(""), .store = processes.store()});
  Transformer& model = *built.model;
  Evaluation evaluation(cfg, data, model, processes);
  const std::string data_change =
      built.resumed ? check_same_data(*built.resumed, dir, cfg, *ckpt, allow_data_change) : "";
  const Position at = resume_position(built, loader, dir, ckpt);
  int64_t step = at.step, tokens = at.tokens;
  if (writer) write_text_file((dir.path / "config.yaml").string(), dir.config_yaml);
  // Only rank 0 logs: the others' console and sinks are off (their step is the same program's).
  metrics_out =
      std::make_unique<Metrics>(dir.path.string(), writer ? cfg.logging : LoggingConfig::none(),
                                ckpt ? step : -1, run_config_to_json(cfg));
  Metrics& metrics = *metrics_out;
  if (!ckpt || at.config_changed) metrics.log_config(step, dir.config_yaml);
  const PeakFlops peak =
      mfu_peak(built.backend.get(), model.compute_dtype(), cfg.train.peak_tflops);
  const double flops_per_token = train_flops_per_token(model, cfg.data.seq_len);
  log_run_start(metrics, cfg, data, built, peak, flops_per_token);
  if (ckpt) log_resume(metrics, dir.path, *ckpt, step, !resume_from.empty());
  if (!data_change.empty())
    metrics.log_line("note: continuing on other data (--allow-data-change): " + data_change);

  TrainResult result;
  result.writer = writer;
  result.first_step = step;
  result.val_unigram_entropy = data.validation->unigram_entropy();
  TrainStep train_step(model, *built.optimizer, cfg, &processes);
  StepLog step_log(step, tc.max_steps, flops_per_token, peak.flops);
  LossWatch loss_watch;
  if (built.resumed && !built.resumed->loss_watch.is_null()) {
    try {
      loss_watch.restore(built.resumed->loss_watch);
    } catch (const nlohmann::json::exception& e) {
      throw UserError("--resume: the checkpoint's state.json: loss_watch: " +
                      std::string(e.what()));
    }
  }
  // Rank 0 writes the checkpoint; the others wait for it, and stop with its error if it failed.
  auto save_now = [&]() {
    result.last_checkpoint = processes.by_writer(fmt::format("checkpoint at step {}", step), [&] {
      return save(dir, cfg, built, loader, loss_watch, step, tokens);
    });
  };
  StopSignals signals;
  processes.give_up_when([&] { return signals.received() != 0; });
  auto stop_requested = [&](int64_t s) { return stop_after > 0 && s >= stop_after; };
  const RunSchedule schedule{tc.max_steps, tc.eval_every, tc.save_every};
  // Step s may be queued before the previous step's report is read (on pjrt the host builds it
  // while the device runs that one) unless the host needs the model of the s steps before it.
  auto may_queue = [&](int64_t s) {
    return s < tc.max_steps && !schedule.at(s).any() && !stop_requested(s) && !signals.received();
  };
  auto next = [&]() -> const Batch& { return loader.next(); };
  Timer t;
  while (step < tc.max_steps) {
    if (train_step.queued() == 0 && (signals.received() || stop_requested(step))) {
      result.interrupted = true;
      break;
    }
    const StepReport r = train_step.advance(step, next, may_queue);
    ++step;
    lock.check_held();  // the run directory deleted or replaced under the run: stop, named
    data.train->check_unchanged();  // a store written to under the run: stop, named
    tokens += r.tokens;
    result.last_loss = r.loss;
    if (const auto w = loss_watch.add(step, r.loss)) {
      // The newest checkpoint whose next step's loss was still in range stays.
      const auto kept = newest_checkpoint_at_most(dir.path, w->step - 2);
      metrics.log_warning(step, "divergence", w->text(kept ? *kept : std::string()),
                          {{"recent_median", w->median},
                           {"kept_checkpoint", path_to_json(kept ? *kept : std::string())}});
      if (kept && writer)
        protect_checkpoint(dir.path.string(), checkpoint_step(*kept),
                           fmt::format("the newest checkpoint before the divergence warning at "
                                       "step {}",
                                       step));
    }
    step_log.add(t.seconds(), r.tokens);
    if (step % tc.log_every == 0 || step == tc.max_steps) {
      StepMetrics m = step_log.take(step, tokens, r);
      if (!cfg.loss.spec().plain()) m.ce = r.ce;
      measure_memory(m, *built.backend);
      metrics.log_step(m);
    }
    if (train_step.queued() == 0) {  // the model is this step's
      const RunSchedule::Point point = schedule.at(step);
      if (point.save && point.save_first) save_now();
      if (point.evaluate) evaluation.run(metrics, step, result);
      if (point.save && !point.save_first) save_now();
    }
    t.reset();  // a step's time is its own: not the log's, evaluation's or checkpoint's
  }
  result.steps = step;
  result.replayed = built.backend->device().programs.replayed;
  auto stopped = [&] {
    result.interrupted = true;
    result.signal = signals.received();
    metrics.log_line(fmt::format("stopped at step {}{}; continue with --resume", step,
                                 result.signal ? " on a signal" : ""));
    return result;
  };
  if (result.interrupted) {
    const bool saved = result.last_checkpoint.ends_with(fmt::format("step_{:07d}", step));
    if (step > result.first_step && !saved) save_now();
    return stopped();
  }
  if (step == result.first_step && resume_from.empty()) {
    // Nothing to do from the newest checkpoint: a run killed between writing its last checkpoint
    // and pruning the oldest ones is tidied as the save would have, and one killed during its
    // final evaluation (written after the final checkpoint) evaluates.
    const std::string evaluated = processes.by_writer("tidying of the finished run", [&] {
      prune_checkpoints(dir.path.string(), tc.keep_last);
      return eval_logged(dir.path, step) ? "evaluated" : "";
    });
    if (step == tc.max_steps && evaluated.empty()) {
      evaluation.run(metrics, step, result);
      if (signals.received()) return stopped();
    }
  }
  if (tc.sample_tokens > 0 && !signals.received() && writer) log_sample(metrics, cfg, model);
  if (signals.received()) return stopped();
  return result;
}

}  // namespace

int train_exit_code(const TrainResult& r) {
  return r.interrupted ? 128 + (r.signal ? r.signal : SIGINT) : 0;
}

TrainResult train(RunConfig cfg, bool resume, int64_t stop_after, const std::string& resume_from,
                  bool allow_data_change) {
  std::unique_ptr<Metrics> metrics;
  try {
    TrainResult r =
        run_training(std::move(cfg), resume, stop_after, resume_from, allow_data_change, metrics);
    metrics->finish(train_exit_code(r));
    return r;
  } catch (...) {
    if (metrics) {
      try {
        metrics->finish(exit_code_of(std::current_exception()));
      } catch (const std::exception&) {  // the run's own error is the one to report
      }
    }
    throw;
  }
}

}  // namespace lmt
