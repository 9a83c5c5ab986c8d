"""Build the sdist and wheel, install the wheel into a fresh virtualenv, and run it.

``bash dev test`` ends with this, so CI proves the package a user installs, not the
checkout: a module, ``py.typed`` or scenario missing from the package fails the run.

    python tools/check_wheel.py [--keep]

Steps: ``python -m build`` (the wheel is built from the sdist, so a file the sdist
leaves out is missing from the wheel too);
every ``.py`` file of ``jobcore/``, ``drivers/`` and ``parity_tests/`` must be in the wheel
under its installed name, with ``jobcore/py.typed``; then, in a new virtualenv outside
the checkout, ``pip install 'WHEEL[parity]'`` (not editable), ``jobcore demo`` and the
memory section of the parity suite from the installed ``jobcore.parity``, on this Python
and, side by side with it, on the oldest and the newest Python the classifiers name (found
on ``PATH`` or under pyenv), each also checking that ``tools/unasync.py`` makes the generated
modules byte for byte there: the development venv is one Python, the package promises four.
On the oldest, every runtime dependency and the ``postgres`` and ``mongo`` extras are held at
the lowest version pyproject allows (``name>=X`` installed as ``name==X``), and both drivers
must import: a floor that does not work fails here, not on a user's pinned install.
A Python that cannot be found is reported and passed over, except under ``CI=true``, where
it fails the run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import glob
import os
import re
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


def _run(cmd: list[str], *, cwd: Path) -> None:
    started = time.monotonic()
    print(f"check_wheel: $ {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, cwd=cwd, check=True)
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


def supported_pythons() -> list[str]:
    """The ``3.N`` versions pyproject's classifiers promise, oldest first."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    found = re.findall(r'"Programming Language :: Python :: (3\.\d+)"', text)
    return sorted(set(found), key=lambda v: tuple(map(int, v.split("."))))


def find_python(version: str) -> str | None:
    """An interpreter for ``version`` (``3.10``): ``python3.10`` on PATH, else pyenv's build."""
    candidates = [shutil.which(f"python{version}")]
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    builds = glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", f"python{version}"))
    candidates += sorted(builds, reverse=True)
    for candidate in filter(None, candidates):
        # a pyenv shim is on PATH for every installed version but answers only the selected one
        probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                               capture_output=True, text=True, check=False)
        if probe.returncode == 0 and probe.stdout.strip() == str(tuple(map(int, version.split(".")))):
            return candidate
    return None


FLOOR_EXTRAS = ("postgres", "mongo")
"""Extras whose floors the oldest Python installs beside the core dependencies'."""


def floor_constraints() -> list[str]:
    """pip constraints holding each runtime requirement (and :data:`FLOOR_EXTRAS`') at its floor."""
    from packaging.requirements import Requirement  # noqa: PLC0415 - build's own dependency

    if sys.version_info >= (3, 11):
        import tomllib  # noqa: PLC0415
    else:  # build itself depends on tomli before 3.11
        import tomli as tomllib  # noqa: PLC0415
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    specs = [*project["dependencies"], *(s for extra in FLOOR_EXTRAS for s in project["optional-dependencies"][extra])]
    pins = []
    for spec in specs:
        req = Requirement(spec)
        floors = [s.version for s in req.specifier if s.operator == ">="]
        if floors:
            pins.append(f"{req.name}=={floors[0]}" + (f"; {req.marker}" if req.marker else ""))
    return pins


def run_on(interpreter: str, wheel: Path, work: Path, *, name: str, floors: bool = False) -> tuple[bool, str]:
    """The installed wheel's demo and memory parity suite, and the unasync check, on one Python
    (its venv under ``work``, named by ``name``); with ``floors``, every dependency at its lowest
    allowed version, and both drivers imported. A clean environment: nothing from the checkout
    or the calling venv on the path."""
    venv = work / f"venv-{name}"
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["JOBCORE_TEST_DRIVERS"] = "memory"
    python = str(venv / "bin" / "python")
    install = [python, "-m", "pip", "install", "-q", f"{wheel}[parity]"]
    if floors:
        constraints = work / f"floors-{name}.txt"
        constraints.write_text("\n".join(floor_constraints()) + "\n", encoding="utf-8")
        install = [*install[:-1], "-c", str(constraints), f"{wheel}[parity,{','.join(FLOOR_EXTRAS)}]"]
    steps = [
        ([interpreter, "-m", "venv", str(venv)], work),
        (install, work),
        ([str(venv / "bin" / "jobcore"), "demo"], work),
        ([str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "jobcore.parity.plugin",
          "--pyargs", "jobcore.parity", "--jobcore-drivers", "memory"], work),
        ([interpreter, str(ROOT / "tools" / "unasync.py"), "--check"], ROOT),
    ]
    if floors:
        imports = (
            "import importlib.metadata as m, jobcore.drivers.postgres, jobcore.drivers.mongo; "
            "print('floors:', *(f'{n} {m.version(n)}' for n in ('attrs', 'cronsim', 'tzdata', 'psycopg', "
            "'psycopg-pool', 'pymongo')))"
        )
        steps.insert(2, ([python, "-c", imports], work))
    log: list[str] = []
    for cmd, cwd in steps:
        started = time.monotonic()
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
        log.append(f"check_wheel: $ {' '.join(cmd)}  ({time.monotonic() - started:.1f} s, exit {done.returncode})")
        if done.returncode != 0:
            log.append((done.stdout + done.stderr).rstrip()[-4000:])
            return False, "\n".join(log)
        if cmd[1:3] == ["-m", "pytest"] or cmd[1] == "-c":  # the suite's tally, the floors' versions
            log.append(done.stdout.strip().splitlines()[-1])
    return True, "\n".join(log)


def every_python(wheel: Path, work: Path) -> bool:
    """Runs :func:`run_on`, side by side, on this Python and on the oldest supported one (at the
    floors, even when it is this one: this one's run installs the newest dependencies) and the
    newest, unless it is this one."""
    versions = supported_pythons()
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    wanted = [v for v in dict.fromkeys([versions[0], versions[-1]]) if v == versions[0] or v != here]
    ok = True
    runs: dict[str, tuple[str, bool]] = {f"{here} (this one)": (sys.executable, False)}
    for version in wanted:
        interpreter = find_python(version)
        if interpreter is None:
            print(f"check_wheel: no Python {version} found (PATH, pyenv); the package promises it", flush=True)
            ok = ok and os.environ.get("CI", "").lower() not in {"1", "true", "yes"}
        else:
            runs[version] = (interpreter, version == versions[0])
    with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
        futures = {
            version: pool.submit(run_on, interpreter, wheel, work, floors=floors, name=version.split()[0])
            for version, (interpreter, floors) in runs.items()
        }
        for version, future in futures.items():
            passed, log = future.result()
            verdict = "passed" if passed else "FAILED"
            print(f"check_wheel: Python {version} ({runs[version][0]}): {verdict}\n{log}", flush=True)
            ok = ok and passed
    return ok


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
        if not every_python(wheel, work):
            print("check_wheel: the wheel failed on a supported Python (above)", flush=True)
            return 1
        print("check_wheel: the installed wheel runs the demo and the memory parity suite on every Python", flush=True)
        return 0
    finally:
        if args.keep:
            print(f"check_wheel: kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
