// bf16 products for a test of the CPU backend's mixed precision: oneDNN's where the CPU has bf16
// matrix instructions (AVX512-BF16, AMX), else emulated (LMTRAIN_CPU_BF16=emulate: the same
// numbers with f32 products), so that the test runs on any machine.
#pragma once

#include "backend/cpu/cpu_backend.h"
#include "test_util.h"

namespace lmt::test {

// Sets LMTRAIN_CPU_BF16 for one scope: emulate where the CPU cannot compute bf16 products.
class ScopedBf16Products {
 public:
  ScopedBf16Products()
      : native_(CpuBackend().unsupported(DType::bf16).empty()),
        env_("LMTRAIN_CPU_BF16", native_ ? nullptr : "emulate") {}
  bool native() const { return native_; }
  const char* name() const {
    return native_ ? "oneDNN's bf16 products" : "emulated bf16 products (no AVX512-BF16 or AMX)";
  }

 private:
  bool native_;  // before env_: the CPU's answer without the emulation
  ScopedEnv env_;
};

}  // namespace lmt::test
