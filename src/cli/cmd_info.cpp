// `lmtrain info`: what a model directory (Hugging Face or a checkpoint) holds and what training it
// costs, from config.json alone: the parameter layout and the activation arena are computed from
// the config without allocating anything, so a 70B config answers at once. Weights on disk are
// the tensor bytes of the directory's safetensors headers (the files are mapped, not read).
#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/info_mesh.h"
#include "core/error.h"
#include "io/hf_export.h"
#include "io/hf_model.h"
#include "io/peft_adapter.h"
#include "model/transformer.h"
#include "train/bench.h"
#include "train/checkpoint.h"
#include "train/memory_check.h"
#include "train/mesh_plan.h"
#include "train/run_config.h"

namespace lmt::cli {

std::string format_count(int64_t n) {
  std::string s = std::to_string(n < 0 ? -n : n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return n < 0 ? "-" + s : s;
}

std::string format_bytes(uint64_t b) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1000 && u < 5) {
    v /= 1000;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.2f} {}", v, units[u]);
}

namespace {

// The training step of `run` compiled, not run, on a PJRT plugin (or for a target through the
// CUDA plugin or libtpu, without the device): XLA's own plan of its device memory (arguments,
// temporaries) there, as `lmtrain bench --compile-only` gives it, and for a target whether it
// fits the device, its collectives and (GPUs) the kernels one step launches.
nlohmann::json pjrt_step_memory(RunConfig run, const std::string& plugin,
                                const std::optional<CompileTarget>& target) {
  run.train.backend = "pjrt";
  run.train.pjrt_plugin = plugin;
  const nlohmann::json b = run_bench(std::move(run), 0, /*compile_only=*/true, target);
  const nlohmann::json& p = b.at("pjrt");
  const nlohmann::json& m = p.at("step_memory");
  if (!m.is_object()) throw UserError("--pjrt: the plugin reported no memory of the compiled step");
  nlohmann::json j = {{"platform", p.at("platform")},
                      {"device_kind", p.at("device_kind")},
                      {"compile_seconds", p.at("compile_seconds")},
                      {"argument_bytes", m.at("argument_bytes")},
                      {"temp_bytes", m.at("temp_bytes")},
                      {"total_bytes", m.at("argument_plus_temp_bytes")}};
  for (const char* k : {"attention", "device_fit", "launches", "collectives"})
    if (p.contains(k)) j[k] = p.at(k);
  return j;
}

// A target's lines: the step against the device's memory, and the kernels it launches by kind.
void print_target_step(const nlohmann::json& p) {
  if (p.contains("device_fit") && p["device_fit"].contains("verdict")) {
    fmt::print("  {}\n", p["device_fit"]["verdict"].get<std::string>());
  } else if (p.contains("device_fit")) {
    const nlohmann::json& f = p["device_fit"];
    fmt::print(
        "  fits the device: the step needs {} of the {} the plugin's allocator takes "
        "({:.0f}% of its {})\n",
        format_bytes(f["step_bytes"].get<uint64_t>()),
        format_bytes(f["allocator_bytes"].get<uint64_t>()),
        100 * f["allocator_fraction"].get<double>(),
        format_bytes(f["device_bytes"].get<uint64_t>()));
  }
  if (p.contains("collectives")) {
    std::string by;
    for (const auto& [k, v] : p["collectives"]["by_kind"].items())
      by += fmt::format("{}{} {} ({})", by.empty() ? "" : ", ", k, v["count"].get<int64_t>(),
                        format_bytes(v["bytes"].get<uint64_t>()));
    fmt::print("  collectives per step and device (loops counted by their trips): {}\n",
               by.empty() ? "none" : by);
  }
  if (!p.contains("launches")) return;
  const nlohmann::json& l = p["launches"];
  std::vector<std::pair<int64_t, std::string>> kinds;
  for (const auto& [k, v] : l["by_kind"].items()) kinds.emplace_back(v.get<int64_t>(), k);
  std::sort(kinds.rbegin(), kinds.rend());
  std::string by;
  for (const auto& [n, k] : kinds) by += fmt::format("{}{} {}", by.empty() ? "" : ", ", k, n);
  fmt::print("  kernel launches per step: {} ({} thunks, loops counted by their trips): {}\n",
             l["total"].get<int64_t>(), l["static_thunks"].get<int64_t>(), by);
}

// XLA's compiled step beside the plan's (train/step_memory.h, train/mesh_plan.h), per device: the
// memory (arguments, temporaries, their sum) and, per kind of collective, the count and the bytes
// each device sends a step (both by ring algorithms), with the plan's error against XLA in percent
// (positive: XLA needs or sends more than the plan says).
nlohmann::json against_plan_json(const nlohmann::json& p, const StepMemory& m,
                                 const std::vector<Collective>& plan) {
  auto error = [](int64_t xla, int64_t planned) {
    return planned > 0 ? nlohmann::json(100.0 * static_cast<double>(xla - planned) /
                                        static_cast<double>(planned))
                       : nlohmann::json(nullptr);
  };
  auto term = [&](int64_t xla, uint64_t planned) {
    return nlohmann::json{{"xla_bytes", xla},
                          {"plan_bytes", planned},
                          {"error_percent", error(xla, static_cast<int64_t>(planned))}};
  };
  const int64_t args = p.at("argument_bytes").get<int64_t>(), temp = p.at("temp_bytes").get<int64_t>();
  nlohmann::json j = {{"memory",
                       {{"arguments", term(args, m.argument_bytes)},
                        {"temporaries", term(temp, m.temp_bytes())},
                        {"total", term(args + temp, m.total_bytes())}}},
                      {"collectives", nlohmann::json::object()}};
  if (!p.contains("collectives")) return j;
  nlohmann::json& cs = j["collectives"];
  auto kind = [&](const std::string& k) -> nlohmann::json& {
    if (!cs.contains(k))
      cs[k] = {{"xla_count", 0}, {"xla_sent_bytes", 0}, {"plan_count", 0}, {"plan_sent_bytes", 0}};
    return cs[k];
  };
  for (const Collective& c : plan)
    for (const char* k : {"all-gather", "reduce-scatter", "all-reduce", "all-to-all"})
      if (c.what.rfind(k, 0) == 0) {
        nlohmann::json& e = kind(k);
        e["plan_count"] = e["plan_count"].get<int64_t>() + c.count;
        e["plan_sent_bytes"] = e["plan_sent_bytes"].get<int64_t>() + static_cast<int64_t>(c.bytes);
      }
  for (const auto& [k, v] : p["collectives"]["by_kind"].items()) {
    nlohmann::json& e = kind(k);
    e["xla_count"] = v["count"];
    e["xla_sent_bytes"] = v["sent_bytes"];
  }
  for (auto& [k, e] : cs.items())
    e["error_percent"] = error(e["xla_sent_bytes"].get<int64_t>(), e["plan_sent_bytes"].get<int64_t>());
  return j;
}

std::string percent_text(const nlohmann::json& e) {
  return e.is_number() ? fmt::format(" ({:+.0f}%)", e.get<double>()) : "";
}

void print_against_plan(const nlohmann::json& a) {
  fmt::print("  XLA beside the plan, per device (plan's error: XLA against the plan):\n");
  for (const char* t : {"arguments", "temporaries", "total"}) {
    const nlohmann::json& e = a["memory"][t];
    fmt::print("    {:<20} XLA {:>10}   plan {:>10}{}\n", t,
               format_bytes(e["xla_bytes"].get<uint64_t>()),
               format_bytes(e["plan_bytes"].get<uint64_t>()), percent_text(e["error_percent"]));
  }
  if (a["collectives"].empty()) return;
  fmt::print("    collectives a step (count x bytes sent by ring algorithms):\n");
  for (const auto& [k, e] : a["collectives"].items())
    fmt::print("    {:<20} XLA {:>5} x {:>10}   plan {:>4} x {:>10}{}\n", k,
               e["xla_count"].get<int64_t>(), format_bytes(e["xla_sent_bytes"].get<uint64_t>()),
               e["plan_count"].get<int64_t>(), format_bytes(e["plan_sent_bytes"].get<uint64_t>()),
               percent_text(e["error_percent"]));
}

struct ParamCounts {
  int64_t total = 0, embedding = 0, flat = 0;
};

// Embedding tables (token and position) are "embedding"; an untied output head is not, as in
// transformers' num_parameters(exclude_embeddings=True). A tied head is the embedding, counted
// once.
ParamCounts count_params(const ModelConfig& cfg) {
  ParamCounts c;
  for (const ParamInfo& p : param_layout(cfg, &c.flat)) {
    c.total += p.numel();
    if (p.kind == ParamKind::embedding) c.embedding += p.numel();
  }
  return c;
}

}  // namespace

Run add_info(CLI::App& app) {
  struct Opts {
    std::string model, adapter, precision = "f32", optimizer = "adamw";
    int64_t micro_batch = 1, seq_len = 0, loss_chunk = 1024;
    std::string pjrt_plugin, target;
    bool checkpointing = false, json = false, pjrt = false;
    int activation_bits = 0;
  };
  auto o = std::make_shared<Opts>();
  app.add_option(
         "--model", o->model,
         "Hugging Face model directory, checkpoint, or run directory (its newest checkpoint)")
      ->required();
  app.add_option("--adapter", o->adapter,
                 "a PEFT LoRA adapter directory on the model (a LoRA checkpoint brings its own)");
  CLI::Option* micro_batch =
      app.add_option("--micro-batch", o->micro_batch,
                     "sequences per training micro-batch (with --mesh: of the whole mesh; default "
                     "data x fsdp, one a device)")
          ->capture_default_str()
          ->check(CLI::PositiveNumber);
  app.add_option("--seq-len", o->seq_len,
                 "tokens per sequence; default min(max_position_embeddings, 2048)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--activation-checkpointing", o->checkpointing,
               "count the activations of training with activation checkpointing");
  app.add_option("--activation-bits", o->activation_bits,
                 "0, or 1: count the activations of training with train.activation_bits: 1 "
                 "(hidden_act relu or relu2, non-gated MLP)")
      ->capture_default_str()
      ->check(CLI::IsMember({0, 1}));
  app.add_option("--loss-chunk-tokens", o->loss_chunk, "tokens per cross-entropy chunk")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--precision", o->precision,
                 "f32, or bf16 (train.precision: bf16 compute beside f32 master weights, on pjrt)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--optimizer", o->optimizer,
                 "the optimizer whose state to count: adamw, lion, sgd or muon")
      ->capture_default_str()
      ->check(CLI::IsMember({"adamw", "lion", "sgd", "muon"}));
  app.add_flag("--pjrt", o->pjrt,
               "also compile the step (not run it) on a PJRT plugin and print the device memory "
               "XLA plans for it");
  app.add_option("--pjrt-plugin", o->pjrt_plugin,
                 "the plugin of --pjrt (default: LMTRAIN_PJRT_PLUGIN, else XLA's CPU plugin)");
  app.add_option("--target", o->target,
                 "with --pjrt: compile the step for hardware that is not here, as bench --target "
                 "names it (h100, h200, h100x8, a GpuTargetConfigProto file; v5e-8, v5e:2x2, ... "
                 "through libtpu), for the mesh of --mesh / --chips where one is planned; says "
                 "whether the step fits the device, its collectives and, for a GPU, the kernels "
                 "it launches");
  app.add_flag("--json", o->json, "print one JSON object");
  const std::shared_ptr<MeshOptions> mo = add_mesh_options(app);
  mo->micro_batch = micro_batch;
  return [o, mo]() {
    if (!o->target.empty() && !o->pjrt)
      throw UserError("--target compiles the step for a GPU or TPU: it goes with --pjrt");
    std::optional<CompileTarget> target;
    if (!o->target.empty()) target = compile_target(o->target, "--target");
    CheckpointHold hold;
    const std::string dir = resolve_model_dir(o->model, "--model", hold).string();
    const ModelConfig cfg = read_hf_model_config(dir);
    StepShape shape;
    shape.micro_batch = o->micro_batch;
    const Mesh mesh = mo->planning() ? resolve_mesh(*mo, cfg, shape) : Mesh{};
    const int64_t B = shape.micro_batch;
    const int64_t T =
        o->seq_len > 0 ? o->seq_len : std::min<int64_t>(cfg.max_position_embeddings, 2048);
    if (T > cfg.max_position_embeddings)
      throw UserError(fmt::format("--seq-len ({}) must be <= max_position_embeddings ({}) of {}", T,
                                  cfg.max_position_embeddings, dir));
    const ParamCounts pc = count_params(cfg);
    const HfWeightsOnDisk disk = hf_weights_on_disk(dir);
    // LoRA adapters: --adapter, or those of a LoRA checkpoint.
    std::string adapter = o->adapter;
    if (adapter.empty() && is_lora_checkpoint(dir)) adapter = dir;
    RunConfig run;  // one training step on the CPU backend, as train's memory check counts it
    run.model = cfg;
    run.train.micro_batch_size = B;
    run.data.seq_len = T;
    run.train.activation_checkpointing = o->checkpointing;
    run.train.activation_bits = o->activation_bits;
    run.optimizer.name = o->optimizer;
    if (o->activation_bits == 1) {
      const std::string why = Transformer::activation_bits_unsupported(cfg);
      if (!why.empty()) throw UserError("--activation-bits 1 " + why + " (" + dir + ")");
    }
    run.train.precision = o->precision;
    run.train.loss_chunk_tokens = o->loss_chunk;
    // A target and a planned mesh: the step is compiled for that mesh of the target's devices,
    // its memory and collectives per device beside the plan's.
    const bool target_mesh = target && mo->planning();
    if (target_mesh) {
      run.parallel.data = mesh.axis_size("data");
      run.parallel.fsdp = mesh.axis_size("fsdp");
      run.parallel.tensor = mesh.axis_size("tensor");
    }
    shape.seq_len = T;
    shape.checkpointing = o->checkpointing;
    shape.bf16 = o->precision == "bf16";
    shape.optimizer = o->optimizer;
    shape.loss_chunk = o->loss_chunk;
    LoraLayout lora;
    if (!adapter.empty()) {
      const LoraSpec spec = read_peft_adapter_config(adapter);
      try {
        lora = lora_layout(cfg, spec);
      } catch (const UserError& e) {
        throw UserError(adapter + "/adapter_config.json: " + e.what());
      }
      run.lora.rank = spec.rank;
      run.lora.alpha = spec.alpha;
      run.lora.target_modules = spec.target_modules;
      run.lora.use_rslora = spec.use_rslora;
      run.lora.dropout = spec.dropout;
    }
    if (mo->planning() && !adapter.empty())
      throw UserError("--mesh, --device, --chips and --fit plan full training; " + adapter +
                      " trains LoRA adapters, which the plan does not count");
    if (o->optimizer == "muon" && !adapter.empty())
      throw UserError("--optimizer muon orthogonalises hidden weight matrices, and " + adapter +
                      " trains LoRA adapters instead (adamw, lion or sgd)");
    int64_t lora_params = 0;
    for (const ParamInfo& p : lora.params) lora_params += p.numel();
    const TrainingMemory tm = training_memory(run);
    struct Line {
      const char* key;    // in --json
      const char* label;  // in the table
      uint64_t bytes;
    };
    std::vector<Line> mem = {{"weights", "weights", tm.weights},
                             {"gradients", "gradients", tm.gradients}};
    if (o->optimizer == "adamw") {  // its two moments as two lines
      mem.push_back({"adamw_m", "AdamW m", tm.optimizer / 2});
      mem.push_back({"adamw_v", "AdamW v", tm.optimizer / 2});
    } else {  // another optimizer's state and scratch as one
      mem.push_back({"optimizer_state",
                     o->optimizer == "lion"  ? "Lion m"
                     : o->optimizer == "sgd" ? "SGD momentum"
                                             : "Muon state",
                     tm.optimizer});
    }
    mem.push_back({"activations", "activations", tm.activations});
    if (tm.lora_scratch > 0) mem.push_back({"lora_scratch", "LoRA scratch", tm.lora_scratch});
    uint64_t total = 0;
    for (const Line& l : mem) total += l.bytes;
    // What one layer keeps for the backward: every layer's set without checkpointing, one set
    // (recomputed per layer) with it; the rest of the arena is the residual stream of every
    // layer, the head's loss chunk and the backward's scratch.
    const DType act_dt = o->precision == "bf16" ? DType::bf16 : DType::f32;
    const ActivationPlan::LayerBytes layer =
        ActivationPlan::layer_bytes(cfg, act_dt, B, T, o->activation_bits);
    const uint64_t sets = o->checkpointing ? 1 : static_cast<uint64_t>(cfg.num_hidden_layers);
    // What the MLP keeps of its pre-activation, and its output (the down projection's input),
    // which every setting keeps.
    const std::string mlp_kept =
        o->activation_bits == 0 ? "its pre-activation " + format_bytes(layer.mlp_pre_activation)
        : cfg.hidden_act == "relu"
            ? "a 1-bit sign mask (" + format_bytes(layer.mlp_pre_activation) +
                  ") in place of its pre-activation"
            : std::string("no pre-activation (ReLU^2's derivative comes from its output)");
    const uint64_t mlp_out =
        static_cast<uint64_t>(B * T * cfg.intermediate_size) * (o->precision == "bf16" ? 2 : 4);

    if (o->json) {
      nlohmann::json j = {{"model", dir},
                          {"family", cfg.family},
                          {"layers", cfg.num_hidden_layers},
                          {"hidden_size", cfg.hidden_size},
                          {"intermediate_size", cfg.intermediate_size},
                          {"attention_heads", cfg.num_attention_heads},
                          {"key_value_heads", cfg.kv_heads()},
                          {"head_dim", cfg.head_size()},
                          {"vocab_size", cfg.vocab_size},
                          {"max_position_embeddings", cfg.max_position_embeddings},
                          {"tied_embeddings", cfg.tie_word_embeddings},
                          {"parameters",
                           {{"total", pc.total},
                            {"embedding", pc.embedding},
                            {"non_embedding", pc.total - pc.embedding}}},
                          {"weights_on_disk",
                           {{"bytes", disk.bytes}, {"files", disk.files}, {"dtypes", disk.dtypes}}},
                          {"training_step",
                           {{"micro_batch", B},
                            {"seq_len", T},
                            {"activation_checkpointing", o->checkpointing},
                            {"activation_bits", o->activation_bits},
                            {"precision", o->precision},
                            {"optimizer", o->optimizer},
                            {"activations_per_layer", layer.layer},
                            {"mlp_pre_activation_per_layer", layer.mlp_pre_activation},
                            {"layer_sets", sets}}}};
      if (!adapter.empty())
        j["lora"] = {{"adapter", adapter},
                     {"rank", run.lora.rank},
                     {"alpha", run.lora.alpha},
                     {"tensors", lora.params.size()},
                     {"parameters", lora_params}};
      for (const Line& l : mem) j["training_step"][l.key] = l.bytes;
      j["training_step"]["total"] = total;
      if (adapter.empty()) j["pjrt_predicted"] = predicted_step_json(cfg, shape);
      if (mo->planning()) j["mesh_plan"] = mesh_plan_json(*mo, cfg, shape, mesh);
      if (o->pjrt) j["pjrt_step"] = pjrt_step_memory(run, o->pjrt_plugin, target);
      if (o->pjrt && target && mo->planning())
        j["xla_against_plan"] =
            against_plan_json(j["pjrt_step"], step_memory(cfg, shape, mesh, StepTarget::accelerator),
                              step_collectives(cfg, shape, mesh));
      fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
      return 0;
    }
    fmt::print("model:       {} ({})\n", dir, cfg.family);
    fmt::print(
        "shape:       {} layers, hidden {}, MLP {}, {} heads ({} key/value, head dim {}), "
        "vocab {}, context {}\n",
        cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads,
        cfg.kv_heads(), cfg.head_size(), cfg.vocab_size, cfg.max_position_embeddings);
    fmt::print("parameters:  {} (embedding {}, non-embedding {}; output head {})\n",
               format_count(pc.total), format_count(pc.embedding),
               format_count(pc.total - pc.embedding),
               cfg.tie_word_embeddings ? "tied to the embedding" : "separate");
    if (disk.files > 0) {
      std::string dtypes;
      for (const std::string& d : disk.dtypes) dtypes += (dtypes.empty() ? "" : ", ") + d;
      fmt::print("on disk:     {} of weights ({}) in {} file{}\n", format_bytes(disk.bytes), dtypes,
                 disk.files, disk.files == 1 ? "" : "s");
    } else {
      fmt::print("on disk:     no weights (config.json only)\n");
    }
    if (!adapter.empty())
      fmt::print(
          "LoRA:        {} ({} tensors, {} parameters; rank {}, alpha {}; the base frozen)\n",
          adapter, lora.params.size(), format_count(lora_params), run.lora.rank, run.lora.alpha);
    const std::string name = o->optimizer == "adamw"  ? "AdamW"
                             : o->optimizer == "lion" ? "Lion"
                             : o->optimizer == "sgd"  ? "SGD with momentum"
                                                      : "Muon with AdamW for the rest";
    fmt::print("one training step {}, micro-batch {} x {} tokens{}:\n",
               o->precision == "bf16"
                   ? "on pjrt (bf16 compute with f32 master weights and gradients, " + name +
                         "; the bf16 copies counted with weights and gradients)"
                   : "on the CPU backend (f32, " + name + ")",
               B, T,
               std::string(o->checkpointing ? ", activation checkpointing" : "") +
                   (o->activation_bits == 1 ? ", activation_bits 1" : ""));
    for (const Line& l : mem) fmt::print("  {:<12} {:>10}\n", l.label, format_bytes(l.bytes));
    fmt::print("  {:<12} {:>10}\n", "total", format_bytes(total));
    fmt::print(
        "activations: {} per layer set, {} ({}); in each the MLP keeps {}, and its output "
        "(the down projection's input) {}; the rest is the residual stream of every "
        "layer, the loss chunk and the backward's scratch\n",
        format_bytes(layer.layer), sets,
        o->checkpointing ? "one, recomputed for each layer in the backward" : "one a layer",
        mlp_kept, format_bytes(mlp_out));
    if (adapter.empty()) print_predicted_step(cfg, shape);
    if (o->pjrt) {
      const nlohmann::json p = pjrt_step_memory(run, o->pjrt_plugin, target);
      fmt::print(
          "on pjrt ({}, {}{}), as XLA plans the compiled step: arguments {}, temporaries {}, "
          "total {} (compiled in {:.1f} s, not run)\n",
          p["platform"].get<std::string>(), p["device_kind"].get<std::string>(),
          !target       ? ""
          : target_mesh ? fmt::format(", deviceless: target {}, per device of the mesh data {} x "
                                      "fsdp {} x tensor {}",
                                      target->name, mesh.axis_size("data"), mesh.axis_size("fsdp"),
                                      mesh.axis_size("tensor"))
                        : ", deviceless: target " + target->name,
          format_bytes(p["argument_bytes"].get<uint64_t>()),
          format_bytes(p["temp_bytes"].get<uint64_t>()),
          format_bytes(p["total_bytes"].get<uint64_t>()), p["compile_seconds"].get<double>());
      print_target_step(p);
      if (target_mesh)
        print_against_plan(against_plan_json(
            p, step_memory(cfg, shape, mesh, StepTarget::accelerator),
            step_collectives(cfg, shape, mesh)));
    }
    if (mo->planning()) print_mesh_plan(*mo, cfg, shape, mesh);
    return 0;
  };
}

}  // namespace lmt::cli
