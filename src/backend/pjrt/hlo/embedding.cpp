// The embedding section of backend.h as StableHLO (see lowering.h): a gather of the table's
// rows, and its gradient as a scatter-add of dout's rows by id.
#include "backend/pjrt/hlo/lowering_helpers.h"
#include "core/error.h"

namespace lmt::hlo {

Value embedding_forward(StablehloBuilder& b, const Value& ids, const Value& table) {
  LMT_CHECK(table.rank() == 2 && ids.rank() == 1 && ids.dtype == DType::i32,
            "embedding_forward: ids i32 [N], table [V,C]");
  return b.gather_rows(table, ids);
}

Value embedding_backward(StablehloBuilder& b, const Value& dout, const Value& ids, int64_t V) {
  LMT_CHECK(dout.rank() == 2 && ids.dims == Dims{dout.dims[0]} && ids.dtype == DType::i32,
            "embedding_backward: dout [N,C], ids i32 [N]");
  const Value zero = b.constant(0.0, dout.dtype, {V, dout.dims[1]});
  return b.scatter_add_rows(zero, ids, dout);
}

}  // namespace lmt::hlo
