// The run config's `lora:` section, which is also what a model's adapters are made from
// (Transformer::add_lora, lora_layout, PEFT's adapter_config.json): declared once (name, default,
// help, choices), visit() drives YAML reading, printing, saving and hashing, validate() checks it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config_checks.h"

namespace lmt {

// LoRA fine-tuning (rank > 0): the base model (train.init_from, or the initialisation) is frozen
// and adapters on the chosen projections train; checkpoints hold the adapters only.
struct LoraSpec {
  int64_t rank = 0;  // 0: no adapters
  double alpha = 16;
  // Hugging Face module names, matched as PEFT does (the name, or a suffix after a '.': "q_proj",
  // "self_attn.q_proj", "attn.c_proj"), or the single entry "all-linear" (every projection of
  // the blocks, not the output head).
  std::vector<std::string> target_modules = {"all-linear"};
  bool use_rslora = false;
  // PEFT's lora_dropout: in training, each adapter reads its input through its own dropout mask
  // (the base projection reads it unchanged). Evaluation and inference use no dropout.
  double dropout = 0;
  // PEFT's modules_to_save: base modules trained in full beside the adapters, matched as PEFT
  // does (the module name ends with the entry: "norm" takes every norm, "input_layernorm",
  // "model.norm", "lm_head"). Norms, and the embeddings and head of an untied model.
  std::vector<std::string> modules_to_save;
  std::string base_dtype = "f32";  // the frozen base's weights in memory
  std::string init_from;           // a PEFT adapter directory to continue (train/init_from.h)

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
      "converted to f32 when it runs, the computation stays f32)",
      {"f32", "bf16"});
    v("init_from", init_from,
      "a PEFT LoRA adapter directory to continue training: its adapter_config.json gives rank, "
      "alpha, target_modules, modules_to_save, use_rslora and dropout (with rank set here, rank, "
      "alpha, use_rslora and the modules must agree with it, and dropout is this file's) and its "
      "weights replace the initialisation; a resumed run continues from its checkpoint");
  }

  double scaling() const;
  // Throws UserError naming the first key (lora.<key>) out of range. The adapters' fit to a
  // model (modules, rank against widths) is lora_layout's to check.
  void validate() const;
};

}  // namespace lmt
