"""TensorBoard event files as TensorBoard itself reads them (EventAccumulator, whose record reader
checks both CRCs of every record): a short real `lmtrain train` run with logging.tensorboard and
evaluations, on a tiny random model and a small generated text corpus.

- every scalar TensorBoard holds (train/loss, train/lr, train/grad_norm, train/tokens_per_s,
  train/mfu, val/loss, val/ppl; memory/rss_gib and memory/rss_peak_gib, metrics.jsonl's bytes in
  GiB) equals metrics.jsonl's value at every step, to float32 rounding,
  and no step is missing or extra;
- the "config" text is config.yaml as a markdown code block, at step 0;
- a file cut short inside its last record (a killed run) still reads, with every earlier record;
- a run resumed from an older checkpoint (its directory then holds two event files, the first with
  steps past the resume point) reads as one series equal to metrics.jsonl, which --resume rewrote
  the same way;
- TensorBoard's plugin view (plugin_event_accumulator, as the dashboards get the data) sees the
  same values, the scalars under the scalars plugin and the config under the text plugin.
"""
import json
import random

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator, plugin_event_accumulator
from tensorboard.util import tensor_util

from conftest import lmtrain
from test_export import random_text

TAGS = {
    "train/loss": "loss",
    "train/lr": "lr",
    "train/grad_norm": "grad_norm",
    "train/tokens_per_s": "tokens_per_s",
    "train/mfu": "mfu",
    "val/loss": "val_loss",
    "val/ppl": "val_ppl",
}
# The memory group, in GiB, from metrics.jsonl's bytes (the CPU backend: the process's only).
MEMORY_TAGS = {
    "memory/rss_gib": "rss_bytes",
    "memory/rss_peak_gib": "rss_peak_bytes",
}
GIB = float(1 << 30)


def scalar_tags():
    """Every scalar tag, the jsonl key it comes from and the factor from that key's value."""
    return [(tag, key, 1.0) for tag, key in TAGS.items()] + [
        (tag, key, 1.0 / GIB) for tag, key in MEMORY_TAGS.items()]


def write_config(tmp_path, rng, seed, max_steps, eval_every, save_every):
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(random_text(rng, rng.randrange(20, 60)) for _ in range(300)))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"""model:
  family: llama
  vocab_size: 260
  hidden_size: {rng.choice([24, 32, 40])}
  intermediate_size: {rng.choice([48, 64, 72])}
  num_hidden_layers: 2
  num_attention_heads: 4
  num_key_value_heads: 2
  max_position_embeddings: 64
data:
  sources:
    - path: {text}
      split: line
  tokenizer: bytes
  seq_len: 32
  val_fraction: 0.1
train:
  max_steps: {max_steps}
  micro_batch_size: 4
  lr: 1.0e-2
  warmup_steps: 2
  eval_every: {eval_every}
  eval_steps: 2
  save_every: {save_every}
  keep_last: 0
  log_every: 1
  seed: {seed}
  threads: 1
  out_dir: {tmp_path / "run"}
logging:
  tensorboard: true
""")
    return cfg


def load(path):
    """Every scalar and tensor, none sampled away (size guidance 0 keeps all)."""
    acc = event_accumulator.EventAccumulator(
        str(path), size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
    acc.Reload()
    return acc


def load_as_plugins(path):
    """As TensorBoard's Python data path serves the dashboards: legacy simple_value summaries
    migrated to the scalars plugin, and the first SessionLog START of a run not taken as a
    restart."""
    acc = plugin_event_accumulator.EventAccumulator(
        str(path), size_guidance={plugin_event_accumulator.TENSORS: 0})
    acc.Reload()
    return acc


def expect_plugin_view_equals_jsonl(acc, lines):
    plugins = {tag: md.plugin_data.plugin_name for tag, md in acc.summary_metadata.items()}
    assert plugins == {**{tag: "scalars" for tag, _, _ in scalar_tags()}, "config": "text"}
    for tag, key, factor in scalar_tags():
        want = [(j["step"], float(np.float32(j[key] * factor))) for j in lines if key in j]
        got = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]
        assert got == want, tag


def jsonl(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def expect_scalars_equal_jsonl(acc, lines):
    assert set(acc.Tags()["scalars"]) == {tag for tag, _, _ in scalar_tags()}
    for tag, key, factor in scalar_tags():
        want = [(j["step"], j[key] * factor) for j in lines if key in j]
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        assert [s for s, _ in got] == [s for s, _ in want], tag
        for (step, value), (_, ref) in zip(got, want):
            assert value == float(np.float32(ref)), f"{tag} at step {step}: {value} vs {ref}"


def event_files(run):
    return sorted((run / "tb").glob("events.out.tfevents.*"))


def test_scalars_config_and_a_truncated_file(tmp_path, seed):
    rng = random.Random(seed)
    cfg = write_config(tmp_path, rng, seed, max_steps=rng.randrange(6, 10), eval_every=3,
                       save_every=0)
    out = lmtrain("train", "--config", cfg).stdout
    run = tmp_path / "run"
    assert "MFU against a measured peak of" in out and "MFU " in out
    files = event_files(run)
    assert len(files) == 1
    lines = jsonl(run)
    acc = load(files[0])
    expect_scalars_equal_jsonl(acc, lines)
    assert all(0 < j["mfu"] < 1 for j in lines if "mfu" in j)
    evals = [j["step"] for j in lines if "val_loss" in j]
    assert len(evals) >= 2 and evals[-1] == lines[-1]["step"]

    config = acc.Tensors("config")
    assert [e.step for e in config] == [0]
    text = config[0].tensor_proto.string_val[0].decode()
    assert text == "```yaml\n" + (run / "config.yaml").read_text() + "```\n"
    assert "tensorboard: true" in text
    expect_plugin_view_equals_jsonl(load_as_plugins(files[0]), lines)

    # A run killed while writing its last record: the reader keeps every record before it.
    data = files[0].read_bytes()
    cut = tmp_path / "cut" / files[0].name
    cut.parent.mkdir()
    cut.write_bytes(data[:-rng.randrange(1, 5)])
    acc_cut = load(cut)
    last = lines[-1]["step"]
    for tag in TAGS:
        full = [(e.step, e.value) for e in acc.Scalars(tag)]
        got = [(e.step, e.value) for e in acc_cut.Scalars(tag)]
        # The last record is the final evaluation: its values are the ones lost.
        want = [x for x in full if x[0] != last] if tag.startswith("val/") else full
        assert got == want, tag
    assert len(acc_cut.Tensors("config")) == 1


def test_a_resumed_run_reads_as_one_series(tmp_path, seed):
    rng = random.Random(seed)
    cfg = write_config(tmp_path, rng, seed, max_steps=8, eval_every=2, save_every=4)
    lmtrain("train", "--config", cfg)
    run = tmp_path / "run"
    first = jsonl(run)
    # Back to step 4: the first file holds steps 5-8 too; the resumed run logs them again.
    lmtrain("train", "--config", cfg, "--resume", "step_0000004")
    files = event_files(run)
    assert len(files) == 2
    lines = jsonl(run)
    assert [j["step"] for j in lines] == [j["step"] for j in first]
    acc = load(run / "tb")  # the directory: its files in name order, as TensorBoard reads a run
    expect_scalars_equal_jsonl(acc, lines)
    expect_plugin_view_equals_jsonl(load_as_plugins(run / "tb"), lines)
    # Exact resume: the repeated steps' losses equal the first run's (the timings differ).
    assert [j.get("loss") for j in lines] == [j.get("loss") for j in first]
    assert [e.step for e in acc.Tensors("config")] == [0]


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v"]))
