#include "train/run_processes.h"

#include <fmt/format.h>

#include <filesystem>
#include <stdexcept>

#include "core/error.h"

namespace lmt {

std::string coordination_dir(const RunConfig& cfg) {
  if (!cfg.parallel.coordination_dir.empty()) return cfg.parallel.coordination_dir;
  return (std::filesystem::path(cfg.train.out_dir) / "coordination").string();
}

namespace {

// The launcher's group, checked against what a run across processes needs.
ProcessGroup checked_group(const RunConfig& cfg) {
  const ProcessGroup group = process_group_from_env();
  if (!group.several()) return group;
  if (cfg.train.backend != "pjrt")
    throw UserError(fmt::format(
        "train.backend: a run across {} processes ({}) needs backend pjrt (it is '{}'): the "
        "processes run one program over their devices, which only a PJRT plugin does",
        group.count, group.source, cfg.train.backend));
  if (cfg.train.micro_batch_size % group.count != 0)
    throw UserError(fmt::format(
        "train.micro_batch_size ({}) is the global batch, which the {} processes ({}) feed in "
        "equal shares: it must be a multiple of {}",
        cfg.train.micro_batch_size, group.count, group.source, group.count));
  return group;
}

}  // namespace

RunProcesses::RunProcesses(const RunConfig& cfg)
    : RunProcesses(checked_group(cfg), coordination_dir(cfg),
                   std::chrono::seconds(cfg.parallel.coordination_timeout)) {}

RunProcesses::RunProcesses(const ProcessGroup& group, const std::string& coordination_dir,
                           std::chrono::seconds timeout)
    : group_(group) {
  if (group_.several()) store_ = std::make_shared<DirectoryStore>(coordination_dir, group, timeout);
}

std::string RunProcesses::next_key(const std::string& what) {
  return fmt::format("lmt/{}/{}", serial_++, what);
}

int64_t RunProcesses::sum(const std::string& what, int64_t value) {
  if (!store_) return value;
  const std::string key = next_key(what);
  auto rank_key = [&](int rank) { return fmt::format("{}/rank {}", key, rank); };
  store_->put(rank_key(group_.rank), std::to_string(value));
  int64_t total = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int rank = 0; rank < group_.count; ++rank) {
    if (rank == group_.rank) {
      total += value;
      continue;
    }
    auto give_up = [&] {
      if (!stopping_ || !stopping_() || std::chrono::steady_clock::now() - start < kStopGrace)
        return std::string();
      return fmt::format(
          "a stop signal arrived, and rank {} has not come to this exchange within {} s: the "
          "ranks stopped at different steps (continue with --resume from the last checkpoint)",
          rank, kStopGrace.count());
    };
    const std::string got = store_->wait(rank_key(rank), kWaitLimit,
                                         fmt::format("rank {}'s {}", rank, what), give_up);
    try {
      total += std::stoll(got);
    } catch (const std::exception&) {
      throw UserError(fmt::format("parallel: rank {}'s {} is '{}', not a number", rank, what,
                                  got.substr(0, 40)));
    }
  }
  // Every rank has reached this exchange, so has read every key put before the last one.
  for (const std::string& k : read_) store_->remove(k);
  read_ = std::move(unread_);
  unread_ = {rank_key(group_.rank)};
  return total;
}

std::string RunProcesses::by_writer(const std::string& what,
                                    const std::function<std::string()>& write) {
  if (!store_) return write();
  const std::string key = next_key(what);
  if (!writer()) {
    const std::string got = store_->wait(key, kWaitLimit, "rank 0's " + what);
    if (got.starts_with("error\n"))
      throw UserError(fmt::format("parallel: rank 0 failed at the {}, so rank {} of {} stops: {}",
                                  what, group_.rank, group_.count, got.substr(6)));
    return got.substr(got.find('\n') + 1);
  }
  unread_.push_back(key);
  try {
    const std::string result = write();
    store_->put(key, "ok\n" + result);
    return result;
  } catch (const std::exception& e) {
    store_->put(key, std::string("error\n") + e.what());
    throw;
  }
}

}  // namespace lmt
