// `lmtrain info`'s plan of a pjrt step on paper (info_mesh.h): the memory model's terms per
// device, the collectives and the estimated step time, as a table or as JSON.
#include <fmt/core.h>

#include "backend/devices.h"
#include "cli/commands.h"
#include "cli/info_mesh.h"
#include "core/error.h"
#include "train/mesh_plan.h"

namespace lmt::cli {
namespace {

std::string gib(uint64_t b) { return fmt::format("{:.2f} GiB", static_cast<double>(b) / (1 << 30)); }

std::string mesh_text(const Mesh& m) {
  return fmt::format("data {} x fsdp {} x tensor {} = {} device{}", m.axis_size("data"),
                     m.axis_size("fsdp"), m.axis_size("tensor"), m.size(),
                     m.size() == 1 ? "" : "s");
}

nlohmann::json terms_json(const std::vector<MemoryTerm>& terms) {
  nlohmann::json j = nlohmann::json::object();
  for (const MemoryTerm& t : terms) j[t.key] = t.bytes;
  return j;
}

nlohmann::json memory_json(const StepMemory& m) {
  return {{"arguments", terms_json(m.arguments)},
          {"at_loss_head", terms_json(m.at_head)},
          {"at_backward_end", terms_json(m.at_backward)},
          {"argument_bytes", m.argument_bytes},
          {"temp_bytes", m.temp_bytes()},
          {"total_bytes", m.total_bytes()},
          {"peak", m.peak_at_head() ? "loss_head" : "backward_end"}};
}

void print_terms(const StepMemory& m) {
  for (const MemoryTerm& t : m.arguments) fmt::print("    {:<44} {:>12}\n", t.what, gib(t.bytes));
  const bool head = m.peak_at_head();
  fmt::print("    temporaries at their peak, {} ({} there, {} at the {}):\n",
             head ? "where the loss head runs" : "at the end of the backward",
             gib(m.temp_bytes()), gib(head ? m.backward_bytes : m.head_bytes),
             head ? "backward's end" : "loss head");
  for (const MemoryTerm& t : head ? m.at_head : m.at_backward)
    fmt::print("      {:<42} {:>12}\n", t.what, gib(t.bytes));
  fmt::print("    {:<44} {:>12}\n", "total", gib(m.total_bytes()));
}

const DeviceSpec* device_of(const MeshOptions& o) {
  return o.device.empty() ? nullptr : &device_spec(o.device, "--device");
}

std::string fit_text(const StepMemory& m, const DeviceSpec& d) {
  return fmt::format("{}: {:.1f} of {:.0f} GiB ({})",
                     m.total_bytes() <= d.memory ? "fits" : "does not fit",
                     static_cast<double>(m.total_bytes()) / (1 << 30),
                     static_cast<double>(d.memory) / (1 << 30), d.name);
}

}  // namespace

std::shared_ptr<MeshOptions> add_mesh_options(CLI::App& app) {
  auto o = std::make_shared<MeshOptions>();
  app.add_option("--mesh", o->mesh,
                 "plan the step per device of a mesh, e.g. data=2,fsdp=4,tensor=2 (the keys "
                 "parallel.data / fsdp / tensor): memory, collectives, step time");
  app.add_option("--device", o->device,
                 "the accelerator of the plan: h100, h200, a100, v4, v5e, v5p, v6e (its memory "
                 "for the fit, its peaks for the step time)");
  app.add_option("--chips", o->chips,
                 "devices of the plan; without --mesh, a mesh of fsdp over all of them")
      ->check(CLI::PositiveNumber);
  app.add_flag("--fit", o->fit,
               "also search the smallest mesh (fsdp x tensor) whose step fits --device, with as "
               "many sequences per device as the plan has");
  app.add_option("--mfu", o->mfu, "the model FLOPs utilisation the step-time estimate assumes")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1.0));
  return o;
}

Mesh resolve_mesh(const MeshOptions& o, const ModelConfig& cfg, StepShape& shape) {
  Mesh mesh = !o.mesh.empty() ? parse_mesh(o.mesh, "--mesh")
                              : Mesh{{{"data", 1}, {"fsdp", std::max<int64_t>(o.chips, 1)},
                                      {"tensor", 1}}};
  const char* flag = !o.mesh.empty() ? "--mesh" : "--chips";
  if (!o.mesh.empty() && o.chips > 0 && o.chips != mesh.size())
    throw UserError(fmt::format("--chips {} but --mesh {} has {} devices", o.chips, o.mesh,
                                mesh.size()));
  if (o.fit && o.device.empty()) throw UserError("--fit needs --device (the chip to fit)");
  device_of(o);  // an unknown --device is an error before anything is printed
  if (o.micro_batch->count() == 0)
    shape.micro_batch = mesh.axis_size("data") * mesh.axis_size("fsdp");
  check_mesh(cfg, mesh, shape.micro_batch, flag);
  return mesh;
}

nlohmann::json predicted_step_json(const ModelConfig& cfg, const StepShape& shape) {
  const Mesh one{{{"data", 1}, {"fsdp", 1}, {"tensor", 1}}};
  nlohmann::json j = memory_json(step_memory(cfg, shape, one, StepTarget::xla_cpu));
  j["target"] = "xla_cpu";
  return j;
}

void print_predicted_step(const ModelConfig& cfg, const StepShape& shape) {
  const Mesh one{{{"data", 1}, {"fsdp", 1}, {"tensor", 1}}};
  const StepMemory cpu = step_memory(cfg, shape, one, StepTarget::xla_cpu);
  const StepMemory acc = step_memory(cfg, shape, one, StepTarget::accelerator);
  fmt::print(
      "pjrt step, predicted (not compiled): XLA:CPU arguments {}, temporaries {}, total {}; on "
      "one GPU or TPU {} (docs/parallel.md)\n",
      format_bytes(cpu.argument_bytes), format_bytes(cpu.temp_bytes()),
      format_bytes(cpu.total_bytes()), format_bytes(acc.total_bytes()));
}

nlohmann::json mesh_plan_json(const MeshOptions& o, const ModelConfig& cfg, const StepShape& shape,
                              const Mesh& mesh) {
  const StepMemory m = step_memory(cfg, shape, mesh, StepTarget::accelerator);
  const std::vector<Collective> cs = step_collectives(cfg, shape, mesh);
  nlohmann::json j = {{"mesh",
                       {{"data", mesh.axis_size("data")},
                        {"fsdp", mesh.axis_size("fsdp")},
                        {"tensor", mesh.axis_size("tensor")},
                        {"devices", mesh.size()}}},
                      {"micro_batch", shape.micro_batch},
                      {"seq_len", shape.seq_len},
                      {"target", "accelerator"},
                      {"per_device", memory_json(m)},
                      {"collectives", nlohmann::json::array()}};
  for (const Collective& c : cs)
    j["collectives"].push_back({{"key", c.key},
                                {"what", c.what},
                                {"axis", c.axis},
                                {"count", c.count},
                                {"bytes_per_device", c.bytes},
                                {"exposed", c.exposed}});
  if (const DeviceSpec* d = device_of(o)) {
    const StepTime st = estimate_step_time(cfg, shape, mesh, cs, *d, o.mfu);
    j["device"] = {{"key", d->key},
                   {"name", d->name},
                   {"memory_bytes", d->memory},
                   {"bf16_flops", d->bf16_flops},
                   {"link_bytes_per_s", d->link_bytes}};
    j["fits"] = m.total_bytes() <= d->memory;
    j["step_time_estimate"] = {{"assumed_mfu", o.mfu},
                               {"flops_per_device", st.flops_per_device},
                               {"compute_s", st.compute_s},
                               {"overlapped_collectives_s", st.overlapped_s},
                               {"exposed_collectives_s", st.exposed_s},
                               {"step_s", st.step_s},
                               {"tokens_per_s_per_device", st.tokens_per_s_per_device}};
    if (o.fit) {
      const int64_t per_device = shape.micro_batch / (mesh.axis_size("data") * mesh.axis_size("fsdp"));
      const MeshFit fit = smallest_fitting_mesh(cfg, shape, per_device, *d);
      j["smallest_fitting_mesh"] = {{"found", fit.found}, {"sequences_per_device", per_device}};
      if (fit.found) {
        j["smallest_fitting_mesh"]["fsdp"] = fit.mesh.axis_size("fsdp");
        j["smallest_fitting_mesh"]["tensor"] = fit.mesh.axis_size("tensor");
        j["smallest_fitting_mesh"]["devices"] = fit.mesh.size();
        j["smallest_fitting_mesh"]["total_bytes"] = fit.memory.total_bytes();
      }
    }
  }
  return j;
}

void print_mesh_plan(const MeshOptions& o, const ModelConfig& cfg, const StepShape& shape,
                     const Mesh& mesh) {
  const StepMemory m = step_memory(cfg, shape, mesh, StepTarget::accelerator);
  const std::vector<Collective> cs = step_collectives(cfg, shape, mesh);
  const int64_t rows = mesh.axis_size("data") * mesh.axis_size("fsdp");
  fmt::print("mesh:        {}; micro-batch {} x {} tokens ({} sequence{} a data x fsdp device)\n",
             mesh_text(mesh), shape.micro_batch, shape.seq_len, shape.micro_batch / rows,
             shape.micro_batch / rows == 1 ? "" : "s");
  fmt::print("  per device, on a GPU or TPU ({} compute; f32 weights and optimizer state):\n",
             shape.bf16 ? "bf16" : "f32");
  print_terms(m);
  if (cs.empty()) {
    fmt::print("  collectives: none (one device)\n");
  } else {
    fmt::print("  collectives per step, bytes each device sends (ring algorithms):\n");
    for (const Collective& c : cs)
      fmt::print("    {:<6} {:<58} {:>4} x {:>10}\n", c.axis, c.what, c.count,
                 format_bytes(c.bytes / static_cast<uint64_t>(c.count)));
  }
  const DeviceSpec* d = device_of(o);
  if (!d) return;
  const StepTime st = estimate_step_time(cfg, shape, mesh, cs, *d, o.mfu);
  fmt::print(
      "  step time on {} x {}, an estimate: compute {:.3f} s ({:.0f} TFLOP a device at {:.0f}% "
      "of {:.1f} TFLOP/s); fsdp and data collectives {:.3f} s at {:.0f} GB/s a device "
      "(overlapped with compute); tensor all-reduces {:.3f} s (not overlapped); step = "
      "max({:.3f}, {:.3f}) + {:.3f} = {:.3f} s, {:.0f} tokens/s a device\n",
      mesh.size(), d->name, st.compute_s, st.flops_per_device / 1e12, o.mfu * 100,
      d->bf16_flops / 1e12, st.overlapped_s, d->link_bytes / 1e9, st.exposed_s, st.compute_s,
      st.overlapped_s, st.exposed_s, st.step_s, st.tokens_per_s_per_device);
  fmt::print("  {}\n", fit_text(m, *d));
  if (!o.fit) return;
  const MeshFit fit = smallest_fitting_mesh(cfg, shape, shape.micro_batch / rows, *d);
  if (fit.found)
    fmt::print("  smallest mesh that fits ({} sequence{} a device): fsdp {} x tensor {} = {} x "
               "{}, {}\n",
               shape.micro_batch / rows, shape.micro_batch / rows == 1 ? "" : "s",
               fit.mesh.axis_size("fsdp"), fit.mesh.axis_size("tensor"), fit.mesh.size(), d->key,
               fit_text(fit.memory, *d));
  else
    fmt::print("  no mesh of up to 65536 x {} fits this step\n", d->key);
}

}  // namespace lmt::cli
