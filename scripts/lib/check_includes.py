#!/usr/bin/env python3
"""The one-way ground (DESIGN.md section 2): every #include "..." of the library's sources
either stays in its own room or goes down the ladder below, never up or sideways.

    python3 scripts/lib/check_includes.py [SOURCE_DIR]

prints one line per include that climbs (file:line, the header, both rooms and why) and
exits 1 if there is any, 0 otherwise. tests/, bench/ and fuzz/ may include anything: they
are not part of the ground. Standard library only; needs no build."""
import os
import re
import sys

# Rooms from the ground up. A room may include its own headers and those of rooms on a
# lower rung; two rooms on one rung know nothing of each other.
LADDER = [
    ["kernels"],                                # Tensor, Device, ops, the Backend interface
    ["kernels/cpu", "kernels/cuda"],            # the backends, private to kernels/
    ["checkpoint", "codistill/util"],
    ["codistill/dist"],
    ["codistill/data", "codistill/nn"],         # nn: modules, the arena, initializers
    ["codistill/data/text", "codistill/nn/layers"],  # text/tokenizer/, text/tokens/: part of text
    ["codistill/data/feed", "codistill/nn/blocks"],  # containers: sequential, residual, transformer
    ["codistill/models", "codistill/optim"],    # optim works on nn's arena, not on models
    ["codistill/config"],                       # YAML onto the option structs of those below
    ["codistill/eval"],
    ["codistill/persist"],
    ["codistill/teachers"],
    ["codistill/train"],
    ["codistill/inspect"],
    ["trainer"],
]
# Backends are reached through the Backend interface (kernels/backend.hpp), from anywhere
# above, and named only by the registry.
PRIVATE = {"kernels/cpu": {"kernels"}, "kernels/cuda": {"kernels"}}
# Includes that cross the ladder on purpose, each with its reason.
ALLOWED = {
    ("kernels/registry.cpp", "kernels/cpu/backend.hpp"): "the explicit backend registry",
    ("kernels/registry.cpp", "kernels/cuda/backend.hpp"): "the explicit backend registry",
    ("kernels/cuda/device_api.cuh", "simt/cuda_shim.hpp"):
        "device code compiled for the SIMT executor (tests) takes the executor's CUDA shim",
}
CHECKED = ("kernels", "checkpoint", "codistill", "trainer")
SOURCE = re.compile(r"\.(hpp|cpp|h|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

RUNG = {room: i for i, rung in enumerate(LADDER) for room in rung}


def room_of(path):
    """The deepest room that holds path (a repository-relative file path), or None."""
    folder = os.path.dirname(path)
    while folder:
        if folder in RUNG:
            return folder
        folder = os.path.dirname(folder)
    return None


def why_not(src, inc):
    """Why src may not include inc (both repository-relative), or None where it may."""
    if (src, inc) in ALLOWED:
        return None
    a, b = room_of(src), room_of(inc)
    if a is None:
        return "its folder is on no rung of the ladder (scripts/lib/check_includes.py)"
    if b is None or a == b:
        return None  # system-like or generated headers; the room's own headers
    if b in PRIVATE and a not in PRIVATE[b]:
        return "%s is private to %s (go through kernels/backend.hpp)" % (b, ", ".join(sorted(PRIVATE[b])))
    if RUNG[b] > RUNG[a]:
        return "climbs: %s (rung %d) is above %s (rung %d)" % (b, RUNG[b], a, RUNG[a])
    if RUNG[b] == RUNG[a]:
        return "sideways: %s and %s share rung %d" % (a, b, RUNG[a])
    return None


def violations(source_dir):
    found = []
    for top in CHECKED:
        for folder, _, names in os.walk(os.path.join(source_dir, top)):
            for name in sorted(names):
                if not SOURCE.search(name):
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, source_dir)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for m in INCLUDE.finditer(text):
                    reason = why_not(rel, m.group(1))
                    if reason:
                        line = text.count("\n", 0, m.start()) + 1
                        found.append("%s:%d: includes %s: %s" % (rel, line, m.group(1), reason))
    return found


def main(argv):
    source_dir = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    found = violations(os.path.abspath(source_dir))
    for line in found:
        print(line)
    if found:
        print("%d include(s) break the one-way ground (DESIGN.md section 2)" % len(found))
        return 1
    print("includes: the ground is one-way")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
