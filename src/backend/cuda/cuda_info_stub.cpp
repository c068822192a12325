#include "backend/cuda/cuda_info.h"

namespace lmt {

bool cuda_built() {
  return false;
}
int cuda_device_count() {
  return 0;
}
std::string cuda_device_summary() {
  return "built without CUDA";
}

}  // namespace lmt
