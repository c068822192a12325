// Everything one run needs, one struct per YAML section. Each field is declared once in visit()
// (name, default, help); loading, --set overrides, printing and saving follow from that list.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/lora.h"
#include "model/model_config.h"
#include "optim/optimizer.h"

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
      "text (plain text files), jsonl (one JSON object per line), csv or tsv (header row)");
    v("split", split, "how a text file splits into documents: file, line or delimiter");
    v("delimiter", delimiter, "the line that separates documents when split = delimiter");
    v("weight", weight, "relative sampling weight of this source");
    v("exclude", exclude, "file-name patterns to leave out of a directory, e.g. ['*.dat']");
    v("field", field, "jsonl: the string field, csv/tsv: the column, that holds the document");
    v("on_error", on_error,
      "stop at a bad record (file:line; for text a binary file or invalid UTF-8), or skip "
      "and count it");
    v("schema", schema,
      "text (each record is one document, all in the loss), instruction (instruction / "
      "optional input / output fields as a user turn and an assistant turn) or chat (a list of "
      "{role: system|user|assistant, content} messages; in CSV/TSV the column holds them as "
      "JSON)");
    v("chat_template", chat_template,
      "instruction/chat: chatml, qwen2.5 (chatml plus Qwen's default system prompt), llama3, "
      "gemma (system folded into the first user turn; turns must alternate), plain (no special "
      "tokens, for base models), or a custom pattern like "
      "'<s>{turn}<|{role}|>\\n{content}</s>\\n'");
    v("loss", loss,
      "instruction/chat: assistant (only the assistant turns' content and end-of-turn marker "
      "count) or all (every token counts)");
    v("messages_field", messages_field, "chat: the field holding the list of messages");
    v("instruction_field", instruction_field, "instruction: the field holding the instruction");
    v("input_field", input_field, "instruction: the (optional) field holding the input");
    v("output_field", output_field, "instruction: the field holding the response");
    v("max_record_bytes", max_record_bytes,
      "jsonl, csv and tsv: the longest record read, in bytes; a longer one is a bad record (a "
      "JSON parse takes many times its size in memory; a CSV row is read through without being "
      "held)");
  }
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
      "or bin (whole documents bin-packed into samples, the rest padded)");
    v("store", store,
      "the token store `lmtrain prepare` writes and `lmtrain train` reads; empty: train "
      "prepares one in <train.out_dir>/data");
  }
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
  int64_t loss_chunk_tokens = 1024;
  int64_t threads = 0;
  double peak_tflops = 0;
  std::string sample_prompt;
  int64_t sample_tokens = 0;
  std::string init_from;

  template <class V>
  void visit(V& v) {
    v("backend", backend, "cpu, pjrt (XLA through a PJRT plugin), cuda or auto");
    v("pjrt_plugin", pjrt_plugin,
      "PJRT plugin for backend pjrt (libtpu.so, the CUDA plugin, ...); default "
      "LMTRAIN_PJRT_PLUGIN, else XLA's CPU plugin from scripts/setup.sh");
    v("precision", precision,
      "f32, or bf16 (bf16 compute, f32 master weights, gradients, moments and loss; the cpu "
      "backend needs AVX512-BF16 or AMX)");
    v("deterministic", deterministic,
      "backend pjrt: ask XLA for deterministic ops (GPUs: no atomic scatter-adds or reductions, "
      "so a run and its resume repeat exactly; slower). The CPU backend always is");
    v("micro_batch_size", micro_batch_size, "sequences per forward/backward pass");
    v("grad_accum_steps", grad_accum_steps, "micro-batches per optimizer step");
    v("max_steps", max_steps, "optimizer steps in the run");
    v("lr", lr, "peak learning rate");
    v("min_lr", min_lr, "learning rate at the end of the decay");
    v("warmup_steps", warmup_steps, "steps of linear warmup from 0");
    v("schedule", schedule, "constant, cosine, linear or wsd");
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
    v("loss_chunk_tokens", loss_chunk_tokens, "tokens per cross-entropy chunk");
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
};

struct OptimizerConfig {
  std::string name = "adamw";
  double beta1 = 0.9;
  double beta2 = 0.95;  // lion: 0.99 unless given
  double eps = 1e-8;
  double momentum = 0.9;  // muon: 0.95 unless given
  bool nesterov = false;  // muon: true unless given
  int64_t ns_steps = 5;
  bool decay_embeddings = false;
  bool decay_norms_and_biases = false;

  template <class V>
  void visit(V& v) {
    v("name", name,
      "adamw, lion (about 3-10x smaller lr, larger weight_decay), sgd (with momentum) or muon "
      "(hidden matrices; adamw for the rest)");
    v("beta1", beta1, "adamw: first-moment decay; lion: interpolation of the update's sign");
    v("beta2", beta2, "adamw: second-moment decay (0.95); lion: momentum decay (0.99)");
    v("eps", eps, "adamw: denominator epsilon");
    v("momentum", momentum, "sgd: momentum (0.9); muon: momentum (0.95)");
    v("nesterov", nesterov, "sgd and muon: Nesterov momentum (sgd: false; muon: true)");
    v("ns_steps", ns_steps, "muon: Newton-Schulz iterations");
    v("decay_embeddings", decay_embeddings, "apply weight decay to embeddings too");
    v("decay_norms_and_biases", decay_norms_and_biases, "apply weight decay to norms and biases");
  }
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
  bool enabled() const {
    return !project.empty() || !name.empty() || !entity.empty() || !tags.empty() ||
           !group.empty() || !notes.empty() || !id.empty();
  }
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
};

// Several devices (backend pjrt): a mesh of named axes whose product is the number of devices the
// run uses; one program, annotated with shardings (the plan: model/sharding_plan.h), partitioned
// by XLA's SPMD partitioner. The batch is split over data x fsdp; parameters, gradients and
// optimizer state over fsdp (ZeRO-3) and, Megatron's way, over tensor.
struct ParallelConfig {
  int64_t data = 1;
  int64_t fsdp = 1;
  int64_t tensor = 1;
  std::vector<int64_t> devices;
  std::string coordination_dir;
  int64_t coordination_timeout = 60;

  template <class V>
  void visit(V& v) {
    v("data", data, "data-parallel ways: each group of devices takes its share of the batch");
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
      "sees, where they exchange the plugin's keys; empty: <train.out_dir>/coordination");
    v("coordination_timeout", coordination_timeout,
      "seconds a process waits for the others' keys (or for a lost one's heartbeat) before it "
      "gives up");
  }
  int64_t size() const { return data * fsdp * tensor; }
};

// LoRA fine-tuning (rank > 0): the base model (train.init_from, or the initialisation) is frozen
// and adapters on the chosen projections train; checkpoints hold the adapters only.
struct LoraConfig {
  int64_t rank = 0;
  double alpha = 16;
  std::vector<std::string> target_modules = {"all-linear"};
  bool use_rslora = false;
  double dropout = 0;
  std::string base_dtype = "f32";
  std::vector<std::string> modules_to_save;
  std::string init_from;

  template <class V>
  void visit(V& v) {
    v("rank", rank, "adapter rank; 0 = full training (no adapters)");
    v("alpha", alpha, "adapter scale numerator: the update is (alpha / rank) B A x");
    v("target_modules", target_modules,
      "projections to adapt: Hugging Face module names (q_proj, k_proj, v_proj, o_proj, "
      "gate_proj, up_proj, down_proj; gpt2: c_attn, c_proj, c_fc), or all-linear (a list, or "
      "the string all-linear as PEFT writes it)");
    v("use_rslora", use_rslora, "scale by alpha / sqrt(rank) (rank-stabilised LoRA)");
    v("dropout", dropout,
      "dropout probability on each adapter's input in training (PEFT's lora_dropout), in [0, 1)");
    v("modules_to_save", modules_to_save,
      "base modules trained in full beside the adapters (PEFT's modules_to_save, matched as PEFT "
      "does: a module whose name ends with the entry): norms (norm, input_layernorm, ln_f, ...), "
      "and an untied model's lm_head or embeddings");
    v("base_dtype", base_dtype,
      "f32 or bf16: the frozen base's weights in memory (bf16 halves them; each layer is "
      "converted to f32 when it runs, the computation stays f32)");
    v("init_from", init_from,
      "a PEFT LoRA adapter directory to continue training: its adapter_config.json gives rank, "
      "alpha, target_modules, modules_to_save, use_rslora and dropout (with rank set here, rank, "
      "alpha, use_rslora and the modules must agree with it, and dropout is this file's) and its "
      "weights replace the initialisation; a resumed run continues from its checkpoint");
  }
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
    v("name", name, "cross_entropy or focal (the cross-entropy weighted by (1 - p_label)^gamma)");
    v("label_smoothing", label_smoothing,
      "in [0, 1): the target mixes in the uniform distribution with this weight (either loss)");
    v("z_loss", z_loss, "adds z_loss * log(sum exp(logits))^2 per token (either loss); 0 = off");
    v("focal_gamma", focal_gamma, "gamma of the focal loss (name focal; left at 2 otherwise)");
    v("impl", impl,
      "chunked (logits of train.loss_chunk_tokens whole rows at a time) or cut (the head's product "
      "fused with the loss, tiles of train.loss_chunk_tokens x vocab_tile logits at a time, the "
      "backward computing them again)");
    v("vocab_tile", vocab_tile, "token ids per tile of the cut loss");
  }
  LossSpec spec() const { return {label_smoothing, z_loss, name == "focal" ? focal_gamma : 0.0}; }
  int64_t head_vocab_tile() const { return impl == "cut" ? vocab_tile : 0; }
};

struct RunConfig {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  LossConfig loss;
  OptimizerConfig optimizer;
  LoraConfig lora;
  ParallelConfig parallel;
  LoggingConfig logging;

  template <class V>
  void visit(V& v) {
    v("model", model, "model shape");
    v("data", data, "data sources and sampling");
    v("train", train, "training loop");
    v("loss", loss, "the training objective");
    v("optimizer", optimizer, "optimizer");
    v("lora", lora, "LoRA adapters (rank 0: full training)");
    v("parallel", parallel, "several devices: the mesh (backend pjrt)");
    v("logging", logging, "metric sinks");
  }

  // Throws UserError naming the key of the first inconsistent or out-of-range value.
  void validate() const;

  // Where the values came from, for the record in the run directory; not keys (neither written
  // as keys nor hashed), empty for a config built in code: the config file, its base_config files
  // in the order applied (each as the chain of files that named it, "run.yaml -> base.yaml"),
  // and the --set arguments.
  std::string config_file;
  std::vector<std::string> base_files;
  std::vector<std::string> overrides;
};

// The adapters a config asks for, as the model takes them.
LoraSpec lora_spec(const LoraConfig& c);

// lora.init_from: fills the lora section from DIR/adapter_config.json when lora.rank is 0, else
// checks that rank, alpha, use_rslora and the adapted modules agree with it (one UserError naming
// the key and both values). Does nothing when lora.init_from is empty.
void apply_lora_init_from(RunConfig& cfg);

// train.init_from: sets cfg.model from DIR/config.json. `set_model_keys`: the model keys the
// user gave (names without "model."); each must agree with DIR's value (num_key_value_heads and
// head_dim compared resolved), else one UserError naming the key and both values. When
// `tokenizer_set` is false or data.tokenizer is empty, DIR's tokenizer.json / tokenizer.model
// becomes data.tokenizer (DIR itself); an empty data.tokenizer with none in DIR is an error.
// `where`: the config file, for messages. Does nothing when train.init_from is empty.
void apply_init_from(RunConfig& cfg, const std::vector<std::string>& set_model_keys,
                     bool tokenizer_set, const std::string& where);
// Every model key's name (ModelConfig::visit), e.g. to check a whole config with apply_init_from.
std::vector<std::string> model_key_names();

// Loads a YAML file with its base_config files (io/config_base.h), applies "section.key=value"
// overrides in order, fills a RunConfig (with
// apply_init_from, the model keys and data.tokenizer taken as set when the file or an override
// names them) and validates it. Every problem is a UserError naming the file, the key or the
// override; a key a base gave is named at that base's file and line.
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides);
// The name of each data source (data.sources[i].name, else its path's stem), unique: a repeated
// default gets _2, _3, ...; repeated given names are refused by validation.
std::vector<std::string> source_names(const DataConfig& d);

// The optimizer section and train.weight_decay as make_optimizer takes them.
OptimizerSpec optimizer_spec(const RunConfig& cfg);

// How train, bench and info make the run's backend: train.backend's settings and the mesh of the
// parallel section (its axes of size 1 left out).
BackendOptions backend_options(const RunConfig& cfg);

// The resolved config as YAML text (every field, defaults included).
std::string run_config_to_yaml(RunConfig& cfg);
// The resolved config as JSON (every field, a map per section), as W&B takes a run's config.
nlohmann::json run_config_to_json(RunConfig& cfg);

// What a run directory's config.yaml holds: run_config_to_yaml's text after a comment naming the
// config file, its base_config chain and the --set arguments. It names no base_config itself, so
// it loads as it is, to the same config and hash.
std::string run_config_record(RunConfig& cfg);
// A stable hash of the resolved config (hex), stored in checkpoints.
std::string run_config_hash(RunConfig& cfg);

}  // namespace lmt
