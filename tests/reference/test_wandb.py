"""W&B offline runs as W&B's own schema reads them (wandb.proto.wandb_internal_pb2.Record), through
a reader of the record log written here from the format's rules, which is first checked on an
offline run that wandb itself writes (so the reader cannot merely agree with lmtrain):

- wandb's run: every record decodes, its history holds what was logged at each step, and its
  directory layout (offline-run-<time>-<id>/run-<id>.wandb, files/, logs/, latest-run) is the one
  lmtrain makes; the log spans several 32 KiB blocks, so records split across blocks are read;
- a short real `lmtrain train` run with logging.wandb: the run record (id, project, name, tags,
  notes, group, entity and the resolved config, section by section equal to config.yaml), every
  numeric value of metrics.jsonl in the history row of its step (nested ones as a/b/c) and no
  other keys, one row a step in order, a summary holding each key's last value, and the exit
  record (code 0) last;
- a run stopped by SIGTERM ends with exit code 143; its --resume writes a second directory with
  the same run id, marked resumed, that goes on after the checkpoint and ends with code 0.

What this does not check: the upload. `wandb sync` reads these files with W&B's Go reader and
sends them to a W&B server, and no server is reached from here (docs/wandb.md).
"""
import json
import math
import os
import random
import re
import signal
import struct
import subprocess
import sys
import time
import zlib

import yaml
from wandb.proto import wandb_internal_pb2 as pb

from conftest import lmtrain, lmtrain_path


class Yaml12Loader(yaml.SafeLoader):
    """PyYAML follows YAML 1.1, where 1e-05 (no dot) is a string; lmtrain writes YAML 1.2, where it
    is a float. This loader reads floats as YAML 1.2 does."""


Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)"
        r"|\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))


def load_yaml_12(text):
    return yaml.load(text, Loader=Yaml12Loader)
from test_export import random_text

BLOCK = 32 * 1024


def read_records(path):
    """Every record of a .wandb file, checking each chunk's CRC-32 and the block rules."""
    data = path.read_bytes()
    assert data[:7] == b":W&B\xe1\xbe\x00", data[:7]
    pos, pending, inside, records = 7, b"", False, []
    while pos < len(data):
        room = BLOCK - pos % BLOCK
        if room < 7:
            assert data[pos:pos + room] == bytes(room), f"padding at {pos}"
            pos += room
            continue
        crc, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        assert 7 + n <= room, f"a chunk crosses a block at {pos}"
        chunk = data[pos + 7:pos + 7 + n]
        assert len(chunk) == n, f"a chunk cut short at {pos}"
        assert zlib.crc32(bytes([kind]) + chunk) == crc, f"CRC at {pos}"
        assert kind in (1, 2, 3, 4), f"chunk type {kind} at {pos}"
        assert inside == (kind in (3, 4)), f"chunk type {kind} out of order at {pos}"
        pending += chunk
        inside = kind in (2, 3)
        if not inside:
            r = pb.Record()
            r.ParseFromString(pending)
            records.append(r)
            pending = b""
        pos += 7 + n
    assert not inside, "the last record is not complete"
    return records


def kinds(records):
    return [r.WhichOneof("record_type") for r in records]


def item_key(item):
    return item.key or "/".join(item.nested_key)


def history(records):
    """[(step, {key: value})] of the history records, in order."""
    return [(r.history.step.num, {item_key(i): json.loads(i.value_json) for i in r.history.item})
            for r in records if r.HasField("history")]


def summary(records):
    s = {}
    for r in records:
        if r.HasField("summary"):
            s.update({item_key(i): json.loads(i.value_json) for i in r.summary.update})
    return s


def run_dir_of(parent):
    link = parent / "latest-run"
    assert link.is_symlink() and not os.path.isabs(os.readlink(link))
    d = parent / os.readlink(link)
    name = d.name
    assert name.startswith("offline-run-") and name[20] == "_" and name[27] == "-", name
    run_id = name[28:]
    assert (d / "files").is_dir() and (d / "logs").is_dir()
    return d, run_id, d / f"run-{run_id}.wandb"


WANDB_SCRIPT = """
import sys, wandb
run = wandb.init(project="ref", name="wandb-itself", dir=sys.argv[1], config={"a": 1, "b": {"c": "x"}})
for step in range(1, 301):
    run.log({"loss": 1.0 / step, "lr": 0.5, "nested": {"x": step}}, step=step)
run.finish(exit_code=0)
"""


def test_the_reader_reads_an_offline_run_that_wandb_writes(tmp_path):
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true",
           "WANDB_CONFIG_DIR": str(tmp_path / "cfg"), "WANDB_CACHE_DIR": str(tmp_path / "cache"),
           "WANDB_DATA_DIR": str(tmp_path / "data"), "WANDB_DISABLE_GIT": "true"}
    subprocess.run([sys.executable, "-c", WANDB_SCRIPT, str(tmp_path)], env=env, check=True,
                   timeout=300)
    d, run_id, path = run_dir_of(tmp_path / "wandb")
    assert path.stat().st_size > 2 * BLOCK  # records split across blocks
    records = read_records(path)
    assert kinds(records)[0] == "header" and kinds(records)[-1] == "exit"
    assert records[-1].exit.exit_code == 0
    run = next(r.run for r in records if r.HasField("run"))
    assert run.run_id == run_id and run.project == "ref" and run.display_name == "wandb-itself"
    config = {i.key: json.loads(i.value_json) for i in run.config.update}
    assert config["a"] == 1 and config["b"] == {"c": "x"}
    rows = history(records)
    assert [s for s, _ in rows] == list(range(1, 301))
    for step, row in rows:
        assert row["loss"] == 1.0 / step and row["lr"] == 0.5 and row["_step"] == step
        assert row.get("nested/x", row.get("nested")) in (step, {"x": step})
    assert summary(records)["loss"] == 1.0 / 300


def write_config(tmp_path, rng, seed, max_steps, save_every, wandb):
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(random_text(rng, rng.randrange(20, 60)) for _ in range(300)))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"""model:
  family: llama
  vocab_size: 260
  hidden_size: 24
  intermediate_size: 48
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
  eval_every: 2
  eval_steps: 1
  save_every: {save_every}
  keep_last: 0
  log_every: 1
  seed: {seed}
  threads: 1
  out_dir: {tmp_path / "run"}
logging:
  wandb: {wandb}
""")
    return cfg


def flatten(j, prefix=""):
    """The numeric and boolean leaves of a metrics.jsonl line, keys joined with '/'."""
    out = {}
    for k, v in j.items():
        key = prefix + k
        if isinstance(v, dict):
            out.update(flatten(v, key + "/"))
        elif isinstance(v, (int, float)):
            out[key] = v
    return out


def expect_history_equals_jsonl(records, lines):
    want = {}
    for j in lines:
        want.setdefault(j["step"], {}).update(flatten(j))
    rows = history(records)
    assert [s for s, _ in rows] == sorted(want), "one row a step, in order"
    for step, row in rows:
        assert row.pop("_step") == step
        assert row.pop("_runtime") >= 0 and row.pop("_timestamp") > 1.6e9
        want[step].pop("step")
        assert row == want[step], f"step {step}"
    last = {}
    for step in sorted(want):
        last.update(want[step])
    got = summary(records)
    assert {k: v for k, v in got.items() if not k.startswith("_")} == last
    assert got["_step"] == rows[-1][0]


def jsonl(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_an_lmtrain_run_holds_config_metrics_summary_and_exit(tmp_path, seed):
    rng = random.Random(seed)
    cfg = write_config(tmp_path, rng, seed, max_steps=rng.randrange(4, 7), save_every=0,
                       wandb="{project: lmt-test, name: tiny, entity: team, group: g, "
                             "notes: 'a note', tags: [a, b]}")
    out = lmtrain("train", "--config", cfg).stdout
    run = tmp_path / "run"
    d, run_id, path = run_dir_of(run / "wandb")
    assert f"wandb: {d}" in out and f"wandb sync {d}" in out
    records = read_records(path)
    assert kinds(records)[:2] == ["header", "run"]
    assert kinds(records)[-1] == "exit" and records[-1].exit.exit_code == 0
    assert all(r.num == i + 1 for i, r in enumerate(records))
    r = records[1].run
    assert (r.run_id, r.project, r.display_name, r.entity, r.run_group, r.notes, list(r.tags)) == (
        run_id, "lmt-test", "tiny", "team", "g", "a note", ["a", "b"])
    assert len(run_id) == 8 and not r.resumed and r.start_time.seconds > 1.6e9
    config = {i.key: json.loads(i.value_json) for i in r.config.update}
    assert config == load_yaml_12((run / "config.yaml").read_text())
    lines = jsonl(run)
    assert any("val_loss" in j for j in lines)
    expect_history_equals_jsonl(records, lines)


def test_a_stopped_run_and_its_resume(tmp_path, seed):
    rng = random.Random(seed)
    cfg = write_config(tmp_path, rng, seed, max_steps=400, save_every=2, wandb="{project: p}")
    run = tmp_path / "run"
    p = subprocess.Popen([lmtrain_path(), "train", "--config", str(cfg)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (
                (run / "metrics.jsonl").exists() and len(jsonl(run)) >= 3):
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=120) == 128 + signal.SIGTERM, p.stderr.read()
    finally:
        p.kill()
    first_dir, run_id, path = run_dir_of(run / "wandb")
    first = read_records(path)
    assert kinds(first)[-1] == "exit" and first[-1].exit.exit_code == 128 + signal.SIGTERM
    expect_history_equals_jsonl(first, jsonl(run))
    stopped_at = history(first)[-1][0]

    lmtrain("train", "--config", cfg, "--resume", "--set", "train.max_steps=" + str(stopped_at + 3))
    d, resumed_id, path = run_dir_of(run / "wandb")
    assert resumed_id == run_id and d != first_dir and d.name > first_dir.name
    records = read_records(path)
    assert records[1].run.resumed and records[1].run.run_id == run_id
    assert kinds(records)[-1] == "exit" and records[-1].exit.exit_code == 0
    checkpoint = stopped_at  # a signal's checkpoint is of the last finished step, logged last
    assert (run / "checkpoints" / f"step_{checkpoint:07d}").is_dir()
    lines = [j for j in jsonl(run) if j["step"] > checkpoint]
    expect_history_equals_jsonl(records, lines)


if __name__ == "__main__":
    import pytest
    raise SystemExit(pytest.main([__file__, "-v"]))
