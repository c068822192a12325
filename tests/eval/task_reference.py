"""lm-evaluation-harness's own requests for task files, for tests/eval/test_task.cpp.

Usage: task_reference.py SPEC.json OUT.json. SPEC: {"dir": task directory, "tasks": [{"name",
"num_fewshot" (or null), "limit" (or null)}]}. Each task is loaded by the harness's TaskManager
from `dir`, given num_fewshot and the few-shot seed as evaluator.simple_evaluate gives them, and
its requests built with build_all_requests(limit=...). OUT: {name: {"docs": [{"doc_id", "args", "target"}],
"config": dump_config()}} or {name: {"error": "..."}}.
"""
import json
import logging
import sys

logging.disable(logging.WARNING)

from lm_eval.tasks import TaskManager, get_task_dict  # noqa: E402


def requests_of(task, num_fewshot, limit):
    if num_fewshot is not None:
        if task.get_config("num_fewshot") != 0:
            task.set_config(key="num_fewshot", value=num_fewshot)
    elif task.get_config("num_fewshot") is None:
        task.set_config(key="num_fewshot", value=0)
    task.set_fewshot_seed(seed=1234)
    task.build_all_requests(limit=limit)
    docs = {}
    for inst in task.instances:
        docs.setdefault(inst.doc_id, []).append(inst)
    out = []
    for doc_id in sorted(docs):
        insts = sorted(docs[doc_id], key=lambda i: i.idx)
        out.append({"doc_id": doc_id, "args": [list(i.arguments) for i in insts],
                    "target": task.doc_to_target(insts[0].doc)})
    return out


def main():
    spec = json.load(open(sys.argv[1]))
    tm = TaskManager(include_path=spec["dir"], include_defaults=False)
    result = {}
    for t in spec["tasks"]:
        try:
            task = get_task_dict([t["name"]], tm)[t["name"]]
            result[t["name"]] = {"docs": requests_of(task, t["num_fewshot"], t["limit"]),
                                 "config": task.dump_config()}
        except Exception as e:  # noqa: BLE001
            result[t["name"]] = {"error": f"{type(e).__name__}: {e}"}
    json.dump(result, open(sys.argv[2], "w"), default=str)


if __name__ == "__main__":
    main()
