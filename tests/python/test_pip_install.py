"""`pip install .` (pyproject.toml, setup.py) into a fresh venv of Debian's python3, offline: the
package builds from the sources, without make, and the README's train.py runs with that venv's
python under pushpull-launch, importing pushpull from the venv rather than the tree."""

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from conftest import BIN, ROOT

PYTHON = "/usr/bin/python3"  # Debian's: the one with NumPy, PyTorch, pybind11 and setuptools


def readme_train_py():
    readme = open(os.path.join(ROOT, "README.md")).read()
    block = re.search(r"<!-- train\.py:.*?-->\n```python\n(.*?)```", readme, re.S)
    assert block, "no train.py block in README.md"
    return block.group(1)


@pytest.fixture
def scratch():
    """A temporary directory, removed afterwards (a venv and a build: tens of MB)."""
    d = tempfile.mkdtemp(prefix="pushpull-pip-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_setup_py_builds_the_makefiles_client_sources(scratch, monkeypatch):
    spec = importlib.util.spec_from_file_location("pushpull_setup", os.path.join(ROOT, "setup.py"))
    setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup)  # (not as __main__: it builds nothing)
    monkeypatch.chdir(ROOT)
    # BUILD= a scratch directory: make writes its flags stamp there even to print a variable.
    make = subprocess.run(["make", "-s", "--no-print-directory", f"BUILD={scratch}",
                           "--eval=pp-client-srcs: ; @echo $(CLIENT_SRCS)", "pp-client-srcs"],
                          capture_output=True, text=True, timeout=60)
    assert make.returncode == 0, make.stderr
    assert sorted(setup.client_sources()) == sorted(make.stdout.split())


@pytest.mark.skipif(not os.access(os.path.join(BIN, "pushpull-launch"), os.X_OK), reason="no pushpull-launch built")
def test_pip_install_into_a_venv_runs_the_readme_program(scratch):
    tools = subprocess.run([PYTHON, "-c", "import setuptools, wheel, pybind11"], capture_output=True, text=True,
                           timeout=60)
    assert tools.returncode == 0, "pip builds with Debian's python3-setuptools, python3-wheel and python3-pybind11 " \
                                  "(make deps installs them): " + tools.stderr
    venv = os.path.join(scratch, "venv")
    made = subprocess.run([PYTHON, "-m", "venv", "--system-site-packages", venv], capture_output=True, text=True,
                          timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    # setuptools' build and egg-info in the scratch directory, not the tree's build/pip: the tree
    # stays as it was, and two runs at once do not share a directory.
    config = os.path.join(scratch, "setuptools.cfg")
    with open(config, "w") as f:
        f.write(f"[build]\nbuild_base = {scratch}/build\n[egg_info]\negg_base = {scratch}/egg-info\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(DIST_EXTRA_CONFIG=config, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1")
    pip = subprocess.run([os.path.join(venv, "bin", "pip"), "install", "--no-build-isolation", "--no-index", ROOT],
                         env=env, cwd=scratch, capture_output=True, text=True, timeout=540)
    assert pip.returncode == 0, pip.stdout[-4000:] + pip.stderr[-4000:]
    assert "Successfully installed pushpull" in pip.stdout, pip.stdout[-4000:]

    # The README's program as it stands, then a line that says where its pushpull came from.
    script = os.path.join(scratch, "train.py")
    with open(script, "w") as f:
        f.write(readme_train_py() + "print('pushpull from', pushpull.__file__)\n")
    python = os.path.join(venv, "bin", "python")
    run = subprocess.run([os.path.join(BIN, "pushpull-launch"), "--servers=2", "--workers=2", "--", python, script],
                         env=env, cwd=scratch, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "[launch] job succeeded" in run.stdout + run.stderr, run.stdout + run.stderr
    losses = [float(v) for v in re.findall(r"worker \d: loss ([0-9.]+)", run.stdout)]
    assert len(losses) == 2 and max(losses) < 1e-3, run.stdout
    sources = re.findall(r"pushpull from (\S+)", run.stdout)
    site = os.path.realpath(venv) + os.sep
    assert len(sources) == 2 and all(os.path.realpath(s).startswith(site) for s in sources), (sources, venv)
