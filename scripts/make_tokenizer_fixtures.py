#!/usr/bin/env python3
"""Makes the SentencePiece-style tokenizer.json fixtures and the reference ids of every
tokenizer.json fixture in tests/data/tokenizers, with Hugging Face tokenizers itself (the Python
package of the reference tier's environment, scripts/setup.sh). Python is needed only to
regenerate the fixtures, never to build or test:

  ~/.cache/lmtrain/venv/bin/python3 scripts/make_tokenizer_fixtures.py

(It replaces make_tokenizer_fixtures.mjs, which used HF's Node bindings through npm; the files it
writes are the same but for hf_ref.json's "generator" line.)

1. llama2_style_bpe.json, metaspace_bpe.json, metaspace_split_bpe.json, metaspace_never_bpe.json,
   split_behaviors_bpe.json:
   sp_bpe.vocab's pieces (ids in order) and scores converted the way transformers' LlamaConverter
   does (merges: every split of a piece into two vocab pieces, ordered by the piece's score), with
   the "▁" handling of Llama 2 (normalizer Prepend + Replace) or of a Metaspace pre-tokenizer with
   prepend_scheme first / always / never, split false / true, or Gemma's Replace-only normalizer
   with Split pre-tokenizers of every behavior. Each is loaded into HF and saved back, so the files
   are what HF writes.
2. hf_ref.json: for each tokenizer.json fixture (these five, the byte-level ones, and the file that
   `lmtrain tokenizer train` wrote, lmtrain_trained_bpe.json), HF's ids without and with special
   tokens and HF's decode of the ids, for ref_ids.json's texts plus harder ones.
"""
import json
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer

DIR = Path(__file__).resolve().parent.parent / "tests" / "data" / "tokenizers"

# ---- 1. SentencePiece-style tokenizer.json files from sp_bpe.vocab ----
PIECES = []
for line in (DIR / "sp_bpe.vocab").read_text(encoding="utf-8").split("\n"):
    if line:
        p, s = line.split("\t")[:2]
        PIECES.append((p, float(s)))
VOCAB = {}
for i, (p, _) in enumerate(PIECES):
    VOCAB[p] = i


def llama_merges():
    """transformers' SentencePieceExtractor.extract(vocab_scores)."""
    merges = []
    for piece, score in PIECES:
        cps = list(piece)
        local = []
        for k in range(1, len(cps)):
            left, right = "".join(cps[:k]), "".join(cps[k:])
            if left in VOCAB and right in VOCAB:
                local.append((left, right, score))
        local.sort(key=lambda m: (VOCAB[m[0]], VOCAB[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: (-m[2], -len(m[0]), -len(m[1])))
    return [[left, right] for left, right, _ in merges]


def special(content, id_):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": True}


BASE_ADDED = [special("<unk>", 0), special("<s>", 1), special("</s>", 2)]


def bpe_model(**extra):
    return {"type": "BPE", "dropout": None, "unk_token": "<unk>",
            "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": True,
            "byte_fallback": True, "ignore_merges": False, "vocab": VOCAB,
            "merges": llama_merges(), **extra}


LLAMA_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
    {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}


def template(single):
    return {"type": "TemplateProcessing",
            "single": [{"Sequence": {"id": "A", "type_id": 0}} if s == "$A"
                       else {"SpecialToken": {"id": s, "type_id": 0}} for s in single],
            "pair": [],
            "special_tokens": {s: {"id": s, "ids": [VOCAB[s]], "tokens": [s]}
                               for s in single if s != "$A"}}


def metaspace(scheme, split):
    return {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split}


def head():
    return {"version": "1.0", "truncation": None, "padding": None}


SP_STYLE = {
    # Llama 2 / Mistral (transformers' legacy conversion).
    "llama2_style_bpe": {
        **head(),
        "added_tokens": BASE_ADDED + [{"id": 600, "content": "<|sep|>", "single_word": False,
                                       "lstrip": False, "rstrip": False, "normalized": True,
                                       "special": False}],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": None, "post_processor": template(["<s>", "$A"]),
        "decoder": LLAMA_DECODER, "model": bpe_model()},
    # Llama 2 converted with legacy=false: Metaspace, prepend only at the start of the text.
    "metaspace_bpe": {
        **head(), "added_tokens": BASE_ADDED, "normalizer": None,
        "pre_tokenizer": metaspace("first", False),
        "post_processor": template(["<s>", "$A", "</s>"]), "decoder": LLAMA_DECODER,
        "model": bpe_model()},
    # Metaspace that splits words, prepends to every segment, decoder Metaspace, ignore_merges,
    # added tokens that strip whitespace (lstrip / rstrip).
    "metaspace_split_bpe": {
        **head(),
        "added_tokens": BASE_ADDED + [{**special("<eos>", 601), "rstrip": True},
                                      {**special("<|user|>", 600), "lstrip": True,
                                       "rstrip": True}],
        "normalizer": None, "pre_tokenizer": metaspace("always", True), "post_processor": None,
        "decoder": metaspace("always", True), "model": bpe_model(ignore_merges=True)},
    # No prepend, no byte fallback: unknown characters become one fused <unk>.
    "metaspace_never_bpe": {
        **head(), "added_tokens": BASE_ADDED, "normalizer": None,
        "pre_tokenizer": metaspace("never", True), "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "Fuse"}]},
        "model": bpe_model(byte_fallback=False, fuse_unk=True)},
    # Gemma-like normalizer (Replace only, no prepend) and a chain of Split pre-tokenizers that
    # exercises every split behavior.
    "split_behaviors_bpe": {
        **head(), "added_tokens": BASE_ADDED,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "[0-9]"}, "behavior": "Isolated",
             "invert": False},
            {"type": "Split", "pattern": {"String": "-"}, "behavior": "Removed", "invert": False},
            {"type": "Split", "pattern": {"Regex": "[.,!?;:]"}, "behavior": "Contiguous",
             "invert": False},
            {"type": "Split", "pattern": {"String": "\n"}, "behavior": "MergedWithPrevious",
             "invert": False},
            {"type": "Split", "pattern": {"String": "▁"}, "behavior": "MergedWithNext",
             "invert": False}]},
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": bpe_model()},
}

# ---- 2. reference ids ----
HARD = ["", " ", "  ", "   leading", "trailing   ", "many     spaces   here", "\n",
        "line1\nline2\n\nline3\n", "\ttabs\t\tand\tmore\t", "cr\r\nlf",
        "🙂👍🏽 family: 👨‍👩‍👧‍👦", "emoji at the end 🙂", "中文字符，日本語のテキスト、한국어",
        "e\u0301 a\u0308 n\u0303 combining vs é ä ñ", "mixed Ελληνικά русский العربية हिन्दी",
        "digits 1234567 and 3.14159", "DON'T it's we've", "a\u00a0non-breaking\u2003em space",
        "nul\u0000byte and \u0001\u007f controls", "<s>Hello</s> world", "Hello <s> world </s>",
        "<s> leading special", "<unk>", "a<unk>b", "x <|sep|> y<|sep|>z", "<|user|>hi<eos>",
        "<|endoftext|> in text <|end_of_text|><|begin_of_text|>", "▁already▁has▁metaspace",
        " ▁ mixed ▁", "<0x41> a literal byte token", "ẞ ǅ ﬁ ligature \U0010FFFF",
        "the the the the quick quick brown", "Supercalifragilisticexpialidocious",
        "hi  <|user|>  there", "x\t<eos>\n y <eos>", " \u00a0<|user|>\u2003",
        "well-known, right?! yes... 12-34 a--b\n\nnext\n", "-leading-and-trailing-",
        "!!!?? 2024-11-23"]
NAMES = ["llama2_style_bpe", "metaspace_bpe", "metaspace_split_bpe", "metaspace_never_bpe",
         "split_behaviors_bpe", "bytelevel_bpe", "llama3_style_bpe", "lmtrain_trained_bpe"]


def main():
    for name, spec in SP_STYLE.items():
        Tokenizer.from_str(json.dumps(spec)).save(str(DIR / f"{name}.json"), pretty=False)
    ref = json.loads((DIR / "ref_ids.json").read_text(encoding="utf-8"))
    texts = ref["texts"] + HARD
    out = {"generator": f"scripts/make_tokenizer_fixtures.py, HF tokenizers "
                        f"{tokenizers.__version__} (Python)",
           "texts": texts, "tokenizers": {}}
    for name in NAMES:
        path = DIR / f"{name}.json"
        if not path.exists():
            raise SystemExit(f"missing {path}")
        tok = Tokenizer.from_file(str(path))
        r = {"ids": [], "ids_special": [], "decoded": []}
        for t in texts:
            ids = tok.encode(t, add_special_tokens=False).ids
            r["ids"].append(ids)
            r["ids_special"].append(tok.encode(t, add_special_tokens=True).ids)
            r["decoded"].append(tok.decode(ids, skip_special_tokens=False))
        out["tokenizers"][name] = r
    # As JSON.stringify(out): compact, non-ASCII written as it is.
    (DIR / "hf_ref.json").write_text(
        json.dumps(out, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {len(SP_STYLE)} tokenizer.json files and hf_ref.json ({len(texts)} texts x "
          f"{len(NAMES)} tokenizers) with HF tokenizers {tokenizers.__version__}")


if __name__ == "__main__":
    main()
