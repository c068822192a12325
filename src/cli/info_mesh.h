// `lmtrain info`'s plan of a pjrt step without compiling it: the analytic memory model
// (train/step_memory.h) on XLA:CPU for one device, and with --mesh / --fit / --device the step
// per device of a mesh, its collectives and an estimated step time (train/mesh_plan.h).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "model/model_config.h"
#include "train/step_memory.h"

namespace lmt::cli {

struct MeshOptions {
  std::string mesh, device;
  int64_t chips = 0;
  bool fit = false;
  double mfu = 0.5;
  CLI::Option* micro_batch = nullptr;  // info's --micro-batch, to tell whether it was given
  bool planning() const { return !mesh.empty() || !device.empty() || chips > 0 || fit; }
};

std::shared_ptr<MeshOptions> add_mesh_options(CLI::App& app);

// The mesh of the options (--mesh, else --chips fsdp ways, else one device), checked against the
// model; sets shape.micro_batch to data x fsdp where --micro-batch was not given.
Mesh resolve_mesh(const MeshOptions& o, const ModelConfig& cfg, StepShape& shape);

// XLA:CPU's step on one device, as the model predicts it.
nlohmann::json predicted_step_json(const ModelConfig& cfg, const StepShape& shape);
void print_predicted_step(const ModelConfig& cfg, const StepShape& shape);

nlohmann::json mesh_plan_json(const MeshOptions& o, const ModelConfig& cfg, const StepShape& shape,
                              const Mesh& mesh);
void print_mesh_plan(const MeshOptions& o, const ModelConfig& cfg, const StepShape& shape,
                     const Mesh& mesh);

}  // namespace lmt::cli
