"""The Python client against the C++ client, in one run, on the same job, client, tables and
arrays (make bench runs it after pushpull-bench):

  python_push_pull/16MB/2s1w   a push then a pull of a 16 MB dense table, from a Python loop,
                               against the same calls made from C++ (_core._bench_steps); MB/s
  python_server_optimizer/fmnist_cnn/2s1w
                               ServerOptimizer.step() on examples/python/fmnist_cnn.py's CNN
                               (push every gradient, clock, pull every parameter, add the
                               start) against the same pushes, clock and pulls from C++; steps/s

Rounds alternate Python and C++, and the ratio reported is the median of the rounds' ratios.
Usage: python_bench.py BUILD_DIR OUT_JSONL [--quick]
"""

import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
OUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(BUILD, "bench", "results.jsonl")
QUICK = "--quick" in sys.argv
os.environ["PUSHPULL_BUILD"] = os.path.relpath(BUILD, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
sys.path.insert(0, os.path.join(BUILD, "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import pushpull  # noqa: E402
import pushpull.torch  # noqa: E402
from conftest import Job  # noqa: E402  (the scheduler and servers as processes on free ports)
from fmnist_cnn import Net  # noqa: E402

torch.set_num_threads(1)
ROUNDS = 3 if QUICK else 7


def rounds(python_round, cpp_round):
    """(median Python rate, median C++ rate, median of the rounds' ratios), alternating."""
    py, cc = [], []
    for _ in range(ROUNDS):
        py.append(python_round())
        cc.append(cpp_round())
    return statistics.median(py), statistics.median(cc), statistics.median(p / c for p, c in zip(py, cc))


def report(f, case, unit, value, baseline, ratio, note):
    line = {"bench": "python", "case": case, "unit": unit, "value": value, "baseline": baseline, "ratio": ratio,
            "note": note}
    f.write(json.dumps(line) + "\n")
    print(f"  {case:45s} {value:10.1f} {unit}  C++ {baseline:10.1f}  ratio {ratio:.3f}  ({note})", flush=True)


def push_pull(client, f):
    rows, dim = 4096, 1024  # 16 MB
    t = client.create_table("bench/dense16", rows=rows, dim=dim, optimizer=pushpull.SGD(lr=1e-6), consistency="asp")
    grads = np.full((rows, dim), 1e-3, np.float32)
    out = np.empty((rows, dim), np.float32)
    n = 4 if QUICK else 12
    mb = 2 * grads.nbytes / 1e6 * n

    def python_round():
        start = time.perf_counter()
        for _ in range(n):
            pushed = client.push_async(t, grads)
            client.pull(t, out=out)
            pushed.wait()
        return mb / (time.perf_counter() - start)

    def cpp_round():
        start = time.perf_counter()
        pushpull._core._bench_steps(client._c, [t], [grads], [out], n, False)
        return mb / (time.perf_counter() - start)

    python_round(), cpp_round()  # warm-up
    py, cc, ratio = rounds(python_round, cpp_round)
    report(f, "python_push_pull/16MB/2s1w", "MB/s", py, cc, ratio, "goal: ratio >= 0.9")


def server_optimizer(client, f):
    model = Net()
    opt = pushpull.torch.ServerOptimizer(model, pushpull.Adam(lr=1e-4), client=client, name="bench/cnn")
    # Gradients where backward leaves them: in the .grad views ServerOptimizer gave the parameters.
    for p in model.parameters():
        p.grad.copy_(torch.randn_like(p) * 1e-3)
    t = opt.table
    grads = [opt._grad.numpy().reshape(t.rows, t.dim)]
    outs = [np.empty_like(grads[0])]
    tables = [t]
    n = 20 if QUICK else 100
    floats = sum(p.numel() for p in model.parameters())

    def python_round():
        start = time.perf_counter()
        for _ in range(n):
            opt.step()
        return n / (time.perf_counter() - start)

    def cpp_round():
        start = time.perf_counter()
        pushpull._core._bench_steps(client._c, tables, grads, outs, n, True)
        return n / (time.perf_counter() - start)

    python_round(), cpp_round()
    py, cc, ratio = rounds(python_round, cpp_round)
    report(f, "python_server_optimizer/fmnist_cnn/2s1w", "steps/s", py, cc, ratio,
           f"{len(list(model.parameters()))} parameters, {floats} floats in one table; goal: C++ time / Python time >= 1/1.2 = 0.833")


def main():
    os.makedirs(os.path.dirname(OUT) or ".", exist_ok=True)
    job = Job(servers=2, workers=1)
    try:
        print("python bench: the Python client against the C++ client (same job, client, tables, arrays)", flush=True)
        with pushpull.connect(scheduler=job.scheduler, rank=0, request_timeout=120) as client, open(OUT, "a") as f:
            push_pull(client, f)
            server_optimizer(client, f)
    finally:
        job.close()


if __name__ == "__main__":
    main()
