"""A pushpull job for each test: the scheduler and the servers as real processes on free ports,
the workers as clients (threads) of the test's own process. PUSHPULL_BUILD names the build
directory (default: build)."""

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("PUSHPULL_BUILD", "build"))
BIN = os.path.join(BUILD, "bin")
sys.path.insert(0, os.path.join(BUILD, "python"))


class Job:
    """A scheduler and `servers` servers waiting for `workers` workers; .scheduler is its address."""

    def __init__(self, servers, workers, on_worker_death="abort", scheduler_flags=()):
        self.dir = tempfile.mkdtemp(prefix="pushpull-pytest-")
        self.log = open(os.path.join(self.dir, "job.log"), "w+")
        endpoint = os.path.join(self.dir, "scheduler")
        self.procs = [subprocess.Popen(
            [os.path.join(BIN, "pushpull-scheduler"), "--port=0", "--bind_host=127.0.0.1",
             f"--endpoint_file={endpoint}", f"--num_servers={servers}", f"--num_workers={workers}",
             "--heartbeat_timeout_ms=3000", f"--on_worker_death={on_worker_death}", "--register_timeout_ms=30000",
             *scheduler_flags],
            stdout=self.log, stderr=subprocess.STDOUT)]
        deadline = time.time() + 20
        while not (os.path.exists(endpoint) and open(endpoint).read().strip()):
            if time.time() > deadline or self.procs[0].poll() is not None:
                self.close()
                raise RuntimeError("the scheduler did not start: " + self.output())
            time.sleep(0.02)
        self.scheduler = open(endpoint).read().strip()
        for s in range(servers):
            self.procs.append(subprocess.Popen(
                [os.path.join(BIN, "pushpull-server"), f"--scheduler={self.scheduler}", "--bind_host=127.0.0.1",
                 f"--rank={s}", "--update_threads=1", "--stats_every_s=0", "--register_timeout_ms=30000"],
                stdout=self.log, stderr=subprocess.STDOUT))

    @property
    def servers(self):
        return self.procs[1:]

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    @contextlib.contextmanager
    def servers_stopped(self):
        """The servers stopped (SIGSTOP) for the block: requests to them stay unanswered."""
        for p in self.servers:
            p.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            for p in self.servers:
                p.send_signal(signal.SIGCONT)

    def wait_scheduler(self, timeout=30):
        """The scheduler's exit status once the job ended."""
        return self.procs[0].wait(timeout)

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.log.close()


@pytest.fixture
def job_factory():
    jobs = []

    def make(servers=2, workers=1, **kw):
        j = Job(servers, workers, **kw)
        jobs.append(j)
        return j

    yield make
    for j in jobs:
        j.close()


def run_workers(n, fn, timeout=120):
    """Runs fn(rank) on n threads at once (each a worker of the job); re-raises the first error."""
    import threading
    errors, threads = [], []
    for r in range(n):
        def body(r=r):
            try:
                fn(r)
            except BaseException as e:  # noqa: B036  (re-raised in the test's thread)
                errors.append(e)
        t = threading.Thread(target=body, daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), f"a worker thread still runs after {timeout} s"
    if errors:
        raise errors[0]
