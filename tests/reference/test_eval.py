"""`lmtrain eval` against lm-evaluation-harness (lm_eval, pinned in scripts/requirements.txt) on
the same models, tasks and local data: a multiple-choice, a loglikelihood, a generation and a
rolling-loglikelihood task, with few-shot examples (drawn from the evaluated split itself for one,
from a separate split for the others), on random models of two families that lmtrain writes. The
harness runs its Hugging Face backend (transformers, f32) on the model directory; lmtrain reads
the same directory and the same task files. Per document: the contexts and continuations (the
few-shot sampling reproduced), the loglikelihoods (1e-4 relative), the greedy flags, the
generations; per task: every metric.
"""
import json
import os
import random

import pytest

from conftest import DATA, lmtrain

FAMILIES = {
    "llama": ["model.hidden_size=64", "model.intermediate_size=128", "model.num_hidden_layers=2",
              "model.num_attention_heads=4", "model.num_key_value_heads=2",
              "model.max_position_embeddings=96"],
    "gemma2": ["model.hidden_size=64", "model.intermediate_size=128", "model.num_hidden_layers=2",
               "model.num_attention_heads=4", "model.num_key_value_heads=2", "model.head_dim=16",
               "model.max_position_embeddings=96", "model.sliding_window=32"],
}

WORDS = ("alpha beta gamma delta river stone cloud north quiet amber seven orbit lantern "
         "meadow copper violet harbor",)[0].split()


def make_docs(rng, n):
    docs = []
    for i in range(n):
        a, b = rng.randrange(10), rng.randrange(10)
        choices = [str(a + b)] + [str(a + b + d) for d in rng.sample([1, 2, 3, 5, 11], 3)]
        rng.shuffle(choices)
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(5, 120)))
        docs.append({"q": f"What is {a} plus {b}?", "choices": choices,
                     "label": choices.index(str(a + b)), "answer": str(a + b),
                     "text": text.capitalize() + "."})
    return docs


def write_tasks(tmp, rng):
    data = tmp / "data"
    data.mkdir()
    for split, n in (("test", 14), ("train", 6)):
        with open(data / f"{split}.jsonl", "w") as f:
            for d in make_docs(rng, n):
                f.write(json.dumps(d) + "\n")
    files = {"test": str(data / "test.jsonl"), "train": str(data / "train.jsonl")}
    common = {"dataset_path": "json", "dataset_kwargs": {"data_files": files},
              "test_split": "test"}
    tasks = {
        "lmt_mc": {**common, "output_type": "multiple_choice", "fewshot_split": "test",
                   "num_fewshot": 2, "doc_to_text": "Question: {{q}}\nAnswer:",
                   "doc_to_choice": "{{choices}}", "doc_to_target": "label",
                   "metric_list": [{"metric": "acc"}, {"metric": "acc_norm"}]},
        "lmt_ll": {**common, "output_type": "loglikelihood", "fewshot_split": "train",
                   "num_fewshot": 1, "doc_to_text": "Q: {{q}}\nA:", "doc_to_target": "{{answer}}",
                   "metric_list": [{"metric": "perplexity"}, {"metric": "acc"}]},
        "lmt_gen": {**common, "output_type": "generate_until", "fewshot_split": "train",
                    "num_fewshot": 3, "doc_to_text": "Q: {{q}}\nA:", "doc_to_target": "answer",
                    "generation_kwargs": {"until": ["\n", "Q:"], "max_gen_toks": 6,
                                          "do_sample": False},
                    "metric_list": [{"metric": "exact_match", "ignore_case": True}]},
        "lmt_roll": {**common, "output_type": "loglikelihood_rolling", "doc_to_text": "",
                     "doc_to_target": "{{text}}",
                     "metric_list": [{"metric": "word_perplexity"}, {"metric": "byte_perplexity"},
                                     {"metric": "bits_per_byte"}]},
    }
    taskdir = tmp / "tasks"
    taskdir.mkdir()
    import yaml
    for name, body in tasks.items():
        (taskdir / f"{name}.yaml").write_text(yaml.safe_dump({"task": name, **body}))
    return taskdir, list(tasks)


def harness(model_dir, taskdir, names, tmp):
    """The harness's run, its results and per-document records as its command line writes them
    (EvaluationTracker: results_*.json, samples_<task>_*.jsonl)."""
    os.environ.update({"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
                       "HF_HOME": str(tmp / "hf_home"), "TOKENIZERS_PARALLELISM": "false"})
    import lm_eval
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager
    out_dir = tmp / "harness"
    tracker = EvaluationTracker(output_path=str(out_dir))
    out = lm_eval.simple_evaluate(
        model="hf", model_args=f"pretrained={model_dir},dtype=float32", tasks=names,
        batch_size=4, device="cpu", log_samples=True, evaluation_tracker=tracker,
        task_manager=TaskManager(include_path=str(taskdir)))
    samples = out.pop("samples")
    tracker.save_results_aggregated(results=out, samples=samples)
    records = {}
    for name in names:
        tracker.save_results_samples(task_name=name, samples=samples[name])
        (path,) = out_dir.rglob(f"samples_{name}_*.jsonl")
        records[name] = [json.loads(line) for line in path.read_text().splitlines()]
    (path,) = out_dir.rglob("results_*.json")
    return json.loads(path.read_text()), records


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_eval_matches_the_harness(tmp_path, seed, family):
    rng = random.Random(seed)
    model = tmp_path / "model"
    sets = [a for s in FAMILIES[family] for a in ("--set", s)]
    lmtrain("init", "--family", family, "--seed", seed, "--tokenizer",
            DATA / "tokenizers" / "llama3_style_bpe.json", *sets, "--out", model)
    taskdir, names = write_tasks(tmp_path, rng)
    out = tmp_path / "lmtrain" / "results.json"
    out.parent.mkdir()
    lmtrain("eval", "--model", model, "--tasks",
            ",".join(str(taskdir / f"{n}.yaml") for n in names), "--batch", 3, "--out", out,
            "--log-samples")
    ours = json.loads(out.read_text())
    ref, ref_samples = harness(model, taskdir, names, tmp_path)
    ref_results = ref["results"]
    for name in names:
        got = {r["doc_id"]: r for r in map(json.loads,
               (out.parent / f"samples_{name}.jsonl").read_text().splitlines())}
        want = {r["doc_id"]: r for r in ref_samples[name]}
        assert sorted(got) == sorted(want), name
        for i, w in want.items():
            g = got[i]
            where = f"{family} {name} doc {i}"
            assert g["arguments"].keys() == w["arguments"].keys(), where
            for k, args in w["arguments"].items():
                assert g["arguments"][k]["arg_0"] == args["arg_0"], where
                if isinstance(args.get("arg_1"), str):
                    assert g["arguments"][k]["arg_1"] == args["arg_1"], where
            if name == "lmt_gen":
                assert g["filtered_resps"] == w["filtered_resps"], where
                continue
            for gr, wr in zip(g["filtered_resps"], w["filtered_resps"], strict=True):
                gl = float(gr[0] if isinstance(gr, list) else gr)
                wl = float(wr[0] if isinstance(wr, (list, tuple)) else wr)
                assert gl == pytest.approx(wl, rel=1e-4, abs=1e-5), where
                if isinstance(wr, (list, tuple)):
                    assert str(gr[1]) == str(wr[1]), where
            for metric in w["metrics"]:
                assert g[metric] == pytest.approx(w[metric], rel=1e-4), (where, metric)
        for key, value in ref_results[name].items():
            if key in ("alias", "name", "sample_len") or value == "N/A":
                continue
            assert ours["results"][name][key] == pytest.approx(value, rel=1e-4), (name, key)
        assert ours["n-shot"][name] == ref["n-shot"][name], name
        assert ours["n-samples"][name] == ref["n-samples"][name], name
        assert ours["higher_is_better"][name] == ref["higher_is_better"][name], name
