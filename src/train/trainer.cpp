#include "train/trainer.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "data/loader.h"
#include "data/mixture.h"
#include "data/packing.h"
#include "data/prepare.h"
#include "data/tokenizer/tokenizer.h"
#include "io/hf_model.h"
#include "io/peft_adapter.h"
#include "io/text_file.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "train/checkpoint.h"
#include "train/flops.h"
#include "train/generation.h"
#include "train/memory_check.h"
#include "train/metrics.h"
#include "train/run_lock.h"
#include "train/train_data.h"

namespace lmt {

static_assert(kNoLabel == Transformer::kIgnoreIndex, "the loader's and the model's ignore label");

namespace fs = std::filesystem;

namespace {

std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int sig) {
  g_stop_signal.store(sig);
}

// SIGINT / SIGTERM during a run: finish the step in flight, write a checkpoint, return.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal.store(0);
    old_int_ = std::signal(SIGINT, on_stop_signal);
    old_term_ = std::signal(SIGTERM, on_stop_signal);
  }
  ~StopSignals() {
    std::signal(SIGINT, old_int_);
    std::signal(SIGTERM, old_term_);
  }
  int received() const { return g_stop_signal.load(); }

 private:
  void (*old_int_)(int);
  void (*old_term_)(int);
};

// The loss sum and labelled tokens over the evaluation batches.
LossSum evaluate(Transformer& model, EvalLoader& loader, int64_t batches, int64_t B, int64_t T,
                 bool masking) {
  loader.reset();
  std::vector<int32_t> ids(static_cast<size_t>(B * T)), labels(ids.size()), starts(ids.size()),
      pos(ids.size());
  LossSum total;
  for (int64_t i = 0; i < batches; ++i) {
    loader.next(ids.data(), labels.data(), starts.data(), pos.data());
    const Transformer::Packing packing{pos.data(), starts.data()};
    LossSum s = model.forward_loss(ids.data(), labels.data(), B, T, masking ? &packing : nullptr);
    total.sum += s.sum;
    total.tokens += s.tokens;
  }
  return total;
}

double mean(const LossSum& s) {
  return s.tokens ? s.sum / static_cast<double>(s.tokens) : 0.0;
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

}  // namespace

TrainResult train(RunConfig cfg, bool resume, int64_t stop_after, const std::string& resume_from) {
  const TrainConfig& tc = cfg.train;
  set_threads(tc.threads);
  check_training_memory(cfg, physical_memory_bytes());  // before any allocation
  const std::string config_yaml = run_config_to_yaml(cfg);
  const std::string config_hash = run_config_hash(cfg);
  const fs::path run_dir = tc.out_dir;
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec)
    throw UserError("train.out_dir: cannot create '" + run_dir.string() + "': " + ec.message());
  const RunDirLock lock(run_dir.string());  // held until train() returns
  remove_run_dir_leftovers(run_dir);

  // Resume point, if asked for and present.
  std::optional<std::string> ckpt;
  if (resume && !resume_from.empty()) {
    ckpt = find_checkpoint(run_dir.string(), resume_from);
  } else if (resume) {
    ckpt = find_latest_checkpoint(run_dir.string());
    if (!ckpt)
      throw UserError("--resume: no complete checkpoint in '" + (run_dir / "checkpoints").string() +
                      "'");
  }

  TrainData data = open_train_data(cfg, resume);
  const int64_t B = tc.micro_batch_size, T = cfg.data.seq_len, accum = tc.grad_accum_steps;
  Loader loader(*data.train, B, static_cast<uint64_t>(tc.seed));
  std::unique_ptr<EvalLoader> eval_loader;
  if (tc.eval_every > 0 || tc.eval_steps > 0) {
    if (data.validation->num_samples() > 0)
      eval_loader = std::make_unique<EvalLoader>(*data.validation, B);
  }

  auto be = make_backend(tc.backend, backend_options(cfg));
  Transformer model(be.get(), cfg.model);
  const bool lora = cfg.lora.rank > 0;
  model.set_activation_checkpointing(tc.activation_checkpointing);
  model.set_activation_bits(static_cast<int>(tc.activation_bits));
  model.set_loss_chunk_tokens(tc.loss_chunk_tokens);
  std::string init_line;
  if (!tc.init_from.empty() && !ckpt) {
    // load_run_config took the shape from init_from; a config built in code must match it too.
    RunConfig probe = cfg;
    apply_init_from(probe, model_key_names(), true, "train");
    load_hf_weights(tc.init_from, model);
    init_line = fmt::format(
        "init: weights of Hugging Face model '{}' ({}, from its config.json); "
        "tokenizer {}",
        tc.init_from, cfg.model.family, cfg.data.tokenizer);
  } else if (lora && !tc.init_from.empty()) {  // the frozen base is not in the checkpoint
    load_hf_weights(tc.init_from, model);
    init_line = fmt::format("init: base weights of Hugging Face model '{}'", tc.init_from);
  } else {
    model.init_weights(static_cast<uint64_t>(tc.seed));
    if (!tc.init_from.empty())
      init_line = fmt::format("init: train.init_from '{}' not reloaded: resuming from {}",
                              tc.init_from, *ckpt);
  }
  std::string base_hash;
  if (lora) {
    base_hash = base_weights_hash(model);
    if (!cfg.lora.init_from.empty() && !ckpt) {  // continue from an existing adapter
      load_peft_adapter(cfg.lora.init_from, model);
      init_line += fmt::format("{}init: LoRA adapters of '{}'", init_line.empty() ? "" : "\n",
                               cfg.lora.init_from);
    } else {
      model.add_lora(lora_spec(cfg.lora), static_cast<uint64_t>(tc.seed));
    }
    if (cfg.lora.base_dtype == "bf16") model.set_base_dtype(DType::bf16);
    init_line += fmt::format(
        "{}LoRA: rank {}, alpha {}, {} adapters{}, {} trainable parameters; the base is frozen{}",
        init_line.empty() ? "" : "\n", cfg.lora.rank, cfg.lora.alpha, model.lora_targets().size(),
        model.lora_saved().empty()
            ? ""
            : fmt::format(" and {} base tensors trained in full (modules_to_save)",
                          model.lora_saved().size()),
        model.lora_num_params(),
        cfg.lora.base_dtype == "bf16" ? " and held in bf16 (computation in f32)" : "");
  }
  if (tc.precision == "bf16") model.set_compute_dtype(DType::bf16);
  const std::unique_ptr<Optimizer> optimizer = make_optimizer(
      be.get(), model.trainable_params(), model.trainable_flat_size(), optimizer_spec(cfg));
  Optimizer& opt = *optimizer;

  int64_t step = 0, tokens_seen = 0;
  bool config_changed = false;  // since the checkpoint resumed from was written
  if (ckpt) {
    CheckpointState st;
    try {
      st = load_checkpoint(*ckpt, model, opt.state(), opt.name());
    } catch (const UserError& e) {
      throw UserError("--resume: checkpoint '" + *ckpt + "' cannot be resumed: " + e.what() +
                      " (an older checkpoint can be named: --resume step_N)");
    }
    if (lora && st.base_hash != base_hash)
      throw UserError(fmt::format(
          "--resume: checkpoint '{}' holds adapters for another base model (base {} with weights "
          "{}; this run's base {} has weights {})",
          *ckpt, st.base_init_from.empty() ? "initialised from train.seed" : st.base_init_from,
          st.base_hash, tc.init_from.empty() ? "initialised from train.seed" : tc.init_from,
          base_hash));
    step = st.step;
    tokens_seen = st.tokens;
    opt.set_step_count(st.optimizer_step);
    loader.set_state(st.loader.get<LoaderState>());
    config_changed = st.config_hash != config_hash;
    if (config_changed)
      fmt::print("note: the config differs from the one checkpoint {} was written with\n", *ckpt);
  }
  write_text_file((run_dir / "config.yaml").string(), config_yaml);
  Metrics metrics(run_dir.string(), cfg.logging, ckpt ? step : -1);
  if (!ckpt || config_changed) metrics.log_config(step, config_yaml);
  metrics.log_line(fmt::format("data: store {}{}", data.dir,
                               data.prepared_now ? " (prepared now)"
                               : data.megatron   ? " (a Megatron-LM indexed dataset: it does not "
                                                   "name its tokenizer, so data.tokenizer must be "
                                                   "the one that made it; no validation split)"
                                                 : ""));
  metrics.log_line(manifest_summary(data.manifest));
  metrics.log_line(fmt::format("samples of {} tokens: train {}, validation {}", T,
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
      model.num_params(), cfg.model.num_hidden_layers, cfg.model.hidden_size, be->name(),
      thread_count(),
      tc.precision == "bf16" ? "bf16 (bf16 compute; f32 master weights, gradients, moments, loss)"
                             : "f32"));
  if (!init_line.empty()) metrics.log_line(init_line);
  if (const std::string a = opt.assignment(); !a.empty()) metrics.log_line(a);
  // MFU's ceiling: the device's nominal peak where it is known, else one GEMM in the compute
  // dtype measured once (a 1024^3 GEMM is ~2 GFLOP).
  const PeakFlops peak = mfu_peak(be.get(), model.compute_dtype(), 1024, 3);
  const double peak_flops = peak.flops;
  const double flops_per_token = train_flops_per_token(model, T);
  metrics.log_line(
      fmt::format("MFU against {}; {:.3g} training FLOPs per token", peak.source, flops_per_token));
  if (!metrics.tensorboard_path().empty())
    metrics.log_line("tensorboard: " + metrics.tensorboard_path() + " (tensorboard --logdir " +
                     (run_dir / "tb").string() + ")");
  if (ckpt) metrics.log_line(fmt::format("resumed from {} at step {}", *ckpt, step));
  if (ckpt && !resume_from.empty() &&
      fs::equivalent(fs::path(*ckpt).parent_path(), run_dir / "checkpoints", ec)) {
    const std::vector<std::string> aside = set_aside_newer_checkpoints(run_dir.string(), step);
    if (!aside.empty())
      metrics.log_line(fmt::format(
          "set aside {} newer checkpoint(s) of the run resumed from an older point: {} (now in {})",
          aside.size(), fmt::join(aside, ", "), (run_dir / "checkpoints" / "abandoned").string()));
  }

  TrainResult result;
  result.first_step = step;
  result.val_unigram_entropy = data.validation->unigram_entropy();
  std::vector<int32_t> ids(static_cast<size_t>(B * T * accum)), labels(ids.size());
  std::vector<int32_t> doc_start(ids.size()), positions(ids.size());  // packed layout
  double window_s = 0;
  int64_t window_tokens = 0, window_steps = 0;
  Timer since_start;
  const int64_t first_step = step;

  auto save = [&]() {
    CheckpointState st;
    st.step = step;
    st.optimizer_step = opt.step_count();
    st.tokens = tokens_seen;
    st.loader = loader.get_state();
    st.config_hash = config_hash;
    st.tokenizer = cfg.data.tokenizer;
    st.lora = lora;
    st.base_init_from = tc.init_from;
    st.base_hash = base_hash;
    st.optimizer = opt.name();
    result.last_checkpoint =
        save_checkpoint(run_dir.string(), model, opt.state(), st, config_yaml, tc.keep_last);
  };
  // Several sources: each one's validation samples are evaluated on their own too (the same
  // number of batches, or one pass over a smaller source), named as data.sources names them.
  std::vector<std::pair<std::string, std::unique_ptr<EvalLoader>>> source_loaders;
  if (eval_loader && data.validation->num_sources() > 1) {
    const std::vector<std::string> names =
        static_cast<int>(cfg.data.sources.size()) == data.validation->num_sources()
            ? source_names(cfg.data)
            : std::vector<std::string>{};
    for (int i = 0; i < data.validation->num_sources(); ++i)
      if (data.validation->source_samples(i) > 0)
        source_loaders.emplace_back(
            names.empty() ? "source" + std::to_string(i) : names[static_cast<size_t>(i)],
            std::make_unique<EvalLoader>(*data.validation, B, i, 0, 1));
  }
  auto run_eval = [&]() {
    if (!eval_loader) return;
    const int64_t batches = tc.eval_steps > 0 ? tc.eval_steps : eval_loader->batches_per_pass();
    result.last_val_loss = mean(evaluate(model, *eval_loader, batches, B, T, tc.document_masking));
    std::vector<SourceEval> sources;
    for (auto& [name, loader] : source_loaders) {
      const LossSum s = evaluate(model, *loader, std::min(batches, loader->batches_per_pass()), B,
                                 T, tc.document_masking);
      sources.push_back({name, mean(s), s.tokens});
    }
    metrics.log_eval(step, result.last_val_loss, batches * B * T, sources);
  };

  StopSignals signals;
  while (step < tc.max_steps) {
    if (signals.received() || (stop_after > 0 && step >= stop_after)) {
      result.interrupted = true;
      break;
    }
    Timer t;
    const double lr = lr_at(tc, step);
    // All micro-batches of the step first: the loss is the mean over every labelled token of
    // the step, whatever the split into micro-batches.
    int64_t labelled = 0;
    for (int64_t a = 0; a < accum; ++a) {
      const Batch& b = loader.next();
      std::copy(b.ids.begin(), b.ids.end(), ids.begin() + a * B * T);
      std::copy(b.labels.begin(), b.labels.end(), labels.begin() + a * B * T);
      packed_layout(b.doc_starts, T, &doc_start[a * B * T], &positions[a * B * T]);
    }
    for (int32_t l : labels) labelled += l != Transformer::kIgnoreIndex;
    if (labelled == 0) throw UserError("data: a training step has no labelled tokens");
    // The step reads nothing back until the norm after the update (one program on pjrt). A
    // non-finite loss makes a non-finite gradient, so the update was skipped on the device.
    model.zero_grads();
    int64_t loss_tokens = 0;
    for (int64_t a = 0; a < accum; ++a) {
      const Transformer::Packing packing{&positions[a * B * T], &doc_start[a * B * T]};
      model.set_dropout(static_cast<uint64_t>(tc.seed), static_cast<uint64_t>(step * accum + a));
      loss_tokens += model
                         .forward_backward(&ids[a * B * T], &labels[a * B * T], B, T,
                                           1.0 / static_cast<double>(labelled),
                                           tc.document_masking ? &packing : nullptr, false)
                         .tokens;
    }
    opt.step(static_cast<float*>(model.trainable_data()),
             static_cast<float*>(model.trainable_grads_data()), lr, tc.grad_clip);
    model.discard_grads();  // dead from here: on pjrt they stay inside the step's program
    const double norm = opt.finish_step();
    const double mean_loss = model.take_loss_sum() / static_cast<double>(loss_tokens);
    if (!std::isfinite(mean_loss))
      throw NonFiniteError(
          fmt::format("step {}: the loss is {} (lr {:.3e}); no checkpoint was "
                      "written from this step",
                      step + 1, mean_loss, lr));
    if (!std::isfinite(norm))
      throw NonFiniteError(
          fmt::format("step {}: the gradient norm is {} (loss {:.4f}); no "
                      "checkpoint was written from this step",
                      step + 1, norm, mean_loss));
    ++step;
    tokens_seen += B * T * accum;
    result.last_loss = mean_loss;
    window_s += t.seconds();
    window_tokens += B * T * accum;
    ++window_steps;

    if (step % tc.log_every == 0 || step == tc.max_steps) {
      StepMetrics m;
      m.step = step;
      m.max_steps = tc.max_steps;
      m.loss = mean_loss;
      m.lr = lr;
      m.grad_norm = norm;
      m.tokens_per_s = window_tokens / window_s;
      m.mfu = flops_per_token * m.tokens_per_s / peak_flops;
      m.step_ms = window_s / static_cast<double>(window_steps) * 1e3;
      m.eta_s = since_start.seconds() / static_cast<double>(step - first_step) *
                static_cast<double>(tc.max_steps - step);
      m.tokens = tokens_seen;
      metrics.log_step(m);
      window_s = 0;
      window_tokens = window_steps = 0;
    }
    if (tc.eval_every > 0 && step % tc.eval_every == 0 && step != tc.max_steps) run_eval();
    if (tc.save_every > 0 && step % tc.save_every == 0 && step != tc.max_steps) save();
  }
  result.steps = step;
  if (result.interrupted) {
    if (step > first_step) save();
    metrics.log_line(fmt::format("stopped at step {}{}; continue with --resume", step,
                                 signals.received() ? " on a signal" : ""));
    return result;
  }
  if (step > first_step || !ckpt) {
    run_eval();
    save();
  } else if (resume_from.empty()) {
    // Nothing to do from the newest checkpoint: a run killed between writing its last checkpoint
    // and pruning the oldest ones is tidied as the save would have.
    prune_checkpoints(run_dir.string(), tc.keep_last);
  }

  if (tc.sample_tokens > 0) {
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
    if (!be->incremental_decoding()) {
      cpu = make_backend("cpu");
      copy = model.clone(cpu.get());
    }
    std::vector<int32_t> out = generate_ids(copy ? *copy : model, in, g);
    metrics.log_line("sample:\n" + prompt + tok->decode(out));
  }
  return result;
}

}  // namespace lmt
