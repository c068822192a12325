"""Shared pieces of the reference tier (ctest label `reference`), run by tests/run_reference.sh in
the Python environment that scripts/setup.sh makes.

- `lmtrain(*args)` runs the binary under test (LMTRAIN_BIN, set by ctest) and returns its stdout;
  a non-zero exit fails the test with the command and its output.
- `seed` is fresh for every run and printed with each test's name, so a failure can be replayed
  with LMTRAIN_TEST_SEED=N.
- A skipped test is reported as failed: this tier never passes without its references.
"""
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("LMTRAIN_TEST_DATA", ROOT / "tests" / "data"))
_SEED = int(os.environ.get("LMTRAIN_TEST_SEED", random.SystemRandom().randrange(1, 2**31)))


def lmtrain_path():
    p = os.environ.get("LMTRAIN_BIN", str(ROOT / "build" / "lmtrain"))
    if not os.access(p, os.X_OK):
        pytest.fail(f"no lmtrain binary at {p} (build it, or set LMTRAIN_BIN)")
    return p


def lmtrain(*args, check=True, timeout=600):
    """Runs lmtrain with `args` (converted with str); returns the CompletedProcess."""
    cmd = [lmtrain_path(), *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {r.returncode}\nstdout:\n{r.stdout[-4000:]}\n"
                    f"stderr:\n{r.stderr[-4000:]}")
    return r


@pytest.fixture
def seed(request):
    """A seed derived from the run's seed and the test's name: fresh each run, replayable."""
    s = random.Random(f"{_SEED}/{request.node.nodeid}").randrange(1, 2**31)
    print(f"\n[{request.node.nodeid}] seed {s} (run seed: LMTRAIN_TEST_SEED={_SEED})")
    return s


def pytest_report_header(config):
    return f"lmtrain reference tier: LMTRAIN_TEST_SEED={_SEED}, python {sys.version.split()[0]}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped:
        rep.outcome = "failed"
        rep.longrepr = f"skipped, which the reference tier does not allow: {rep.longrepr}"
