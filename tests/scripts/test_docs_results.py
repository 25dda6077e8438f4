"""docs/results.md is organized by claim, each with its newest number and raw output (the design's
section 10, Benchmarks): every file it links or cites under docs/results/ or
bench/results/ exists, every link to one of its own sections names a heading it has, it stays
within MAX_LINES, and neither its headings nor its prose nor any README.md under docs/results/
or bench/results/ reads as a development diary (numbered work periods, "earlier today", "this
session", "we tried"). Raw file names that hold such tokens (`..._s19.txt`) may stay: code
spans and link targets are not prose. Standard library only; needs no build."""
import os
import re
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import support  # noqa: E402

RESULTS_MD = os.path.join(support.SOURCE, "docs", "results.md")
RAW_DIRS = ("docs/results", "bench/results")
MAX_LINES = 700

ORDINALS = ("first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth "
            "thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth twentieth "
            "twenty-first twenty-second twenty-third twenty-fourth twenty-fifth thirtieth").split()
# Each: (pattern, what it is). Matched against prose (code spans and link targets removed).
DIARY = [
    (re.compile(r"(?<![\w/.-])sessions?\b(?![.-]\w|_)", re.I), "a work session"),
    (re.compile(r"\b(%s)\s+(work\s+)?(session|period|phase|round of work)\b" % "|".join(ORDINALS), re.I),
     "a numbered work period"),
    (re.compile(r"\bphase\s+\d+\s+of\s+the\s+work\b", re.I), "a numbered work phase"),
    (re.compile(r"(?<![\w/.-])s\d{1,2}\b(?![\w.-])"), "a work period as 'sN'"),
    (re.compile(r"\b(earlier|later)\s+today\b|\bthis\s+morning\b|\byesterday\b", re.I), "a relative date"),
    (re.compile(r"\bwe\s+(tried|attempted)\b|\bI\s+(tried|attempted|have not found|did not find)\b", re.I),
     "who tried what"),
]

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`[^`]*`")
# A path under one of the raw folders, cited in a code span or in prose: repo-relative.
CITED = re.compile(r"(?<![\w./-])((?:docs/results|bench/results)/[\w./{},*-]*[\w}*])")


def prose_and_code(text):
    """(prose lines, code-block lines), each as (line number, text); fenced blocks are code."""
    prose, code, fenced = [], [], False
    for n, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        (code if fenced else prose).append((n, line))
    return prose, code


def headings(text):
    return [(n, line) for n, line in prose_and_code(text)[0] if re.match(r"#{1,6}\s", line)]


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    title = re.sub(r"^#+\s*", "", heading).strip().lower()
    title = re.sub(r"[^\w\- ]", "", title)
    return title.replace(" ", "-")


def expand_braces(path):
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    out = []
    for alt in m.group(1).split(","):
        out += expand_braces(path[: m.start()] + alt + path[m.end():])
    return out


def under_raw_dirs(rel):
    return any(rel == d or rel.startswith(d + "/") for d in RAW_DIRS)


def missing_files(text, doc_path, root):
    """(line, target) of each link or cited path to docs/results/ or bench/results/ that does not exist."""
    doc_dir = os.path.dirname(doc_path)
    missing = []
    for n, line in prose_and_code(text)[0]:
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = os.path.normpath(os.path.join(doc_dir, target.split("#")[0]))
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            if under_raw_dirs(rel) and not os.path.exists(path):
                missing.append((n, target))
        for span in CODE_SPAN.findall(line) + [LINK.sub("", CODE_SPAN.sub("", line))]:
            for cited in CITED.findall(span):
                if "*" in cited:
                    continue
                for one in expand_braces(cited.rstrip(".,;:")):
                    if not os.path.exists(os.path.join(root, one)):
                        missing.append((n, one))
    return missing


def broken_anchors(text):
    """(line, anchor) of each link to a section of the same document that has no such heading."""
    anchors = {slug(h) for _, h in headings(text)}
    broken = []
    for n, line in prose_and_code(text)[0]:
        for target in LINK.findall(line):
            if target.startswith("#") and target[1:] not in anchors:
                broken.append((n, target))
    return broken


def diary_words(lines):
    """(line, what, matched text) of each diary phrase in the given (line number, text) pairs."""
    found = []
    for n, line in lines:
        prose = LINK.sub(lambda m: m.group(0).split("](")[0], CODE_SPAN.sub("", line))
        for pattern, what in DIARY:
            for m in pattern.finditer(prose):
                found.append((n, what, m.group(0)))
    return found


def listing(path, found):
    """The findings as 'path:line: ...' lines, for a failure message."""
    return "\n".join("%s:%d: %s" % ((path, item[0], " ".join(map(repr, item[1:])))) for item in found)


def readmes():
    out = []
    for d in RAW_DIRS:
        for dirpath, _, files in os.walk(os.path.join(support.SOURCE, d)):
            out += [os.path.join(dirpath, f) for f in files if f == "README.md"]
    return sorted(out)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


class DocsResults(unittest.TestCase):
    maxDiff = None

    def test_cited_raw_files_exist(self):
        text = read(RESULTS_MD)
        missing = missing_files(text, RESULTS_MD, support.SOURCE)
        self.assertFalse(missing, "docs/results.md links or cites raw output that is not in the tree:\n"
                         + listing("docs/results.md", missing))

    def test_cites_raw_output(self):
        # A document by claim cites its raw output: links into both raw folders are there.
        text = read(RESULTS_MD)
        targets = [t for _, line in prose_and_code(text)[0] for t in LINK.findall(line)]
        self.assertTrue(any(t.startswith("results/") for t in targets), "no link into docs/results/")
        self.assertTrue(any(t.startswith("../bench/results/") for t in targets), "no link into bench/results/")

    def test_section_links_resolve(self):
        broken = broken_anchors(read(RESULTS_MD))
        self.assertFalse(broken, "links to sections docs/results.md does not have:\n" + listing("docs/results.md", broken))

    def test_length(self):
        n = len(read(RESULTS_MD).rstrip("\n").split("\n"))
        self.assertLessEqual(n, MAX_LINES, "docs/results.md has %d lines (at most %d: newest number per claim "
                             "and host, the history in git)" % (n, MAX_LINES))

    def test_headings_name_claims_not_work_periods(self):
        found = diary_words(headings(read(RESULTS_MD)))
        self.assertFalse(found, "headings name work periods, not claims:\n" + listing("docs/results.md", found))

    def test_no_diary_in_results_md(self):
        found = diary_words(prose_and_code(read(RESULTS_MD))[0])
        self.assertFalse(found, "a development diary in docs/results.md (a result carries its date, host and "
                         "commit, nothing more about its making):\n" + listing("docs/results.md", found))

    def test_no_diary_in_raw_folder_readmes(self):
        found = []
        for path in readmes():
            words = diary_words(prose_and_code(read(path))[0])
            if words:
                found.append(listing(os.path.relpath(path, support.SOURCE), words))
        self.assertFalse(found, "a development diary in the raw folders' READMEs:\n" + "\n".join(found))

    def test_the_checks_catch_what_they_should(self):
        # The checks themselves, on a made-up document beside a made-up raw folder.
        root = tempfile.mkdtemp(prefix="codistill-docs-results-")
        os.makedirs(os.path.join(root, "docs", "results"))
        os.makedirs(os.path.join(root, "bench", "results"))
        for f in ("docs/results/a.txt", "bench/results/b.txt", "bench/results/b.json"):
            open(os.path.join(root, f), "w").close()
        doc = os.path.join(root, "docs", "results.md")
        good = ("# R\n\n## Stale teachers\n\n[a](results/a.txt), [b](../bench/results/b.txt), "
                "`bench/results/b.{txt,json}`, see [x](#stale-teachers); `train_cpu_mlp_s19.txt`\n")
        self.assertEqual(missing_files(good, doc, root), [])
        self.assertEqual(broken_anchors(good), [])
        self.assertEqual(diary_words(prose_and_code(good)[0]), [])
        bad = good + "[gone](../bench/results/gone.txt) and `docs/results/x.{txt,json}`, [y](#no-such)\n"
        self.assertEqual(missing_files(bad, doc, root), [(6, "../bench/results/gone.txt"),
                                                          (6, "docs/results/x.txt"), (6, "docs/results/x.json")])
        self.assertEqual(broken_anchors(bad), [(6, "#no-such")])
        diary = ["## Fused loss (2026-11-27, fourteenth session)", "## The loss, session 14",
                 "as measured earlier today", "this session's host", "we tried a variant",
                 "the 2026-11-26 s7 run"]
        for line in diary:
            self.assertTrue(diary_words([(1, line)]), line)
        for line in ["`session.log`: everything", "run1-session.log", "bench/run_gpu_session.sh",
                     "[raw](../bench/results/train_cpu_mlp_s19_vs_4d9c34e.txt)", "`gpu_h100_2026-11-26_s5/`"]:
            self.assertEqual(diary_words([(1, line)]), [], line)


if __name__ == "__main__":
    support.main(DocsResults)
