#!/usr/bin/env python3
"""Writes the chat dataset of configs/sft-lora.yaml: a task a model pretrained on English text
cannot do until it is fine-tuned, with an exact answer, so that learning shows as the exact-match
rate of greedy answers on held-out questions.

The task: a user turn "Reverse: <three words>" and the assistant's answer, the same words in
reverse order ("Reverse: red fox jumps" -> "jumps fox red"). The words come from a list of common
English words, and no held-out question's triple appears in the training set, so a held-out answer
cannot be remembered; it must be computed.

  python3 scripts/make_sft_task.py --out DIR [--train 4000] [--heldout 200] [--seed 1]

writes DIR/train.jsonl (chats: {"messages": [{"role": "user", ...}, {"role": "assistant", ...}]})
and DIR/heldout.jsonl (one {"prompt": ..., "answer": ...} per line). Standard library only.
"""
import argparse
import json
import random
from pathlib import Path

WORDS = ("red blue green cat dog fox bird fish tree river stone house road night day sun moon "
         "star rain snow wind fire water light dark old new big small fast slow warm cold king "
         "queen ship book song door window garden city forest mountain sea").split()


def question(rng):
    return tuple(rng.sample(WORDS, 3))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--train", type=int, default=4000)
    ap.add_argument("--heldout", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    heldout = set()
    while len(heldout) < a.heldout:
        heldout.add(question(rng))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "train.jsonl", "w") as f:
        n = 0
        while n < a.train:
            q = question(rng)
            if q in heldout:
                continue
            f.write(json.dumps({"messages": [
                {"role": "user", "content": "Reverse: " + " ".join(q)},
                {"role": "assistant", "content": " ".join(reversed(q))}]}) + "\n")
            n += 1
    with open(out / "heldout.jsonl", "w") as f:
        for q in sorted(heldout):
            f.write(json.dumps({"prompt": "Reverse: " + " ".join(q),
                                "answer": " ".join(reversed(q))}) + "\n")

if __name__ == "__main__":
    main()
