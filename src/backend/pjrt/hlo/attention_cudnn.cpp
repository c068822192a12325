// cuDNN's fused flash attention on XLA's CUDA plugin: the custom calls __cudnn$fmhaSoftmax
// (forward) and __cudnn$fmhaSoftmaxBackward, built as jax.nn.dot_product_attention(
// implementation="cudnn") builds them (JAX's jax/_src/cudnn/fused_attention_stablehlo.py, BTNH
// layout). q, k, v, dout and out go in as lmtrain holds them, [B,T,H,D] (k and v with their own
// kv heads: cuDNN reads grouped-query attention as it is); O, dQ, dK and dV come out typed
// [B,H,T,D] with layout {3,1,2,0}, i.e. stored as [B,T,H,D], so the transposes back to [B,T,H,D]
// move nothing. The backend_config JSON is written with JAX's key order, separators and float
// form, so that lmtrain's calls can be compared with JAX's text (tests/pjrt/cudnn_attention_test,
// against programs JAX made for an H100). No GPU has run lmtrain's calls yet: that the kernel
// computes what attention.cpp computes is not shown here.
#include <charconv>
#include <cmath>
#include <string>
#include <vector>

#include "backend/pjrt/hlo/lowering_helpers.h"
#include "core/error.h"

namespace lmt::hlo {

namespace {

constexpr const char* kForward = "__cudnn$fmhaSoftmax";
constexpr const char* kBackward = "__cudnn$fmhaSoftmaxBackward";
// Minor-to-major layouts: row-major [B,T,H,D]; [B,H,T,D] stored as [B,T,H,D]; stats [B,H,T]; the
// u8[0] workspace.
const Dims kRowMajor4 = {3, 2, 1, 0}, kStoredBTHD = {3, 1, 2, 0}, kRowMajor3 = {2, 1, 0},
           kRowMajor1 = {0};

// A double as Python's repr writes it (json.dumps does): the shortest digits that read back as
// v, fixed-point with at least one digit after the point for exponents -4 to 15, else
// d.ddde+XX.
std::string python_float(double v) {
  LMT_CHECK(std::isfinite(v), "cuDNN attention: a number JSON cannot hold");
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  LMT_CHECK(ec == std::errc(), "to_chars");
  const std::string s(buf, end);  // "-1.25e-01"
  const size_t e = s.find('e');
  const bool negative = s[0] == '-';
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e; ++i)
    if (s[i] != '.') digits += s[i];
  const int exp10 = std::stoi(s.substr(e + 1));
  std::string out = negative ? "-" : "";
  if (exp10 < -4 || exp10 >= 16) {  // d.ddde-XX
    out += digits[0];
    if (digits.size() > 1) out.append(".").append(digits, 1);
    const int a = std::abs(exp10);
    return out.append(exp10 < 0 ? "e-" : "e+").append(a < 10 ? "0" : "").append(std::to_string(a));
  }
  const int point = exp10 + 1;  // digits before the decimal point
  if (point <= 0) return out.append("0.").append(size_t(-point), '0').append(digits);
  if (size_t(point) >= digits.size())
    return out.append(digits).append(size_t(point) - digits.size(), '0').append(".0");
  return out.append(digits, 0, size_t(point)).append(".").append(digits, size_t(point));
}

std::string quoted(const std::string& s) {
  return "\"" + s + "\"";
}

// ["a", "b"] with each number as a string, as protobuf's JSON form writes int64 fields.
std::string string_list(const Dims& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + quoted(std::to_string(v[i]));
  return s + "]";
}

// One matrix product of the kernel as dot dimension numbers over the BTNH operands (JAX's table:
// BMM1 q k^T, BMM2 p v; in the backward dK, dQ, dV and dP).
std::string dot_numbers(const char* key, int64_t lhs_contract, int64_t rhs_contract,
                        const Dims& lhs_batch, const Dims& rhs_batch) {
  return quoted(key) + ": {\"lhs_contracting_dimensions\": " + string_list({lhs_contract}) +
         ", \"rhs_contracting_dimensions\": " + string_list({rhs_contract}) +
         ", \"lhs_batch_dimensions\": " + string_list(lhs_batch) +
         ", \"rhs_batch_dimensions\": " + string_list(rhs_batch) + "}";
}

std::string dot_numbers_of(bool backward) {
  const Dims bn = {0, 1}, bt = {0, 2};  // [B,N,T,S] and [B,T,N,H] operands' batch dims
  if (!backward) {
    return dot_numbers("bmm1_dot_dimension_numbers", 3, 3, bt, bt) + ", " +
           dot_numbers("bmm2_dot_dimension_numbers", 3, 1, bn, bt);
  }
  return dot_numbers("bmm1_grad_gemm1_dot_dimension_numbers", 2, 1, bn, bt) + ", " +
         dot_numbers("bmm1_grad_gemm2_dot_dimension_numbers", 3, 1, bn, bt) + ", " +
         dot_numbers("bmm2_grad_gemm1_dot_dimension_numbers", 2, 1, bn, bt) + ", " +
         dot_numbers("bmm2_grad_gemm2_dot_dimension_numbers", 3, 3, bt, bt);
}

void check_inputs(const AttentionArgsHlo& a, const Value& q, const Value& k, const Value& v) {
  LMT_CHECK(q.rank() == 4 && k.dims == v.dims && k.rank() == 4 && k.dims[0] == q.dims[0] &&
                k.dims[1] == q.dims[1] && k.dims[3] == q.dims[3] && q.dims[2] % k.dims[2] == 0,
            "cuDNN attention: q [B,T,Hq,D], k and v [B,T,Hkv,D]");
  LMT_CHECK(
      (q.dtype == DType::bf16 || q.dtype == DType::f16) && k.dtype == q.dtype && v.dtype == q.dtype,
      "cuDNN attention: q, k and v all bf16 or all f16");
  LMT_CHECK(a.softcap == 0, "cuDNN attention: no soft-capping");
}

// A window that keeps every key a causal query has (T or more) is no window.
int64_t window_of(const AttentionArgsHlo& a, int64_t T) {
  return a.window > 0 && a.window < T ? a.window : 0;
}

}  // namespace

// Why XLA's lowering, not cuDNN's kernel, computes this attention; nullptr: cuDNN's kernel does.
// Not checked: the GPU's generation and cuDNN's version, which cuDNN's flash attention has
// minimums for (lmtrain asks the plugin for neither).
const char* cudnn_attention_fallback(const std::string& platform, DType dt, const AttentionArgs& a,
                                     bool deterministic, int64_t devices) {
  if (platform != "cuda") return "not XLA's CUDA plugin: only its XLA has the cuDNN calls";
  if (deterministic)
    return "train.deterministic: XLA's CUDA plugin cannot compile cuDNN's backward "
           "deterministically";
  if (dt != DType::bf16 && dt != DType::f16)
    return "f32 / f64: cuDNN's flash attention takes bf16 or f16 inputs only";
  if (a.softcap != 0) return "logit soft-capping: the cuDNN call has no tanh on the scores";
  if (a.doc_start)  // cuDNN's packed segments bound their count per row in the program
    return "document masks: cuDNN takes segment lengths, not lmtrain's per-token doc_start";
  if (a.head_dim % 8 != 0 || a.head_dim > 128)  // 256 needs Hopper, which lmtrain cannot see
    return "head_dim: cuDNN's flash attention takes multiples of 8 up to 128 on every GPU";
  if (a.q_offset != 0 || a.q_len != a.kv_len)
    return "a query offset: the calls here are training's self-attention of whole sequences";
  if (a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0)
    return "query heads not a multiple of the kv heads";
  // XLA's SPMD partitioner cannot split the custom call: it gathers q, k and v over the batch and
  // the heads and every device computes the whole batch's attention (docs/parallel.md, "What the
  // real compilers show"). Until the call runs on each device's shards in a manual-sharding
  // region, a mesh takes XLA's attention, which the partitioner splits.
  if (devices > 1)
    return "a mesh: XLA's SPMD partitioner cannot split cuDNN's call (it would gather q, k and v "
           "and compute the whole batch's attention on every device)";
  return nullptr;
}

bool use_cudnn_attention(const std::string& platform, DType dt, const AttentionArgs& a,
                         bool deterministic, int64_t devices) {
  return cudnn_attention_fallback(platform, dt, a, deterministic, devices) == nullptr;
}

std::string cudnn_fmha_config(int64_t B, int64_t Hq, int64_t T, DType dt, double scale,
                              int64_t window, bool backward) {
  LMT_CHECK(dt == DType::bf16 || dt == DType::f16, "cuDNN attention: bf16 or f16 inputs");
  const std::string algorithm =
      R"({"algo_id": "0", "math_type": "TENSOR_OP_MATH", "tuning_knobs": {"17": "1", "24": "0"}, )"
      R"("is_cudnn_frontend": true, "workspace_size": "0"})";
  const std::string layout =
      R"({"dim_level_types": [], "dim_unique": [], "dim_ordered": [], )"
      R"("minor_to_major": ["3", "2", "1", "0"], "tiles": [], "element_size_in_bits": "0", )"
      R"("memory_space": "0", "index_primitive_type": "PRIMITIVE_TYPE_INVALID", )"
      R"("pointer_primitive_type": "PRIMITIVE_TYPE_INVALID", )"
      R"("dynamic_shape_metadata_prefix_bytes": "0"})";
  // The scores' shape [B, Hq, T, S] in the inputs' type (no such tensor exists in flash form).
  const std::string scores = "{\"element_type\": " + quoted(dt == DType::bf16 ? "BF16" : "F16") +
                             ", \"dimensions\": " + string_list({B, Hq, T, T}) +
                             ", \"tuple_shapes\": [], \"layout\": " + layout +
                             ", \"is_dynamic_dimension\": [false, false, false, false]}";
  // No dropout (its seed, JAX's default 42, is then unused); one segment per row.
  return "{\"operation_queue_id\": \"0\", \"cudnn_fmha_backend_config\": {\"algorithm\": " +
         algorithm + ", \"fmha_scale\": " + python_float(scale) +
         ", \"intermediate_tensor_shape\": " + scores +
         ", \"is_flash_attention\": true, \"mask_type\": \"CAUSAL\", " + dot_numbers_of(backward) +
         ", \"dropout_rate\": 0.0, \"seed\": 42, \"sliding_window_length\": " +
         std::to_string(window) + ", \"max_seg_per_batch\": 1, \"is_paged_attention\": false}}";
}

AttentionOut cudnn_attention_forward(StablehloBuilder& b, const AttentionArgsHlo& a, const Value& q,
                                     const Value& k, const Value& v) {
  check_inputs(a, q, k, v);
  const int64_t B = q.dims[0], T = q.dims[1], Hq = q.dims[2], D = q.dims[3];
  StablehloBuilder::CustomCall c;
  c.target = kForward;
  c.backend_config = cudnn_fmha_config(B, Hq, T, q.dtype, a.scale, window_of(a, T), false);
  c.operand_layouts = {kRowMajor4, kRowMajor4, kRowMajor4};
  c.result_layouts = {kStoredBTHD, kRowMajor3, kRowMajor1};
  const std::vector<Value> r =
      b.custom_call(c, {q, k, v},
                    {StablehloBuilder::type_of(q.dtype, {B, Hq, T, D}),  // O
                     StablehloBuilder::type_of(DType::f32, {B, Hq, T}),  // softmax statistics
                     StablehloBuilder::type_of(DType::u8, {0})});        // workspace
  return {b.transpose(r[0], {0, 2, 1, 3}), r[1]};
}

AttentionGrads cudnn_attention_backward(StablehloBuilder& b, const AttentionArgsHlo& a,
                                        const Value& dout, const Value& q, const Value& k,
                                        const Value& v, const Value& out, const Value& lse) {
  check_inputs(a, q, k, v);
  const int64_t B = q.dims[0], T = q.dims[1], Hq = q.dims[2], Hkv = k.dims[2], D = q.dims[3];
  LMT_CHECK(
      dout.dims == q.dims && out.dims == q.dims && dout.dtype == q.dtype && out.dtype == q.dtype,
      "cuDNN attention backward: dout and out [B,T,Hq,D] of q's dtype");
  LMT_CHECK(lse.dtype == DType::f32 && lse.dims == (Dims{B, Hq, T}),
            "cuDNN attention backward: lse [B,Hq,T] f32");
  StablehloBuilder::CustomCall c;
  c.target = kBackward;
  c.backend_config = cudnn_fmha_config(B, Hq, T, q.dtype, a.scale, window_of(a, T), true);
  c.operand_layouts = {kRowMajor4, kRowMajor4, kRowMajor4, kRowMajor3, kRowMajor4, kRowMajor4};
  c.result_layouts = {kStoredBTHD, kStoredBTHD, kStoredBTHD, kRowMajor1};
  const std::vector<Value> r =
      b.custom_call(c, {q, k, v, lse, dout, out},
                    {StablehloBuilder::type_of(q.dtype, {B, Hq, T, D}),   // dQ
                     StablehloBuilder::type_of(q.dtype, {B, Hkv, T, D}),  // dK
                     StablehloBuilder::type_of(q.dtype, {B, Hkv, T, D}),  // dV
                     StablehloBuilder::type_of(DType::u8, {0})});         // workspace
  const Dims back = {0, 2, 1, 3};
  return {b.transpose(r[0], back), b.transpose(r[1], back), b.transpose(r[2], back)};
}

}  // namespace lmt::hlo
