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

}  // namespace lmt::shlo
