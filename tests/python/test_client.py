"""pushpull's Python client against a real job: pulls and pushes of NumPy arrays and torch
tensors without copies, futures, errors by status code, bad input refused without harm, the
context manager, and BSP's mean update matching torch's optimizer on the mean gradient."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import BIN, BUILD, run_workers

import pushpull


def connect(job, rank=0, request_timeout=30, **kw):
    return pushpull.connect(scheduler=job.scheduler, rank=rank, request_timeout=request_timeout, **kw)


def test_dense_push_and_pull_round_trip(job_factory):
    job = job_factory(servers=2, workers=1)
    with connect(job) as c:
        assert (c.rank, c.num_workers, c.num_servers, c.consistency) == (0, 1, 2, "bsp")
        t = c.create_table("w", rows=10, dim=3, optimizer=pushpull.SGD(lr=1.0))
        assert (t.name, t.rows, t.dim, t.sparse) == ("w", 10, 3, False)
        assert np.array_equal(c.pull(t), np.zeros((10, 3), np.float32))
        g = np.arange(30, dtype=np.float32).reshape(10, 3)
        c.push(t, g)
        c.clock()
        got = c.pull(t)
        assert got.dtype == np.float32 and got.shape == (10, 3)
        assert np.array_equal(got, -g)  # SGD, lr 1, from zeros
        assert c.stats()["pushes"] >= 1 and c.stats()["clocks"] == 1
    assert job.wait_scheduler() == 0, job.output()


def test_keyed_calls_on_a_sparse_table_take_int64_and_uint64_keys(job_factory):
    job = job_factory(servers=2, workers=1)
    with connect(job, consistency="asp") as c:
        t = c.create_table("emb", dim=4, sparse=True, optimizer=pushpull.SGD(lr=0.5))
        assert t.consistency == "asp"
        keys = np.array([3, 1 << 40, 7], dtype=np.int64)
        c.push(t, np.ones((3, 4), np.float32), keys=keys)
        got = c.pull(t, keys=keys.astype(np.uint64))
        assert np.array_equal(got, np.full((3, 4), -0.5, np.float32))
        # lookup() reads keys not there as they would start, without adding them.
        assert np.array_equal(c.lookup(t, [12345]), np.zeros((1, 4), np.float32))


def test_pull_fills_the_callers_array_and_tensor_in_place(job_factory):
    torch = pytest.importorskip("torch")
    job = job_factory(servers=2, workers=1)
    with connect(job) as c:
        t = c.create_table("w", rows=64, dim=8, optimizer=pushpull.SGD(lr=1.0))
        c.push(t, np.full((64, 8), 2.0, np.float32))
        c.clock()
        out = np.empty((64, 8), np.float32)
        assert c.pull(t, out=out) is out
        assert np.all(out == -2.0)
        tensor = torch.empty(64, 8)
        before = tensor.data_ptr()
        assert c.pull(t, out=tensor) is tensor and tensor.data_ptr() == before
        assert torch.all(tensor == -2.0)
        # A tensor's gradient goes out as a view of the tensor's own memory.
        grad = torch.ones(64, 8)
        view = pushpull._array(grad, "grads")
        assert view.__array_interface__["data"][0] == grad.data_ptr()
        c.push(t, grad)
        c.clock()
        assert np.all(c.pull(t) == -3.0)


def test_a_push_sends_the_callers_array_without_a_copy(job_factory):
    """The library holds the array itself until the servers answered: with the servers stopped
    (SIGSTOP), the push stays in flight holding one more reference to the very array."""
    job = job_factory(servers=1, workers=1)
    with connect(job) as c:
        t = c.create_table("w", rows=1 << 16, dim=16, optimizer=pushpull.SGD(lr=1.0))  # 4 MB
        grads = np.ones((1 << 16, 16), np.float32)
        refs = sys.getrefcount(grads)
        sent = c.stats()["bytes_sent"]
        with job.servers_stopped():
            f = c.push_async(t, grads)
            assert pushpull.held_buffers() == 1
            assert sys.getrefcount(grads) == refs + 1
            assert not f.done()
        assert f.wait() is None
        c.clock()
        assert c.stats()["bytes_sent"] - sent >= grads.nbytes
    assert pushpull.held_buffers() == 0
    assert sys.getrefcount(grads) == refs


def test_futures_wait_and_say_when_done(job_factory):
    job = job_factory(servers=2, workers=1)
    with connect(job) as c:
        t = c.create_table("w", rows=100, dim=2, optimizer=pushpull.Adam(lr=0.1))
        futures = [c.push_async(t, np.ones((100, 2), np.float32)) for _ in range(3)]
        for f in futures:
            assert f.wait(timeout=30) is None
            assert f.done()
        c.clock()
        pulled = c.pull_async(t).wait(timeout=30)
        assert pulled.shape == (100, 2) and np.all(pulled < 0)


@pytest.mark.parametrize("bad,message", [
    (lambda np_, torch: np_.ones((10, 3), np_.float64), "must be float32, not float64"),
    (lambda np_, torch: np_.ones((10, 6), np_.float32)[:, ::2], "C-contiguous"),
    (lambda np_, torch: np_.ones((10, 4), np_.float32), "grads hold 40 floats"),
    (lambda np_, torch: [1.0] * 30, "must be a NumPy array"),
    (lambda np_, torch: torch.ones(10, 3, dtype=torch.float64), "must be float32"),
    (lambda np_, torch: torch.ones(3, 10).t(), "contiguous"),
])
def test_bad_gradients_raise_invalid_argument_and_harm_nothing(job_factory, bad, message):
    torch = pytest.importorskip("torch")
    job = job_factory(servers=1, workers=1)
    with connect(job) as c:
        t = c.create_table("w", rows=10, dim=3, optimizer=pushpull.SGD(lr=1.0))
        with pytest.raises(pushpull.InvalidArgument, match=message) as e:
            c.push(t, bad(np, torch))
        assert isinstance(e.value, ValueError) and e.value.code == "InvalidArgument"
        c.push(t, np.ones((10, 3), np.float32))  # the client goes on
        c.clock()
        assert np.all(c.pull(t) == -1.0)


def test_bad_keys_and_destinations_raise_invalid_argument(job_factory):
    job = job_factory(servers=1, workers=1)
    with connect(job) as c:
        dense = c.create_table("w", rows=10, dim=2)
        sparse = c.create_table("s", dim=2, sparse=True)
        with pytest.raises(pushpull.InvalidArgument, match="keys must be integers"):
            c.pull(sparse, keys=np.array([1.5, 2.0]))
        with pytest.raises(pushpull.InvalidArgument, match="keys must be >= 0"):
            c.pull(sparse, keys=[-1])
        with pytest.raises(pushpull.InvalidArgument, match="is sparse: a pull names its keys"):
            c.pull(sparse)
        with pytest.raises(pushpull.InvalidArgument, match="out holds 6 floats"):
            c.pull(dense, out=np.empty((3, 2), np.float32))
        ro = np.empty((10, 2), np.float32)
        ro.flags.writeable = False
        with pytest.raises(pushpull.InvalidArgument, match="read-only"):
            c.pull(dense, out=ro)
        with pytest.raises(pushpull.InvalidArgument, match="out of range"):
            c.pull(dense, keys=[10])
        with pytest.raises(pushpull.InvalidArgument, match="optimizer.beta1"):
            pushpull.Adam(betas=(1.5, 0.9))
        with pytest.raises(pushpull.AlreadyExists):
            c.create_table("w", rows=11, dim=2)
        assert c.pull(dense).shape == (10, 2)


def test_a_table_of_another_client_and_calls_after_finish_are_refused(job_factory):
    job = job_factory(servers=1, workers=2)
    clients = {}

    def worker(r):
        clients[r] = connect(job, rank=r)

    run_workers(2, worker)
    a, b = clients[0], clients[1]
    ta = a.create_table("w", rows=4, dim=1)
    b.create_table("w", rows=4, dim=1)
    with pytest.raises(pushpull.InvalidArgument, match="belongs to another client"):
        b.pull(ta)
    a.finish()
    with pytest.raises(pushpull.FailedPrecondition):
        a.pull(ta)
    b.finish()
    assert job.wait_scheduler() == 0, job.output()


def test_an_exception_in_the_with_block_leaves_the_job_naming_it(job_factory):
    job = job_factory(servers=1, workers=1)
    with pytest.raises(RuntimeError, match="model diverged"):
        with connect(job) as c:
            c.create_table("w", rows=4, dim=1)
            raise RuntimeError("model diverged")
    assert job.wait_scheduler() != 0
    assert "RuntimeError: model diverged" in job.output()


def test_bsp_applies_the_workers_mean_gradient_as_torch_sgd_would(job_factory):
    """Two workers (threads: the GIL is released while each waits for the other at its clock)
    push different gradients; under BSP each step applies their mean, with momentum and
    Nesterov, as torch.optim.SGD does on the mean gradient."""
    torch = pytest.importorskip("torch")
    job = job_factory(servers=2, workers=2)
    steps, shape = 20, (16, 5)
    rng = np.random.default_rng(1)
    grads = rng.standard_normal((2, steps) + shape).astype(np.float32)
    results = {}

    def worker(r):
        with connect(job, rank=r) as c:
            t = c.create_table("w", rows=shape[0], dim=shape[1],
                               optimizer=pushpull.SGD(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01))
            for s in range(steps):
                c.push(t, grads[r, s])
                c.clock()
            results[r] = c.pull(t)

    run_workers(2, worker)
    p = torch.zeros(shape, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
    for s in range(steps):
        p.grad = torch.from_numpy(grads[:, s].mean(axis=0))
        opt.step()
    for r in (0, 1):
        np.testing.assert_allclose(results[r], p.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_a_script_under_pushpull_launch_finds_the_job_in_its_environment(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import numpy as np, pushpull\n"
        "with pushpull.connect() as c:\n"
        "    t = c.create_table('w', rows=8, dim=2, optimizer=pushpull.SGD(lr=1.0))\n"
        "    for _ in range(5):\n"
        "        c.push(t, np.ones((8, 2), np.float32))\n"
        "        c.clock()\n"
        "    print('rank', c.rank, 'of', c.num_workers, c.consistency, float(c.pull(t)[0, 0]))\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"))
    run = subprocess.run([os.path.join(BIN, "pushpull-launch"), "--servers=2", "--workers=2",
                          "--consistency=ssp:1", "--", sys.executable, str(script)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    for r in (0, 1):
        assert f"worker {r} | rank {r} of 2 ssp:1" in run.stdout, run.stdout


def test_a_killed_python_worker_ends_the_job_as_a_cpp_worker_would(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import os, signal, numpy as np, pushpull\n"
        "c = pushpull.connect()\n"
        "t = c.create_table('w', rows=8, dim=2)\n"
        "for step in range(100000):\n"
        "    c.push(t, np.ones((8, 2), np.float32))\n"
        "    c.clock()\n"
        "    if c.rank == 1 and step == 20:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "python"))
    run = subprocess.run([os.path.join(BIN, "pushpull-launch"), "--servers=1", "--workers=2",
                          "--heartbeat_timeout_ms=1500", "--heartbeat_interval_ms=200", "--", sys.executable,
                          str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "worker 1 (pid" in run.stdout and "killed by signal 9" in run.stdout, run.stdout


def test_an_expired_wait_raises_deadline_exceeded_and_the_client_goes_on(job_factory):
    job = job_factory(servers=1, workers=1)
    with connect(job) as c:
        t = c.create_table("w", rows=8, dim=2)
        with job.servers_stopped():
            f = c.pull_async(t)
            with pytest.raises(pushpull.DeadlineExceeded) as e:
                f.wait(timeout=0.2)
            assert isinstance(e.value, TimeoutError)
        assert c.pull(t).shape == (8, 2)


def test_keyword_arguments_win_over_the_environment(job_factory, monkeypatch):
    job = job_factory(servers=1, workers=1)
    monkeypatch.setenv("PUSHPULL_SCHEDULER", "tcp://127.0.0.1:1")  # nobody there
    monkeypatch.setenv("PUSHPULL_CONSISTENCY", "asp")
    monkeypatch.setenv("PUSHPULL_RANK", "0")
    with pushpull.connect(scheduler=job.scheduler, consistency="ssp:3", request_timeout=30) as c:
        assert c.consistency == "ssp:3" and c.rank == 0
        assert pushpull.default_client() is c
    monkeypatch.setenv("PUSHPULL_RANK", "first")
    with pytest.raises(pushpull.InvalidArgument, match="PUSHPULL_RANK='first'"):
        pushpull.connect(scheduler=job.scheduler)


def test_the_job_state_a_program_checks_before_resuming(job_factory):
    job = job_factory(servers=1, workers=1)
    with connect(job) as c:
        assert c.replacement is False
        assert c.checkpoints_enabled is False  # the job's scheduler has no --checkpoint_dir
        assert c.restored_run == ""
        with pytest.raises(pushpull.FailedPrecondition):
            c.checkpoint("one line")


def test_a_checkpoint_taken_from_python_restores_tables_clock_and_run(job_factory, tmp_path):
    ckpt = str(tmp_path / "ckpt")
    job = job_factory(servers=2, workers=1, scheduler_flags=[f"--checkpoint_dir={ckpt}"])
    with connect(job) as c:
        assert c.checkpoints_enabled
        t = c.create_table("w", rows=6, dim=2, optimizer=pushpull.Adam(lr=0.1))
        for _ in range(3):
            c.push(t, np.ones((6, 2), np.float32))
            c.clock()
        c.checkpoint("batch 8, 3 clocks")
        saved = c.pull(t)
    assert job.wait_scheduler() == 0, job.output()
    again = job_factory(servers=2, workers=1, scheduler_flags=[f"--restore_from={ckpt}"])
    with connect(again) as c:
        assert c.restored_run == "batch 8, 3 clocks" and c.current_clock == 3
        t = c.create_table("w", rows=6, dim=2, optimizer=pushpull.Adam(lr=0.1))
        assert np.array_equal(c.pull(t), saved)


def test_an_argument_of_the_wrong_type_names_the_call_and_the_argument(job_factory):
    job = job_factory(servers=1, workers=1)
    with connect(job) as c:
        t = c.create_table("w", rows=4, dim=2, optimizer=pushpull.SGD(lr=1.0))
        ones = np.ones((4, 2), np.float32)
        wrong_type = [
            (lambda: c.pull("w"), "pull(table): expected a pushpull.Table (from client.create_table), got str 'w'"),
            (lambda: c.push_async(None, ones), "push_async(table): expected a pushpull.Table"),
            (lambda: c.push(t, ones, timeout="1"),
             "push(timeout): expected seconds (a number >= 0) or None, got str '1'"),
            (lambda: c.lookup(t.name, [1]), "lookup(table): expected a pushpull.Table"),
            (lambda: c.create_table(5), "create_table(name): expected a string, got int 5"),
            (lambda: c.create_table("v", rows="10"), "create_table(rows): expected an integer >= 0, got str '10'"),
            (lambda: c.create_table("v", optimizer="adam"), "create_table(optimizer): expected an optimizer"),
            (lambda: c.checkpoint(3), "checkpoint(run): expected a string, got int 3"),
            (lambda: c.leave(42), "leave(reason): expected a string or an exception"),
            (lambda: c.pull_async(t).wait("soon"),
             "wait(timeout): expected seconds (a number) or None, got str 'soon'"),
            (lambda: pushpull.connect(scheduler=7000), "connect(scheduler): expected a string or None, got int 7000"),
            (lambda: pushpull.Adam(lr="1e-3"), "Adam(lr): expected a number, got str '1e-3'"),
            (lambda: pushpull.SGD(0.1, nesterov="yes"), "SGD(nesterov): expected True or False, got str 'yes'"),
            (lambda: pushpull.Adam(schedule="cosine"), "Adam(schedule): expected a schedule (from pushpull.cosine"),
            (lambda: pushpull.cosine(total_steps=100.5),
             "cosine(total_steps): expected an integer >= 0, got float 100.5"),
        ]
        for call, message in wrong_type:
            with pytest.raises(TypeError) as e:
                call()
            assert str(e.value).startswith(message), (str(e.value), message)
        # The right type, a value out of range: InvalidArgument, a ValueError.
        out_of_range = [
            (lambda: c.create_table("v", rows=-1), "create_table(rows): expected an integer >= 0, got int -1"),
            (lambda: pushpull.connect(request_timeout=-1), "connect(request_timeout): expected seconds"),
            (lambda: pushpull.Adam(betas=(0.9,)), "Adam(betas): expected a pair of numbers, got tuple (0.9,)"),
        ]
        for call, message in out_of_range:
            with pytest.raises(pushpull.InvalidArgument) as e:
                call()
            assert isinstance(e.value, ValueError) and str(e.value).startswith(message), (str(e.value), message)
        # Nothing was sent: the client goes on.
        c.push(t, ones)
        c.clock()
        assert np.all(c.pull(t) == -1.0)
    assert job.wait_scheduler() == 0, job.output()


def test_the_error_classes_of_every_code(job_factory):
    for name in ["InvalidArgument", "NotFound", "Corruption", "Unavailable", "DeadlineExceeded", "FailedPrecondition",
                 "AlreadyExists", "Aborted", "Internal", "ResourceExhausted", "Diverged", "TargetMissed"]:
        cls = getattr(pushpull, name)
        assert issubclass(cls, pushpull.Error) and cls.code == name and name in pushpull.__all__


@pytest.mark.parametrize("reason,said,code", [
    (pushpull.TargetMissed("missed target: AUC 0.5100 < 0.8600"), "TargetMissed: missed target: AUC 0.5100 < 0.8600",
     3),
    (pushpull.Diverged("loss is nan at step 7"), "Diverged: loss is nan at step 7", 4),
    (pushpull.NotFound("no file /data/train.csv"), "NotFound: no file /data/train.csv", 2),
    (RuntimeError("out of data"), "Aborted: RuntimeError: out of data", 1),
    ("no more data", "Aborted: no more data", 1),
])
def test_leave_sends_the_code_of_its_reason(job_factory, reason, said, code):
    """A pushpull.Error goes with its code, which the scheduler acts on as on a C++ worker's (a
    missed target ends the job with exit 3, a diverged one with 4, a setup error with 2); anything
    else is Aborted."""
    job = job_factory(servers=1, workers=1)
    c = connect(job)
    c.leave(reason)
    assert job.wait_scheduler() == code, job.output()
    assert f"job aborted: worker 0 stopped: {said}" in job.output()


def test_a_finish_that_fails_at_the_end_of_the_with_block_leaves_the_job_with_its_error(job_factory):
    """The block ends normally, but finish() fails: the servers (stopped) never answer its last
    push within the request timeout. The client leaves the job with finish's error before it
    re-raises, so that the scheduler names this worker and that error, not a heartbeat timeout."""
    job = job_factory(servers=1, workers=1)
    c = connect(job, request_timeout=0.5)
    t = c.create_table("w", rows=4, dim=1)
    with job.servers_stopped():
        with pytest.raises(pushpull.DeadlineExceeded, match="finish") as e:
            with c:
                c.push_async(t, np.ones((4, 1), np.float32))
    assert job.wait_scheduler() != 0
    out = job.output()
    aborted = [line for line in out.splitlines() if "job aborted:" in line]
    assert aborted and f"worker 0 stopped: DeadlineExceeded: {e.value}" in aborted[0], out
    assert "no heartbeat" not in out, out


def test_connect_timeout_bounds_the_wait_for_a_scheduler_that_refuses(monkeypatch):
    monkeypatch.delenv("PUSHPULL_CONNECT_TIMEOUT_MS", raising=False)
    start = time.monotonic()
    with pytest.raises(pushpull.Unavailable, match=r"tcp://127\.0\.0\.1:1 .*connection refused"):
        pushpull.connect(scheduler="tcp://127.0.0.1:1", rank=0, connect_timeout=0.5, register_timeout=30)
    assert time.monotonic() - start < 10
