// The fuzz targets, one per input format lmtrain parses (fuzz/<name>.cpp; its corpus is
// tests/data/fuzz/<name>/, its libFuzzer binary fuzz_<name> in the fuzz build).
#pragma once

#include <cstddef>
#include <cstdint>

namespace lmt::fuzz {

int adapter_config(const uint8_t* data, size_t size);     // PEFT adapter_config.json
int base_config_chain(const uint8_t* data, size_t size);  // a config and its base_config files
int chat_template(const uint8_t* data, size_t size);      // a template, then messages rendered
int checkpoint_state(const uint8_t* data, size_t size);   // a checkpoint's state.json
int config_overrides(const uint8_t* data, size_t size);   // --set lines on a config with a mesh
int csv(const uint8_t* data, size_t size);                // a CSV or TSV source
int hf_config(const uint8_t* data, size_t size);          // Hugging Face config.json
int ids_file(const uint8_t* data, size_t size);           // token ids as JSON (--ids-file)
int jsonl(const uint8_t* data, size_t size);              // a JSONL source
int parquet(const uint8_t* data, size_t size);            // a Parquet source
int safetensors(const uint8_t* data, size_t size);        // a .safetensors file
int sp_model(const uint8_t* data, size_t size);           // a SentencePiece .model
int store_manifest(const uint8_t* data, size_t size);     // a token store's manifest.json
int tokenizer_json(const uint8_t* data, size_t size);     // a Hugging Face tokenizer.json
int yaml_config(const uint8_t* data, size_t size);        // a run config (YAML)

struct Target {
  const char* name;
  int (*run)(const uint8_t* data, size_t size);
};

inline constexpr Target kTargets[] = {
    {"adapter_config", adapter_config},
    {"base_config_chain", base_config_chain},
    {"chat_template", chat_template},
    {"checkpoint_state", checkpoint_state},
    {"config_overrides", config_overrides},
    {"csv", csv},
    {"hf_config", hf_config},
    {"ids_file", ids_file},
    {"jsonl", jsonl},
    {"parquet", parquet},
    {"safetensors", safetensors},
    {"sp_model", sp_model},
    {"store_manifest", store_manifest},
    {"tokenizer_json", tokenizer_json},
    {"yaml_config", yaml_config},
};

}  // namespace lmt::fuzz
