// Everything one run needs, one struct per YAML section, each declared once in its visit() (name,
// default, help, choices) and checked by its validate(): the model (model/model_config.h), data,
// train, loss, parallel and logging (train/config_sections.h), optimizer (optim/optimizer_spec.h)
// and lora (model/lora_spec.h). Here: the whole, the checks that span sections, loading a YAML
// file (with train.init_from's import: train/init_from.h), saving and hashing.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/lora_spec.h"
#include "model/model_config.h"
#include "optim/optimizer_spec.h"
#include "train/config_sections.h"

namespace lmt {

struct RunConfig {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  LossConfig loss;
  OptimizerSpec optimizer;
  LoraSpec lora;
  ParallelConfig parallel;
  LoggingConfig logging;
  EvalConfig eval;

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
    v("eval", eval, "lm-evaluation-harness tasks scored at each evaluation");
  }

  // Throws UserError naming the key of the first inconsistent or out-of-range value: each
  // section's validate(), and between them the checks that span sections.
  void validate() const;

  // Where the values came from, for the record in the run directory; not keys (neither written
  // as keys nor hashed), empty for a config built in code: the config file, its base_config files
  // in the order applied (each as the chain of files that named it, "run.yaml -> base.yaml"),
  // and the --set arguments.
  std::string config_file;
  std::vector<std::string> base_files;
  std::vector<std::string> overrides;
  // train.init_from as import_init_from (train/init_from.h) read it: the model section is that
  // directory's. "" for a config that has not been through it.
  std::string imported_init_from;
};

// Loads a YAML file with its base_config files (io/config_base.h), applies "section.key=value"
// overrides in order, fills a RunConfig (the model and optimizer sections starting from the
// defaults of their family and name), imports train.init_from and lora.init_from (the model keys
// and data.tokenizer taken as given when the file or an override names them) and validates it.
// Every problem is a UserError naming the file, the key or the override; a key a base gave is named
// at that base's file and line.
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides);
// The name of each data source (data.sources[i].name, else its path's stem), unique: a repeated
// default gets _2, _3, ...; repeated given names are refused by validation.
std::vector<std::string> source_names(const DataConfig& d);

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
