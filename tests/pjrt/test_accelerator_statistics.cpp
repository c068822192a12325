// The step's statistics on an accelerator (the loss sums, the gradients' sum of squares, the
// clipping and gradient scales: backend.h's double* device scalars) are held as f32 pairs summed
// with compensation (hlo/wide.cpp), so no program the pjrt backend sends a GPU or TPU holds f64.
// Here, on the test plugin posing as "cuda" or "tpu" (XLA:CPU running what lmtrain sends that
// platform): a compensated sum of a million elements equals their exact sum to 1e-12; sums, sums
// of squares, the clipping scale and the head's loss sums agree with the f64 ones of the CPU
// backend and XLA:CPU on fresh random inputs; every program of a run (steps, evaluations,
// checkpoints) holds no f64, for f32 and bf16, clipping, Muon and Lion, the loss variants, the
// cut loss's loops, gradient accumulation and LoRA; and a run resumed from a checkpoint repeats the
// uninterrupted run bit for bit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/pjrt/backend.h"
#include "core/rng.h"
#include "pjrt_test_util.h"
#include "train/run_config.h"
#include "train/trainer.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

// The exact sum of x (each element a double): Neumaier's compensated sum in double, whose error
// (about n 2^-106 of the magnitudes) is far below what the tests resolve.
double exact_sum(const std::vector<double>& x) {
  double s = 0, c = 0;
  for (double v : x) {
    const double t = s + v;
    c += std::fabs(s) >= std::fabs(v) ? (s - t) + v : (v - t) + s;
    s = t;
  }
  return s + c;
}

double magnitude(const std::vector<float>& x) {
  double m = 0;
  for (float v : x) m += std::fabs(double{v});
  return m;
}

// ---- the compensated sum itself (hlo::wide_sum), on XLA:CPU ----

class WideSum : public test::PjrtTest {};

// A million and three random floats, of mixed signs and of one sign, summed as f32 pairs: within
// 1e-12 of the sum of their magnitudes from the exact sum (XLA:CPU's own f32 sum of them, a tree
// of partial sums, was off by 2e-10 to 8e-8), whole, as two halves added (wide_add) and as a
// 2-D array; the pair's hi is the f32 nearest the pair's value.
TEST_F(WideSum, AMillionElementsSumToTheirExactSum) {
  const int64_t n = (int64_t{1} << 20) + 3, half = n / 2;
  for (bool positive : {false, true}) {
    std::vector<float> x = uniform(static_cast<size_t>(n));
    if (positive)
      for (float& v : x) v = std::fabs(v) * 1000;
    StablehloBuilder b;
    const HloValue p = b.param(DType::f32, {n});
    const HloValue whole = hlo::wide_sum(b, p, hlo::WideForm::f32_pair);
    const HloValue halves =
        hlo::wide_add(b, hlo::wide_sum(b, b.slice(p, {0}, {half}), hlo::WideForm::f32_pair),
                      hlo::wide_sum(b, b.slice(p, {half}, {n}), hlo::WideForm::f32_pair));
    const HloValue rows = hlo::wide_sum(
        b, b.reshape(b.slice(p, {0}, {n - 3}), {1024, (n - 3) / 1024}), hlo::WideForm::f32_pair);
    const HloValue plain = b.reduce_sum(p, {0});
    b.ret({whole, halves, rows, hlo::wide_value(b, whole), plain});
    PjrtBuffer bx = client_->to_device(x.data(), DType::f32, {n});
    std::vector<PjrtBuffer> out = client_->compile(b.text()).execute(std::vector<PjrtBuffer*>{&bx});
    const std::vector<double> xd(x.begin(), x.end());
    const double want = exact_sum(xd), mag = magnitude(x);
    const double want_rows = exact_sum(std::vector<double>(xd.begin(), xd.end() - 3));
    auto pair_sum = [](PjrtBuffer& o) {
      const std::vector<float> v = o.to_host<float>();
      EXPECT_EQ(v.size(), 2u);
      return double{v[0]} + double{v[1]};
    };
    SCOPED_TRACE(seed_note() + (positive ? ", positive" : ", mixed signs"));
    const double err = std::fabs(pair_sum(out[0]) - want) / mag;
    EXPECT_LE(err, 1e-12);
    EXPECT_LE(std::fabs(pair_sum(out[1]) - want) / mag, 1e-12);
    EXPECT_LE(std::fabs(pair_sum(out[2]) - want_rows) / mag, 1e-12);
    EXPECT_EQ(out[3].to_host<float>().at(0), static_cast<float>(pair_sum(out[0])));
    const double plain_err = std::fabs(double{out[4].to_host<float>().at(0)} - want) / mag;
    std::printf("%s: the pair's error %.1e of the magnitudes (a plain f32 sum's %.1e)\n",
                positive ? "positive" : "mixed signs", err, plain_err);
  }
}

// ---- the backend's statistics on an accelerator ----

// A backend on the test plugin posing as `platform` (XLA:CPU's programs, the accelerator's forms).
std::unique_ptr<Backend> posing_as(const char* platform) {
  test::ScopedEnv env("LMT_TEST_PLUGIN_PLATFORM", platform);
  auto be = make_pjrt_backend(LMT_TEST_PJRT_PLUGIN, PjrtOptions{});
  EXPECT_EQ(be->device().platform, platform);
  return be;
}

// A described device scalar, zero.
Buffer device_scalar(Backend* be, const char* name) {
  Buffer s(be, sizeof(double));
  be->describe(s.data(), TensorDesc{name, DType::f64, {}});
  be->zero(s.data(), sizeof(double));
  return s;
}

double read_scalar(Backend* be, const Buffer& s) {
  double v = 0;
  be->to_host(&v, s.data(), sizeof v);
  return v;
}

class AcceleratorStatistics : public test::TestPluginTest {};

// Backend::sum, sum_squares and clip_scale over a million and five floats on the accelerator form,
// against the CPU backend (f64 sums of the elements, of their exact squares): the sum within
// 1e-12 of the magnitudes, the sum of squares within 6e-8 (each square rounded to f32 once), the
// clipping scale (computed in f32 from it) within 3e-7.
TEST_F(AcceleratorStatistics, SumsAndNormsAgreeWithTheCpuBackendsF64) {
  const int64_t n = (int64_t{1} << 20) + 5;
  std::vector<float> x = uniform(static_cast<size_t>(n));
  for (float& v : x) v *= 1e-3f;  // gradient-sized
  auto cpu = make_backend("cpu");
  auto acc = posing_as("cuda");
  struct Stats {
    double sum = 0, sum_squares = 0, scale = 0;
  };
  auto stats = [&](Backend* be, double max_norm) {
    Buffer dx(be, x.size() * sizeof(float));
    be->from_host(dx.data(), x.data(), dx.bytes());
    const Buffer sum = device_scalar(be, "test.sum"), ss = device_scalar(be, "test.sum_squares"),
                 scale = device_scalar(be, "test.clip_scale");
    be->sum(DType::f32, sum.as<double>(), dx.data(), n);
    // In two pieces, as the optimizer sums tensor after tensor.
    be->sum_squares(DType::f32, ss.as<double>(), dx.data(), n / 3);
    be->sum_squares(DType::f32, ss.as<double>(), x.size() / 3 + static_cast<float*>(dx.data()),
                    n - n / 3);
    be->clip_scale(scale.as<double>(), ss.as<double>(), max_norm);
    return Stats{read_scalar(be, sum), read_scalar(be, ss), read_scalar(be, scale)};
  };
  double norm = 0;
  for (float v : x) norm += double{v} * v;
  norm = std::sqrt(norm);
  const double max_norm = norm / 3;  // clipped
  const Stats want = stats(cpu.get(), max_norm), got = stats(acc.get(), max_norm);
  SCOPED_TRACE(seed_note());
  const double sum_err = std::fabs(got.sum - want.sum) / magnitude(x);
  const double ss_err = std::fabs(got.sum_squares / want.sum_squares - 1);
  const double scale_err = std::fabs(got.scale / want.scale - 1);
  std::printf(
      "accelerator form against f64: sum %.1e of the magnitudes, sum of squares %.1e, "
      "clipping scale %.1e (relative)\n",
      sum_err, ss_err, scale_err);
  EXPECT_LE(sum_err, 1e-12);
  EXPECT_LE(ss_err, 6e-8);
  EXPECT_LE(scale_err, 3e-7);
  EXPECT_NEAR(want.scale, max_norm / (norm + 1e-6), 1e-12);
}

// Backend::head_loss over 6000 rows (12 chunks of 512 carrying the sums through a loop, the last
// one partly padding), with z-loss, label smoothing and ignored rows, whole rows of logits and
// the cut loss's vocabulary tiles: the objective's and the cross-entropy's sums on the
// accelerator form against XLA:CPU's f64 sums of the same program's rows (within 1e-7) and the
// CPU backend's (within 1e-6: its rows' losses are f32 sums in another order).
TEST_F(AcceleratorStatistics, LossSumsAgreeWithF64OverManyTokens) {
  const int64_t N = 6000, C = 32, V = 384;
  std::vector<float> h = uniform(static_cast<size_t>(N * C)),
                     w = uniform(static_cast<size_t>(V * C));
  for (float& v : h) v *= 2;
  std::vector<int32_t> labels(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i)
    labels[i] = i % 7 == 3 ? -100 : static_cast<int32_t>(rng_() % static_cast<uint32_t>(V));
  auto sums = [&](Backend* be, int64_t tile) {
    HeadLossArgs a;
    a.N = N, a.C = C, a.V = V, a.chunk = 512, a.vocab_tile = tile;
    a.loss = LossSpec{0.1, 1e-3, 0.0};  // label smoothing, z-loss
    Buffer dh(be, h.size() * 4), dw(be, w.size() * 4), dl(be, labels.size() * 4);
    be->from_host(dh.data(), h.data(), dh.bytes());
    be->from_host(dw.data(), w.data(), dw.bytes());
    be->from_host(dl.data(), labels.data(), dl.bytes());
    const Buffer loss = device_scalar(be, "loss_sum"), ce = device_scalar(be, "ce_sum");
    const HeadLossScratch s = head_loss_scratch(a.chunk, V, tile);
    Buffer logits(be, static_cast<size_t>(s.logits) * 4),
        losses(be, static_cast<size_t>(s.losses) * 4);
    be->head_loss(DType::f32, a, dh.data(), dw.data(), static_cast<const int32_t*>(dl.data()),
                  loss.as<double>(), nullptr, nullptr, logits.data(), losses.data(),
                  ce.as<double>());
    return std::pair{read_scalar(be, loss), read_scalar(be, ce)};
  };
  auto cpu = make_backend("cpu");
  auto xla_cpu = make_pjrt_backend(LMT_TEST_PJRT_PLUGIN, PjrtOptions{});
  auto acc = posing_as("cuda");
  for (int64_t tile : {int64_t{0}, int64_t{100}}) {
    SCOPED_TRACE(seed_note() + ", vocabulary tile " + std::to_string(tile));
    const auto want = sums(cpu.get(), tile), f64 = sums(xla_cpu.get(), tile),
               got = sums(acc.get(), tile);
    const double vs_f64 =
        std::max(std::fabs(got.first / f64.first - 1), std::fabs(got.second / f64.second - 1));
    const double vs_cpu =
        std::max(std::fabs(got.first / want.first - 1), std::fabs(got.second / want.second - 1));
    std::printf(
        "loss sums over %lld rows (tile %lld): accelerator form against XLA:CPU's f64 "
        "%.1e, against the CPU backend %.1e (relative)\n",
        static_cast<long long>(N), static_cast<long long>(tile), vs_f64, vs_cpu);
    EXPECT_LE(vs_f64, 1e-7);
    EXPECT_LE(vs_cpu, 1e-6);
    EXPECT_NE(got.first, got.second);  // two sums, not one
  }
}

// A described f64 scalar on an accelerator reads and writes as a double (the nearest pair: about
// 48 bits); a sum of squares that overflows f32 is not finite there; an undescribed scalar is
// refused by the kernels that would misread it.
TEST_F(AcceleratorStatistics, DeviceScalarsReadAndWriteAsDoubles) {
  auto acc = posing_as("tpu");
  Buffer report(acc.get(), 3 * sizeof(double));
  acc->describe(report.data(), TensorDesc{"step_report.0", DType::f64, {3}});
  const double written[3] = {1.0 / 3, -2.5e30, 7e-40};  // 7e-40: f32's subnormals
  acc->from_host(report.data(), written, sizeof written);
  double read[3] = {0, 0, 0};
  acc->to_host(read, report.data(), sizeof read);
  EXPECT_NEAR(read[0], 1.0 / 3, 1e-14);  // hi + lo: about 48 bits
  EXPECT_NEAR(read[1], -2.5e30, 2.5e30 * 1e-14);
  EXPECT_NEAR(read[2], 7e-40, 1e-45);
  acc->to_host(read, report.as<double>() + 1, sizeof(double));  // one element of three
  EXPECT_EQ(read[0], read[1]);

  // A sum of squares beyond f32's range is not finite, and so is the clipping scale.
  const std::vector<float> huge = {1.0f, 2e19f, 3.0f, 1.0f};
  Buffer x(acc.get(), huge.size() * sizeof(float));
  acc->from_host(x.data(), huge.data(), x.bytes());
  const Buffer ss = device_scalar(acc.get(), "grad_sum_squares"),
               scale = device_scalar(acc.get(), "clip_scale");
  acc->sum_squares(DType::f32, ss.as<double>(), x.data(), 4);
  acc->clip_scale(scale.as<double>(), ss.as<double>(), 1.0);
  EXPECT_FALSE(std::isfinite(read_scalar(acc.get(), ss)));
  EXPECT_TRUE(std::isnan(read_scalar(acc.get(), scale)));

  Buffer raw(acc.get(), sizeof(double));
  const std::string msg = [&] {
    try {
      acc->sum(DType::f32, raw.as<double>(), x.data(), 4);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  }();
  EXPECT_NE(msg.find("must be described as f64"), std::string::npos) << msg;
}

// ---- whole runs ----

// Runs of a small Llama on raw text (bytes), in this test's directory.
class AcceleratorRuns : public test::TestPluginTest {
 protected:
  void SetUp() override {
    test::TestPluginTest::SetUp();
    if (HasFatalFailure()) return;
    dir_ = record_dir_ / "runs";
    fs::create_directories(dir_);
    const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "then", "ran", "far"};
    Rng r(seed_);
    std::ofstream f(dir_ / "docs.txt");
    for (int d = 0; d < 60; ++d) {
      if (d) f << "%\n";
      for (int i = 0; i < 12; ++i) f << words[r.below(10)] << (i == 11 ? "\n" : " ");
    }
  }

  // The run's config (as a file: later --set style `sets` win), writing to dir_/out.
  RunConfig config(const std::string& out, const std::vector<std::string>& sets) {
    const fs::path yaml = dir_ / "run.yaml";
    std::ofstream(yaml)
        << "model: {family: llama, vocab_size: 257, hidden_size: 32,\n"
           "  intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 2,\n"
           "  num_key_value_heads: 1, max_position_embeddings: 32}\n"
           "data: {sources: [{path: "
        << (dir_ / "docs.txt").string()
        << "}], seq_len: 16, val_fraction: 0.1}\n"
           "train: {backend: pjrt, pjrt_plugin: " LMT_TEST_PJRT_PLUGIN
           ", micro_batch_size: 4,\n"
           "  warmup_steps: 2, lr: 1.0e-2, grad_clip: 0.5, eval_every: 2,\n"
           "  eval_steps: 1, keep_last: 0, log_every: 1, sample_tokens: 0}\n"
           "logging: {console: false}\n";
    std::vector<std::string> all = {"train.out_dir=" + (dir_ / out).string()};
    all.insert(all.end(), sets.begin(), sets.end());
    return load_run_config(yaml.string(), all);
  }

  // metrics.jsonl as text lines (doubles bit for bit), less the clock and memory fields.
  std::vector<std::string> metric_lines(const std::string& out) {
    std::ifstream f(dir_ / out / "metrics.jsonl");
    std::vector<std::string> lines;
    for (std::string l; std::getline(f, l);)
      lines.push_back(test::without_run_dependent_metrics(nlohmann::json::parse(l)).dump());
    return lines;
  }

  fs::path dir_;
};

// Every program of a run sent to a GPU or a TPU (recorded by the test plugin, which compiles and
// runs them on XLA:CPU): steps, evaluations and checkpoints, of f32 and bf16 runs with clipping,
// AdamW, Muon and Lion, z-loss, focal loss and label smoothing, the cut loss (its loops carry the
// sums), gradient accumulation and LoRA on a bf16 base, holds no f64. The same run on XLA:CPU
// does hold f64 (its statistics stay f64): what the search would find.
TEST_F(AcceleratorRuns, NoProgramSentToAnAcceleratorHoldsF64) {
  struct Case {
    const char* platform;
    std::string name;
    std::vector<std::string> sets;
  };
  // bf16 on "cuda" asks for deterministic ops: cuDNN's attention (which XLA:CPU cannot run)
  // is then XLA's.
  const std::vector<Case> cases = {
      {"cuda", "f32", {}},
      {"tpu",
       "bf16-muon-zloss-accum",
       {"train.precision=bf16", "optimizer.name=muon", "loss.z_loss=1e-4",
        "train.grad_accum_steps=2"}},
      {"cuda",
       "bf16-focal-smoothing-lion-cut-accum",
       {"train.precision=bf16", "train.deterministic=true", "loss.name=focal",
        "loss.label_smoothing=0.1", "optimizer.name=lion", "loss.impl=cut", "loss.vocab_tile=64",
        "train.loss_chunk_tokens=32", "train.grad_accum_steps=2"}},
      {"tpu",
       "f32-focal-smoothing-cut",
       {"loss.name=focal", "loss.label_smoothing=0.1", "loss.z_loss=1e-4", "loss.impl=cut",
        "loss.vocab_tile=64", "train.loss_chunk_tokens=32"}},
      {"tpu",
       "lora-bf16-base-dropout",  // the head staged from the base: Backend::sum's sums
       {"lora.rank=4", "lora.dropout=0.1", "lora.base_dtype=bf16", "loss.z_loss=1e-4"}},
      {"cpu", "xla-cpu", {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.platform) + " " + c.name);
    const fs::path rec = record_dir_ / (std::string(c.platform) + "_" + c.name);
    {
      test::ScopedEnv platform("LMT_TEST_PLUGIN_PLATFORM", c.platform);
      test::ScopedEnv record("LMT_TEST_PLUGIN_RECORD", rec.c_str());
      test::ScopedEnv posed("LMT_TEST_PLUGIN_RECORD_POSED", "1");
      std::vector<std::string> sets = c.sets;
      sets.insert(sets.end(), {"train.max_steps=3", "train.save_every=2"});
      const TrainResult r = train(config(std::string(c.platform) + "_" + c.name, sets), false);
      EXPECT_EQ(r.steps, 3);
      EXPECT_TRUE(std::isfinite(r.last_loss));
    }
    int programs = 0, with_f64 = 0;
    for (const auto& e : fs::directory_iterator(rec)) {
      if (e.path().extension() != ".mlir") continue;
      ++programs;
      if (test::read_file(e.path()).find("f64") != std::string::npos) ++with_f64;
    }
    std::printf("%s %s: %d programs, %d with f64\n", c.platform, c.name.c_str(), programs,
                with_f64);
    EXPECT_GE(programs, 2);  // steps and evaluations
    if (std::string(c.platform) == "cpu")
      EXPECT_GT(with_f64, 0);
    else
      EXPECT_EQ(with_f64, 0);
  }
}

// On the accelerator form (the test plugin posing as "cuda": steps queued ahead and replayed),
// 6 steps straight and 3 steps, a checkpoint, a resume in a new backend and 3 more give the same
// metrics (losses, gradient norms, evaluations) and the same final checkpoint, bit for bit: bf16
// with Muon, z-loss, clipping and two micro-batches a step (deterministic ops, as a resumed GPU
// run asks for them); f32 with AdamW.
TEST_F(AcceleratorRuns, AResumedRunRepeatsTheUninterruptedRunBitForBit) {
  test::ScopedEnv platform("LMT_TEST_PLUGIN_PLATFORM", "cuda");
  for (const std::vector<std::string>& variant :
       {std::vector<std::string>{"train.precision=bf16", "train.deterministic=true",
                                 "optimizer.name=muon", "loss.z_loss=1e-4",
                                 "train.grad_accum_steps=2"},
        std::vector<std::string>{}}) {
    const std::string tag = variant.empty() ? "f32" : "bf16";
    SCOPED_TRACE(tag);
    auto with = [&](std::vector<std::string> sets) {
      sets.insert(sets.begin(), variant.begin(), variant.end());
      sets.push_back("train.save_every=3");
      return sets;
    };
    train(config("whole_" + tag, with({"train.max_steps=6"})), false);
    train(config("resumed_" + tag, with({"train.max_steps=6"})), false, /*stop_after=*/3);
    EXPECT_EQ(train(config("resumed_" + tag, with({"train.max_steps=6"})), true).first_step, 3);
    const std::vector<std::string> want = metric_lines("whole_" + tag);
    ASSERT_EQ(want.size(), 6u + 3u);  // 6 steps, evaluations after steps 2, 4 and 6
    EXPECT_EQ(metric_lines("resumed_" + tag), want);
    for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
      const fs::path ckpt = fs::path("checkpoints") / "step_0000006" / file;
      const std::string a = test::read_file(dir_ / ("whole_" + tag) / ckpt);
      EXPECT_FALSE(a.empty()) << ckpt;
      EXPECT_TRUE(a == test::read_file(dir_ / ("resumed_" + tag) / ckpt)) << ckpt << " differs";
    }
  }
}

}  // namespace
}  // namespace lmt
