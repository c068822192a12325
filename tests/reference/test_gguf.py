"""`lmtrain export --format gguf` against transformers' GGUF loader and llama.cpp's metadata.

Per family: `lmtrain init` writes a small model, every tensor of which (norms too) is then moved
by fresh random noise; lmtrain exports it as GGUF in f32, bf16 and Q8_0; and
- the `gguf` package (llama.cpp's own Python reader) finds every key llama.cpp's loader requires
  for the architecture (src/llama-model.cpp, llama-vocab.cpp), with the types it reads them as,
  and norms / biases / positions stored f32 while the matrices have the asked type;
- transformers' GGUF loader (`from_pretrained(dir, gguf_file=...)`, which undoes llama.cpp's q/k
  interleaving, Gemma's 1 + w norms and GPT-2's transposes itself) gives back every weight: f32
  exactly, bf16 within its rounding, Q8_0 within each 32-block's bound (max|x| / 127 / 2 plus the
  f16 scale's rounding); its logits equal lmtrain's on the source model (f32 within 1e-5, Q8_0
  within 5e-2 of the largest logit); its tokenizer gives `lmtrain tokenize`'s ids on text with
  numbers, code, several scripts and emoji.
transformers does not load gemma (v1) GGUF files: for gemma the tensors are read back with the
`gguf` package and compared with the source plus 1 on the norms (which shows the layout and the
transform, read by llama.cpp's reader, not by an independent model).
Shapes meet what transformers' loader assumes and does not read from the file: qwen3 head_dim 128;
gemma2/3 query_pre_attn_scalar 256 = head_dim; gemma2's soft-caps 50 / 30; gpt2 1024 positions
and a 4 x hidden MLP.
"""
import json
import random

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import DATA, lmtrain

COMMON = {"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128,
          "max_position_embeddings": 128}
FAMILIES = {
    "llama": {"num_attention_heads": 4, "num_key_value_heads": 2},
    "llama_sp": {"num_attention_heads": 4},
    "mistral": {"num_attention_heads": 4, "num_key_value_heads": 1, "sliding_window": 128},
    "qwen2": {"num_attention_heads": 4, "num_key_value_heads": 2},
    "qwen3": {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 128},
    "gemma": {"num_attention_heads": 2, "head_dim": 32},
    "gemma2": {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 256,
               "query_pre_attn_scalar": 256, "sliding_window": 4},
    "gemma3": {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 256,
               "query_pre_attn_scalar": 256, "sliding_window": 4},
    "gpt2": {"num_attention_heads": 4, "intermediate_size": 256, "max_position_embeddings": 1024},
}
TEXT = "Hello world, 12345 apples; def f(x): return x**2 東京 Привет 🙂 done."
SP_TEXT = "Hello world, 12345 apples and more words here."
EPS_KEY = {"gpt2": "attention.layer_norm_epsilon"}


def arch(family):
    return {"mistral": "llama", "llama_sp": "llama"}.get(family, family)


def required_keys(family):
    """(key, GGUFValueType name) that llama.cpp's loader reads for the architecture."""
    a = arch(family)
    keys = [("general.architecture", "STRING"), (f"{a}.context_length", "UINT32"),
            (f"{a}.embedding_length", "UINT32"), (f"{a}.block_count", "UINT32"),
            (f"{a}.feed_forward_length", "UINT32"), (f"{a}.attention.head_count", "UINT32"),
            (f"{a}.attention.head_count_kv", "UINT32"),
            (f"{a}.{EPS_KEY.get(a, 'attention.layer_norm_rms_epsilon')}", "FLOAT32"),
            ("tokenizer.ggml.model", "STRING"), ("tokenizer.ggml.tokens", "ARRAY"),
            ("tokenizer.ggml.token_type", "ARRAY"), ("tokenizer.ggml.bos_token_id", "UINT32"),
            ("tokenizer.ggml.eos_token_id", "UINT32")]
    if a != "gpt2":
        keys += [(f"{a}.rope.freq_base", "FLOAT32"), (f"{a}.rope.dimension_count", "UINT32"),
                 (f"{a}.attention.key_length", "UINT32")]
    if a in ("gemma2", "gemma3"):
        keys.append((f"{a}.attention.sliding_window", "UINT32"))
    if a == "gemma2":
        keys += [(f"{a}.attn_logit_softcapping", "FLOAT32"),
                 (f"{a}.final_logit_softcapping", "FLOAT32")]
    if family == "llama_sp":
        keys.append(("tokenizer.ggml.scores", "ARRAY"))
    else:
        keys += [("tokenizer.ggml.merges", "ARRAY"), ("tokenizer.ggml.pre", "STRING")]
    return keys


def make_model(family, tmp_path, rng):
    shape = {**COMMON, **FAMILIES[family]}
    tok = DATA / "tokenizers" / {"llama_sp": "sp_bpe.model",
                                 "gpt2": "bytelevel_bpe.json"}.get(family, "llama3_style_bpe.json")
    d = tmp_path / "model"
    sets = [a for k, v in shape.items() for a in ("--set", f"model.{k}={v}")]
    lmtrain("init", "--family", arch(family) if family == "llama_sp" else family, *sets,
            "--tokenizer", tok, "--seed", rng.randint(0, 10**6), "--out", d)
    sd = load_file(d / "model.safetensors")
    g = torch.Generator().manual_seed(rng.randint(0, 10**6))
    for k, v in sd.items():  # norms too: a forgotten +1 or transpose must show
        sd[k] = v + 0.05 * torch.randn(v.shape, generator=g)
    save_file(sd, d / "model.safetensors", metadata={"format": "pt"})
    (d / "checksums.json").unlink()  # changed on purpose: lmtrain's listing no longer holds
    return d, tok, sd


def q8_bound(x):
    """Per element: what Q8_0 may move x by (x as rows of 32-blocks, llama.cpp's layout)."""
    b = x.reshape(-1, 32).abs().amax(dim=1, keepdim=True) / 127
    return (b * (0.5 + 127 * 2.0**-11) + 1e-7).expand(-1, 32).reshape(x.shape)


def check_metadata(family, path, dtype, n_vocab):
    from gguf import GGUFReader
    r = GGUFReader(str(path))
    for key, typ in required_keys(family):
        assert key in r.fields, f"{path.name}: no {key}, which llama.cpp reads"
        got = r.fields[key].types[0].name
        assert got == typ, f"{path.name}: {key} is {got}, llama.cpp reads {typ}"
    assert r.fields["tokenizer.ggml.token_type"].types[1].name == "INT32"
    assert len(r.fields["tokenizer.ggml.tokens"].data) == n_vocab
    want = {"f32": "F32", "bf16": "BF16", "q8_0": "Q8_0"}[dtype]
    for t in r.tensors:
        if t.name.endswith("norm.weight") or t.name.endswith(".bias") or len(t.shape) == 1 \
                or t.name.startswith("position_embd"):
            assert t.tensor_type.name == "F32", f"{t.name} stored {t.tensor_type.name}"
        else:
            assert t.tensor_type.name == want, f"{t.name} stored {t.tensor_type.name}"
    return r


@pytest.mark.parametrize("family", FAMILIES)
def test_gguf_export(family, seed, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    rng = random.Random(seed)
    src_dir, tok, src = make_model(family, tmp_path, rng)
    text = SP_TEXT if family == "llama_sp" else TEXT
    ids = json.loads(lmtrain("tokenize", "--tokenizer", tok, "--add-special", "--text", text).stdout)
    (tmp_path / "ids.json").write_text(json.dumps(ids))
    lmtrain("logits", "--model", src_dir, "--ids-file", tmp_path / "ids.json", "--out",
            tmp_path / "logits.safetensors", "--threads", 1)
    ref = load_file(tmp_path / "logits.safetensors")["logits"]
    n_vocab = src[next(k for k in src if k.endswith(("embed_tokens.weight", "wte.weight")))].shape[0]
    out = tmp_path / "gguf"
    for dtype in ("f32", "bf16", "q8_0"):
        path = out / f"{family}-{dtype}.gguf"
        lmtrain("export", "--checkpoint", src_dir, "--format", "gguf", "--dtype", dtype,
                "--out", path)
        reader = check_metadata(family, path, dtype, n_vocab)
        if family == "gemma":  # transformers has no gemma GGUF loader: llama.cpp's reader
            from gguf import dequantize
            names = {"model.embed_tokens.weight": "token_embd.weight",
                     "model.norm.weight": "output_norm.weight",
                     "model.layers.0.self_attn.q_proj.weight": "blk.0.attn_q.weight",
                     "model.layers.1.input_layernorm.weight": "blk.1.attn_norm.weight",
                     "model.layers.1.post_attention_layernorm.weight": "blk.1.ffn_norm.weight",
                     "model.layers.0.mlp.down_proj.weight": "blk.0.ffn_down.weight"}
            got = {t.name: torch.from_numpy(np.array(dequantize(t.data, t.tensor_type),
                                                     dtype=np.float32)).reshape(
                list(reversed([int(x) for x in t.shape]))) for t in reader.tensors}
            assert "output.weight" not in got  # llama.cpp's gemma refuses an output tensor
            for hf, gg in names.items():
                want = src[hf] + (1 if hf.endswith("norm.weight") else 0)
                check_weight(f"{path.name} {gg}", got[gg], want, dtype)
            continue
        model = AutoModelForCausalLM.from_pretrained(str(out), gguf_file=path.name,
                                                     dtype=torch.float32)
        model.eval()
        sd = model.state_dict()
        for name, want in src.items():
            got = sd[name] if name in sd else None
            assert got is not None, f"{path.name}: transformers has no {name}"
            check_weight(f"{path.name} {name}", got, want, dtype)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0]
        r = ((logits - ref).abs().max() / ref.abs().max()).item()
        print(f"  {family:<8} {dtype:<5} logits vs lmtrain {r:.2e}")
        assert r < {"f32": 1e-5, "bf16": 2e-2, "q8_0": 5e-2}[dtype], f"{path.name}: logits {r:.2e}"
        hf_ids = AutoTokenizer.from_pretrained(str(out), gguf_file=path.name)(text)["input_ids"]
        assert hf_ids == ids, f"{path.name}: transformers' tokenizer gives {hf_ids}, lmtrain {ids}"


def check_weight(what, got, want, dtype):
    got, want = got.float(), want.float()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}"
    err = (got - want).abs()
    if dtype == "f32" or want.dim() == 1 or what.endswith(("norm.weight", ".bias", "wpe.weight")):
        assert err.max().item() <= 1e-6, f"{what}: {err.max().item():.2e} from the source"
    elif dtype == "bf16":
        assert (err <= want.abs() * 2.0**-8 + 1e-30).all(), f"{what}: beyond bf16 rounding"
    else:
        # Q8_0 blocks run along the stored rows: GPT-2's Conv1D weights are stored transposed.
        stored = want.t() if what.split()[-1].startswith("transformer.h.") else want
        bound = q8_bound(stored)
        bound = bound.t() if stored is not want else bound
        assert (err <= bound).all(), f"{what}: {(err / bound).max().item():.2f} of Q8_0's bound"


def test_gguf_llama3_rope_factors(seed, tmp_path):
    """llama3 RoPE goes to llama.cpp as `rope_freqs`, divisors of plain RoPE's frequencies
    (transformers' GGUF loader does not read it): equal to transformers' own plain / llama3
    frequencies for the exported config.json, with some frequencies in the smoothed band."""
    from gguf import GGUFReader
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    rng = random.Random(seed)
    d = tmp_path / "model"
    sets = {**COMMON, "num_attention_heads": 4, "rope_type": "llama3",
            "rope_factor": rng.choice([4, 8, 16]), "rope_low_freq_factor": 1,
            "rope_high_freq_factor": 4, "rope_original_max_position_embeddings": 64}
    lmtrain("init", "--family", "llama", *[a for k, v in sets.items() for a in
                                          ("--set", f"model.{k}={v}")],
            "--tokenizer", DATA / "tokenizers" / "llama3_style_bpe.json", "--out", d)
    path = tmp_path / "m.gguf"
    lmtrain("export", "--checkpoint", d, "--format", "gguf", "--dtype", "f32", "--out", path)
    got = next(t for t in GGUFReader(str(path)).tensors if t.name == "rope_freqs.weight")
    got = torch.from_numpy(np.array(got.data, dtype=np.float32))
    cfg = AutoConfig.from_pretrained(str(d))
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg)
    plain = 1.0 / (cfg.rope_parameters["rope_theta"] ** (
        torch.arange(0, cfg.head_dim, 2, dtype=torch.int64).float() / cfg.head_dim))
    want = plain / scaled
    assert got.shape == want.shape
    assert torch.allclose(got, want.float(), rtol=1e-5), f"{got} vs {want}"
    smoothed = ((want > 1.001) & (want < sets["rope_factor"] - 1e-3)).sum().item()
    assert smoothed >= 1 and (want == 1).any() and (want == sets["rope_factor"]).any(), want
