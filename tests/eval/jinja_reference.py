"""Renders templates with lm-evaluation-harness's own Jinja environment, for test_jinja.cpp.

Usage: jinja_reference.py CASES.json OUT.json. CASES: [{"template", "doc"}]. OUT: per case
{"out": rendered} or {"error": exception type}.
"""
import json
import sys

from lm_eval.utils import apply_template

cases = json.load(open(sys.argv[1]))
out = []
for c in cases:
    try:
        out.append({"out": apply_template(c["template"], c["doc"])})
    except Exception as e:  # noqa: BLE001
        out.append({"error": type(e).__name__ + ": " + str(e)})
json.dump(out, open(sys.argv[2], "w"))
