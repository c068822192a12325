#include "parallel/process_group.h"

#include <cstdlib>
#include <optional>

#include "core/error.h"

namespace lmt {

namespace {

// The integer in variable `name`; nullopt when it is unset or empty.
std::optional<long> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 0 || n > 1 << 20)
    throw UserError(std::string("parallel: ") + name + "='" + v +
                    "' (set by the launcher) is not a process number");
  return n;
}

}  // namespace

ProcessGroup process_group_from_env() {
  struct Names {
    const char *rank, *count, *source;
  };
  for (const Names& n :
       {Names{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK/SIZE"},
        Names{"PMI_RANK", "PMI_SIZE", "PMI_RANK/SIZE"}}) {
    const std::optional<long> rank = env_int(n.rank), count = env_int(n.count);
    if (!rank || !count) continue;
    if (*count < 1 || *rank >= *count)
      throw UserError("parallel: the launcher gives rank " + std::to_string(*rank) + " of " +
                      std::to_string(*count) + " processes (" + n.source + ")");
    if (*count == 1) return {};
    return {static_cast<int>(*rank), static_cast<int>(*count), n.source};
  }
  return {};
}

}  // namespace lmt
