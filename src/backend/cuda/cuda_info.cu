#include <cuda_runtime.h>

#include "backend/cuda/cuda_info.h"

namespace lmt {

bool cuda_built() {
  return true;
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

std::string cuda_device_summary() {
  int rt = 0;
  cudaRuntimeGetVersion(&rt);
  std::string s = "CUDA " + std::to_string(rt / 1000) + "." + std::to_string((rt % 1000) / 10);
  int n = cuda_device_count();
  s += ", " + std::to_string(n) + (n == 1 ? " device" : " devices");
  if (n > 0) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, 0) == cudaSuccess) s += ": " + std::string(p.name);
  }
  return s;
}

}  // namespace lmt
