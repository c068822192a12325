#include "parallel/directory_store.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace lmt {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::chrono::milliseconds kPoll{20};         // how often a waiting get looks again
constexpr std::chrono::milliseconds kPeersEvery{250};  // how often it reads the heartbeats
constexpr const char* kEnded = "ended";

// 16 hex digits from the system's entropy: a run id or a nonce no earlier run can have written.
std::string random_id() {
  std::random_device entropy;
  const uint64_t v = (uint64_t{entropy()} << 32) ^ entropy();
  return fmt::format("{:016x}", v);
}

bool is_run_id(const std::string& name) {
  return name.size() == 16 && name.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// The file's bytes; nullopt when it does not exist (or cannot be read, which waits the same way).
std::optional<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Writes through a temporary file renamed over `path`: a reader on any host sees the old content
// or the new, never a part of it.
void write_atomically(const fs::path& path, const std::string& content) {
  static const std::string writer = random_id();  // temporary names unique across hosts
  static std::atomic<uint64_t> serial{0};
  const fs::path tmp = path.string() + ".tmp." + writer + "." + std::to_string(serial++);
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  out.close();
  if (!out)
    throw UserError("parallel.coordination_dir: cannot write '" + tmp.string() +
                    "': " + std::strerror(errno));
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw UserError("parallel.coordination_dir: cannot rename '" + tmp.string() + "' to '" +
                    path.string() + "': " + ec.message());
  }
}

// A key as a file name: letters, digits, '_' and '-' as they are, every other byte as %XX (so a
// key never names a path or a temporary file); a very long key keeps its start and a hash.
std::string file_name_of(const std::string& key) {
  std::string name = "k_";
  for (const char c : key) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '_' || c == '-')
      name += c;
    else
      name += fmt::format("%{:02X}", u);
  }
  if (name.size() <= 200) return name;
  uint64_t hash = 14695981039346656037ull;  // FNV-1a
  for (const char c : key) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return fmt::format("{}~{:016x}", name.substr(0, 160), hash);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

DirectoryStore::DirectoryStore(const fs::path& dir, const ProcessGroup& group,
                               std::chrono::seconds timeout)
    : dir_(dir), group_(group), timeout_(timeout) {
  if (dir_.empty())
    throw UserError("parallel.coordination_dir: empty, and a run of " +
                    std::to_string(group_.count) + " processes needs a directory they all see");
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec)
    throw UserError("parallel.coordination_dir: cannot create '" + dir_.string() +
                    "': " + ec.message());
  try {
    join();
  } catch (...) {
    stop_heartbeat();
    throw;
  }
  const auto now = Clock::now();
  for (int r = 0; r < group_.count; ++r)
    if (r != group_.rank) peers_[r] = Peer{"", now};
}

DirectoryStore::~DirectoryStore() {
  stop_heartbeat();
}

void DirectoryStore::join() {
  if (group_.rank == 0)
    join_as_rank0();
  else
    join_as_other();
}

void DirectoryStore::join_as_rank0() {
  run_id_ = random_id();
  run_dir_ = dir_ / run_id_;
  std::error_code ec;
  fs::create_directories(run_dir_ / "kv", ec);
  if (ec)
    throw UserError("parallel.coordination_dir: cannot create '" + (run_dir_ / "kv").string() +
                    "': " + ec.message());
  start_heartbeat();
  const auto deadline = Clock::now() + timeout_;
  std::vector<std::string> nonces(group_.count);
  std::string written;
  for (;;) {
    std::string run = fmt::format("{} {}\n", run_id_, group_.count);
    for (int r = 1; r < group_.count; ++r) {
      const std::vector<std::string> join =
          lines_of(read_file(dir_ / ("join." + std::to_string(r))).value_or(""));
      nonces[r] = join.empty() ? "" : join[0];
      run += nonces[r] + "\n";
    }
    if (run != written) write_atomically(dir_ / "run", written = run);
    int waiting_for = 0;
    for (int r = 1; r < group_.count && !waiting_for; ++r)
      if (nonces[r].empty() ||
          read_file(dir_ / ("ack." + std::to_string(r))) != run_id_ + " " + nonces[r])
        waiting_for = r;
    if (!waiting_for) break;
    if (Clock::now() > deadline)
      throw UserError(fmt::format(
          "parallel: rank 0 of {} waited {} s (parallel.coordination_timeout) in '{}' for rank {} "
          "to join: was it started ({}), and does it see the same directory?",
          group_.count, timeout_.count(), dir_.string(), waiting_for, group_.source));
    std::this_thread::sleep_for(kPoll);
  }
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    std::error_code ignored;
    if (is_run_id(name) && name != run_id_ && e.is_directory(ignored))
      fs::remove_all(e.path(), ignored);  // an earlier run's keys and heartbeats
  }
  write_atomically(run_dir_ / "joined", "");
}

void DirectoryStore::join_as_other() {
  const std::string nonce = random_id();
  write_atomically(dir_ / ("join." + std::to_string(group_.rank)), nonce + "\n");
  const auto deadline = Clock::now() + timeout_;
  auto timed_out = [&](const std::string& what) {
    if (Clock::now() <= deadline) return;
    throw UserError(fmt::format(
        "parallel: rank {} of {} waited {} s (parallel.coordination_timeout) in '{}' for {}: was "
        "it started ({}), and does it see the same directory?",
        group_.rank, group_.count, timeout_.count(), dir_.string(), what, group_.source));
  };
  for (;;) {
    const std::vector<std::string> run = lines_of(read_file(dir_ / "run").value_or(""));
    if (static_cast<int>(run.size()) > group_.rank && run[group_.rank] == nonce) {
      std::istringstream header(run[0]);
      int count = 0;
      header >> run_id_ >> count;
      if (count != group_.count)
        throw UserError(fmt::format(
            "parallel: rank 0 runs with {} processes, rank {} with {} ({}): one launcher "
            "command should start them all",
            count, group_.rank, group_.count, group_.source));
      break;
    }
    timed_out("rank 0 to start the run");
    std::this_thread::sleep_for(kPoll);
  }
  run_dir_ = dir_ / run_id_;
  start_heartbeat();
  write_atomically(dir_ / ("ack." + std::to_string(group_.rank)), run_id_ + " " + nonce);
  while (!fs::exists(run_dir_ / "joined")) {
    timed_out("every rank to join");
    std::this_thread::sleep_for(kPoll);
  }
}

fs::path DirectoryStore::alive_path(int rank) const {
  return run_dir_ / ("alive." + std::to_string(rank));
}

void DirectoryStore::start_heartbeat() {
  write_atomically(alive_path(group_.rank), "0");
  heartbeat_ = std::thread([this] { heartbeat_loop(); });
}

void DirectoryStore::heartbeat_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (uint64_t beat = 1; !stop_; ++beat) {
    lock.unlock();
    try {
      write_atomically(alive_path(group_.rank), std::to_string(beat));
    } catch (const UserError&) {
      // A missed beat; the next one tries again, and a lasting failure shows as a lost rank.
    }
    lock.lock();
    wake_.wait_for(lock, kHeartbeatEvery, [this] { return stop_; });
  }
}

void DirectoryStore::stop_heartbeat() noexcept {
  if (!heartbeat_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  heartbeat_.join();
  try {
    write_atomically(alive_path(group_.rank), kEnded);
  } catch (const UserError&) {
    // The others then see this rank's heartbeat go stale instead.
  }
}

std::string DirectoryStore::lost_peer() {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = Clock::now();
  if (now - peers_read_ < kPeersEvery) return "";
  peers_read_ = now;
  for (auto& [rank, peer] : peers_) {
    const std::string beat = read_file(alive_path(rank)).value_or("");
    if (beat == kEnded) return fmt::format("rank {} ended (its process exited)", rank);
    if (beat != peer.beat) {
      peer.beat = beat;
      peer.changed = now;
    } else if (now - peer.changed >= kLostAfter) {
      return fmt::format(
          "lost rank {}: its heartbeat ('{}') has not changed for {} s (killed, or its host is "
          "down)",
          rank, alive_path(rank).string(),
          std::chrono::duration_cast<std::chrono::seconds>(now - peer.changed).count());
    }
  }
  return "";
}

fs::path DirectoryStore::key_path(const std::string& key) const {
  return run_dir_ / "kv" / file_name_of(key);
}

void DirectoryStore::put(const std::string& key, const std::string& value) {
  write_atomically(key_path(key), value);
}

std::optional<std::string> DirectoryStore::try_get(const std::string& key) const {
  return read_file(key_path(key));
}

void DirectoryStore::remove(const std::string& key) {
  std::error_code ec;
  fs::remove(key_path(key), ec);
}

std::string DirectoryStore::get(const std::string& key, std::chrono::milliseconds limit) {
  const std::chrono::milliseconds ours = timeout_;
  return limit < ours ? await(key, limit, "the plugin's limit")
                      : await(key, ours, "parallel.coordination_timeout");
}

std::string DirectoryStore::wait(const std::string& key, std::chrono::seconds limit,
                                 const std::string& what,
                                 const std::function<std::string()>& give_up) {
  return await(key, limit, what, give_up);
}

std::string DirectoryStore::await(const std::string& key, std::chrono::milliseconds limit,
                                  const std::string& limit_name,
                                  const std::function<std::string()>& give_up) {
  const auto start = Clock::now();
  const fs::path path = key_path(key);
  for (;;) {
    if (std::optional<std::string> value = read_file(path)) return *value;
    std::string why;
    if (const std::string lost = lost_peer(); !lost.empty()) {
      why = fmt::format(
          "parallel: {} while rank {} of {} waited for key '{}'; the run cannot go on "
          "without it",
          lost, group_.rank, group_.count, excerpt(key, 200));
    } else if (const std::string reason = give_up ? give_up() : ""; !reason.empty()) {
      why = fmt::format("parallel: rank {} of {} stopped waiting for key '{}': {}", group_.rank,
                        group_.count, excerpt(key, 200), reason);
    } else if (Clock::now() - start >= limit) {
      why = fmt::format(
          "parallel: rank {} of {} waited {} ms ({}) for key '{}' in '{}'; every other rank is "
          "alive, and none put it",
          group_.rank, group_.count, limit.count(), limit_name, excerpt(key, 200),
          path.parent_path().string());
    }
    if (!why.empty()) {
      std::lock_guard<std::mutex> lock(mutex_);
      failure_ = why;
      throw UserError(why);
    }
    std::this_thread::sleep_for(kPoll);
  }
}

std::string DirectoryStore::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

}  // namespace lmt
