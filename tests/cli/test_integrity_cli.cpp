// What lmtrain read back must be what it wrote: a damaged checkpoint file is named, with the
// newest intact checkpoint, by every command that reads it (train --resume, export, generate), and
// never loaded in its place without being asked; a value out of its domain (a negative second
// moment) is named too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "core/output_lock.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;

class Integrity : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lmtrain_integrity_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "data.txt") << "first document\n%\nsecond one, a little longer\n%\n"
                                        "third document here\n%\nfourth\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A tiny run saving at steps 2 and 4.
  std::string config() {
    const fs::path p = dir_ / "run.yaml";
    std::ofstream f(p);
    f << "model:\n  vocab_size: 257\n  hidden_size: 16\n  intermediate_size: 24\n"
         "  num_hidden_layers: 1\n  num_attention_heads: 2\n  max_position_embeddings: 64\n"
         "data:\n  sources:\n    - path: "
      << (dir_ / "data.txt").string()
      << "\n  seq_len: 8\n  val_fraction: 0.0\n"
         "train:\n  max_steps: 4\n  micro_batch_size: 2\n  eval_every: 0\n  eval_steps: 0\n"
         "  log_every: 1\n  save_every: 2\n  keep_last: 0\n  out_dir: "
      << out().string() << "\n";
    return p.string();
  }
  fs::path out() const { return dir_ / "out"; }
  fs::path step(int s) const { return out() / "checkpoints" / ("step_000000" + std::to_string(s)); }

  fs::path dir_;
};

// The byte offset of the data of tensor `name` in a safetensors file.
uint64_t data_offset(const fs::path& file, const std::string& name) {
  std::ifstream in(file, std::ios::binary);
  uint64_t header = 0;
  in.read(reinterpret_cast<char*>(&header), 8);
  return 8 + header + lmt::SafetensorsFile::open(file.string()).meta(name).begin;
}

void flip_bit(const fs::path& file, uint64_t offset, int bit) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ (1 << bit));
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

void expect_named(const Result& r, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("lmtrain: error: "), std::string::npos) << r.out;
  for (const std::string& p : parts)
    EXPECT_NE(r.out.find(p), std::string::npos) << p << "\n" << r.out;
}

// One flipped exponent bit in a weight (0.0x becomes ~1e37, a finite value): resume, export and
// generate name the file and the newest intact checkpoint, and load nothing.
TEST_F(Integrity, AFlippedBitIsNamedByEveryCommandThatReadsIt) {
  const std::string cfg = config();
  ASSERT_EQ(run("train --config " + cfg).code, 0);
  const fs::path weights = step(4) / "model.safetensors";
  flip_bit(weights, data_offset(weights, "model.norm.weight") + 3, 6);  // f32 exponent's top bit
  const std::vector<std::string> named = {
      "checkpoint '" + step(4).string() + "' is damaged",
      "model.safetensors does not match its checksum",
      "the newest intact checkpoint of this run is step_0000002", "--resume step_0000002"};
  expect_named(run("train --config " + cfg + " --resume --set train.max_steps=6"), named);
  const fs::path exported = dir_ / "exported";
  expect_named(run("export --checkpoint " + out().string() + " --out " + exported.string()), named);
  EXPECT_FALSE(fs::exists(exported));
  expect_named(run("export --format gguf --checkpoint " + step(4).string() + " --out " +
                   (dir_ / "m.gguf").string()),
               named);
  expect_named(run("generate --model " + step(4).string() + " --prompt a --max-new-tokens 2"),
               named);
  // The run's own choice of the intact one resumes.
  const Result r = run("train --config " + cfg + " --resume step_0000002");
  EXPECT_EQ(r.code, 0) << r.out;
}

// A low mantissa bit of the optimizer's state (a value off by one part in 10^7) is named too.
TEST_F(Integrity, ALowBitOfTheOptimizerStateIsNamed) {
  const std::string cfg = config();
  ASSERT_EQ(run("train --config " + cfg).code, 0);
  const fs::path opt = step(4) / "optimizer.safetensors";
  flip_bit(opt, data_offset(opt, "exp_avg.model.norm.weight"), 0);
  expect_named(run("train --config " + cfg + " --resume --set train.max_steps=6"),
               {"checkpoint '" + step(4).string() + "' is damaged",
                "optimizer.safetensors does not match its checksum"});
}

// A second moment that is negative cannot come from training: named, even with a checksum
// recorded over it (a damage from before the checksum, or a hand edit).
TEST_F(Integrity, ANegativeSecondMomentIsNamed) {
  const std::string cfg = config();
  ASSERT_EQ(run("train --config " + cfg).code, 0);
  const fs::path opt = step(4) / "optimizer.safetensors";
  const uint64_t at = data_offset(opt, "exp_avg_sq.model.norm.weight");
  flip_bit(opt, at + 3, 7);  // the sign bit of the first element
  lmt::test::reseal_checksums(step(4));
  expect_named(run("train --config " + cfg + " --resume --set train.max_steps=6"),
               {step(4).string() + "/optimizer.safetensors",
                "exp_avg_sq of model.norm.weight holds a negative value"});
}

// A checkpoint lmtrain wrote is refused without its checksums.json or with a file it does not list
// (a Hugging Face directory another tool wrote, with neither state.json nor checksums.json, loads
// as before: the fixtures of tests/data/hf).
TEST_F(Integrity, AChecksumListingMustCoverTheCheckpoint) {
  const std::string cfg = config();
  ASSERT_EQ(run("train --config " + cfg).code, 0);
  std::ofstream(step(4) / "notes.txt") << "added by hand\n";
  expect_named(run("generate --model " + step(4).string() + " --prompt a --max-new-tokens 2"),
               {"'notes.txt' is not listed in checksums.json"});
  fs::remove(step(4) / "notes.txt");
  fs::remove(step(4) / "checksums.json");
  expect_named(run("train --config " + cfg + " --resume --set train.max_steps=6"),
               {"checksums.json is missing",
                "the newest intact checkpoint of this run is "
                "step_0000002"});
}

}  // namespace

namespace {

// Prepares the run's data into a store of its own (data.store), as a user would.
std::string prepared(const std::string& cfg, const fs::path& store) {
  const Result p = run("prepare --quiet --config " + cfg + " --out " + store.string());
  EXPECT_EQ(p.code, 0) << p.out;
  return " --set data.store=" + store.string();
}

// A store prepared again from other data at the same path is not the data a checkpoint trained
// on: the resume is refused, naming both, unless the user says it is meant.
TEST_F(Integrity, AResumeOnOtherDataIsRefusedUnlessAllowed) {
  const std::string cfg = config();
  const fs::path store = dir_ / "store";
  const std::string use = prepared(cfg, store);
  ASSERT_EQ(run("train --config " + cfg + use).code, 0);
  // The same lengths in other letters: the same samples, other tokens.
  std::ofstream(dir_ / "data.txt", std::ios::trunc)
      << "FIRST DOCUMENT\n%\nSECOND ONE, A LITTLE LONGER\n%\nTHIRD DOCUMENT HERE\n%\nFOURTH\n";
  prepared(cfg, store);
  const std::string resume = "train --config " + cfg + use + " --resume --set train.max_steps=6";
  expect_named(run(resume), {"checkpoint " + step(4).string() + " cannot continue on this data",
                             "token store '" + store.string(), "--allow-data-change"});
  const Result r = run(resume + " --allow-data-change");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("note: continuing on other data (--allow-data-change)"), std::string::npos)
      << r.out;
}

// A shard changed after prepare (here one byte of its tokens) is named when a run opens it and by
// `lmtrain check`, which also checks a run's checkpoints.
TEST_F(Integrity, AChangedShardIsNamedAtOpenAndByCheck) {
  const std::string cfg = config();
  const fs::path store = dir_ / "store";
  const std::string use = prepared(cfg, store);
  ASSERT_EQ(run("train --config " + cfg + use).code, 0);
  const Result good = run("check " + store.string() + " " + out().string());
  EXPECT_EQ(good.code, 0) << good.out;
  EXPECT_NE(good.out.find("ok       checkpoint " + step(4).string()), std::string::npos)
      << good.out;
  EXPECT_NE(good.out.find("ok       token store " + store.string()), std::string::npos) << good.out;
  flip_bit(store / "train-00000.bin", 3, 0);
  expect_named(run("train --config " + cfg + use + " --resume --set train.max_steps=6"),
               {(store / "train-00000.bin").string() + "' is not the file prepare wrote"});
  const Result bad = run("check " + store.string());
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("DAMAGED  token store " + store.string()), std::string::npos) << bad.out;
  flip_bit(step(2) / "config.json", 3, 0);
  const Result ck = run("check " + out().string());
  EXPECT_EQ(ck.code, 2) << ck.out;
  EXPECT_NE(ck.out.find("DAMAGED  checkpoint " + step(2).string()), std::string::npos) << ck.out;
  EXPECT_NE(ck.out.find("ok       checkpoint " + step(4).string()), std::string::npos) << ck.out;
}

}  // namespace

namespace {

// A signal while the run evaluates (here an evaluation of a million batches, hours long) stops it
// within seconds, exiting 128 + the signal, with the checkpoint of the last finished step; at the
// end of a run that checkpoint is written before the final evaluation begins.
void stop_during_evaluation(const fs::path& dir, const std::string& cfg, bool final_eval,
                            const char* sig, int code) {
  SCOPED_TRACE(std::string(sig) + (final_eval ? " during the final evaluation" : " mid-run"));
  fs::remove_all(dir / "out");
  const std::string sets =
      final_eval ? " --set train.max_steps=1"
                 : " --set train.max_steps=1000 --set train.eval_every=1 --set train.save_every=0";
  // The final evaluation starts once the checkpoint is there; a mid-run one once step 1 is logged.
  const std::string ready = final_eval ? (dir / "out/checkpoints/step_0000001/state.json").string()
                                       : (dir / "out/metrics.jsonl").string();
  const Result r =
      run_shell("(" + std::string(LMT_BINARY) + " train --config " + cfg + sets +
                " --set train.eval_steps=1000000 > " + (dir / "log").string() +
                " 2>&1 & pid=$!; for i in $(seq 600); do [ -s " + ready +
                " ] && break; sleep 0.05; done; sleep 0.5; start=$(date +%s%N); kill -" + sig +
                " $pid; wait $pid; echo rc=$?; echo ms=$(( ($(date +%s%N) - start) / 1000000 )))");
  EXPECT_NE(r.out.find("rc=" + std::to_string(code)), std::string::npos) << r.out;
  const size_t at = r.out.find("ms=");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_LT(std::stoi(r.out.substr(at + 3)), 5000) << r.out;
  EXPECT_TRUE(fs::exists(dir / "out/checkpoints/step_0000001/checksums.json")) << r.out;
  std::ifstream log(dir / "log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("stopped at step 1 on a signal"), std::string::npos) << text;
}

TEST_F(Integrity, SignalsDuringEvaluationStopWithTheLastStepsCheckpoint) {
  {
    std::ofstream f(dir_ / "data.txt", std::ios::trunc);
    for (int i = 0; i < 200; ++i) f << "document number " << i << " of the evaluation test\n%\n";
  }
  const std::string cfg = config() + " --set data.val_fraction=0.25";
  stop_during_evaluation(dir_, cfg, true, "TERM", 143);
  stop_during_evaluation(dir_, cfg, true, "HUP", 129);
  stop_during_evaluation(dir_, cfg, false, "TERM", 143);
  stop_during_evaluation(dir_, cfg, false, "INT", 130);
}

}  // namespace

namespace {

// The run directory deleted under a running train: the run stops at its next step with a message
// naming it, instead of training on into nothing (and leaving the directory to a second writer).
TEST_F(Integrity, ARunDirectoryDeletedMidRunStopsTheRun) {
  const std::string cfg = config() + " --set train.max_steps=1000000 --set train.save_every=0";
  const Result r = run_shell(
      "(" + std::string(LMT_BINARY) + " train --config " + cfg + " > " + (dir_ / "log").string() +
      " 2>&1 & pid=$!; for i in $(seq 600); do [ -s " + (out() / "metrics.jsonl").string() +
      " ] && break; sleep 0.05; done; rm -rf " + out().string() + "; wait $pid; echo rc=$?)");
  EXPECT_NE(r.out.find("rc=2"), std::string::npos) << r.out;
  std::ifstream log(dir_ / "log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("lmtrain: error: train.out_dir: '" + out().string() +
                      "' was deleted or replaced while this process was writing to it"),
            std::string::npos)
      << text;
}

// Two writers of one output: the second prepare or export is refused, naming the output and the
// first's pid; what killed writers left beside an output (OUT.tmp-PID of a dead PID) is removed by
// the next writer.
TEST_F(Integrity, OneWriterPerOutputAndLeftoversOfDeadWritersAreRemoved) {
  const std::string cfg = config();
  ASSERT_EQ(run("train --config " + cfg).code, 0);
  const std::string pid = "(pid " + std::to_string(::getpid()) + ")";
  const fs::path store = dir_ / "store", exported = dir_ / "exported";
  {
    const lmt::OutputLock held = lmt::lock_output_path(store.string(), "data.store");
    expect_named(
        run("prepare --quiet --config " + cfg + " --out " + store.string()),
        {"data.store: '" + store.string() + "' is in use by another lmtrain process " + pid});
  }
  {
    const lmt::OutputLock held = lmt::lock_output_path(exported.string(), "--out");
    expect_named(
        run("export --checkpoint " + out().string() + " --out " + exported.string()),
        {"--out: '" + exported.string() + "' is in use by another lmtrain process " + pid});
  }
  // A dead export's temporary directory (pid 999999999 is beyond any pid_max).
  fs::create_directories(dir_ / "exported.tmp-999999999");
  std::ofstream(dir_ / "exported.tmp-999999999" / "model.safetensors") << "half written";
  const Result e = run("export --checkpoint " + out().string() + " --out " + exported.string());
  EXPECT_EQ(e.code, 0) << e.out;
  EXPECT_FALSE(fs::exists(dir_ / "exported.tmp-999999999"));
  EXPECT_FALSE(fs::exists(dir_ / ".exported.lock"));  // the lock file goes with its writer
}

}  // namespace

namespace {

// A store truncated under a running train (here by a test hook, in the middle of a read: after the
// range is found and before it is copied) is one message naming the file and exit 2, not
// "Bus error"; the run's checkpoints stay intact.
TEST_F(Integrity, AStoreTruncatedMidReadIsANamedError) {
  const std::string cfg = config();
  const fs::path store = dir_ / "store";
  const std::string use = prepared(cfg, store);
  ASSERT_EQ(run("train --config " + cfg + use).code, 0);
  const fs::path bin = store / "train-00000.bin";
  const Result r =
      capture("LMT_TEST_TRUNCATE_DURING_READ=" + bin.string() + " " + std::string(LMT_BINARY) +
              " train --config " + cfg + use + " --resume --set train.max_steps=6");
  expect_named(r, {"'" + bin.string() + "' was truncated while lmtrain was reading it"});
  EXPECT_EQ(fs::file_size(bin), 0u);  // the hook did truncate it
  const Result ck = run("check " + out().string());
  EXPECT_EQ(ck.code, 0) << ck.out;
}

}  // namespace

namespace {

// A prepare input truncated while prepare reads it (through a hook, once the first 4 MiB are read
// and handed back): a named error, exit 2, and no store.
TEST_F(Integrity, APrepareInputTruncatedMidReadIsANamedError) {
  const fs::path data = dir_ / "data.txt";
  const size_t bytes = size_t{24} << 20;
  {
    std::ofstream f(data);
    const std::string doc = std::string(200, 'a') + " lorem ipsum\n%\n";
    for (size_t n = 0; n < bytes / doc.size(); ++n) f << doc;
  }
  const fs::path store = dir_ / "store";
  const Result r =
      capture("LMT_TEST_TRUNCATE_INPUT=" + data.string() + " " + std::string(LMT_BINARY) +
              " prepare --quiet --config " + config() + " --out " + store.string());
  expect_named(r, {"'" + data.string() + "' was truncated while lmtrain was reading it"});
  EXPECT_LT(fs::file_size(data), bytes / 2);  // the hook did truncate it
  EXPECT_FALSE(fs::exists(store / "manifest.json"));
}

// A store's tokens zeroed in place under a running train (same size, same file) stop the run at
// its next step, naming the file, instead of training on zeros.
TEST_F(Integrity, AStoreWrittenToUnderARunningTrainStopsIt) {
  const std::string cfg = config() + " --set train.max_steps=1000000 --set train.save_every=0";
  const fs::path store = dir_ / "store";
  const std::string use = prepared(config(), store);
  const fs::path bin = store / "train-00000.bin";
  const Result r =
      run_shell("(" + std::string(LMT_BINARY) + " train --config " + cfg + use + " > " +
                (dir_ / "log").string() + " 2>&1 & pid=$!; for i in $(seq 600); do [ -s " +
                (out() / "metrics.jsonl").string() + " ] && break; sleep 0.05; done; sleep 0.2; " +
                "dd if=/dev/zero of=" + bin.string() + " bs=$(stat -c %s " + bin.string() +
                ") count=1 conv=notrunc 2>/dev/null; wait $pid; echo rc=$?)");
  EXPECT_NE(r.out.find("rc=2"), std::string::npos) << r.out;
  std::ifstream log(dir_ / "log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("lmtrain: error: token store: '" + bin.string() +
                      "': changed while this run was reading it"),
            std::string::npos)
      << text;
}

}  // namespace

namespace {

// Paths are bytes: under a directory whose name is not UTF-8 (byte 0xFF), with the tokenizer there
// too, prepare, train, resume, export and check work as anywhere else.
TEST_F(Integrity, NonUtf8PathsWorkThroughPrepareTrainAndExport) {
  const fs::path odd = dir_ / std::string("d\xff\xfex");
  fs::create_directories(odd);
  fs::copy_file(dir_ / "data.txt", odd / "data.txt");
  fs::copy_file(std::string(LMT_TEST_DATA) + "/tokenizers/bytelevel_bpe.json", odd / "tok.json");
  const std::string sets =
      " --set data.sources.0.path=" + (odd / "data.txt").string() +
      " --set data.tokenizer=" + (odd / "tok.json").string() +
      " --set model.vocab_size=704 --set train.out_dir=" + (odd / "out").string();
  const std::string cfg = "'" + config() + "'" + sets;
  const Result p =
      run("prepare --quiet --config " + cfg + " --out '" + (odd / "store").string() + "'");
  ASSERT_EQ(p.code, 0) << p.out;
  const std::string use = " --set 'data.store=" + (odd / "store").string() + "'";
  Result t = run("train --config " + cfg + use);
  ASSERT_EQ(t.code, 0) << t.out;
  t = run("train --config " + cfg + use + " --resume --set train.max_steps=6");
  ASSERT_EQ(t.code, 0) << t.out;
  const Result e = run("export --checkpoint '" + (odd / "out").string() + "' --out '" +
                       (odd / "exported").string() + "'");
  ASSERT_EQ(e.code, 0) << e.out;
  const Result c = run("check '" + (odd / "out").string() + "' '" + (odd / "store").string() +
                       "' '" + (odd / "exported").string() + "'");
  EXPECT_EQ(c.code, 0) << c.out;
}

}  // namespace
