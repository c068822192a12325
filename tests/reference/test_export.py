"""`lmtrain export` checked with transformers, per family: what a user gets from init, a few
training steps and an export must load with AutoModelForCausalLM / AutoTokenizer and compute what
lmtrain computes.

For each family, from the test's seed: `lmtrain init` makes a small model of a random shape (odd
sizes, weights large enough that soft-capping acts, windows shorter than the text) with a
tokenizer (SentencePiece for llama and gemma*, a tokenizer.json for the others); `lmtrain train`
fine-tunes it a few steps (train.init_from) on a text this test writes, so the export holds trained
weights; `lmtrain export` writes it as f32 and as bf16, both in several shards. Then, per export:
- AutoTokenizer's ids of a random text equal `lmtrain tokenize --add-special`'s (for a
  tokenizer.json with runs of spaces, tabs and newlines; see the note at random_text's call);
- transformers' logits and loss (float32, eager attention; a bf16 export computed in float32 on
  its bf16 weights) equal `lmtrain logits`' on the same export: max|diff| / max|ref| < 1e-4, loss
  relative < 1e-5; the bf16 export's logits stay within 5e-2 of the f32 export's;
- greedy generation (transformers' generate, do_sample=False, end-of-sequence not stopping) and
  `lmtrain generate --temperature 0 --ignore-eos --prompt-ids ... --json` give the same 32 new
  tokens. Where they differ, the test passes only when, at the first differing step, transformers'
  logits of the two candidates are within the logits tolerance (a near-tie, reported); the tokens
  after it cannot be compared.
Each export prints one line of measured errors.
"""
import json
import random
import struct

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from conftest import DATA, lmtrain

FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gpt2"]
LOGITS_TOL = 1e-4  # max |diff| / max |ref|
LOSS_TOL = 1e-5  # relative
BF16_VS_F32_TOL = 5e-2  # bf16 rounding of every weight (2^-9 relative) moves the logits this far
NEW_TOKENS = 32
WORDS = ("the a model trains on text and learns which token comes next from what came before it "
         "weights gradients loss step layer attention window head norm cat dog river sun book "
         "night park tree sea warm quick brown fox jumps over lazy").split()


def random_text(rng, n_words, odd_spaces=False):
    """Words with punctuation and numbers; with odd_spaces, some separators are runs of spaces,
    tabs or newlines and some words are not ASCII."""
    words = []
    for i in range(n_words):
        w = rng.choice(WORDS)
        if i == 0 or words[-1].endswith("."):
            w = w.capitalize()
        r = rng.random()
        if r < 0.08:
            w += "."
        elif r < 0.14:
            w += ","
        elif r < 0.18:
            w = str(rng.randrange(1000))
        elif odd_spaces and r < 0.24:
            w = rng.choice(["café", "naïve", "straße", "東京", "🙂", "—"])
        words.append(w)
    # Always a number of several digits (pre-tokenizers split digits differently: transformers 5
    # once gave a qwen2 export other ids for "42"); with odd_spaces also code, other scripts and
    # an emoji.
    words.insert(rng.randrange(len(words) + 1), str(rng.randrange(10, 100000)))
    if odd_spaces:
        for extra in (rng.choice(["f(x)=x**2;", "a[i]+=b[j]->c", "if(x){return;}"]),
                      rng.choice(["東京", "Привет", "مرحبا", "ελληνικά"]), "🙂"):
            words.insert(rng.randrange(len(words) + 1), extra)
    if not odd_spaces:
        return " ".join(words) + "."
    seps = [rng.choice([" ", " ", " ", "  ", "\t", "\n", " \n "]) for _ in words]
    return "".join(w + sep for w, sep in zip(words, seps)).rstrip() + "."


def model_shape(rng, family):
    """--set arguments of a small random model: odd widths, 2-4 layers, grouped-query heads."""
    heads = rng.choice([2, 4])
    head_dim = rng.choice([8, 12, 16])
    hidden = heads * head_dim if family == "gpt2" else rng.choice([24, 40, 56])
    kv = 0 if family == "gpt2" else rng.choice([k for k in (1, 2, 4) if heads % k == 0])
    s = {
        "hidden_size": hidden,
        "intermediate_size": rng.randrange(33, 97, 2),
        "num_hidden_layers": rng.randint(2, 4),
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "max_position_embeddings": 128,
        "initializer_range": round(rng.uniform(0.06, 0.12), 3),
    }
    if family != "gpt2":
        s["head_dim"] = head_dim
    if family in ("llama", "mistral", "qwen2", "qwen3"):
        s["tie_word_embeddings"] = rng.choice(["true", "false"])
    if family in ("mistral", "gemma2", "gemma3"):
        s["sliding_window"] = rng.randint(4, 9)
    if family == "gemma3":
        s["sliding_window_pattern"] = rng.choice([2, 3])  # some layers global, some windowed
    if family in ("gemma2", "gemma3"):
        s["query_pre_attn_scalar"] = rng.choice([head_dim, 2 * head_dim, 3 * head_dim])
    # Caps near the logits' and scores' size (a few units), so that they bend them. gemma3 has
    # no attention cap (transformers' Gemma3 ignores attn_logit_softcapping; export refuses it).
    if family == "gemma2" or (family == "gemma3" and rng.random() < 0.5):
        s["final_logit_softcapping"] = round(rng.uniform(2.0, 5.0), 2)
    if family == "gemma2":
        s["attn_logit_softcapping"] = round(rng.uniform(1.0, 3.0), 2)
    return s


def tokenizer_file(family):
    sentencepiece = family == "llama" or family.startswith("gemma")
    return DATA / "tokenizers" / ("sp_bpe.model" if sentencepiece else "llama3_style_bpe.json")


def train_config(path, init_dir, text_file, out_dir, seed, lr=1e-2, extra=""):
    """A few training steps from init_dir on text_file; `extra`: more YAML sections."""
    path.write_text(f"""data:
  sources:
    - path: {text_file}
      split: line
  seq_len: 32
  val_fraction: 0.0
train:
  init_from: {init_dir}
  max_steps: 4
  micro_batch_size: 4
  lr: {lr}
  schedule: constant
  warmup_steps: 0
  eval_every: 0
  save_every: 0
  log_every: 1
  seed: {seed}
  threads: 1
  out_dir: {out_dir}
logging:
  jsonl: false
""" + extra)


def safetensors_dtypes(path):
    """Every tensor's dtype as the file's header names it (F32, BF16, ...)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return {k: v["dtype"] for k, v in header.items() if k != "__metadata__"}


def shard_files(export_dir):
    index = json.loads((export_dir / "model.safetensors.index.json").read_text())
    return sorted(set(index["weight_map"].values()))


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def lmtrain_logits(export_dir, ids_file, out):
    loss = json.loads(lmtrain("logits", "--model", export_dir, "--ids-file", ids_file, "--out", out,
                              "--threads", 1).stdout)["loss"]
    return load_file(out)["logits"], loss


def lmtrain_greedy(export_dir, prompt):
    out = lmtrain("generate", "--model", export_dir, "--prompt-ids", json.dumps(prompt),
                  "--max-new-tokens", NEW_TOKENS, "--temperature", 0, "--ignore-eos", "--json",
                  "--threads", 1).stdout
    j = json.loads(out)
    assert j["prompt_ids"] == prompt, out
    return j["ids"]


def hf_greedy(model, prompt):
    model.generation_config.eos_token_id = None  # as --ignore-eos: exactly NEW_TOKENS tokens
    model.generation_config.pad_token_id = 0
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False)
    return out[0, len(prompt):].tolist()


def compare_greedy(model, prompt, hf_ids, lm_ids):
    """'same', or a near-tie at the first differing step (gap within the logits tolerance); any
    other difference fails."""
    assert len(hf_ids) == NEW_TOKENS, hf_ids
    assert len(lm_ids) == NEW_TOKENS, lm_ids
    if hf_ids == lm_ids:
        return "same"
    k = next(i for i, (a, b) in enumerate(zip(hf_ids, lm_ids)) if a != b)
    with torch.no_grad():
        row = model(input_ids=torch.tensor([prompt + hf_ids[:k]])).logits[0, -1]
    gap = (row[hf_ids[k]] - row[lm_ids[k]]).abs().item()
    bound = LOGITS_TOL * row.abs().max().item()
    assert gap <= bound, (
        f"greedy generation differs at new token {k}: transformers {hf_ids[k]}, lmtrain "
        f"{lm_ids[k]}, whose logits in transformers are {gap:.3e} apart (> {bound:.3e}, not a tie)"
        f"\ntransformers {hf_ids}\nlmtrain      {lm_ids}")
    return f"near-tie at token {k} (gap {gap:.1e} <= {bound:.1e})"


@pytest.mark.parametrize("family", FAMILIES)
def test_export_loads_and_matches_transformers(family, seed, tmp_path, capsys):
    rng = random.Random(seed)
    tok = tokenizer_file(family)
    shape = model_shape(rng, family)
    sets = [a for k, v in shape.items() for a in ("--set", f"model.{k}={v}")]
    with capsys.disabled():
        print(f"\n[{family}] seed {seed}, shape {shape}")
    init = tmp_path / "init"
    lmtrain("init", "--family", family, *sets, "--tokenizer", tok, "--seed", seed, "--out", init)

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(random_text(rng, rng.randint(8, 20)) for _ in range(64)) + "\n")
    config = tmp_path / "train.yaml"
    train_config(config, init, corpus, tmp_path / "run", seed)
    lmtrain("train", "--config", config)

    exports = {}
    f32_bytes = (init / "model.safetensors").stat().st_size
    for dtype, shard_bytes in (("f32", f32_bytes // 6), ("bf16", f32_bytes // 12)):
        exports[dtype] = tmp_path / dtype
        lmtrain("export", "--checkpoint", tmp_path / "run", "--out", exports[dtype],
                "--dtype", dtype, "--max-shard-size", shard_bytes)
        shards = shard_files(exports[dtype])
        assert len(shards) >= 2, f"{dtype}: expected several shards, got {shards}"
        want = {"f32": "F32", "bf16": "BF16"}[dtype]
        for s in shards:
            got = set(safetensors_dtypes(exports[dtype] / s).values())
            assert got == {want}, f"{dtype} export, {s}: tensors stored as {got}"
    # Trained: the export is not the initialisation any more.
    trained = {}
    for s in shard_files(exports["f32"]):
        trained.update(load_file(exports["f32"] / s))
    initial = load_file(init / "model.safetensors")
    moved = max((trained[n] - initial[n]).abs().max().item() for n in initial)
    assert moved > 1e-3, f"training changed no weight by more than {moved:.1e}"

    text = random_text(rng, rng.randint(28, 36), odd_spaces=True)
    lm_ids = json.loads(
        lmtrain("tokenize", "--tokenizer", tok, "--add-special", "--text", text).stdout)
    ids = lm_ids[:96]  # for the logits: within max_position_embeddings (128) whatever the text
    assert len(ids) > shape.get("sliding_window", 0) + 8
    ids_file = tmp_path / "ids.json"
    ids_file.write_text(json.dumps(ids))
    prompt = lm_ids[: rng.randint(4, 12)]

    logits = {}
    for dtype, d in exports.items():
        hf_ids = AutoTokenizer.from_pretrained(d)(text)["input_ids"]
        assert hf_ids == lm_ids, f"{dtype}: AutoTokenizer gives other ids for {text!r}"
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                     attn_implementation="eager")
        model.eval()
        x = torch.tensor([ids])
        with torch.no_grad():
            out = model(input_ids=x, labels=x)
        ref, ref_loss = lmtrain_logits(d, ids_file, tmp_path / f"logits_{dtype}.safetensors")
        logits[dtype] = ref
        got = out.logits[0].float()
        assert got.shape == ref.shape
        r_logits = rel(got, ref)
        r_loss = abs(out.loss.item() - ref_loss) / abs(ref_loss)
        line = (f"{family:<8} {dtype:<4} logits {r_logits:.2e} loss {r_loss:.2e} "
                f"max|logit| {ref.abs().max().item():5.2f}")
        if dtype == "bf16":
            line += f" vs_f32 {rel(ref, logits['f32']):.2e}"
        greedy = "FAILED"  # printed with the errors whatever happens in generation
        try:
            greedy = compare_greedy(model, prompt, hf_greedy(model, prompt),
                                    lmtrain_greedy(d, prompt))
        finally:
            with capsys.disabled():
                print(f"  {line} greedy {greedy}")
        assert r_logits < LOGITS_TOL, line
        assert r_loss < LOSS_TOL, line
    vs_f32 = rel(logits["bf16"], logits["f32"])
    assert vs_f32 < BF16_VS_F32_TOL, f"bf16 export: logits {vs_f32:.2e} from the f32 export's"
    assert vs_f32 > 0, "the bf16 export computes exactly what the f32 one does: not rounded?"
