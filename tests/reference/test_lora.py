"""LoRA adapters checked with PEFT, per family: what lmtrain trains, PEFT loads and computes the
same; what PEFT makes, lmtrain loads and computes the same; and lmtrain's merged export equals
PEFT's merge_and_unload().

For each family, from the test's seed: `lmtrain init` makes a small random base model (shapes as
in test_export.py); `lmtrain train` trains LoRA adapters on it for a few steps (a random rank,
alpha, rsLoRA or not, dropout, random target modules or all-linear, and modules_to_save: some
norms and an untied head, or none); `lmtrain export` writes them as a PEFT adapter directory.
Then:
- PeftModel.from_pretrained(base, our adapter) gives `lmtrain logits --model base --adapter`'s
  logits and loss (against PEFT in float64, eager attention: max|diff| / max|ref| < 1e-4, loss
  relative < 1e-5, or 8x the model's measured float32 sensitivity where that is larger),
  and `lmtrain logits` of the LoRA checkpoint itself gives the same;
- an adapter that PEFT makes (init_lora_weights=False: A and B random and non-zero, the saved
  modules perturbed) and saves loads in lmtrain with PEFT's logits;
- `lmtrain export --merge` of our checkpoint holds the weights of PEFT's merge_and_unload() (max
  |diff| / max |weight| < 1e-6) and computes its logits.
Each family prints one line of measured errors.
"""
import copy
import json
import random

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from conftest import lmtrain
from test_export import (FAMILIES, lmtrain_logits, model_shape, random_text, rel, tokenizer_file,
                         train_config)

LOGITS_TOL = 1e-4
LOSS_TOL = 1e-5
MERGE_TOL = 1e-6

MODULES = {
    "gpt2": ["c_attn", "attn.c_proj", "c_fc", "mlp.c_proj"],
    "default": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}


NORMS = {
    "gpt2": ["ln_1", "ln_2", "ln_f"],
    "default": ["norm", "input_layernorm", "post_attention_layernorm"],
}


def lora_section(lora):
    return f"""lora:
  rank: {lora["rank"]}
  alpha: {lora["alpha"]}
  use_rslora: {str(lora["rslora"]).lower()}
  dropout: {lora["dropout"]}
  target_modules: {json.dumps(lora["targets"])}
  modules_to_save: {json.dumps(lora["save"])}
"""


def modules_to_save(rng, family, shape):
    """Norms trained beside the adapters (PEFT matches them by suffix), and an untied head."""
    if rng.random() < 0.3:
        return []
    save = [rng.choice(NORMS["gpt2" if family == "gpt2" else "default"])]
    if shape.get("tie_word_embeddings") == "false" and rng.random() < 0.7:
        save.append("lm_head")
    return save


def hf_base(init):
    model = AutoModelForCausalLM.from_pretrained(init, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    return model


def hf_logits(model, ids):
    x = torch.tensor([ids])
    with torch.no_grad():
        out = model(input_ids=x, labels=x)
    return out.logits[0].double(), out.loss.item()


def perturbed_logits(model64, ids, seed):
    """The float64 model's logits with every weight and every module's output multiplied by
    (1 + 2^-24 n), n standard normal: one sample of what float32 rounding alone can do to them."""
    p = copy.deepcopy(model64)
    g = torch.Generator().manual_seed(seed)

    def noise(t):
        return t * (1 + 2.0**-24 * torch.randn(t.shape, generator=g, dtype=t.dtype))

    for mod in p.modules():
        if not list(mod.children()):
            mod.register_forward_hook(lambda m, i, o: noise(o) if torch.is_tensor(o) else o)
    with torch.no_grad():
        for w in p.parameters():
            w.copy_(noise(w))
    return hf_logits(p, ids)


def reference(model, ids):
    """PEFT's logits and loss in float64, and the tolerances for ours: 1e-4 and 1e-5, or eight
    times the model's own float32 sensitivity where random adapters and trained norms make it
    less well conditioned than that. The sensitivity is the largest error of five samples:
    PyTorch in float32, and the float64 model under four float32-sized perturbations. One sample
    alone is not enough: on one qwen2 adapter PyTorch's float32 was 2.7e-5 from float64, the
    perturbations 3.8e-5 to 1.2e-4, the same model merged in PyTorch float32 2.2e-4, and ours
    5.7e-4."""
    model64 = copy.deepcopy(model).to(torch.float64)
    ref, ref_loss = hf_logits(model64, ids)
    samples = [hf_logits(model, ids)] + [perturbed_logits(model64, ids, s) for s in range(4)]
    e_logits = max(rel(r, ref) for r, _ in samples)
    e_loss = max(abs(l - ref_loss) / abs(ref_loss) for _, l in samples)
    return ref, ref_loss, max(LOGITS_TOL, 8 * e_logits), max(LOSS_TOL, 8 * e_loss)


def check(name, got, got_loss, reference):
    ref, ref_loss, logits_tol, loss_tol = reference
    r_logits = rel(got.double(), ref)
    r_loss = abs(got_loss - ref_loss) / abs(ref_loss)
    assert r_logits < logits_tol, f"{name}: logits differ by {r_logits:.2e} (relative)"
    assert r_loss < loss_tol, f"{name}: loss differs by {r_loss:.2e} (relative)"
    return r_logits


@pytest.mark.parametrize("family", FAMILIES)
def test_lora_adapters_match_peft(family, seed, tmp_path, capsys):
    rng = random.Random(seed)
    shape = model_shape(rng, family)
    sets = [a for k, v in shape.items() for a in ("--set", f"model.{k}={v}")]
    modules = MODULES["gpt2" if family == "gpt2" else "default"]
    targets = ["all-linear"] if rng.random() < 0.3 else rng.sample(modules, rng.randint(1, 3))
    lora = {"rank": rng.choice([2, 4, 8]), "alpha": rng.choice([4, 8, 16, 32]),
            "rslora": rng.random() < 0.5, "targets": targets,
            "dropout": rng.choice([0.0, 0.05, 0.1]), "save": modules_to_save(rng, family, shape)}
    with capsys.disabled():
        print(f"\n[{family}] seed {seed}, shape {shape}, lora {lora}")
    init = tmp_path / "init"
    lmtrain("init", "--family", family, *sets, "--tokenizer", tokenizer_file(family), "--seed",
            seed, "--out", init)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(random_text(rng, rng.randint(8, 20)) for _ in range(64)) + "\n")
    config = tmp_path / "lora.yaml"
    train_config(config, init, corpus, tmp_path / "run", seed, lr=3e-2, extra=lora_section(lora))
    lmtrain("train", "--config", config)
    adapter = tmp_path / "adapter"
    lmtrain("export", "--checkpoint", tmp_path / "run", "--out", adapter, "--dtype", "f32")
    weights = load_file(adapter / "adapter_model.safetensors")
    moved = max(w.abs().max().item() for n, w in weights.items() if ".lora_B." in n)
    assert moved > 1e-4, f"training left every lora_B at zero (max {moved:.1e})"
    saved = sorted(n for n in weights if ".lora_" not in n)
    assert bool(saved) == bool(lora["save"]), f"modules_to_save {lora['save']} saved {saved}"

    ids = [rng.randrange(0, 200) for _ in range(rng.randint(40, 90))]
    ids_file = tmp_path / "ids.json"
    ids_file.write_text(json.dumps(ids))

    # Ours in PEFT.
    peft = PeftModel.from_pretrained(hf_base(init), adapter)
    peft.eval()
    ref = reference(peft, ids)
    got, got_loss = lmtrain_logits_with(init, adapter, ids_file, tmp_path / "ours.safetensors")
    e_ours = check("our adapter in PEFT", got, got_loss, ref)
    ckpt = sorted((tmp_path / "run" / "checkpoints").iterdir())[-1]
    got, got_loss = lmtrain_logits(ckpt, ids_file, tmp_path / "ckpt.safetensors")
    check("our LoRA checkpoint", got, got_loss, ref)

    # Merged: our --merge export against PEFT's merge_and_unload().
    merged_dir = tmp_path / "merged"
    lmtrain("export", "--checkpoint", tmp_path / "run", "--out", merged_dir, "--dtype", "f32",
            "--merge")
    merged = peft.merge_and_unload()
    ours = {}
    for f in merged_dir.glob("*.safetensors"):
        ours.update(load_file(f))
    e_merge = 0.0
    for n, w in merged.state_dict().items():
        if n not in ours:  # a tied head is saved once
            continue
        e_merge = max(e_merge, rel(ours[n].float(), w.float()))
    assert e_merge < MERGE_TOL, f"merged weights differ by {e_merge:.2e} (relative)"
    got, got_loss = lmtrain_logits(merged_dir, ids_file, tmp_path / "merged.safetensors")
    check("merged export", got, got_loss, ref)

    # PEFT's adapter in lmtrain: random non-zero A and B.
    torch.manual_seed(seed)
    pcfg = LoraConfig(r=lora["rank"], lora_alpha=lora["alpha"], use_rslora=lora["rslora"],
                      target_modules=modules if "all-linear" in targets else targets,
                      init_lora_weights=False, fan_in_fan_out=family == "gpt2",
                      modules_to_save=lora["save"] or None)
    made = get_peft_model(hf_base(init), pcfg)
    with torch.no_grad():  # the saved modules' copies differ from the base
        for n, p in made.named_parameters():
            if ".modules_to_save." in n:
                p.add_(0.1 * torch.randn_like(p))
    made.eval()
    peft_dir = tmp_path / "peft_made"
    made.save_pretrained(peft_dir)
    ref = reference(made, ids)
    got, got_loss = lmtrain_logits_with(init, peft_dir, ids_file, tmp_path / "theirs.safetensors")
    e_theirs = check("PEFT's adapter in lmtrain", got, got_loss, ref)
    with capsys.disabled():
        print(f"{family:<8} ours-in-PEFT logits {e_ours:.2e}  PEFT's-in-lmtrain logits "
              f"{e_theirs:.2e}  merge {e_merge:.2e}")


def lmtrain_logits_with(model_dir, adapter, ids_file, out):
    loss = json.loads(lmtrain("logits", "--model", model_dir, "--adapter", adapter, "--ids-file",
                              ids_file, "--out", out, "--threads", 1).stdout)["loss"]
    return load_file(out)["logits"], loss
