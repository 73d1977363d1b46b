"""One namespace: the top-level folders install under ``signoff.`` (signoff.engine, signoff.api, ...),
so nothing generic lands at the top of site-packages, and the code never imports them by their
folder name (which would load a second copy of every module)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("signoff", "engine", "workflows", "activities", "service", "api")


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_installed_under_signoff():
    config = _config()
    folder_of = {pkg: folder for pkg, folder in config["package-dir"].items()}
    assert set(folder_of.values()) == set(FOLDERS)
    on_disk = set()
    for pkg, folder in folder_of.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            on_disk.add(".".join([pkg, *rel.parts]))
    assert set(config["packages"]) == on_disk
    assert all(p == "signoff" or p.startswith("signoff.") for p in config["packages"])


IMPORT_ALL = r"""
import importlib, pkgutil, sys
import signoff
for info in pkgutil.walk_packages(signoff.__path__, "signoff."):
    importlib.import_module(info.name)
for pkg in ("signoff.engine", "signoff.workflows", "signoff.activities", "signoff.service", "signoff.api"):
    mod = importlib.import_module(pkg)
    for info in pkgutil.walk_packages(mod.__path__, pkg + "."):
        importlib.import_module(info.name)
print(sorted({m.split(".")[0] for m in sys.modules} & {"engine", "workflows", "activities", "service", "api"}))
"""


def test_nothing_imports_a_folder_by_its_bare_name():
    # run from the repository root, where `import engine` would find the folder
    out = subprocess.run([sys.executable, "-c", IMPORT_ALL], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
