// What --target names (devices.h, CompileTarget): a GPU's target config (one, several on a host,
// several hosts), a TPU slice's topology for libtpu, or a target config file. TPU slices: the
// topology names and create options libtpu takes for a deviceless compile (as JAX's
// jax.experimental.topologies passes them); Cloud TPU's slice names count TensorCores for the
// megacore generations (v4, v5p: two a chip, one device) and chips for v5e and v6e.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <regex>
#include <string_view>
#include <utility>

#include "backend/devices.h"
#include "core/error.h"
#include "core/regular_file.h"

namespace lmt {

// The target configs compiled into lmtrain (CMakeLists.txt generates them from
// src/backend/targets/*.txtpb): file name without extension, text.
const std::vector<std::pair<std::string_view, std::string_view>>& gpu_target_configs();

namespace {

// The keys of the rows with a target config: "h100, h200".
std::string target_keys() {
  std::string keys;
  for (const DeviceSpec& d : device_specs())
    if (!d.target.empty()) keys += (keys.empty() ? "" : ", ") + d.key;
  return keys;
}

std::string known_targets() {
  return target_keys() +
         ", h100x8 (8 on a host), 2xh100x8 (2 hosts of 8); TPU slices v4-8, v4-32, v5e-8, "
         "v5p-64, v6e-8, or topologies v4:2x2x1, v5:2x2x1 (v5p), v5e:2x2, v6e:2x2";
}

CompileTarget read_target(std::string name, std::string config, const std::string& flag) {
  CompileTarget t;
  t.name = std::move(name);
  t.config = std::move(config);
  std::smatch m;
  static const std::regex kInfo(R"((^|\n)\s*gpu_device_info\s*\{)");
  if (!std::regex_search(t.config, kInfo))
    throw UserError(
        fmt::format("{} '{}' is not a GPU target config: it has no gpu_device_info (a text "
                    "stream_executor.GpuTargetConfigProto is expected, as in XLA's "
                    "xla/backends/gpu/target_config/specs/; or name one of {})",
                    flag, t.name, target_keys()));
  static const std::regex kMemory(R"(device_memory_size:\s*([0-9]+))");
  if (std::regex_search(t.config, m, kMemory)) t.device_memory = std::stoll(m[1].str());
  static const std::regex kKind(R"re(device_description_str:\s*"([^"]*)")re");
  if (std::regex_search(t.config, m, kKind)) t.device_kind = m[1].str();
  return t;
}

// The table's GPU with a target config named `key`, or nullopt.
std::optional<CompileTarget> table_gpu(const std::string& key, const std::string& flag) {
  for (const DeviceSpec& d : device_specs()) {
    if (d.target.empty() || d.key != key) continue;
    for (const auto& [name, text] : gpu_target_configs())
      if (name == d.target) return read_target(d.key, std::string(text), flag);
    LMT_CHECK(false, "no target config compiled in for " + d.key);
  }
  return std::nullopt;
}

// A TPU generation: how libtpu names its topologies and what its chips are.
struct TpuGeneration {
  const char* slice;     // Cloud TPU's slice prefix: "v4" (v4-8), "v5p", "v5e", "v6e"
  const char* topology;  // libtpu's topology prefix: "v4" (v4:2x2x1), "v5" (v5p), "v5e", "v6e"
  const char* cloud;     // Cloud TPU's accelerator type prefix: "v4" (v4-8), "v5litepod" (-4)
  bool megacore;         // two TensorCores a chip acting as one device (v4, v5p)
  size_t dims;           // a slice's chip grid: 3-D (v4, v5p) or 2-D (v5e, v6e)
  int64_t max_chips;     // the largest slice
};

constexpr TpuGeneration kTpus[] = {
    {"v4", "v4", "v4", true, 3, 4096},
    {"v5p", "v5", "v5p", true, 3, 8192},
    {"v5e", "v5e", "v5litepod", false, 2, 256},
    {"v6e", "v6e", "v6e", false, 2, 256},
};

// The chip grid of a slice of `chips` chips, as Cloud TPU shapes it: from 2x2x1 (3-D) or 1x1
// (2-D), the smallest side doubled, the last of equals first (v4-32: 16 chips, 2x2x4; v5e-8:
// 2x4).
std::vector<int64_t> slice_grid(const TpuGeneration& g, int64_t chips) {
  std::vector<int64_t> grid =
      g.dims == 3 ? std::vector<int64_t>{2, 2, 1} : std::vector<int64_t>{1, 1};
  int64_t n = g.dims == 3 ? 4 : 1;
  while (n < chips) {
    size_t at = grid.size() - 1;
    for (size_t i = grid.size(); i-- > 0;)
      if (grid[i] < grid[at]) at = i;
    grid[at] *= 2;
    n *= 2;
  }
  return grid;
}

// The slice with chip grid `grid`: its topology name and libtpu's create options. A host holds
// 2x2x1 chips (v4, v5p, and v5e and v6e slices of more than 8 chips) or, for a v5e or v6e slice
// of 8, all 2x4; the slice has no wraparound links (a torus needs a full pod's side).
CompileTarget tpu_target(const std::string& name, const TpuGeneration& g,
                         const std::vector<int64_t>& grid) {
  CompileTarget t;
  t.name = name;
  t.platform = "tpu";
  t.devices = 1;
  std::vector<int64_t> host = {1, 1, 1}, wrap = {0, 0, 0};
  for (size_t i = 0; i < grid.size(); ++i) {
    t.topology += (i ? "x" : "") + std::to_string(grid[i]);
    t.devices *= grid[i];
  }
  t.topology = std::string(g.topology) + ":" + t.topology;
  t.accelerator_type = fmt::format("{}-{}", g.cloud, g.megacore ? 2 * t.devices : t.devices);
  const std::vector<int64_t> most =
      g.dims == 3 ? std::vector<int64_t>{2, 2, 1}
                  : std::vector<int64_t>{2, t.devices == 8 ? int64_t{4} : int64_t{2}};
  for (size_t i = 0; i < grid.size(); ++i) host[i] = std::min(grid[i], most[i]);
  t.options = {{"chip_config_name", std::string(g.megacore ? "megacore" : "default")},
               {"chips_per_host_bounds", host},
               {"num_slices", int64_t{1}},
               {"wrap", wrap}};
  return t;
}

bool power_of_two(int64_t n) {
  return n > 0 && (n & (n - 1)) == 0;
}

// A TPU slice named either way ("v5p-64", "v5:2x2x1"), or nullopt for a name of neither form.
std::optional<CompileTarget> tpu_slice(const std::string& target, const std::string& key,
                                       const std::string& flag) {
  static const std::regex kSlice(R"(^(v[0-9][a-z]?)-([0-9]+)$)");
  static const std::regex kTopology(R"(^(v[0-9][a-z]?):([0-9]+)x([0-9]+)(?:x([0-9]+))?$)");
  std::smatch m;
  if (std::regex_match(key, m, kSlice)) {
    for (const TpuGeneration& g : kTpus) {
      if (m[1].str() != g.slice) continue;
      const int64_t n = std::stoll(m[2].str()), chips = g.megacore ? n / 2 : n;
      if (!power_of_two(chips) || chips < (g.dims == 3 ? 4 : 1) || chips > g.max_chips ||
          (g.megacore && n % 2))
        throw UserError(
            fmt::format("{} '{}': a {} slice has a power of two of {} from {} to {}", flag, target,
                        g.slice, g.megacore ? "TensorCores (two a chip)" : "chips",
                        g.megacore ? 8 : 1, g.megacore ? 2 * g.max_chips : g.max_chips));
      return tpu_target(target, g, slice_grid(g, chips));
    }
    return std::nullopt;
  }
  if (!std::regex_match(key, m, kTopology)) return std::nullopt;
  for (const TpuGeneration& g : kTpus) {
    if (m[1].str() != g.topology) continue;
    const size_t dims = m[4].matched ? 3 : 2;
    if (dims != g.dims)
      throw UserError(fmt::format("{} '{}': a {} topology has {} sides ({})", flag, target,
                                  g.topology, g.dims, g.dims == 3 ? "v4:2x2x1" : "v5e:2x2"));
    std::vector<int64_t> grid;
    int64_t chips = 1;
    for (size_t i = 0; i < dims; ++i) {
      grid.push_back(std::stoll(m[2 + i].str()));
      chips *= grid.back();
    }
    if (chips < 1 || chips > g.max_chips)
      throw UserError(fmt::format("{} '{}': a {} slice has 1 to {} chips", flag, target, g.topology,
                                  g.max_chips));
    return tpu_target(target, g, grid);
  }
  return std::nullopt;
}

// Several GPUs of the table: "h100x8" (one host), "2xh100x8" (hosts of 8), or nullopt.
std::optional<CompileTarget> gpu_hosts(const std::string& target, const std::string& key,
                                       const std::string& flag) {
  static const std::regex kHosts(R"(^(?:([0-9]+)x)?([a-z0-9]+)x([0-9]+)$)");
  std::smatch m;
  if (!std::regex_match(key, m, kHosts)) return std::nullopt;
  std::optional<CompileTarget> t = table_gpu(m[2].str(), flag);
  if (!t) return std::nullopt;
  const int64_t hosts = m[1].matched ? std::stoll(m[1].str()) : 1, each = std::stoll(m[3].str());
  if (hosts < 1 || hosts > 64 || each < 1 || each > 8)
    throw UserError(fmt::format("{} '{}': 1 to 8 GPUs a host, 1 to 64 hosts", flag, target));
  t->name = target;
  t->topology = fmt::format("1x{}x{}", hosts, each);
  t->devices = hosts * each;
  return t;
}

}  // namespace

CompileTarget compile_target(const std::string& target, const std::string& flag) {
  std::string k = target;
  std::transform(k.begin(), k.end(), k.begin(), [](unsigned char c) { return std::tolower(c); });
  if (std::optional<CompileTarget> t = table_gpu(k, flag)) return *t;
  if (std::optional<CompileTarget> t = gpu_hosts(target, k, flag)) return *t;
  if (std::optional<CompileTarget> t = tpu_slice(target, k, flag)) return *t;
  std::string text;
  try {
    text = read_regular_file(target, flag, kMaxConfigBytes);
  } catch (const UserError& e) {
    throw UserError(
        fmt::format("{} '{}' is neither a target lmtrain knows ({}) nor a file it can "
                    "read: {}",
                    flag, target, known_targets(), e.what()));
  }
  return read_target(target, std::move(text), flag);
}

}  // namespace lmt
