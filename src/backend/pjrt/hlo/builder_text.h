// Spelling pieces of StablehloBuilder's MLIR text that its source files share (builder.cpp,
// builder_control.cpp); not for use outside them.
#pragma once

#include <string>
#include <vector>

#include "backend/pjrt/hlo/builder.h"

namespace lmt::shlo {

// MLIR's element type: lmtrain's dtype names are MLIR's for the types a program may hold.
std::string element_type(DType t);
// "1, 2, 3"
std::string join(const std::vector<int64_t>& v);
// "(tensor<..>, tensor<..>) -> tensor<..>"
std::string signature(const std::vector<HloValue>& in, const HloValue& out);
// Checks that dims are distinct dimensions of a rank-n tensor (`what` names the op).
void check_dims(const std::vector<int64_t>& dims, int64_t n, const char* what);

}  // namespace lmt::shlo
