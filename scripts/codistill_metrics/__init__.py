"""Reading a run directory's metrics.jsonl files (DESIGN.md sections 4 and 7) for the
after-training tools: scripts/plot_run.py and scripts/to_tensorboard.py. Standard library
only, so that either interpreter (Debian's /usr/bin/python3 or .venv-tools) can use it.

    run = read_run(RUN_DIR)        # raises NotARunDir
    for w in run.workers:          # Worker: id, name, series {tag: Series}, notes, ...
        w.series["train/loss"].steps, .values, .times
"""
from codistill_metrics.reader import NotARunDir, Run, Worker, read_run  # noqa: F401
from codistill_metrics.scalars import Series, tags_of_event  # noqa: F401
