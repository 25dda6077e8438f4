#!/usr/bin/env python3
"""Combines the CUDA loss benchmark's raw outputs into bench/results/loss_cuda.json and a table.

Inputs (written by bench/run_loss_bench_cuda.sh on the GPU machine):
  --ours JSON     bench_loss_cuda --json (codistill, float32 and bf16)
  --torch JSON    torch_loss_cuda.py --json (eager, torch.compile, Liger, float64 references)
  --gen JSON      torch_loss_cuda.py --gen-check --json (the shared generator, bit for bit)
  --grad JSON     torch_loss_cuda.py --grad-check --json (codistill's loss and gradient rows
                  against float64)
--ours and --torch may be given several times (parts of one run); --merge FINAL... instead
re-combines earlier outputs of this script (their "raw" section), e.g. two device calls
that each ran some of the shapes. Prints the table (also appended to --txt) and writes --out.
Exit status 1 when a numerical check failed (the table still comes out); a loss that
differs between calls on the same input is flagged, not failed.
"""
import argparse
import datetime
import json
import sys


def key(r):
    return (r["dtype"], r["V"], r["K"])


def fmt_ms(x):
    return f"{x:.3f}" if x is not None else "-"


def ratio(a, b):
    return a / b if a is not None and b else None


def fmt_x(x):
    return f"{x:.2f}x" if x is not None else "-"


def combine(ours_docs, torch_docs, gen_docs, grad_docs, meta):
    ours = {key(r): r for d in ours_docs for r in d["results"]}
    timings = {}
    for d in torch_docs:
        for r in d["results"]:
            timings[key(r) + (r["impl"],)] = r
    refs = {key(r): r for d in torch_docs for r in d.get("references", [])}
    grads = {key(r): r for d in grad_docs for r in d.get("grad_check", [])}
    copy_ours = ours_docs[0]["copy"]["gbs"] if ours_docs else None
    copy_torch = torch_docs[0]["copy"]["gbs"] if torch_docs else None

    def t(k, impl):
        r = timings.get(k + (impl,))
        return r.get("median_ms") if r else None

    rows, checks_ok = [], True
    shapes = sorted(set(ours) | {k[:3] for k in timings}, key=lambda k: (k[0] != "float32", k[1], k[2]))
    for k in shapes:
        o = ours.get(k)
        ref = refs.get(k)
        eager = timings.get(k + ("eager",))
        row = {"dtype": k[0], "N": (o or eager or {}).get("N"), "V": k[1], "K": k[2]}
        row["codistill"] = None if o is None else {
            f: o[f] for f in ("median_ms", "min_ms", "bytes", "gbs", "pct_copy", "loss", "ce", "distill",
                              "deterministic")}
        for impl in ("eager", "compile", "liger", "liger_jsd", "liger_ce_op", "liger_kldiv_op", "liger_jsd_op"):
            r = timings.get(k + (impl,))
            if r is None:
                continue
            row[impl] = {f: r[f] for f in ("median_ms", "min_ms", "gbs", "pct_copy", "loss", "first_call_s",
                                           "loss_rel_err_vs_float64", "skipped", "error") if f in r}
        ours_ms = o["median_ms"] if o else None
        row["speedup"] = {impl: ratio(t(k, impl), ours_ms)
                          for impl in ("eager", "compile", "liger", "liger_jsd") if t(k, impl)}
        if o and ref:
            row["loss_float64"] = ref["loss"]
            row["codistill_loss_rel_err_vs_float64"] = abs(o["loss"] - ref["loss"]) / abs(ref["loss"])
        if o and eager and "loss" in eager:
            row["codistill_vs_eager_loss_rel_diff"] = abs(o["loss"] - eager["loss"]) / abs(eager["loss"])
        g = grads.get(k)
        if g:
            row["grad_check"] = {f: g[f] for f in ("loss_rel_err", "grad_rel_err", "tolerance", "ok")}
            checks_ok &= g["ok"]
        rows.append(row)
    gen_ok = all(d["gen_check"]["ok"] for d in gen_docs) if gen_docs else None
    if gen_ok is False:
        checks_ok = False
    t0 = torch_docs[0] if torch_docs else {}
    doc = {"benchmark": "loss_cuda", **meta,
           "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "torch": t0.get("torch"), "triton": t0.get("triton"), "liger": t0.get("liger"),
           "liger_note": t0.get("liger_note"),
           "copy_gbs": {"codistill_memcpy_d2d": copy_ours, "torch_copy": copy_torch},
           "timing": (ours_docs[0]["timing"] if ours_docs else None),
           "timing_torch": t0.get("timing"),
           "traffic": "(1 + K) reads + 1 write of N*V elements (4 bytes float32, 2 bfloat16); "
                      "% copy = that over the device-to-device copy bandwidth of the same side",
           "params": {"temperature": 2.0, "weight": 1.0, "hard_weight": 1.0},
           "generator_check_ok": gen_ok, "checks_ok": checks_ok,
           "codistill_deterministic": all(o.get("deterministic", True) for o in ours.values()),
           "results": rows,
           "raw": {"ours": ours_docs, "torch": torch_docs, "gen": gen_docs, "grad": grad_docs}}
    return doc


def table(doc):
    lines = []
    c = doc["copy_gbs"]
    lines.append(f"{doc.get('gpu', '?')}, driver {doc.get('driver', '?')}, commit {doc.get('commit', '?')}; "
                 f"torch {doc.get('torch')}, triton {doc.get('triton')}, liger {doc.get('liger')}")
    lines.append("device copy (read + write): codistill memcpy "
                 + (f"{c['codistill_memcpy_d2d']:.0f}" if c["codistill_memcpy_d2d"] else "-") + " GB/s, torch copy_ "
                 + (f"{c['torch_copy']:.0f}" if c["torch_copy"] else "-") + " GB/s")
    lines.append("speed-up = their time / codistill's time (fwd+bwd, median wall time per call)")
    hdr = (f"{'dtype':<8} {'V':>6} {'K':>1} {'ours ms':>8} {'GB/s':>6} {'%copy':>5} {'eager ms':>9} {'compile':>8} "
           f"{'liger':>8} {'lgr-jsd':>8} {'vs eager':>8} {'vs comp':>8} {'vs liger':>8} {'vs jsd':>7} "
           f"{'loss vs f64':>11} {'vs eager':>8} {'grad err':>8}")
    lines.append(hdr)
    for r in doc["results"]:
        o = r.get("codistill") or {}

        def ms(impl):
            x = r.get(impl) or {}
            return x.get("median_ms")

        s = r.get("speedup", {})
        g = r.get("grad_check") or {}
        lf = r.get("codistill_loss_rel_err_vs_float64")
        le = r.get("codistill_vs_eager_loss_rel_diff")
        gbs = f"{o['gbs']:.0f}" if o else "-"
        pct = f"{o['pct_copy']:.0f}%" if o else "-"
        lf = f"{lf:.1e}" if lf is not None else "-"
        le = f"{le:.1e}" if le is not None else "-"
        ge = f"{g['grad_rel_err']:.1e}" if g else "-"
        lines.append(
            f"{r['dtype']:<8} {r['V']:>6} {r['K']:>1} {fmt_ms(o.get('median_ms')):>8} {gbs:>6} {pct:>5} "
            f"{fmt_ms(ms('eager')):>9} {fmt_ms(ms('compile')):>8} {fmt_ms(ms('liger')):>8} "
            f"{fmt_ms(ms('liger_jsd')):>8} {fmt_x(s.get('eager')):>8} {fmt_x(s.get('compile')):>8} "
            f"{fmt_x(s.get('liger')):>8} {fmt_x(s.get('liger_jsd')):>7} {lf:>11} {le:>8} {ge:>8}"
            + ("" if not g or g["ok"] else "  CHECK FAILED")
            + ("" if not o or o.get("deterministic", True) else "  NOT DETERMINISTIC"))
    ops = [r for r in doc["results"] if any(r.get(i, {}).get("median_ms") for i in
                                            ("liger_ce_op", "liger_kldiv_op", "liger_jsd_op"))]
    if ops:
        lines.append("Liger ops alone (one op, fwd+bwd), for scale: ms, and codistill's whole loss / the op")
        lines.append(f"{'dtype':<8} {'V':>6} {'K':>1} {'CE ms':>8} {'KLDiv ms':>9} {'JSD ms':>8} "
                     f"{'ours/CE':>8} {'ours/KLD':>8} {'ours/JSD':>8}")
        for r in ops:
            ours_ms = (r.get("codistill") or {}).get("median_ms")
            m = {i: (r.get(i) or {}).get("median_ms") for i in ("liger_ce_op", "liger_kldiv_op", "liger_jsd_op")}
            lines.append(f"{r['dtype']:<8} {r['V']:>6} {r['K']:>1} {fmt_ms(m['liger_ce_op']):>8} "
                         f"{fmt_ms(m['liger_kldiv_op']):>9} {fmt_ms(m['liger_jsd_op']):>8} "
                         f"{fmt_x(ratio(ours_ms, m['liger_ce_op'])):>8} {fmt_x(ratio(ours_ms, m['liger_kldiv_op'])):>8} "
                         f"{fmt_x(ratio(ours_ms, m['liger_jsd_op'])):>8}")
    skipped = sorted({f"{i}: {x.get('skipped') or x.get('error')}" for r in doc["results"]
                      for i, x in r.items() if isinstance(x, dict) and (x.get("skipped") or x.get("error"))})
    for s in skipped[:12]:
        lines.append(f"not measured: {s}")
    gen = doc.get("generator_check_ok")
    lines.append(f"inputs identical on both sides (generator check): {'yes' if gen else 'NO' if gen is False else 'not run'}; "
                 f"numerical checks against float64 {'passed' if doc['checks_ok'] else 'DID NOT PASS'}; "
                 f"codistill's loss the same bits in every call: {'yes' if doc['codistill_deterministic'] else 'NO'}")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ours", action="append", default=[])
    ap.add_argument("--torch", action="append", default=[])
    ap.add_argument("--gen", action="append", default=[])
    ap.add_argument("--grad", action="append", default=[])
    ap.add_argument("--merge", nargs="+", default=[], metavar="FINAL")
    ap.add_argument("--gpu", default=None)
    ap.add_argument("--driver", default=None)
    ap.add_argument("--commit", default=None)
    ap.add_argument("--host", default=None)
    ap.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE", help="more top-level fields")
    ap.add_argument("--out", help="write the combined JSON here")
    ap.add_argument("--txt", help="append the table here")
    args = ap.parse_args()

    def load(paths):
        return [json.load(open(p)) for p in paths]

    ours, torch_, gen, grad = load(args.ours), load(args.torch), load(args.gen), load(args.grad)
    meta = {}
    for m in load(args.merge):
        ours += m["raw"]["ours"]
        torch_ += m["raw"]["torch"]
        gen += m["raw"]["gen"]
        grad += m["raw"]["grad"]
        for f in ("gpu", "driver", "commit", "host"):
            meta.setdefault(f, m.get(f))
    for f in ("gpu", "driver", "commit", "host"):
        if getattr(args, f):
            meta[f] = getattr(args, f)
    for kv in args.meta:
        k, _, v = kv.partition("=")
        meta[k] = v
    if not ours and not torch_:
        ap.error("nothing to combine: give --ours/--torch or --merge")
    doc = combine(ours, torch_, gen, grad, meta)
    lines = table(doc)
    print("\n".join(lines))
    if args.txt:
        with open(args.txt, "a") as f:
            f.write("== side by side\n" + "\n".join(lines) + "\n")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2)
    return 0 if doc["checks_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
