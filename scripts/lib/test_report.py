#!/usr/bin/python3
"""The end of scripts/run_tests.sh: from CTest's JUnit reports (LABEL=FILE ...), the slowest
tests, and every skipped test counted by its reason (the first "skipped: REASON" line it
printed). Exits 1 when a test was skipped for any reason but a missing GPU: CI has none,
so the [cuda] tests skip there ("skipped: no CUDA device..."); anything else that skips
did not do its work and must not pass unnoticed.

  scripts/lib/test_report.py [--slowest N] LABEL=JUNIT.xml ...
"""
import argparse
import re
import sys
import xml.etree.ElementTree as ET

ALLOWED = re.compile(r"^no CUDA device")  # [cuda] tests on a machine without (enough) GPUs
REASON = re.compile(r"^skipped: (.*)$", re.M)


def reason_of(case):
    """The first "skipped: ..." line of the test's output, its details in parentheses cut."""
    out = case.findtext("system-out") or ""
    m = REASON.search(out)
    if not m:
        return "(no reason printed)"
    return re.sub(r"\s*\(.*$", "", m.group(1)).strip().rstrip(":")


def load(spec):
    label, _, path = spec.partition("=")
    if not path:
        sys.exit("test_report.py: expected LABEL=FILE, got %r" % spec)
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        sys.exit("test_report.py: cannot read %s: %s" % (path, e))
    return label, list(root.iter("testcase"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--slowest", type=int, default=10)
    ap.add_argument("reports", nargs="+", metavar="LABEL=JUNIT.xml")
    args = ap.parse_args()
    timed, skips = [], {}
    for spec in args.reports:
        label, cases = load(spec)
        for c in cases:
            name = c.get("name", "?")
            timed.append((float(c.get("time") or 0.0), label, name))
            if c.find("skipped") is not None:
                skips.setdefault(reason_of(c), []).append("%s: %s" % (label, name))

    print("== the %d slowest tests" % args.slowest)
    for t, label, name in sorted(timed, reverse=True)[: args.slowest]:
        print("%8.1f s  %-10s %s" % (t, label, name))

    total = sum(len(v) for v in skips.values())
    print("== skipped: %d test(s)" % total)
    bad = []
    for reason, names in sorted(skips.items(), key=lambda kv: -len(kv[1])):
        ok = bool(ALLOWED.match(reason))
        print("%6d  %s%s" % (len(names), reason, "" if ok else "   <- not allowed"))
        if not ok:
            bad.extend(names)
    if bad:
        print("test_report.py: %d test(s) skipped for a reason other than a missing GPU:" % len(bad),
              file=sys.stderr)
        for n in bad:
            print("  " + n, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
