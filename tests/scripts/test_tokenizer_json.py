"""codistill-prepare-text against Hugging Face `tokenizers` (PyPI, in .venv-tools): the same
token ids, document by document, for
  - the project's own BPE, which prepare-text also writes as tokenizer.json, loaded by
    `tokenizers` and compared with the project's token files;
  - a GPT-2-style byte-level BPE that `tokenizers` trains itself (ByteLevel pre-tokenizer,
    special token <|endoftext|>), given to prepare-text with --tokenizer.
The corpus is the Python docs (python3.11-doc, docs/text-data.md) plus one document of hard
cases (Unicode spaces, other scripts' digits and letters, long runs, the literal
<|endoftext|>). CI compares every 4th document (a deterministic subset, seconds);
`--full` takes all of them (bench/results/tokenizer_json_python_docs.txt).

    python3 tests/scripts/test_tokenizer_json.py [--full]
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import support  # noqa: E402

CORPUS = "/usr/share/doc/python3.11/html/_sources"
SUBSET_EVERY = 4
VOCAB = 8192  # prepare-text's default

def random_text(n, seed=1):
    """Characters drawn from every class either pre-tokenizer tells apart: all of ASCII, Unicode
    spaces and non-spaces, letters and digits of other scripts, marks, emoji."""
    import random
    rng = random.Random(seed)
    pool = [chr(c) for c in range(128)] + list(" \n\t" * 8) + list(
        "\u00a0\u0085\u1680\u2000\u2009\u2028\u2029\u202f\u205f\u3000\u180e\u200b\ufeff"
        "\u00e9\u00df\u0416\u03a9\u05d0\u0627\u4e2d\u3042\u0301\u0663\u00b2\u2167\u00bd"
        "\U0001f600\U0001f44d\U0001d400\u00ad\u00a1\u00bf")
    return "".join(rng.choice(pool) for _ in range(n))


# The literal text of the end-of-document token: `tokenizers` cuts added tokens out of any
# text, so it gives the id of <|endoftext|>; the project's own tokenizer (tokenizer.bpe, which
# made its token files) encodes the bytes. The only known difference (docs/text-data.md).
SPECIAL_CASE = "literal special: a<|endoftext|>b <|endoftext|> <|endoftext|\n"

# Where the two pre-tokenizers and the added-token matching could part ways.
HARD_CASES = "".join([
    "plain words, 42 digits, ::punct:: and  double  spaces\n",
    "tabs\tand\r\nCRLF, trailing spaces   \n\n\n    def indented():\n        return 1\n",
    "unicode spaces:\u00a0nbsp\u2003em\u3000ideographic\u0085nel\u2028line\u180emongolian\u200bzwsp\n",
    "other letters: caf\u00e9 na\u00efve \u0416\u0443\u043a \u65e5\u672c\u8a9e \u0627\u0644\u0639\u0631\u0628\u064a\u0629 e\u0301\n",
    "other digits: \u0663\u0664 \u00b2\u00b3 \u2167 \u00bd and emoji \U0001f600\U0001f44d\U0001f3fd\n",
    "control: \x01\x02\x1c\x1f\x7f end\n",
    "contractions: it's we're they've I'm we'll he'd 'S 'T\n",
    "x" * 300 + " " + "7" * 200 + " " + "!" * 150 + " " * 200 + "y\n",
    "\u00e9" * 100 + " \u6f22" * 50 + "\n",
    random_text(20000),
])


def read_token_file(path):
    """(header fields, list of documents as lists of ids) of a token file v1."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"CDTOKENS", path
    _, width, vocab, eod, docs, ntok = struct.unpack_from("<IIIIQQ", data, 8)
    offsets = struct.unpack_from("<%dQ" % (docs + 1), data, 64)
    base = 64 + 8 * (docs + 1)
    tokens = struct.unpack_from("<%d%s" % (ntok, "H" if width == 2 else "I"), data, base)
    return {"vocab": vocab, "eod": eod}, [list(tokens[offsets[d]:offsets[d + 1]]) for d in range(docs)]


def prepare(corpus, out, extra):
    exe = os.path.join(support.BINARY, "trainer", "codistill-prepare-text")
    cmd = [exe, "--corpus", corpus, "--suffix", ".txt", "--out", out, "--heldout-fraction", "0", "--json"] + extra
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("prepare-text failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stderr))
    return json.loads(r.stdout), time.time() - t


def compare(name, tok, out, texts, expect_differ=()):
    """Encodes each document of out's train.tokens with `tokenizers` and compares the ids;
    returns how many documents differ (those of expect_differ must, and do not count)."""
    header, docs = read_token_file(os.path.join(out, "train.tokens"))
    manifest = json.load(open(os.path.join(out, "prepare.json")))
    names = manifest["train_documents"]
    assert len(names) == len(docs) == len(texts), (len(names), len(docs), len(texts))
    eod = tok.token_to_id("<|endoftext|>")
    if header["eod"] != eod:
        sys.exit("%s: the token files' end of document is %d, tokenizers says %d" % (name, header["eod"], eod))
    t = time.time()
    theirs = [e.ids for e in tok.encode_batch([texts[n] for n in names])]
    hf_s = time.time() - t
    ids = mismatched = 0
    for n, mine, other in zip(names, docs, theirs):
        ids += len(other)
        if n in expect_differ:
            if mine == other or other.count(eod) != texts[n].count("<|endoftext|>"):
                print("UNEXPECTED %s %s: tokenizers should give <|endoftext|> its id where codistill has bytes" % (name, n))
                mismatched += 1
            ids -= len(other)
            continue
        if mine != other:
            mismatched += 1
            k = next((i for i, (a, b) in enumerate(zip(mine, other)) if a != b), min(len(mine), len(other)))
            print("MISMATCH %s %s: %d vs %d ids, first at %d: codistill %s, tokenizers %s" %
                  (name, n, len(mine), len(other), k, mine[max(0, k - 3):k + 5], other[max(0, k - 3):k + 5]))
    print("%-9s %d documents, %d ids compared, %d documents differ%s; vocabulary %d, end of document %d; "
          "tokenizers encoded in %.2f s" % (name, len(docs) - len(expect_differ), ids, mismatched,
                                            " (and the literal <|endoftext|> as documented)" if expect_differ else "",
                                            header["vocab"], eod, hf_s))
    return mismatched


def main():
    full = "--full" in sys.argv[1:]
    support.require_tools("tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    if not os.path.isdir(CORPUS):
        print("skipped: no corpus %s (python3.11-doc; scripts/setup.sh)" % CORPUS)
        sys.exit(77)
    start = time.time()
    tmp = tempfile.mkdtemp(prefix="codistill-tokjson-")
    try:
        files = sorted(os.path.relpath(os.path.join(d, f), CORPUS)
                       for d, _, fs in os.walk(CORPUS) for f in fs if f.endswith(".rst.txt"))
        chosen = files if full else files[::SUBSET_EVERY]
        corpus = os.path.join(tmp, "corpus")
        texts = {}
        for rel in chosen:
            os.makedirs(os.path.dirname(os.path.join(corpus, rel)), exist_ok=True)
            with open(os.path.join(CORPUS, rel), "rb") as f:
                data = f.read()
            if data:
                texts[rel[:-len(".rst.txt")] + ".txt"] = data.decode("utf-8")
                shutil.copyfile(os.path.join(CORPUS, rel), os.path.join(corpus, rel[:-len(".rst.txt")] + ".txt"))
        with open(os.path.join(corpus, "zz_hard_cases.txt"), "w", encoding="utf-8") as f:
            f.write(HARD_CASES)
        texts["zz_hard_cases.txt"] = HARD_CASES
        with open(os.path.join(corpus, "zz_special.txt"), "w", encoding="utf-8") as f:
            f.write(SPECIAL_CASE)
        texts["zz_special.txt"] = SPECIAL_CASE
        print("corpus    %s: %d of %d documents, %d bytes, and the hard cases" %
              ("all" if full else "every %dth" % SUBSET_EVERY, len(chosen), len(files),
               sum(len(t.encode()) for t in texts.values())))

        # The project's BPE, written by prepare-text as tokenizer.json.
        summary, s = prepare(corpus, os.path.join(tmp, "own"), ["--vocab-size", str(VOCAB)])
        print("own       prepare-text %.2f s (encode %.2f s)" % (s, summary["seconds"]["encode"]))
        own = Tokenizer.from_file(os.path.join(tmp, "own", "tokenizer.json"))
        bad = compare("own", own, os.path.join(tmp, "own"), texts, expect_differ={"zz_special.txt"})

        # GPT-2 style, trained by `tokenizers` on the same documents.
        t = time.time()
        gpt2 = Tokenizer(models.BPE())
        gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        gpt2.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=VOCAB, min_frequency=2, special_tokens=["<|endoftext|>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        gpt2.train_from_iterator([texts[n] for n in sorted(texts)], trainer=trainer)
        gpt2_path = os.path.join(tmp, "gpt2-tokenizer.json")
        gpt2.save(gpt2_path)
        print("gpt2      trained by tokenizers in %.2f s" % (time.time() - t))
        summary, s = prepare(corpus, os.path.join(tmp, "gpt2"), ["--tokenizer", gpt2_path])
        print("gpt2      prepare-text --tokenizer %.2f s (encode %.2f s)" % (s, summary["seconds"]["encode"]))
        bad += compare("gpt2", Tokenizer.from_file(gpt2_path), os.path.join(tmp, "gpt2"), texts)
        print("total     %.1f s, %d documents differ" % (time.time() - start, bad))
        return 1 if bad else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
