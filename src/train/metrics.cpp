#include "train/metrics.h"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "io/text_file.h"

namespace lmt {

namespace fs = std::filesystem;

// Every TensorBoard error names the key that asked for the files.
template <class F>
void Metrics::to_tensorboard(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    throw UserError(fmt::format("logging.tensorboard: {}{}", e.what(),
                                tb_ ? "; the run stops rather than lose its metrics" : ""));
  }
}

namespace {

// Every W&B error names the key that asked for the run.
template <class F>
void with_wandb_key(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    throw UserError(
        fmt::format("logging.wandb: {}; the run stops rather than lose its metrics", e.what()));
  }
}

}  // namespace

Metrics::Metrics(const std::string& run_dir, const LoggingConfig& sinks, int64_t resume_step,
                 const nlohmann::json& run_config)
    : console_(sinks.console) {
  if (sinks.jsonl) open_jsonl(run_dir, resume_step);
  if (sinks.wandb.enabled()) open_wandb(run_dir, sinks.wandb, resume_step, run_config);
  if (sinks.tensorboard) {
    to_tensorboard([&] {
      tb_ = std::make_unique<TensorBoardWriter>((fs::path(run_dir) / "tb").string());
      // A fresh run hides an earlier run's files in the directory from step 0, as metrics.jsonl
      // starts empty; a resumed one what they logged past the resumed step.
      tb_->session_start(resume_step >= 0 ? resume_step + 1 : 0);
    });
  }
}

void Metrics::open_wandb(const std::string& run_dir, const WandbConfig& c, int64_t resume_step,
                         const nlohmann::json& run_config) {
  const std::string parent = (fs::path(run_dir) / "wandb").string();
  WandbRunInfo run;
  run.project = c.project, run.entity = c.entity, run.name = c.name, run.group = c.group;
  run.notes = c.notes, run.tags = c.tags, run.config = run_config;
  // A resumed run continues the newest W&B run in the directory (one that logging.wandb.id names
  // otherwise); a fresh one is a new W&B run.
  run.id = c.id;
  if (run.id.empty() && resume_step >= 0) run.id = newest_wandb_run_id(parent);
  run.resumed = resume_step >= 0 && !run.id.empty();
  if (run.id.empty()) run.id = new_wandb_run_id();
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) run.host = host;
  run.start_time =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  with_wandb_key([&] { wandb_ = std::make_unique<WandbOfflineRun>(parent, run); });
}

std::vector<WandbItem> wandb_items(const nlohmann::json& line) {
  std::vector<WandbItem> items;
  auto add = [&](auto& self, const nlohmann::json& j, const std::string& prefix) -> void {
    for (const auto& [key, v] : j.items()) {
      const std::string name = prefix + key;
      if (v.is_object())
        self(self, v, name + "/");
      else if (v.is_number_float())
        items.push_back({name, wandb_json_number(v.template get<double>())});
      else if ((v.is_number() || v.is_boolean()) && name != "step")
        items.push_back({name, v.dump()});
    }
  };
  add(add, line, "");
  return items;
}

void Metrics::to_wandb(const nlohmann::json& j) {
  if (!wandb_ || !j.contains("step") || !j["step"].is_number_integer()) return;
  with_wandb_key([&] { wandb_->log(j["step"].get<int64_t>(), wandb_items(j)); });
}

void Metrics::finish(int exit_code) {
  if (wandb_) with_wandb_key([&] { wandb_->finish(exit_code); });
}

void Metrics::open_jsonl(const std::string& run_dir, int64_t resume_step) {
  const std::string path = run_dir + "/metrics.jsonl";
  if (resume_step >= 0 && fs::exists(path)) {
    std::ifstream in(path);
    std::vector<std::string> keep;
    std::string line;
    for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("step")) continue;
      if (!j["step"].is_number_integer())
        throw UserError(fmt::format(
            "{}:{}: field 'step' must be an integer (got {}); --resume keeps the lines up to "
            "the checkpoint's step",
            path, line_no, j["step"].dump()));
      if (j["step"].get<int64_t>() <= resume_step) keep.push_back(line);
    }
    in.close();
    std::string text;
    for (const auto& l : keep) text += l + '\n';
    write_text_file(path, text);  // atomic: a kill here keeps the old file whole
  } else if (resume_step < 0) {
    write_text_file(path, "");
  }
  jsonl_path_ = path;
  jsonl_.open(path, std::ios::app);
  if (!jsonl_) throw UserError("logging.jsonl: cannot open '" + path + "' for writing");
}

// The one place a record is written: every sink of records takes it here.
void Metrics::write(const nlohmann::json& j) {
  if (jsonl_.is_open()) {
    // Paths in messages may hold non-UTF-8 bytes: shown as U+FFFD rather than lost with the line.
    jsonl_ << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    jsonl_.flush();
    if (!jsonl_)
      throw UserError("logging.jsonl: cannot write '" + jsonl_path_ +
                      "' (is the disk full?); the run stops rather than lose its metrics");
  }
  to_wandb(j);
}

namespace {

struct MemoryField {
  const char* name;  // in metrics.jsonl, bytes
  const char* tag;   // in TensorBoard, GiB
  int64_t bytes;
};

// The memory fields a step has.
std::vector<MemoryField> memory_fields(const StepMetrics& m) {
  std::vector<MemoryField> out;
  auto add = [&](const char* name, const char* tag, const std::optional<int64_t>& v) {
    if (v) out.push_back({name, tag, *v});
  };
  add("rss_bytes", "memory/rss_gib", m.rss_bytes);
  add("rss_peak_bytes", "memory/rss_peak_gib", m.rss_peak_bytes);
  add("device_bytes_in_use", "memory/device_in_use_gib", m.device_bytes_in_use);
  add("device_peak_bytes", "memory/device_peak_gib", m.device_peak_bytes);
  return out;
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// " | RSS 1.23 GiB | device 4.56 GiB (peak 7.89)": what the step has.
std::string memory_text(const StepMetrics& m) {
  std::string s;
  if (m.rss_bytes) s += fmt::format(" | RSS {:.2f} GiB", static_cast<double>(*m.rss_bytes) / kGiB);
  if (m.device_bytes_in_use)
    s += fmt::format(" | device {:.2f} GiB", static_cast<double>(*m.device_bytes_in_use) / kGiB);
  if (m.device_bytes_in_use && m.device_peak_bytes)
    s += fmt::format(" (peak {:.2f})", static_cast<double>(*m.device_peak_bytes) / kGiB);
  return s;
}

}  // namespace

void Metrics::log_step(const StepMetrics& m) {
  const bool ce = !std::isnan(m.ce);
  nlohmann::json line = {{"step", m.step}, {"loss", m.loss}};
  if (ce) line["ce"] = m.ce;
  line.update({{"lr", m.lr},
               {"grad_norm", m.grad_norm},
               {"tokens_per_s", m.tokens_per_s},
               {"mfu", m.mfu},
               {"step_ms", m.step_ms},
               {"tokens", m.tokens}});
  for (const MemoryField& f : memory_fields(m)) line[f.name] = f.bytes;
  write(line);
  if (tb_)
    to_tensorboard([&] {
      std::vector<TbScalar> scalars = {{"train/loss", m.loss},
                                       {"train/lr", m.lr},
                                       {"train/grad_norm", m.grad_norm},
                                       {"train/tokens_per_s", m.tokens_per_s},
                                       {"train/mfu", m.mfu}};
      if (ce) scalars.push_back({"train/ce", m.ce});
      tb_->scalars(m.step, scalars);
      std::vector<TbScalar> memory;  // a group of its own: memory/..._gib
      for (const MemoryField& f : memory_fields(m))
        memory.push_back({f.tag, static_cast<double>(f.bytes) / kGiB});
      if (!memory.empty()) tb_->scalars(m.step, memory);
    });
  if (console_) {
    fmt::print(
        "step {:>6}/{} | loss {:.4f}{} | lr {:.3e} | grad norm {:.3f} | {:.0f} tok/s | "
        "MFU {:.1f}% | {:.0f} ms/step | ETA {}{}\n",
        m.step, m.max_steps, m.loss, ce ? fmt::format(" (ce {:.4f})", m.ce) : "", m.lr, m.grad_norm,
        m.tokens_per_s, 100 * m.mfu, m.step_ms, format_duration(m.eta_s), memory_text(m));
    std::fflush(stdout);
  }
}

void Metrics::log_eval(int64_t step, double val_loss, int64_t tokens,
                       const std::vector<SourceEval>& sources) {
  nlohmann::json line = {{"step", step},
                         {"val_loss", val_loss},
                         {"val_ppl", std::exp(val_loss)},
                         {"val_tokens", tokens}};
  std::vector<TbScalar> scalars = {{"val/loss", val_loss}, {"val/ppl", std::exp(val_loss)}};
  std::string per_source;
  for (const SourceEval& s : sources) {
    line["val_sources"][s.name] = {
        {"loss", s.loss}, {"ppl", std::exp(s.loss)}, {"tokens", s.tokens}};
    scalars.push_back({"val/" + s.name + "/loss", s.loss});
    scalars.push_back({"val/" + s.name + "/ppl", std::exp(s.loss)});
    per_source += fmt::format(" | {} {:.4f}", s.name, s.loss);
  }
  write(line);
  if (tb_) to_tensorboard([&] { tb_->scalars(step, scalars); });
  if (console_) {
    fmt::print("eval  {:>6} | val loss {:.4f} | val ppl {:.2f}{}\n", step, val_loss,
               std::exp(val_loss), per_source);
    std::fflush(stdout);
  }
}

void Metrics::log_tasks(int64_t step, const std::vector<TaskScore>& scores) {
  if (scores.empty()) return;
  nlohmann::json line = {{"step", step}, {"eval_tasks", nlohmann::json::object()}};
  std::vector<TbScalar> scalars;
  std::string text;
  for (const TaskScore& s : scores) {
    line["eval_tasks"][s.task][s.metric] = s.value;
    if (s.stderr_) line["eval_tasks"][s.task][s.metric + "_stderr"] = *s.stderr_;
    scalars.push_back({"eval/" + s.task + "/" + s.metric, s.value});
    text += fmt::format(" | {} {} {:.4f}", s.task, s.metric, s.value);
    if (s.stderr_) text += fmt::format(" ± {:.4f}", *s.stderr_);
  }
  write(line);
  if (tb_) to_tensorboard([&] { tb_->scalars(step, scalars); });
  if (console_) {
    fmt::print("tasks {:>6}{}\n", step, text);
    std::fflush(stdout);
  }
}

void Metrics::log_warning(int64_t step, const std::string& kind, const std::string& text,
                          const nlohmann::json& fields) {
  nlohmann::json line = {{"step", step}, {"warning", kind}, {"message", text}};
  line.update(fields);
  write(line);
  fmt::print(stderr, "warning: step {}: {}\n", step, text);
  std::fflush(stderr);
}

void Metrics::log_config(int64_t step, const std::string& yaml) {
  if (tb_) to_tensorboard([&] { tb_->text(step, "config", markdown_code_block(yaml, "yaml")); });
}

std::string markdown_code_block(const std::string& text, const std::string& language) {
  size_t longest = 0, run = 0;  // the fence must be longer than any run of backticks inside
  for (char c : text) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  const std::string fence(std::max<size_t>(3, longest + 1), '`');
  const bool newline = !text.empty() && text.back() == '\n';
  return fence + language + "\n" + text + (newline ? "" : "\n") + fence + "\n";
}

void Metrics::log_line(const std::string& text) {
  if (!console_) return;
  fmt::print("{}\n", text);
  std::fflush(stdout);
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

}  // namespace lmt
