#!/usr/bin/python3
"""Summarizes an independent_vs_codistill.sh output folder of a text (language model) run:
per setting, the workers' held-out loss (nats/token) at the last evaluation and at the
best one (mean ± std over seeds and workers), and for each codistill-nN setting the paper's
measure: the steps its workers take to reach the final held-out loss of the independent
workers on the same shards (indep-nN of the same seed), linearly interpolated between
evaluations. Text checkpoints have no codistill-inspect eval/churn: everything here comes
from the workers' own eval events (metrics.jsonl). Writes OUT/results.json, prints tables.
  summarize_text.py OUT "SEEDS" "SETTINGS"
"""
import json
import statistics as st
import sys

from eval_curves import curve, sd, steps_to

out, seeds, settings = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()


def events(run, w):
    with open(f"{out}/{run}/worker-{w:03d}/metrics.jsonl") as f:
        return [json.loads(l) for l in f]


runs = {}  # (kind, n, seed) -> list of per-worker curves
unigram = None
for seed in seeds:
    for setting in settings:
        kind, n = setting.split(":")
        n = int(n)
        curves = []
        for w in range(n):
            evs = events(f"{kind}-n{n}-s{seed}", w)
            unigram = next((e["unigram_ce"] for e in evs if e["event"] == "data"), unigram)
            c = curve(evs)
            if not c:
                sys.exit(f"{out}/{kind}-n{n}-s{seed}/worker-{w:03d}: no eval events")
            curves.append(c)
        runs[(kind, n, seed)] = curves

rows = {}
for (kind, n, seed), curves in runs.items():
    r = rows.setdefault(f"{kind}-n{n}", {"final": [], "best": [], "final_step": None, "reach": [], "unreached": 0,
                                         "indep_final": []})
    r["final"] += [c[-1][1] for c in curves]
    r["best"] += [min(l for _, l in c) for c in curves]
    r["final_step"] = curves[0][-1][0]
    if kind == "codistill" and ("indep", n, seed) in runs:
        target = st.mean(c[-1][1] for c in runs[("indep", n, seed)])
        r["indep_final"].append(target)
        for c in curves:
            s = steps_to(c, target)
            if s is None:
                r["unreached"] += 1
            else:
                r["reach"].append(s)

base = f"{unigram:.4f}" if unigram is not None else "unknown"
print(f"held-out loss, nats/token (unigram baseline {base}); mean ± std over seeds x workers")
print(f"{'setting':<15} {'workers':>7} {'final loss':>18} {'best loss':>18} {'perplexity':>11}")
for k, r in rows.items():
    print(f"{k:<15} {len(r['final']):>7} {st.mean(r['final']):>9.4f} ± {sd(r['final']):.4f} "
          f"{st.mean(r['best']):>9.4f} ± {sd(r['best']):.4f} {2.718281828459045 ** st.mean(r['final']):>11.2f}")
print("steps to reach the independent workers' final loss (same shards, same seed):")
for k, r in rows.items():
    if not r["indep_final"]:
        continue
    total = r["final_step"]
    if r["reach"]:
        m = st.mean(r["reach"])
        print(f"{k:<15} target {st.mean(r['indep_final']):.4f}: {m:.0f} ± {sd(r['reach']):.0f} steps of {total} "
              f"({100 * m / total:.0f}%; {total / m:.2f}x fewer), {r['unreached']} of "
              f"{len(r['reach']) + r['unreached']} workers never reached it")
    else:
        print(f"{k:<15} target {st.mean(r['indep_final']):.4f}: not reached by any worker in {total} steps")
with open(f"{out}/results.json", "w") as f:
    json.dump({"unigram_ce": unigram, "settings": rows,
               "curves": {f"{k}-n{n}-s{s}": c for (k, n, s), c in runs.items()}}, f, indent=1)
