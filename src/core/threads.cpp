#include "core/threads.h"

#include <omp.h>

#include <string>

#include "core/error.h"

namespace lmt {

void set_threads(int64_t threads) {
  if (threads < 0)
    throw UserError("train.threads must be >= 0 (got " + std::to_string(threads) + ")");
  omp_set_num_threads(threads > 0 ? static_cast<int>(threads) : omp_get_num_procs());
}

int thread_count() {
  return omp_get_max_threads();
}

}  // namespace lmt
