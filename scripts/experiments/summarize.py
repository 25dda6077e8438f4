#!/usr/bin/python3
"""Summarizes an independent_vs_codistill.sh output folder: per setting, the workers' test
accuracy and loss (mean ± std over seeds and workers), the 2-model ensemble and churn of
workers 0 and 1 of each run, and retrain churn (worker 0 of runs with different seeds).
Writes OUT/results.json and prints a table.
  summarize.py OUT INSPECT "SEEDS" "SETTINGS"
"""
import glob
import json
import statistics as st
import subprocess
import sys

out, inspect, seeds, settings = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split()


def final(run, w):
    return sorted(glob.glob(f"{out}/{run}/worker-{w:03d}/ckpt-*.h5"))[-1]


def done(run, w):
    with open(f"{out}/{run}/worker-{w:03d}/metrics.jsonl") as f:
        return [json.loads(l) for l in f if '"done"' in l][-1]


def js(*args):
    res = subprocess.run([inspect, *args, "--json"], check=True, capture_output=True, text=True)
    return json.loads(res.stdout)


rows = {}
for seed in seeds:
    for setting in settings:
        kind, n = setting.split(":")
        n = int(n)
        run = f"{kind}-n{n}-s{seed}"
        ws = [done(run, w) for w in range(n)]
        r = rows.setdefault(f"{kind}-n{n}", {"acc": [], "loss": [], "pair_churn": [], "ensemble2": [], "w0": [],
                                             "acc_by_worker": [[] for _ in range(n)],
                                             "loss_by_worker": [[] for _ in range(n)]})
        r["acc"] += [w["accuracy"] for w in ws]
        for i, w in enumerate(ws):  # a mixed cohort (worker_models): each model on its own
            r["acc_by_worker"][i].append(w["accuracy"])
            r["loss_by_worker"][i].append(w["loss"])
        r["loss"] += [w["loss"] for w in ws]
        r["pair_churn"].append(js("churn", final(run, 0), final(run, 1))["churn"])
        r["ensemble2"].append(js("eval", final(run, 0), final(run, 1))["ensemble"]["accuracy"])
        r["w0"].append(final(run, 0))
for r in rows.values():
    ck = r.pop("w0")
    r["retrain_churn"] = [js("churn", ck[i], ck[j])["churn"] for i in range(len(ck)) for j in range(i + 1, len(ck))]


def sd(v):
    return st.stdev(v) if len(v) > 1 else 0.0


def ms(v):
    return f"{100 * st.mean(v):.2f} ± {100 * sd(v):.2f}"


print(f"{'setting':<14} {'workers acc %':>16} {'test loss':>17} {'2-model ens %':>16} {'pair churn %':>14} {'retrain churn %':>16}")
for k, r in rows.items():
    rc = ms(r["retrain_churn"]) if r["retrain_churn"] else "-"
    print(f"{k:<14} {ms(r['acc']):>16} {st.mean(r['loss']):>8.4f} ± {sd(r['loss']):.4f} {ms(r['ensemble2']):>16} "
          f"{ms(r['pair_churn']):>14} {rc:>16}")
print("per worker (a mixed cohort's models differ by worker):")
for k, r in rows.items():
    print(f"{k:<14} " + "  ".join(f"w{i} {ms(a)}% loss {st.mean(l):.4f} ± {sd(l):.4f}"
                                  for i, (a, l) in enumerate(zip(r["acc_by_worker"], r["loss_by_worker"]))))
with open(f"{out}/results.json", "w") as f:
    json.dump(rows, f, indent=1)
