"""``make test`` runs the suite on every core (pytest-xdist, ``-n auto --dist loadgroup``): the tests of one
``xdist_group`` run on one worker, one after the other, so a module fixture they share (a comparison of four
runs, a torchrun launch) is built once and two torchrun jobs never share the cores."""

import subprocess
import sys
import textwrap


def test_an_xdist_group_keeps_its_module_fixture_on_one_worker(tmp_path):
    (tmp_path / "test_grouped.py").write_text(textwrap.dedent("""
        import os
        import pytest

        @pytest.fixture(scope="module")
        def built():
            with open("setups.log", "a") as log:
                log.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

        @pytest.mark.xdist_group("shared")
        @pytest.mark.parametrize("case", range(4))
        def test_uses_it(built, case):
            pass

        @pytest.mark.parametrize("case", range(8))
        def test_other(case):
            pass
    """))
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                          "loadgroup", "test_grouped.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert len((tmp_path / "setups.log").read_text().split()) == 1  # built once, on one worker
