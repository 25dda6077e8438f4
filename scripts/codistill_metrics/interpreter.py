"""Finding an interpreter that has a package. The first python3 on PATH may be another
interpreter than Debian's (pyenv, conda); matplotlib is Debian's (/usr/bin/python3) and
tensorboard lives in the project's .venv-tools, which sees Debian's packages too."""
import importlib
import os
import sys

SCRIPTS = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
CANDIDATES = (os.path.join(os.path.dirname(SCRIPTS), ".venv-tools", "bin", "python"), "/usr/bin/python3")
TRIED = "CODISTILL_TOOLS_TRIED"  # interpreters already tried, so that none is tried twice


def require(module, prog, hint):
    """Imports module, or runs this script again under an interpreter that might have it;
    when none does, says so in one line (with hint) and exits 1."""
    try:
        return importlib.import_module(module)
    except ImportError:
        pass
    tried = set(filter(None, os.environ.get(TRIED, "").split(os.pathsep)))
    # By path, not by the file it resolves to: a virtual environment's python is a link to
    # the system's, yet sees other packages.
    tried.add(os.path.abspath(sys.executable))
    for python in CANDIDATES:
        if os.access(python, os.X_OK) and python not in tried:
            tried.add(python)
            os.environ[TRIED] = os.pathsep.join(sorted(tried))
            os.execv(python, [python] + sys.argv)
    print("%s: the %s package is missing (%s)" % (prog, module, hint), file=sys.stderr)
    sys.exit(1)
