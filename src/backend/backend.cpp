#include "backend/backend.h"

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_info.h"
#include "backend/pjrt/pjrt_backend.h"
#include "core/error.h"

namespace lmt {

std::unique_ptr<Backend> make_backend(const std::string& name, const std::string& pjrt_plugin) {
  if (name == "cpu") return std::make_unique<CpuBackend>();
  if (name == "auto") return std::make_unique<CpuBackend>();  // until the CUDA backend lands
  if (name == "cuda") {
    if (!cuda_built())
      throw UserError("train.backend: 'cuda' requested, but this lmtrain was built without CUDA");
    throw UserError("train.backend: 'cuda' is not implemented yet (" + cuda_device_summary() +
                    "); use 'cpu'");
  }
  if (name == "pjrt") return make_pjrt_backend(pjrt_plugin);
  throw UserError("train.backend: unknown backend '" + name +
                  "' (expected cpu, pjrt, cuda or auto)");
}

}  // namespace lmt
