// The comparison with transformers that tests/hf/test_hf_parity.cpp (committed fixtures) and
// tests/reference/test_models_reference.cpp (references made at test time) share: for one
// reference of a directory that scripts/make_hf_fixtures.py wrote, our forward gives its logits
// and loss, and our backward its gradient of every parameter. The references may be F32 or F64;
// a reference with "positions" is a packed row (positions restart at each document).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "io/hf_model.h"
#include "io/safetensors.h"
#include "model_passes.h"

namespace lmt::test {

// The bounds the issue sets: logits max|diff| / max|ref|, loss relative, each gradient's relative
// L2 error.
struct ParityBounds {
  double logits = 1e-4;
  double loss = 1e-5;
  double grad = 1e-3;
};

// The errors measured (the largest gradient error and its parameter).
struct ParityErrors {
  double logits = 0, loss = 0, grad = 0;
  std::string worst_grad;
};

// The model's flat buffer (params or grads) slice of one parameter, as f64.
inline std::vector<double> param_slice(const Transformer& m, const void* base, const ParamInfo& p) {
  std::vector<double> out(static_cast<size_t>(p.numel()));
  if (m.dtype() == DType::f64) {
    m.backend()->to_host(out.data(), static_cast<const double*>(base) + p.offset,
                         out.size() * sizeof(double));
  } else {
    std::vector<float> f(out.size());
    m.backend()->to_host(f.data(), static_cast<const float*>(base) + p.offset,
                         f.size() * sizeof(float));
    std::copy(f.begin(), f.end(), out.begin());
  }
  return out;
}

// Loads `dir` in dtype dt and compares with its reference `ref` ("a": ref_a.json and
// ref_a_{logits,grads}.safetensors), adding a test failure for each bound exceeded. Prints one
// line, tagged `tag`, with the errors, which it returns.
inline ParityErrors check_hf_parity(const std::string& dir, const std::string& ref, DType dt,
                                    const ParityBounds& bound = {},
                                    const std::string& tag = "parity") {
  ParityErrors e;
  const std::string what = dir + " ref_" + ref + " " + std::string(dtype_name(dt));
  std::ifstream in(dir + "/ref_" + ref + ".json");
  EXPECT_TRUE(in.good()) << "no " << dir << "/ref_" << ref << ".json";
  if (!in.good()) return e;
  const auto js = nlohmann::json::parse(in);
  const auto ids64 = js.at("input_ids").get<std::vector<int64_t>>();
  const double ref_loss = js.at("loss").get<double>();
  std::vector<int32_t> ids(ids64.begin(), ids64.end());
  const auto T = static_cast<int64_t>(ids.size());
  std::vector<int32_t> labels(ids.size(), Transformer::kIgnoreIndex);
  for (int64_t t = 0; t + 1 < T; ++t) labels[t] = ids[t + 1];
  // A packed row: each token's document starts `position` tokens before it.
  std::vector<int32_t> pos, doc_start;
  Transformer::Packing packing;
  if (js.contains("positions")) {
    pos = js.at("positions").get<std::vector<int32_t>>();
    EXPECT_EQ(pos.size(), ids.size()) << what;
    if (pos.size() != ids.size()) return e;
    for (int64_t t = 0; t < T; ++t) doc_start.push_back(static_cast<int32_t>(t) - pos[t]);
    packing = {pos.data(), doc_start.data()};
  }
  const Transformer::Packing* pk = pos.empty() ? nullptr : &packing;

  CpuBackend be;
  std::unique_ptr<Transformer> m = load_hf_model(dir, &be, dt);
  const int64_t V = m->config().vocab_size;

  const std::vector<double> logits = m->forward_logits(ids.data(), 1, T, pk);
  const HostTensor ref_logits = SafetensorsFile::open(dir + "/ref_" + ref + "_logits.safetensors")
                                    .read_as("logits", DType::f64);
  EXPECT_EQ(ref_logits.shape(), (Shape{T, V})) << what;
  if (ref_logits.shape() != Shape{T, V}) return e;
  double max_diff = 0, max_ref = 0;
  for (int64_t i = 0; i < T * V; ++i) {
    max_diff = std::max(max_diff, std::abs(logits[i] - ref_logits.ptr<double>()[i]));
    max_ref = std::max(max_ref, std::abs(ref_logits.ptr<double>()[i]));
  }
  e.logits = max_diff / max_ref;
  EXPECT_LT(e.logits, bound.logits) << what << ": logits";

  // Loss and gradients of the mean loss.
  m->zero_grads();
  const LossSum s = lmt::test::train_batch(*m, ids.data(), labels.data(), 1, T, 1.0 / (T - 1), pk);
  EXPECT_EQ(s.tokens, T - 1) << what;
  e.loss = std::abs(s.sum / (T - 1) - ref_loss) / std::abs(ref_loss);
  EXPECT_LT(e.loss, bound.loss) << what << ": loss ours " << s.sum / (T - 1) << " ref " << ref_loss;

  const SafetensorsFile grads = SafetensorsFile::open(dir + "/ref_" + ref + "_grads.safetensors");
  EXPECT_EQ(grads.size(), m->params().size()) << what
                                              << ": every reference gradient has a "
                                                 "parameter";
  for (const ParamInfo& p : m->params()) {
    EXPECT_TRUE(grads.contains(p.name)) << what << ": no reference gradient of " << p.name;
    if (!grads.contains(p.name)) continue;
    const HostTensor g = grads.read_as(p.name, DType::f64);
    EXPECT_EQ(g.shape(), p.shape) << what << ": " << p.name;
    if (g.shape() != p.shape) continue;
    const std::vector<double> ours = param_slice(*m, m->grads_data(), p);
    double num = 0, den = 0;
    for (int64_t i = 0; i < p.numel(); ++i) {
      const double r = g.ptr<double>()[i];
      num += (ours[i] - r) * (ours[i] - r);
      den += r * r;
    }
    const double rel = std::sqrt(num / std::max(den, 1e-300));
    EXPECT_LT(rel, bound.grad) << what << ": gradient of " << p.name;
    if (rel >= e.grad) e.grad = rel, e.worst_grad = p.name;
  }
  std::printf("[%s] %s: logits max|d|/max|ref| %.3g, loss rel %.3g, worst grad rel L2 %.3g (%s)\n",
              tag.c_str(), what.c_str(), e.logits, e.loss, e.grad, e.worst_grad.c_str());
  return e;
}

}  // namespace lmt::test
