// The names of a run's checkpoints: `checkpoints/step_N`, N zero-padded to at least 7 digits.
// One parser for every reader of those names (resume, pruning, the search for an intact
// checkpoint, protection, `lmtrain check`).
#pragma once

#include <cstdint>
#include <filesystem>
#include <utility>
#include <vector>

namespace lmt {

// N of a directory named step_N, or -1 for any other name.
int64_t checkpoint_step(const std::filesystem::path& dir);

// The step_N directories directly under root (a run's checkpoints/), newest first; none when
// root cannot be read.
std::vector<std::pair<int64_t, std::filesystem::path>> checkpoint_dirs(
    const std::filesystem::path& root);

}  // namespace lmt
