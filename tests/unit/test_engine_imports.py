"""The engine never imports Temporal or FastAPI (it must run inside activities and the CLI)."""

from __future__ import annotations

import subprocess
import sys

CODE = r"""
import importlib, pkgutil, sys
import signoff.engine
for info in pkgutil.walk_packages(signoff.engine.__path__, "signoff.engine."):
    importlib.import_module(info.name)
bad = sorted(m for m in sys.modules if m.split(".")[0] in ("temporalio", "fastapi", "starlette"))
print("BAD:" + ",".join(bad))
print("N:%d" % len([m for m in sys.modules if m.startswith("signoff.engine.")]))
"""


def test_engine_does_not_import_temporal_or_fastapi():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True).stdout
    assert "BAD:\n" in out, out
    n = int(out.split("N:")[1])
    assert n >= 10  # spec, graph, run, runner, components...
