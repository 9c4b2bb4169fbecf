"""The README's Python program and the examples in examples/python/, each run as it stands under
pushpull-launch with 2 servers and 2 workers (the examples on a slice of their data: the full
runs and their figures are in docs/PERFORMANCE.md)."""

import json
import os
import re
import subprocess
import sys

from conftest import BIN, BUILD, ROOT


def launch(args, flags=(), timeout=240):
    env = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"))
    return subprocess.run([os.path.join(BIN, "pushpull-launch"), "--servers=2", "--workers=2", *flags, "--",
                           sys.executable, *args], env=env, capture_output=True, text=True, timeout=timeout)


def test_the_readme_python_program_trains_under_pushpull_launch(tmp_path):
    readme = open(os.path.join(ROOT, "README.md")).read()
    block = re.search(r"<!-- train\.py:.*?-->\n```python\n(.*?)```", readme, re.S)
    assert block, "no train.py block in README.md"
    (tmp_path / "train.py").write_text(block.group(1))
    run = launch([str(tmp_path / "train.py")])
    assert run.returncode == 0, run.stdout + run.stderr
    losses = [float(v) for v in re.findall(r"worker \d: loss ([0-9.]+)", run.stdout)]
    assert len(losses) == 2 and max(losses) < 1e-3, run.stdout


def test_fmnist_cnn_learns_under_bsp_and_ssp(tmp_path):
    for consistency in ("bsp", "ssp:2"):
        metrics = tmp_path / f"cnn-{consistency}.jsonl"
        run = launch([os.path.join(ROOT, "examples/python/fmnist_cnn.py"), "--epochs=1", "--train_limit=6000",
                      "--test_limit=1000", "--target=0.70", f"--metrics_out={metrics}"],
                     [f"--consistency={consistency}"])
        assert run.returncode == 0, run.stdout + run.stderr
        lines = [json.loads(line) for line in metrics.read_text().splitlines()]
        assert sorted(line["worker"] for line in lines) == [0, 1]
        assert all(line["consistency"] == consistency for line in lines)
        assert [line["test_accuracy"] for line in lines if line["worker"] == 0][0] >= 0.70


def test_ctr_embedding_comes_near_the_generators_auc(tmp_path):
    metrics = tmp_path / "ctr.jsonl"
    run = launch([os.path.join(ROOT, "examples/python/ctr_embedding.py"), "--examples=300000", "--heldout=20000",
                  "--tolerance=0.03", f"--metrics_out={metrics}"])
    assert run.returncode == 0, run.stdout + run.stderr
    result = [json.loads(line) for line in metrics.read_text().splitlines() if '"auc"' in line][0]
    assert result["auc"] >= result["generator_auc"] - 0.03, result


def test_a_missed_target_is_said_and_ends_the_job_with_exit_3():
    """Targets no run can reach (an AUC above the generator's own, an accuracy above 1): worker 0
    prints why, ends the job with pushpull.TargetMissed, and the launcher exits 3."""
    for example, flags, said in [
        ("ctr_embedding.py", ["--examples=20480", "--heldout=5000", "--tolerance=-1"],
         r"ctr_embedding: missed target: AUC 0\.\d{4} < 1\.\d{4} \(generator 0\.\d{4} - tolerance -1\)"),
        ("fmnist_cnn.py", ["--epochs=1", "--train_limit=640", "--test_limit=200", "--target=1.01"],
         r"fmnist_cnn: missed target: test accuracy [01]\.\d{4} < 1\.01 after 1 epochs"),
    ]:
        run = launch([os.path.join(ROOT, "examples/python", example), *flags], timeout=120)
        out = run.stdout + run.stderr
        assert run.returncode == 3, out
        assert re.search(said, run.stdout), out
        assert "worker 0 stopped: TargetMissed: missed target: " in out, out


def test_the_python_bench_reports_each_figure_with_its_cpp_baseline(tmp_path):
    out = tmp_path / "bench.jsonl"
    run = subprocess.run([sys.executable, os.path.join(ROOT, "apps/bench/python_bench.py"), BUILD, str(out),
                          "--quick"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["case"] for line in lines] == ["python_push_pull/16MB/2s1w",
                                                "python_server_optimizer/fmnist_cnn/2s1w"], lines
    for line in lines:
        assert line["bench"] == "python" and line["value"] > 0 and line["baseline"] > 0 and line["ratio"] > 0, line


def test_a_diverging_model_ends_the_job_saying_so_with_exit_4(tmp_path):
    """The README's program with a learning rate that blows it up: a push of Inf or NaN is refused,
    the worker's next step raises pushpull.Diverged, the with block leaves the job with it, and the
    launcher and the scheduler both end with "the job diverged", exit 4."""
    readme = open(os.path.join(ROOT, "README.md")).read()
    program = re.search(r"<!-- train\.py:.*?-->\n```python\n(.*?)```", readme, re.S).group(1)
    assert "pushpull.Adam(lr=0.1)" in program
    (tmp_path / "diverge.py").write_text(program.replace("pushpull.Adam(lr=0.1)", "pushpull.SGD(lr=1e30)"))
    run = launch([str(tmp_path / "diverge.py")], timeout=120)
    out = run.stdout + run.stderr
    assert run.returncode == 4, out
    last = [line for line in out.splitlines() if line.startswith("[launch] job failed")]
    assert last and "the job diverged" in last[-1] and "lower the learning rate or clip gradients" in last[-1], out
    aborted = [line for line in out.splitlines() if "[scheduler] job aborted: " in line]
    assert aborted and "Diverged" in aborted[0] and "the job diverged" in aborted[0], out
