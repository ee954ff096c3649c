"""tailor.paths: spec/ and data/ found in a checkout, in an installed package's layout, or by environment override."""

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tailor import paths

ROOT = Path(__file__).resolve().parents[1]
PROBE = "from tailor import paths; print(paths.CHECKOUT, paths.SPEC_DIR, paths.DATA_DIR, sep='\\n')"


def _python(code: str, pythonpath: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TAILOR_")}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**base, "PYTHONPATH": str(pythonpath), **env})


def test_checkout_reads_its_own_spec_and_data():
    assert paths.CHECKOUT == ROOT
    assert paths.SPEC_DIR == ROOT / "spec" and paths.DATA_DIR == ROOT / "data" and paths.ROOT == ROOT


def test_environment_overrides_spec_and_data(tmp_path):
    shutil.copytree(ROOT / "spec", tmp_path / "myspec")
    (tmp_path / "mydata").mkdir()
    (tmp_path / "mydata" / "oracle").symlink_to(ROOT / "data" / "oracle")
    res = _python(PROBE, ROOT / "src", tmp_path, TAILOR_SPEC_DIR=str(tmp_path / "myspec"),
                  TAILOR_DATA_DIR=str(tmp_path / "mydata"))
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[1:] == [str(tmp_path / "myspec"), str(tmp_path / "mydata")]


def test_a_wrong_override_is_one_error_line(tmp_path):
    res = _python("import sys; from tailor.cli import main; sys.exit(main(['knobs']))", ROOT / "src", tmp_path,
                  TAILOR_SPEC_DIR=str(tmp_path / "nothing"))
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [f"tailor: error: $TAILOR_SPEC_DIR={tmp_path / 'nothing'} must be a "
                                               "spec/ directory holding knobs.json"]


def test_installed_layout_reads_the_package_resources(tmp_path):
    """The wheel's layout (pyproject force-include): tailor/_resources/{spec,data}; no checkout, no Go sources."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "src" / "tailor", site / "tailor", ignore=shutil.ignore_patterns("__pycache__"))
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    for source, target in include["force-include"].items():
        (site / target).parent.mkdir(parents=True, exist_ok=True)
        (site / target).symlink_to(ROOT / source)
    code = PROBE + ("\nfrom tailor.demo.binaries import DemoError, binary\ntry:\n    binary('tailor-edge')\n"
                    "except DemoError as e:\n    print(e)")
    res = _python(code, site, tmp_path)
    assert res.returncode == 0, res.stderr
    checkout, spec, data, err = res.stdout.splitlines()
    assert checkout == "None" and spec == str(site / "tailor/_resources/spec") and data == str(site / "tailor/_resources/data")
    assert "installed package" in err and "$TAILOR_EDGE" in err


def test_the_wheel_carries_what_the_code_reads():
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    carried = set(include["force-include"])
    assert {"spec", "data/oracle", "data/traces", "data/scenarios"} <= carried
    assert all((ROOT / source).is_dir() for source in carried)
