"""The wheel a user installs: one top-level package, ``signoff`` (the folders engine/, api/, ...
are mapped under it by pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_has_one_top_level_package(tmp_path):
    src = tmp_path / "src"  # a copy: building in place would leave build/ in the repository
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "__pycache__",
                                                             ".signoff", "node_modules", "tests"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(src), "-w", str(tmp_path)],
                   check=True, capture_output=True)
    (wheel,) = tmp_path.glob("signoff-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} - {n.split("/")[0] for n in names if ".dist-info" in n} == {"signoff"}
    assert "signoff/engine/run.py" in names and "signoff/api/app.py" in names and "signoff/workflows/flow_run.py" in names
    # the pages' files travel as package data (include-package-data is off: pyproject.toml)
    assert "signoff/api/pages/static/signoff.css" in names and "signoff/api/pages/templates/_card.html" in names
