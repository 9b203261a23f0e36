"""Fit the ask-relevance threshold (src/prefcall/data/relevance.json) for an embedder.

Tuning items: the tune part of the frozen split (src/prefcall/data/splits.json, `prefcall split show`) of BFCL
irrelevance (requests no function fits), BFCL simple_python and ACEBench special_incomplete (requests with their
gold function); never a report item. Rule: the largest threshold (two decimals, rounded down) that keeps at least
98% of the fitting requests.

    HF_HUB_OFFLINE=1 python scripts/fit_relevance.py [EMBEDDER_FOLDER] [--ranges]

--ranges reads the item ranges the shipped threshold was fitted on before the split file existed (BFCL irrelevance
50-149, simple_python 50-99, ACEBench special_incomplete 30-49; all of them lie in the tune split).
"""
import json
import math
import sys

import numpy as np

from prefcall.engine.embedder import SentenceEmbedder
from prefcall.evaluation import splits
from prefcall.evaluation.data import shared_data_dir
from prefcall.strategies.relevance import function_text

D = shared_data_dir()
RANGES = "--ranges" in sys.argv
args = [a for a in sys.argv[1:] if a != "--ranges"]


def lines(path):
    return [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]


def tuning(name, legacy):
    """The tune items of a split source (or, with --ranges, the legacy slice)."""
    rows = lines(D / name)
    if RANGES:
        return rows[legacy]
    keep = splits.tune_keys(D / name)
    if keep is None:
        raise SystemExit(f"{D / name} is not the split source: rebuild the split (prefcall split build)")
    return [r for r in rows if str(r["id"]) in keep]


e = SentenceEmbedder(args[0] if args else None)
pairs = []
for r in tuning("bfcl/BFCL_v4_irrelevance.json", slice(50, 150)):
    pairs.append((0, r["question"][0][-1]["content"], r["function"][0]))
for r in tuning("bfcl/BFCL_v4_simple_python.json", slice(50, 100)):
    pairs.append((1, r["question"][0][-1]["content"], r["function"][0]))
gold = {g["id"]: g for g in lines(D/"acebench/possible_answer/data_special_incomplete.json")}
for r in tuning("acebench/data_special_incomplete.json", slice(30, 50)):
    q = r["question"]; q = q[6:] if q.startswith("user: ") else q
    name = next(iter(gold[r["id"]]["ground_truth"]))
    pairs.append((1, q, next(f for f in r["function"] if f["name"] == name)))
cos = []
for label, q, f in pairs:
    v = e.embed([q, function_text(f["name"], f["description"])])
    cos.append((label, float(v[0] @ v[1])))
pos = np.array([c for l, c in cos if l]); neg = np.array([c for l, c in cos if not l])
auc = np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg])
need = math.ceil(0.98 * len(pos))
t = math.floor(np.sort(pos)[::-1][need - 1] * 100) / 100
print(json.dumps({"embedder": e.name, "n_pos": len(pos), "n_neg": len(neg), "auc": round(auc, 3), "threshold": t,
                  "keep_pos": round(float(np.mean(pos >= t)), 3), "reject_neg": round(float(np.mean(neg < t)), 3)}))
