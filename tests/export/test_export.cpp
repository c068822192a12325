// save_hf_model: an f32 export loads back bit-identical, a bf16 / f16 export holds each weight's
// round-to-nearest-even value and gives the f32 logits within the dtype's tolerance, sharding
// writes what transformers writes (names, index, total_size) and loads back, the tokenizer files
// travel, and the output directory rules hold.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "core/dtype.h"
#include "data/tokenizer/tokenizer.h"
#include "export_test_util.h"
#include "io/hf_export.h"
#include "io/hf_model.h"
#include "io/safetensors.h"

namespace lmt {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<Transformer> fresh_model(CpuBackend& be, const ModelConfig& cfg) {
  auto m = std::make_unique<Transformer>(&be, cfg);
  m->init_weights(test::random_seed());
  return m;
}

HfExportOptions with_dtype(DType dt) {
  HfExportOptions o;
  o.dtype = dt;
  return o;
}

TEST(SaveHfModel, F32ExportLoadsBackBitIdentical) {
  const auto families = test::exportable_families();
  for (const char* f : test::kAllFamilies)
    EXPECT_NE(std::find(families.begin(), families.end(), f), families.end()) << f;
  CpuBackend be;
  for (const std::string& family : families) {
    SCOPED_TRACE(family);
    auto m = fresh_model(be, test::tiny_config(family));
    const fs::path dir = test::fresh_dir("f32_" + family);
    const HfExportResult r = save_hf_model(dir.string(), *m, with_dtype(DType::f32));
    EXPECT_EQ(r.shards, 1);
    EXPECT_EQ(test::list_dir(dir),
              (std::vector<std::string>{"checksums.json", "config.json", "generation_config.json",
                                        "model.safetensors"}));
    const auto cj = test::read_json(dir / "config.json");
    EXPECT_EQ(cj.at("torch_dtype"), "float32");
    EXPECT_EQ(cj.at("dtype"), "float32");
    EXPECT_EQ(cj.at("model_type"), family == "gemma3" ? "gemma3_text" : family);
    const auto gj = test::read_json(dir / "generation_config.json");
    EXPECT_EQ(gj.at("bos_token_id"), 1);
    EXPECT_EQ(gj.at("eos_token_id"), 2);
    EXPECT_EQ(SafetensorsFile::open((dir / "model.safetensors").string()).metadata().at("format"),
              "pt");
    auto back = load_hf_model(dir.string(), &be);
    ASSERT_EQ(back->params().size(), m->params().size());
    for (const ParamInfo& p : m->params()) {
      const auto a = test::param_values(*m, p), b = test::param_values(*back, back->param(p.name));
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << p.name;
    }
  }
}

// The largest |difference| of the logits over the largest |logit| of `ref`.
double relative_logit_error(Transformer& ref, Transformer& got, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<int32_t> ids(23);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % ref.config().vocab_size);
  const auto a = ref.forward_logits(ids.data(), 1, 23), b = got.forward_logits(ids.data(), 1, 23);
  double diff = 0, top = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    top = std::max(top, std::abs(a[i]));
  }
  return diff / top;
}

TEST(SaveHfModel, HalfExportsHoldTheRoundedWeightsAndCloseLogits) {
  CpuBackend be;
  for (const std::string& family : test::exportable_families()) {
    auto m = fresh_model(be, test::tiny_config(family));
    for (DType dt : {DType::bf16, DType::f16}) {
      SCOPED_TRACE(family + " " + std::string(dtype_name(dt)));
      const fs::path dir = test::fresh_dir("half_" + family);
      save_hf_model(dir.string(), *m, with_dtype(dt));
      EXPECT_EQ(test::read_json(dir / "config.json").at("dtype"), torch_dtype_name(dt));
      const SafetensorsFile st = SafetensorsFile::open((dir / "model.safetensors").string());
      for (const std::string& n : st.names()) EXPECT_EQ(st.meta(n).dtype, dt) << n;
      auto back = load_hf_model(dir.string(), &be);
      int64_t changed = 0;
      for (const ParamInfo& p : m->params()) {
        const auto a = test::param_values(*m, p), b = test::param_values(*back, p);
        for (size_t i = 0; i < a.size(); ++i) {
          const float want =
              dt == DType::bf16 ? bf16_to_f32(f32_to_bf16(a[i])) : f16_to_f32(f32_to_f16(a[i]));
          ASSERT_EQ(b[i], want) << p.name << "[" << i << "] of " << a[i];
          changed += b[i] != a[i];
        }
      }
      EXPECT_GT(changed, 0);  // the export really rounded
      const double err = relative_logit_error(*m, *back, test::random_seed());
      std::printf("[ info ] %s %s export: logits max|diff|/max|ref| %.2e\n", family.c_str(),
                  std::string(dtype_name(dt)).c_str(), err);
      // bf16 keeps 8 significant bits (relative rounding 2^-9), f16 11 (2^-12).
      EXPECT_LT(err, dt == DType::bf16 ? 1.5e-2 : 2e-3);
      EXPECT_GT(err, 0.0);
    }
  }
}

TEST(SaveHfModel, Bf16RoundsToNearestEven) {
  CpuBackend be;
  auto m = fresh_model(be, test::tiny_config("llama"));
  const ParamInfo& e = m->param("model.embed_tokens.weight");
  // bf16 keeps 7 fraction bits: around 1 its spacing is 2^-7.
  const float in[] = {1.0f + 0x1p-8f,             // halfway, 1 is even: down
                      1.0f + 3 * 0x1p-8f,         // halfway, 1 + 2^-6 is even: up
                      1.0f + 0x1p-8f + 0x1p-20f,  // past halfway: up
                      -(1.0f + 0x1p-8f),          // the same, negative
                      0x1p-130f};                 // subnormal: kept as bf16 subnormal
  const float want[] = {1.0f, 1.0f + 0x1p-6f, 1.0f + 0x1p-7f, -1.0f, 0x1p-130f};
  be.from_host(static_cast<float*>(m->params_data()) + e.offset, in, sizeof(in));
  const fs::path dir = test::fresh_dir("rne");
  save_hf_model(dir.string(), *m, with_dtype(DType::bf16));
  const HostTensor t = SafetensorsFile::open((dir / "model.safetensors").string())
                           .read_as("model.embed_tokens.weight", DType::f32);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(t.ptr<float>()[i], want[i]) << i;
}

TEST(SaveHfModel, F16RefusesValuesBeyondItsRange) {
  CpuBackend be;
  auto m = fresh_model(be, test::tiny_config("mistral"));
  const ParamInfo& p = m->params()[3];
  const float big = 70000.0f;
  be.from_host(static_cast<float*>(m->params_data()) + p.offset + 5, &big, sizeof(big));
  const fs::path dir = test::fresh_dir("f16_range");
  test::expect_user_error([&] { save_hf_model(dir.string(), *m, with_dtype(DType::f16)); },
                          {p.name, "element 5", "f16"});
  EXPECT_FALSE(fs::exists(dir));
  for (const auto& e : fs::directory_iterator(test::temp_dir()))
    EXPECT_EQ(e.path().filename().string().find("f16_range.tmp"), std::string::npos);
}

TEST(SaveHfModel, ShardsAsTransformersWritesThem) {
  CpuBackend be;
  for (const std::string& family : test::exportable_families()) {
    SCOPED_TRACE(family);
    auto m = fresh_model(be, test::tiny_config(family));
    uint64_t total = 0, biggest = 0;
    for (const ParamInfo& p : m->params()) {
      total += static_cast<uint64_t>(p.numel()) * 4;
      biggest = std::max<uint64_t>(biggest, static_cast<uint64_t>(p.numel()) * 4);
    }
    // A limit below the largest tensor: that tensor gets a shard of its own.
    HfExportOptions o = with_dtype(DType::f32);
    o.max_shard_bytes = std::max<uint64_t>(total / 5, biggest - 4);
    const fs::path dir = test::fresh_dir("shards_" + family);
    const HfExportResult r = save_hf_model(dir.string(), *m, o);
    ASSERT_GE(r.shards, 5);
    EXPECT_EQ(r.tensor_bytes, total);
    EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
    const auto index = test::read_json(dir / "model.safetensors.index.json");
    EXPECT_EQ(index.size(), 2u);
    EXPECT_EQ(index.at("metadata").at("total_size").get<uint64_t>(), total);
    const auto& map = index.at("weight_map");
    EXPECT_EQ(map.size(), m->params().size());
    std::map<std::string, std::set<std::string>> per_shard;
    for (const auto& [tensor, shard] : map.items())
      per_shard[shard.get<std::string>()].insert(tensor);
    ASSERT_EQ(per_shard.size(), static_cast<size_t>(r.shards));
    int i = 1;
    for (const auto& [shard, names] : per_shard) {
      EXPECT_EQ(shard, fmt::format("model-{:05d}-of-{:05d}.safetensors", i++, r.shards));
      const SafetensorsFile st = SafetensorsFile::open((dir / shard).string());
      const auto in_file = st.names();
      EXPECT_EQ(std::set<std::string>(in_file.begin(), in_file.end()), names) << shard;
      uint64_t bytes = 0;
      for (const auto& n : in_file) bytes += st.meta(n).nbytes();
      if (names.size() > 1) EXPECT_LE(bytes, o.max_shard_bytes) << shard;
    }
    auto back = load_hf_model(dir.string(), &be);
    for (const ParamInfo& p : m->params()) {
      const auto a = test::param_values(*m, p), b = test::param_values(*back, p);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << p.name;
    }
    // The same model at a limit it fits under is one file again, with no leftover shards.
    o.max_shard_bytes = total;
    EXPECT_EQ(save_hf_model(dir.string(), *m, o).shards, 1);
    EXPECT_EQ(test::list_dir(dir),
              (std::vector<std::string>{"checksums.json", "config.json", "generation_config.json",
                                        "model.safetensors"}));
  }
}

TEST(SaveHfModel, CarriesTheTokenizer) {
  CpuBackend be;
  const std::string tok_dir = std::string(LMT_TEST_DATA) + "/tokenizers/";
  for (const std::string file : {"llama3_style_bpe.json", "sp_bpe.model"}) {
    SCOPED_TRACE(file);
    const std::string path = tok_dir + file;
    auto tok = load_tokenizer(path);
    ModelConfig cfg = test::tiny_config("llama");
    cfg.vocab_size = tok->vocab_size() + 3;
    cfg.bos_token_id = tok->bos_id();
    cfg.eos_token_id = tok->eos_id();
    auto m = fresh_model(be, cfg);
    HfExportOptions o;
    o.tokenizer = path;
    const fs::path dir = test::fresh_dir("tok");
    save_hf_model(dir.string(), *m, o);
    const bool sp = file.ends_with(".model");
    const fs::path copy = dir / (sp ? "tokenizer.model" : "tokenizer.json");
    ASSERT_TRUE(fs::exists(copy));
    EXPECT_EQ(fs::file_size(copy), fs::file_size(path));
    const auto tc = test::read_json(dir / "tokenizer_config.json");
    // Both load as tokenizer.json in transformers; a SentencePiece model's is converted from it
    // and written beside it (its ids: tests/reference/test_tokenizers.py).
    EXPECT_EQ(tc.at("tokenizer_class"), "PreTrainedTokenizerFast");
    if (sp) {
      const auto tj = test::read_json(dir / "tokenizer.json");
      EXPECT_EQ(tj.at("model").at("type"), "BPE");
      EXPECT_EQ(tj.at("model").at("vocab").size(), static_cast<size_t>(tok->vocab_size()));
      EXPECT_FALSE(tj.at("model").at("merges").empty());
      EXPECT_EQ(tj.at("normalizer").at("normalizers").at(0).at("type"), "Precompiled");
      EXPECT_EQ(tj.at("post_processor").at("single").at(0).at("SpecialToken").at("id"), "<s>");
    }
    EXPECT_EQ(tc.at("model_max_length"), cfg.max_position_embeddings);
    if (!sp) {
      EXPECT_EQ(tc.at("bos_token"), "<|begin_of_text|>");
      EXPECT_EQ(tc.at("eos_token"), "<|end_of_text|>");
    } else {
      EXPECT_TRUE(tc.contains("bos_token") && tc.contains("eos_token")) << tc.dump();
    }
    // The copy is the same tokenizer; lmtrain reads a directory's tokenizer.model where the
    // tokenizer.json beside it has a character map (Precompiled) it does not implement.
    auto again = load_tokenizer(dir.string());
    EXPECT_EQ(again->kind(), tok->kind());
    EXPECT_EQ(again->encode("Hello, world! 123"), tok->encode("Hello, world! 123"));
    // A tokenizer with more tokens than the model's vocabulary is refused.
    cfg.vocab_size = tok->vocab_size() - 1;
    cfg.bos_token_id = cfg.eos_token_id = -1;
    auto small = fresh_model(be, cfg);
    test::expect_user_error([&] { save_hf_model(dir.string(), *small, o); },
                            {file, "more than the model's vocab_size"});
  }
}

TEST(SaveHfModel, ReplacesOnlyAPreviousExport) {
  CpuBackend be;
  auto m = fresh_model(be, test::tiny_config("llama"));
  const fs::path dir = test::fresh_dir("replace");
  fs::create_directories(dir);
  save_hf_model(dir.string(), *m, with_dtype(DType::f32));         // an empty directory is fine
  save_hf_model(dir.string() + "/", *m, with_dtype(DType::bf16));  // a previous export
  EXPECT_EQ(test::read_json(dir / "config.json").at("dtype"), "bfloat16");
  std::ofstream(dir / "notes.txt") << "mine";
  test::expect_user_error([&] { save_hf_model(dir.string(), *m, {}); },
                          {dir.string(), "not empty"});
  EXPECT_TRUE(fs::exists(dir / "notes.txt"));
  // A directory of the right file names that lmtrain did not write (an imported model).
  const fs::path other = test::fresh_dir("not_ours");
  fs::create_directories(other);
  std::ofstream(other / "config.json") << "{}";
  SafetensorsWriter w;
  const float x = 1;
  w.add("x", DType::f32, Shape{1}, &x);
  w.write((other / "model.safetensors").string());
  test::expect_user_error([&] { save_hf_model(other.string(), *m, {}); }, {"not empty"});
  const fs::path file = test::temp_dir() / "a_file";
  std::ofstream(file) << "x";
  test::expect_user_error([&] { save_hf_model(file.string(), *m, {}); }, {"not a directory"});
}

TEST(SaveHfModel, TensorsMustMatchTheConfig) {
  const ModelConfig cfg = test::tiny_config("llama");
  std::vector<ParamInfo> layout = param_layout(cfg);
  std::vector<float> data(1 << 20);
  std::vector<HfTensor> tensors;
  for (const ParamInfo& p : layout) tensors.push_back({p.name, p.shape, data.data()});
  const std::string dir = test::fresh_dir("mismatch").string();
  auto missing = tensors;
  missing.pop_back();
  test::expect_user_error([&] { save_hf_model(dir, cfg, missing, {}); },
                          {layout.back().name, "missing"});
  auto wrong = tensors;
  wrong[1].shape = Shape{3, 3};
  test::expect_user_error([&] { save_hf_model(dir, cfg, wrong, {}); }, {layout[1].name, "[3, 3]"});
  auto extra = tensors;
  extra.push_back({"model.layers.9.mlp.up_proj.weight", Shape{1}, data.data()});
  test::expect_user_error([&] { save_hf_model(dir, cfg, extra, {}); },
                          {"model.layers.9.mlp.up_proj.weight", "not a parameter"});
  EXPECT_FALSE(fs::exists(dir));
}

TEST(SaveHfModel, ParsesSizesAndDtypes) {
  EXPECT_EQ(parse_byte_size("5GB", "s"), 5'000'000'000ull);
  EXPECT_EQ(parse_byte_size("500MB", "s"), 500'000'000ull);
  EXPECT_EQ(parse_byte_size("2GiB", "s"), 2ull << 30);
  EXPECT_EQ(parse_byte_size("1.5kb", "s"), 1500ull);
  EXPECT_EQ(parse_byte_size("123456", "s"), 123456ull);
  for (const char* bad : {"", "GB", "5XB", "-1GB", "1e9", "5 G B"})
    test::expect_user_error([&] { parse_byte_size(bad, "--max-shard-size"); },
                            {"--max-shard-size", "is not a size"});
  test::expect_user_error([&] { parse_byte_size("0", "--max-shard-size"); }, {"at least 1 byte"});
  for (const std::string& huge : {std::string("99999999999999999999999GB"),
                                  std::string("1000000TiB"), "1" + std::string(400, '0') + "B"})
    test::expect_user_error([&] { parse_byte_size(huge, "--max-shard-size"); },
                            {"--max-shard-size", "too large"});
  EXPECT_EQ(parse_export_dtype("bfloat16", "d"), DType::bf16);
  EXPECT_EQ(parse_export_dtype("f16", "d"), DType::f16);
  test::expect_user_error([&] { parse_export_dtype("f64", "--dtype"); }, {"--dtype", "'f64'"});
}

}  // namespace
}  // namespace lmt
