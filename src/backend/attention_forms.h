// The forms the pjrt backend computes attention in, by sequence length: dense scores up to
// kDenseAttentionUpTo positions (each layer keeps its [B, H, T, T] probabilities), blocks of
// kAttentionBlock positions with an online softmax beyond (memory as T, not T^2; 512 was the
// fastest of 256, 512 and 1024 at T = 32768 on the CPU plugin). A header of its own, not part of
// what a Backend reports, because the step's memory is also planned on paper with no backend at
// hand (train/step_memory.cpp, `lmtrain info --mesh`), and that plan must follow the same forms.
#pragma once

#include <cstdint>

namespace lmt {

inline constexpr int64_t kDenseAttentionUpTo = 1024;
inline constexpr int64_t kAttentionBlock = 512;

}  // namespace lmt
