// The run config's own sections: data (and its sources), train, loss, parallel and logging. Each
// declares its keys once in visit() (name, default, help and, for a key of a few values, the
// choices), from which reading, --set, printing, saving and hashing follow, and checks itself in
// validate() (config_sections.cpp; messages name the key as the YAML does). The model, optimizer
// and lora sections are their folders' (model/model_config.h, optim/optimizer_spec.h,
// model/lora_spec.h); what spans sections is RunConfig::validate's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/loss.h"

namespace lmt {

struct SourceConfig {
  std::string path;
  std::string name;  // in metrics and plots; "" = the path's file name without extension
  std::string format = "text";
  std::string split = "delimiter";  // text: file | line | delimiter
  std::string delimiter = "%";
  double weight = 1.0;
  std::vector<std::string> exclude;
  std::string field = "text";     // jsonl
  std::string on_error = "stop";  // stop | skip
  std::string schema = "text";
  std::string chat_template = "chatml";
  std::string loss = "assistant";
  std::string messages_field = "messages";
  std::string instruction_field = "instruction";
  std::string input_field = "input";
  std::string output_field = "output";
  int64_t max_record_bytes = int64_t{64} << 20;

  template <class V>
  void visit(V& v) {
    v("path", path, "a file or a directory of files");
    v("name", name,
      "the source's name in per-source validation metrics (default: the file or directory "
      "name without extension; repeats get _2, _3, ...)");
    v("format", format,
      "text (plain text files), jsonl (one JSON object per line), csv or tsv (header row)",
      {"text", "jsonl", "csv", "tsv", "parquet"});
    v("split", split, "how a text file splits into documents: file, line or delimiter",
      {"file", "line", "delimiter"});
    v("delimiter", delimiter, "the line that separates documents when split = delimiter");
    v("weight", weight, "relative sampling weight of this source");
    v("exclude", exclude, "file-name patterns to leave out of a directory, e.g. ['*.dat']");
    v("field", field, "jsonl: the string field, csv/tsv: the column, that holds the document");
    v("on_error", on_error,
      "stop at a bad record (file:line; for text a binary file or invalid UTF-8), or skip "
      "and count it",
      {"stop", "skip"});
    v("schema", schema,
      "text (each record is one document, all in the loss), instruction (instruction / "
      "optional input / output fields as a user turn and an assistant turn) or chat (a list of "
      "{role: system|user|assistant, content} messages; in CSV/TSV the column holds them as "
      "JSON)",
      {"text", "instruction", "chat"});
    v("chat_template", chat_template,
      "instruction/chat: chatml, qwen2.5 (chatml plus Qwen's default system prompt), llama3, "
      "gemma (system folded into the first user turn; turns must alternate), plain (no special "
      "tokens, for base models), or a custom pattern like "
      "'<s>{turn}<|{role}|>\\n{content}</s>\\n'");
    v("loss", loss,
      "instruction/chat: assistant (only the assistant turns' content and end-of-turn marker "
      "count) or all (every token counts)",
      {"assistant", "all"});
    v("messages_field", messages_field, "chat: the field holding the list of messages");
    v("instruction_field", instruction_field, "instruction: the field holding the instruction");
    v("input_field", input_field, "instruction: the (optional) field holding the input");
    v("output_field", output_field, "instruction: the field holding the response");
    v("max_record_bytes", max_record_bytes,
      "jsonl, csv and tsv: the longest record read, in bytes; a longer one is a bad record (a "
      "JSON parse takes many times its size in memory; a CSV row is read through without being "
      "held)");
  }
  // `at` names the source as the YAML does: "data.sources[2].".
  void validate(const std::string& at) const;
};

struct DataConfig {
  std::vector<SourceConfig> sources;
  std::string tokenizer = "bytes";
  int64_t seq_len = 256;
  double val_fraction = 0.05;
  std::string packing = "auto";
  std::string store;

  template <class V>
  void visit(V& v) {
    v("sources", sources, "list of data sources");
    v("tokenizer", tokenizer,
      "bytes (256 byte ids + end-of-text 256), a Hugging Face tokenizer.json, a SentencePiece "
      ".model, or a model directory holding one");
    v("seq_len", seq_len, "tokens per training sample");
    v("val_fraction", val_fraction, "share of documents held out for evaluation");
    v("packing", packing,
      "auto (text: continue, instruction/chat: bin), continue (documents run on across samples) "
      "or bin (whole documents bin-packed into samples, the rest padded)",
      {"auto", "continue", "bin"});
    v("store", store,
      "the token store `lmtrain prepare` writes and `lmtrain train` reads; empty: train "
      "prepares one in <train.out_dir>/data");
  }
  void validate() const;
};

struct TrainConfig {
  std::string backend = "cpu";
  std::string pjrt_plugin;
  std::string precision = "f32";
  bool deterministic = false;
  int64_t micro_batch_size = 8;
  int64_t grad_accum_steps = 1;
  int64_t max_steps = 1000;
  double lr = 3e-4;
  double min_lr = 3e-5;
  int64_t warmup_steps = 100;
  std::string schedule = "cosine";
  double decay_fraction = 0.2;
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  int64_t seed = 1234;
  int64_t eval_every = 100;
  int64_t eval_steps = 10;
  int64_t save_every = 500;
  int64_t keep_last = 3;
  int64_t log_every = 10;
  std::string out_dir = "runs/default";
  bool activation_checkpointing = false;
  int64_t activation_bits = 0;
  bool document_masking = false;
  int64_t loss_chunk_tokens = 0;  // 0: loss_chunk_rows (train/model_builder.h) chooses
  int64_t threads = 0;
  double peak_tflops = 0;
  std::string sample_prompt;
  int64_t sample_tokens = 0;
  std::string init_from;

  template <class V>
  void visit(V& v) {
    v("backend", backend, "cpu, pjrt (XLA through a PJRT plugin), cuda or auto",
      {"cpu", "pjrt", "cuda", "auto"});
    v("pjrt_plugin", pjrt_plugin,
      "PJRT plugin for backend pjrt (libtpu.so, the CUDA plugin, ...); default "
      "LMTRAIN_PJRT_PLUGIN, else XLA's CPU plugin from scripts/setup.sh");
    v("precision", precision,
      "f32, or bf16 (bf16 compute, f32 master weights, gradients, moments and loss; the cpu "
      "backend needs AVX512-BF16 or AMX)",
      {"f32", "bf16"});
    v("deterministic", deterministic,
      "backend pjrt: ask XLA for deterministic ops (GPUs: no atomic scatter-adds or reductions, "
      "so a run and its resume repeat exactly; slower). The CPU backend always is");
    v("micro_batch_size", micro_batch_size, "sequences per forward/backward pass");
    v("grad_accum_steps", grad_accum_steps, "micro-batches per optimizer step");
    v("max_steps", max_steps, "optimizer steps in the run");
    v("lr", lr, "peak learning rate");
    v("min_lr", min_lr, "learning rate at the end of the decay");
    v("warmup_steps", warmup_steps, "steps of linear warmup from 0");
    v("schedule", schedule, "constant, cosine, linear or wsd",
      {"constant", "cosine", "linear", "wsd"});
    v("decay_fraction", decay_fraction, "wsd: share of max_steps spent decaying at the end");
    v("weight_decay", weight_decay, "decoupled weight decay");
    v("grad_clip", grad_clip, "clip the global gradient norm to this; 0 = off");
    v("seed", seed, "seed of initialisation and data order");
    v("eval_every", eval_every, "steps between evaluations; 0 = never");
    v("eval_steps", eval_steps, "micro-batches per evaluation");
    v("save_every", save_every, "steps between checkpoints; 0 = only at the end");
    v("keep_last", keep_last, "checkpoints to keep; 0 = all");
    v("log_every", log_every, "steps between progress lines");
    v("out_dir", out_dir, "run directory");
    v("activation_checkpointing", activation_checkpointing, "recompute each layer in backward");
    v("activation_bits", activation_bits,
      "0 keeps the MLP's pre-activation for the backward; 1 (model.hidden_act relu or relu2, "
      "gpt2's non-gated MLP) keeps ReLU's sign as 1 bit per element, and for relu2 nothing but "
      "the output the down projection keeps anyway: one [tokens, intermediate_size] tensor less "
      "per layer, the same gradients");
    v("document_masking", document_masking,
      "packed samples: attention stays inside each document and positions restart at its start "
      "(recommended with bin packing / SFT)");
    v("loss_chunk_tokens", loss_chunk_tokens,
      "tokens per cross-entropy chunk; 0 = chosen from the device's memory: 1024 on the CPU "
      "backend; on pjrt the whole micro-batch when its logits take at most an eighth of the "
      "device's memory, else the largest power of two that does (at least 1024)");
    v("threads", threads, "CPU threads; 0 = all cores");
    v("peak_tflops", peak_tflops,
      "the peak of one device that MFU divides by, in TFLOP/s; 0 = the device's nominal peak "
      "where lmtrain knows it (docs/mfu.md), else a GEMM measured at the start (a few seconds)");
    v("sample_prompt", sample_prompt, "text to continue at the end of the run");
    v("sample_tokens", sample_tokens, "tokens to generate at the end of the run; 0 = none");
    v("init_from", init_from,
      "a Hugging Face model directory to fine-tune (config.json, model.safetensors or shards, "
      "optionally tokenizer.json / tokenizer.model): the model's shape comes from its "
      "config.json (model keys set here must agree with it), its weights replace the "
      "initialisation, and its tokenizer is used when data.tokenizer is not set; a resumed run "
      "continues from its checkpoint instead");
  }
  void validate() const;
};

// An offline W&B run in <out_dir>/wandb (io/wandb_writer.h), uploaded later with `wandb sync`.
// The section is on when any key is set; then project is required.
struct WandbConfig {
  std::string project;
  std::string name;
  std::string entity;
  std::vector<std::string> tags;
  std::string group;
  std::string notes;
  std::string id;

  template <class V>
  void visit(V& v) {
    v("project", project, "the W&B project the run is filed under (required)");
    v("name", name, "the run's display name; empty: W&B makes one");
    v("entity", entity, "the W&B team or user; empty: the uploading account's default");
    v("tags", tags, "the run's tags");
    v("group", group, "the run's group");
    v("notes", notes, "the run's notes");
    v("id", id,
      "the W&B run id; empty: a fresh random one, and on --resume the id of the newest run in "
      "<out_dir>/wandb (the resumed run continues it)");
  }
  void validate() const;
  bool enabled() const {
    return !project.empty() || !name.empty() || !entity.empty() || !tags.empty() ||
           !group.empty() || !notes.empty() || !id.empty();
  }
};

// lm-evaluation-harness tasks (src/eval/) scored at each of a run's evaluations (train.eval_every),
// beside the validation loss. Left out of config.yaml, and so of the config's hash, while unused.
struct EvalConfig {
  static constexpr bool kOmitWhenDefault = true;
  std::vector<std::string> tasks;
  int64_t limit = 0;
  int64_t num_fewshot = -1;
  int64_t batch = 8;

  template <class V>
  void visit(V& v) {
    v("tasks", tasks,
      "task files scored at each evaluation: lm-evaluation-harness task YAML naming local data, "
      "or lmtrain's short form (as lmtrain eval --tasks)");
    v("limit", limit, "score only the first N documents of each task; 0 = all");
    v("num_fewshot", num_fewshot, "few-shot examples a document; -1 = each task's own");
    v("batch", batch, "sequences scored together");
  }
  void validate() const;
};

struct LoggingConfig {
  bool console = true;
  bool jsonl = true;
  bool tensorboard = false;
  WandbConfig wandb;

  template <class V>
  void visit(V& v) {
    v("console", console, "print a progress line every log_every steps");
    v("jsonl", jsonl, "write metrics.jsonl in the run directory");
    v("tensorboard", tensorboard,
      "write TensorBoard event files in <out_dir>/tb (tensorboard --logdir <out_dir>/tb): the "
      "train/ and val/ scalars and the resolved config as text");
    v("wandb", wandb,
      "write an offline W&B run in <out_dir>/wandb (upload it with wandb sync <dir>): every "
      "numeric value of metrics.jsonl at its step, the resolved config, the summary and the exit "
      "code");
  }
  void validate() const { wandb.validate(); }
  // Every sink off (the ranks of a run across processes but rank 0).
  static LoggingConfig none() { return {.console = false, .jsonl = false, .tensorboard = false}; }
};

// Several devices (backend pjrt): a mesh of named axes whose product is the number of devices the
// run uses; one program, annotated with shardings (the plan: model/sharding_plan.h), partitioned
// by XLA's SPMD partitioner. The batch is split over data x fsdp; parameters, gradients and
// optimizer state over fsdp (ZeRO-3) and, Megatron's way, over tensor.
struct ParallelConfig {
  static constexpr int64_t kMaxMeshDevices = int64_t{1} << 20;
  static constexpr int64_t kMaxCoordinationTimeout = 7 * 24 * 3600;
  int64_t data = 1;
  int64_t fsdp = 1;
  int64_t tensor = 1;
  std::vector<int64_t> devices;
  std::string coordination_dir;
  int64_t coordination_timeout = 60;

  template <class V>
  void visit(V& v) {
    v("data", data,
      "data-parallel ways: each group of devices takes its share of the batch (across processes: "
      "the axis that spans them)");
    v("fsdp", fsdp,
      "fully sharded data-parallel ways: the batch is split further, and every parameter, its "
      "gradient and its optimizer state are split too (ZeRO-3)");
    v("tensor", tensor,
      "tensor-parallel ways (Megatron): attention heads, the MLP's features and the vocabulary "
      "are split");
    v("devices", devices,
      "the plugin's device ids the mesh uses, data x fsdp x tensor of them; empty: the first ones "
      "(XLA's CPU plugin makes as many as the mesh needs)");
    v("coordination_dir", coordination_dir,
      "several processes (started by mpirun or another launcher): a directory every process "
      "sees, where they exchange the plugin's keys and lmtrain's (each step's labelled tokens, "
      "rank 0's results); empty: <train.out_dir>/coordination");
    v("coordination_timeout", coordination_timeout,
      "seconds a process waits for the others' keys in the plugin's exchange before it gives up "
      "(lmtrain's own exchanges, as a checkpoint rank 0 writes, wait up to an hour); a lost "
      "process is named after 10 s without a heartbeat");
  }
  // The mesh's own consistency; what it must divide (the batch, the model) is RunConfig's check.
  void validate() const;
  int64_t size() const { return data * fsdp * tensor; }
};

// The training objective (backend/loss.h) and how the output head computes it. Every loss is a
// mean over the labelled tokens; metrics report the plain cross-entropy beside it, and the
// evaluation is always the plain cross-entropy.
struct LossConfig {
  std::string name = "cross_entropy";
  double label_smoothing = 0;
  double z_loss = 0;
  double focal_gamma = 2.0;
  std::string impl = "chunked";
  int64_t vocab_tile = 8192;

  template <class V>
  void visit(V& v) {
    v("name", name, "cross_entropy or focal (the cross-entropy weighted by (1 - p_label)^gamma)",
      {"cross_entropy", "focal"});
    v("label_smoothing", label_smoothing,
      "in [0, 1): the target mixes in the uniform distribution with this weight (either loss)");
    v("z_loss", z_loss, "adds z_loss * log(sum exp(logits))^2 per token (either loss); 0 = off");
    v("focal_gamma", focal_gamma, "gamma of the focal loss (name focal; left at 2 otherwise)");
    v("impl", impl,
      "chunked (logits of train.loss_chunk_tokens whole rows at a time) or cut (the head's product "
      "fused with the loss, tiles of train.loss_chunk_tokens x vocab_tile logits at a time, the "
      "backward computing them again)",
      {"chunked", "cut"});
    v("vocab_tile", vocab_tile, "token ids per tile of the cut loss");
  }
  void validate() const;
  LossSpec spec() const { return {label_smoothing, z_loss, name == "focal" ? focal_gamma : 0.0}; }
  int64_t head_vocab_tile() const { return impl == "cut" ? vocab_tile : 0; }
};

}  // namespace lmt
