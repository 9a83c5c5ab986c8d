"""Build the sdist and wheel, install the wheel into a fresh virtualenv, and run it.

``bash dev test`` ends with this, so CI proves the package a user installs, not the
checkout: a module, ``py.typed`` or scenario missing from the package fails the run.

    python tools/check_wheel.py [--keep]

Steps: ``python -m build`` (the wheel is built from the sdist, so a file the sdist
leaves out is missing from the wheel too);
every ``.py`` file of ``jobcore/``, ``drivers/`` and ``parity_tests/`` must be in the wheel
under its installed name, with ``jobcore/py.typed``; then, in a new virtualenv outside
the checkout, ``pip install 'WHEEL[parity]'`` (not editable), ``jobcore demo`` and the
memory section of the parity suite from the installed ``jobcore.parity``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Where each source folder lands inside the wheel (pyproject's package-dir).
INSTALLED_AS = {"jobcore": "jobcore", "drivers": "jobcore/drivers", "parity_tests": "jobcore/parity"}


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> None:
    started = time.monotonic()
    print(f"check_wheel: $ {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, cwd=cwd, env=env, check=True)
    print(f"check_wheel:   ({time.monotonic() - started:.1f} s)", flush=True)


def expected_files() -> set[str]:
    """The wheel paths every source module and marker must have."""
    wanted = {"jobcore/py.typed"}
    for folder, target in INSTALLED_AS.items():
        for path in (ROOT / folder).rglob("*.py"):
            wanted.add(f"{target}/{path.relative_to(ROOT / folder).as_posix()}")
    return wanted


def check_contents(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    missing = sorted(expected_files() - names)
    if missing:
        raise SystemExit(f"check_wheel: {wheel.name} lacks {len(missing)} file(s): {', '.join(missing)}")
    strays = sorted(n for n in names if n.split("/", 1)[0] in {"drivers", "parity_tests", "fixtures", "tests"})
    if strays:
        raise SystemExit(f"check_wheel: {wheel.name} installs top-level packages it must not: {', '.join(strays)}")
    print(f"check_wheel: {wheel.name} holds all {len(expected_files())} expected files", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory and print it")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="jobcore-wheel-"))
    try:
        dist = work / "dist"
        _run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], cwd=work)
        (wheel,) = dist.glob("*.whl")
        (sdist,) = dist.glob("*.tar.gz")
        print(f"check_wheel: built {sdist.name} and {wheel.name}", flush=True)
        check_contents(wheel)
        venv = work / "venv"
        _run([sys.executable, "-m", "venv", str(venv)], cwd=work)
        python = venv / "bin" / "python"
        _run([str(python), "-m", "pip", "install", "-q", f"{wheel}[parity]"], cwd=work)
        # A clean environment: nothing from the checkout or the calling venv on the path.
        env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        _run([str(venv / "bin" / "jobcore"), "demo"], cwd=work, env=env)
        _run(
            [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "jobcore.parity.plugin",
             "--pyargs", "jobcore.parity", "--jobcore-drivers", "memory"],
            cwd=work, env={**env, "JOBCORE_TEST_DRIVERS": "memory"},
        )
        print("check_wheel: the installed wheel runs the demo and the memory parity suite", flush=True)
        return 0
    finally:
        if args.keep:
            print(f"check_wheel: kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
