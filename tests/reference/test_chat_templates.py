"""lmtrain's chat templates against the real Jinja templates run by transformers, token for token.

Random chats (a system message or not, alternating user / assistant turns, sometimes ending with a
user turn; content of random unicode, whitespace runs at either end, braces and Jinja-looking text,
now and then a special token's text) go through the path a user takes: a JSONL file, `lmtrain
prepare` with schema chat and data.sources[].chat_template chatml / qwen2.5 / llama3 / gemma, and
the Megatron .bin/.idx/.mask store it writes, read back here. Each document must equal
transformers' `apply_chat_template(messages, tokenize=True)` with the Hugging Face template
(tests/data/templates/*.json "chat_template"), with one tokenizer on both sides, learned here from
random text with every template's special tokens as added tokens: lmtrain's byte-level BPE, or an
HF-trained SentencePiece-style BPE (Metaspace, byte fallback). The loss mask must hold each
assistant turn's content and end marker, and nothing else but the end of the header where one
token spans both.

The export: `lmtrain export` of a run trained (one step) on such data, or on instruction records,
writes tokenizer_config.json with a `chat_template`; AutoTokenizer on the export must render every
chat as the Hugging Face template does (the built-ins) and as lmtrain prepared it (all, plain and a
custom pattern included), and add_generation_prompt must open an assistant turn.
"""
import json
import random
import struct

import numpy as np
import pytest

from conftest import DATA, lmtrain
from random_text import corpus, random_text

# lmtrain's name -> the fixture holding the Hugging Face template.
TEMPLATES = {"chatml": "chatml", "qwen2.5": "qwen2.5", "llama3": "llama3", "gemma": "gemma3"}
END_MARKER = {"chatml": "<|im_end|>", "qwen2.5": "<|im_end|>", "llama3": "<|eot_id|>",
              "gemma": "<end_of_turn>"}
HEADER = {"chatml": "<|im_start|>assistant\n", "qwen2.5": "<|im_start|>assistant\n",
          "llama3": "<|start_header_id|>assistant<|end_header_id|>\n\n",
          "gemma": "<start_of_turn>model\n"}
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>",
            "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<bos>", "<start_of_turn>",
            "<end_of_turn>"]
N_CHATS = 60


def random_content(rng):
    """Non-blank message content: random text, whitespace at either end, braces, Jinja-looking
    text, sometimes a special token's text."""
    t = random_text(rng, 12)
    k = rng.randrange(8)
    if k == 0:
        t = rng.choice([" ", "  ", "\n", "\n\n", "\t", " \n"]) + t
    elif k == 1:
        t = t + rng.choice([" ", "\n", "\n\n", "  \n"])
    elif k == 2:
        t = rng.choice(["{content}", "{{ bos_token }}", "{% if x %}", "}}{{", "{role}"]) + " " + t
    elif k == 3:
        t = t + rng.choice(SPECIALS[1:])
    if not t.strip():
        t += "x"
    return t


def random_chat(rng):
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": random_content(rng)})
    for turn in range(rng.randint(1, 4)):
        msgs.append({"role": "user", "content": random_content(rng)})
        msgs.append({"role": "assistant", "content": random_content(rng)})
    if rng.random() < 0.2:
        msgs.append({"role": "user", "content": random_content(rng)})  # ends with a question
    return msgs


def read_store(prefix):
    """Documents (token lists) and their loss masks from a Megatron-format store."""
    idx = (prefix.parent / (prefix.name + ".idx")).read_bytes()
    assert idx[:9] == b"MMIDIDX\x00\x00"
    version, code = struct.unpack_from("<QB", idx, 9)
    seqs, docs = struct.unpack_from("<QQ", idx, 18)
    assert version == 1 and docs == seqs + 1
    sizes = np.frombuffer(idx, np.int32, seqs, 34)
    pointers = np.frombuffer(idx, np.int64, seqs, 34 + 4 * seqs)
    dtype = {4: np.int32, 8: np.uint16}[code]
    tokens = np.fromfile(prefix.parent / (prefix.name + ".bin"), dtype)
    mask = np.fromfile(prefix.parent / (prefix.name + ".mask"), np.uint8)
    assert len(mask) == len(tokens)
    es = np.dtype(dtype).itemsize
    out = []
    for n, p in zip(sizes, pointers):
        at = int(p) // es
        out.append((tokens[at:at + n].tolist(), mask[at:at + n].tolist()))
    return out


@pytest.fixture(params=["lmtrain_bytelevel", "hf_metaspace"])
def tokenizer(request, seed, tmp_path):
    """A tokenizer learned here from random text, with the templates' special tokens as added
    tokens: lmtrain's byte-level BPE (`lmtrain tokenizer train`), or a SentencePiece-style BPE
    (Metaspace, byte fallback) trained by HF tokenizers, whose tokens do not map back to bytes."""
    rng = random.Random(seed)
    (tmp_path / "corpus.txt").write_text(corpus(rng, 300), encoding="utf-8")
    tok = tmp_path / "tokenizer.json"
    if request.param == "lmtrain_bytelevel":
        args = [a for s in SPECIALS for a in ("--special", s)]
        lmtrain("tokenizer", "train", "--input", tmp_path / "corpus.txt", "--vocab-size",
                rng.randint(500, 1200), *args, "--out", tok)
        return tok, request.param
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    hf = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    scheme = rng.choice(["always", "first"])
    hf.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme=scheme, split=rng.random() < 0.5)
    hf.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                    decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    hf.train([str(tmp_path / "corpus.txt")], trainers.BpeTrainer(
        vocab_size=rng.randint(800, 1500), show_progress=False, limit_alphabet=150,
        special_tokens=["<unk>"] + SPECIALS + [f"<0x{b:02X}>" for b in range(256)]))
    hf.save(str(tok))
    return tok, request.param


def prepare(tmp_path, tok, name, chats):
    data = tmp_path / f"chats_{name}.jsonl"
    data.write_text("".join(json.dumps({"messages": m}) + "\n" for m in chats), encoding="utf-8")
    cfg = tmp_path / f"prepare_{name}.yaml"
    cfg.write_text(json.dumps({"data": {
        "tokenizer": str(tok), "seq_len": 2048, "val_fraction": 0.0,
        "sources": [{"path": str(data), "format": "jsonl", "schema": "chat",
                     "chat_template": name, "on_error": "stop"}]}}))
    store = tmp_path / f"store_{name}"
    lmtrain("prepare", "--config", cfg, "--out", store, "--quiet")
    prefixes = sorted(p.with_suffix("") for p in store.glob("train-*.idx"))
    assert len(prefixes) == 1, prefixes
    return read_store(prefixes[0])


def fast_tokenizer(tok_path):
    """transformers' tokenizer over the tokenizer.json lmtrain prepared with."""
    from transformers import PreTrainedTokenizerFast
    return PreTrainedTokenizerFast(tokenizer_file=str(tok_path))


def masked_text(hf, ids, mask):
    """The decoded runs of tokens in the loss, in order."""
    runs, cur = [], []
    for i, m in zip(ids, mask):
        if m:
            cur.append(i)
        elif cur:
            runs.append(hf.decode(cur, skip_special_tokens=False))
            cur = []
    if cur:
        runs.append(hf.decode(cur, skip_special_tokens=False))
    return runs


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_prepare_renders_as_the_jinja_template(name, tokenizer, seed, tmp_path):
    tokenizer, kind = tokenizer
    rng = random.Random(seed)
    fixture = json.loads((DATA / "templates" / f"{TEMPLATES[name]}.json").read_text())
    chats = [random_chat(rng) for _ in range(N_CHATS)]
    docs = prepare(tmp_path, tokenizer, name, chats)
    assert len(docs) == len(chats), "lmtrain prepare dropped chats"
    hf = fast_tokenizer(tokenizer)
    hf.chat_template = fixture["chat_template"]
    if fixture["bos_token"]:
        hf.bos_token = fixture["bos_token"]
    bad = []
    for i, (chat, (ids, mask)) in enumerate(zip(chats, docs)):
        # Exactly apply_chat_template's ids, how the conversation ends included: the end-of-turn
        # marker and what the template writes after it, no end-of-sequence token of prepare's.
        want = hf.apply_chat_template(chat, tokenize=True, return_dict=False)
        if ids != list(want):
            bad.append((i, want, ids))
            continue
        # The loss: each assistant turn's (possibly trimmed) content with its end marker, and
        # nothing else but the end of the header when a token spans the header and the content
        # (chatml's "\n" + a content starting "\n").
        trim = name in ("llama3", "gemma")
        turns = [(m["content"].strip() if trim else m["content"]) + END_MARKER[name]
                 for m in chat if m["role"] == "assistant"]
        # Metaspace decoding adds and strips spaces at the ends of a run (prepend_scheme, the Strip
        # decoder), so there runs are compared without spaces.
        runs = masked_text(hf, ids, mask)
        assert len(runs) == len(turns), f"chat {i}: loss runs {runs!r}, want {turns!r}"
        norm = (lambda x: x) if kind == "lmtrain_bytelevel" else (lambda x: x.replace(" ", ""))
        for run, turn in zip(runs, turns):
            run, turn, header = norm(run), norm(turn), norm(HEADER[name])
            assert run.endswith(turn) and header.endswith(run[:len(run) - len(turn)]), \
                f"chat {i}: loss run {run!r}, want {turn!r}"
    if bad:
        i, want, got = bad[0]
        k = next(k for k in range(len(want) + 1) if k >= min(len(want), len(got)) or want[k] != got[k])
        pytest.fail(
            f"{name}: {len(bad)} of {len(chats)} chats differ; first: chat {i} {chats[i]!r}\n"
            f"  from token {k}: HF {hf.convert_ids_to_tokens(list(want[k:k + 10]))}\n"
            f"  lmtrain {hf.convert_ids_to_tokens(got[k:k + 10])}")


# The export: a run trained on chats, exported; AutoTokenizer on the export renders as lmtrain did.
# "plain" and a custom pattern have no Hugging Face original; their Jinja is lmtrain's own.
# "instruction:NAME" trains on instruction records (schema instruction), which plain writes in
# its own style ("### Instruction:" / "### Response:").
EXPORT_TEMPLATES = list(TEMPLATES) + ["plain", "<s>{turn}<|{role}|>\n{content}</s>\n",
                                      "instruction:plain", "instruction:llama3"]


def random_instruction(rng, plain):
    """An instruction record and the chat it stands for (render_instruction's user turn)."""
    rec = {"instruction": random_content(rng),
           "input": random_content(rng) if rng.random() < 0.6 else rng.choice(["", " \n"]),
           "output": random_content(rng)}
    join = "\n\n### Input:\n" if plain else "\n\n"
    user = rec["instruction"] + (join + rec["input"] if rec["input"].strip() else "")
    return rec, [{"role": "user", "content": user}, {"role": "assistant", "content": rec["output"]}]


@pytest.mark.parametrize("name", EXPORT_TEMPLATES)
def test_export_carries_a_chat_template_that_renders_the_same(name, seed, tmp_path):
    from transformers import AutoTokenizer

    rng = random.Random(seed)
    (tmp_path / "corpus.txt").write_text(corpus(rng, 200), encoding="utf-8")
    tok = tmp_path / "tokenizer.json"
    args = [a for s in SPECIALS + ["<s>", "</s>"] for a in ("--special", s)]
    vocab = rng.randint(500, 900)
    lmtrain("tokenizer", "train", "--input", tmp_path / "corpus.txt", "--vocab-size", vocab,
            *args, "--out", tok)
    schema = "instruction" if name.startswith("instruction:") else "chat"
    name = name.removeprefix("instruction:")
    if schema == "chat":
        chats = [random_chat(rng) for _ in range(20)]
        records = [{"messages": m} for m in chats]
    else:
        records, chats = zip(*(random_instruction(rng, name == "plain") for _ in range(20)))
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    run = tmp_path / "run"
    cfg = tmp_path / "run.yaml"
    cfg.write_text(json.dumps({
        "model": {"family": "llama", "vocab_size": vocab, "hidden_size": 32,
                  "intermediate_size": 40, "num_hidden_layers": 1, "num_attention_heads": 2,
                  "max_position_embeddings": 2048},
        "data": {"tokenizer": str(tok), "seq_len": 2048, "val_fraction": 0.0,
                 "sources": [{"path": str(data), "format": "jsonl", "schema": schema,
                              "chat_template": name}]},
        "train": {"backend": "cpu", "micro_batch_size": 1, "max_steps": 1, "warmup_steps": 0,
                  "eval_every": 0, "save_every": 0, "log_every": 1, "out_dir": str(run)}}))
    lmtrain("train", "--config", cfg)
    out = tmp_path / "export"
    r = lmtrain("export", "--checkpoint", run, "--out", out, "--dtype", "f32")
    assert "chat template" in r.stdout, r.stdout
    tc = json.loads((out / "tokenizer_config.json").read_text())
    assert tc.get("chat_template"), "the export's tokenizer_config.json has no chat_template"
    exported = AutoTokenizer.from_pretrained(str(out))
    docs = read_store(next(iter(sorted((run / "data").glob("**/train-*.idx")))).with_suffix(""))
    assert len(docs) == len(chats)
    real = None
    if name in TEMPLATES and schema == "chat":
        fixture = json.loads((DATA / "templates" / f"{TEMPLATES[name]}.json").read_text())
        real = AutoTokenizer.from_pretrained(str(out))
        real.chat_template = fixture["chat_template"]
        if fixture["bos_token"]:
            real.bos_token = fixture["bos_token"]
    for i, (chat, (ids, _)) in enumerate(zip(chats, docs)):
        text = exported.apply_chat_template(chat, tokenize=False)
        if real is not None:
            assert text == real.apply_chat_template(chat, tokenize=False), f"chat {i}"
        want = exported.apply_chat_template(chat, tokenize=True, return_dict=False)
        if ids[len(want):]:  # a template without an end-of-turn marker (plain): the EOS, learned
            assert ids[len(want):] == [exported.convert_tokens_to_ids("<|endoftext|>")]
            assert name == "plain", f"{name}: prepare wrote an EOS after the conversation's end"

        assert ids[:len(want)] == list(want), f"chat {i}: {chat!r}"
        # The generation prompt: the chat up to its last assistant turn, then the header.
        last = max(k for k, m in enumerate(chat) if m["role"] == "assistant")
        prompt = exported.apply_chat_template(chat[:last], tokenize=False,
                                              add_generation_prompt=True)
        assert text.startswith(prompt) and len(prompt) > len(
            exported.apply_chat_template(chat[:last], tokenize=False)), f"chat {i}: {prompt!r}"
