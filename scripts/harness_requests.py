#!/usr/bin/env python3
"""lm-evaluation-harness's Hugging Face backend (HFLM, f32 on the CPU) answering requests, for
lmtrain eval's reference test (tests/reference/test_eval_requests.cpp).

  harness_requests.py MODEL_DIR REQUESTS.json OUT.json

REQUESTS.json: {"loglikelihood": [[context, continuation], ...], "rolling": [text, ...],
"generate": [[context, until, max_gen_toks], ...]}. OUT.json: {"loglikelihood": [[logprob,
greedy], ...], "rolling": [logprob, ...], "generate": [text, ...], "max_length": N,
"tokens": [[context ids, continuation ids], ...] (HFLM's encoding of each loglikelihood
request)}.
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.models.huggingface import HFLM  # noqa: E402


def main():
    model_dir, req_path, out_path = sys.argv[1:4]
    req = json.load(open(req_path))
    lm = HFLM(pretrained=model_dir, dtype="float32", device="cpu", batch_size=4)

    def inst(kind, args, i):
        return Instance(request_type=kind, doc={}, arguments=args, idx=i)

    out = {"max_length": lm.max_length}
    ll = [inst("loglikelihood", tuple(a), i) for i, a in enumerate(req["loglikelihood"])]
    out["loglikelihood"] = [[float(a), bool(b)] for a, b in lm.loglikelihood(ll)]
    out["tokens"] = [list(lm._encode_pair(c, x)) if c else None for c, x in req["loglikelihood"]]
    roll = [inst("loglikelihood_rolling", (t,), i) for i, t in enumerate(req["rolling"])]
    out["rolling"] = [float(x) for x in lm.loglikelihood_rolling(roll)]
    gen = [inst("generate_until", (c, {"until": u, "max_gen_toks": n, "do_sample": False}), i)
           for i, (c, u, n) in enumerate(req["generate"])]
    out["generate"] = lm.generate_until(gen)
    json.dump(out, open(out_path, "w"))


if __name__ == "__main__":
    main()
