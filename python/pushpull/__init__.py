"""pushpull from Python: a worker's client of a pushpull parameter server job.

Run a script as every worker of a job on this machine::

    pushpull-launch --servers=2 --workers=2 -- python3 train.py

and in it::

    import numpy as np
    import pushpull

    with pushpull.connect() as client:          # the job pushpull-launch started
        w = client.create_table("w", rows=1000, dim=64, optimizer=pushpull.Adam(lr=1e-3))
        for step in range(100):
            params = client.pull(w)              # float32 array, rows x dim
            client.push(w, grads)                # NumPy array or CPU torch tensor, not copied
            client.clock()                       # the end of this worker's step

Arrays are sent and filled in place, without copies: float32, C-contiguous. The GIL is released
while a call sends or waits. Errors raise pushpull.Error subclasses named by the status code
(InvalidArgument, Unavailable, DeadlineExceeded, ...), with the servers' message.
"""

from . import _core
from ._core import (  # noqa: F401  (re-exported)
    Aborted,
    AlreadyExists,
    Corruption,
    DeadlineExceeded,
    Error,
    FailedPrecondition,
    Future,
    Internal,
    InvalidArgument,
    NotFound,
    OptimizerConfig,
    ResourceExhausted,
    Table,
    Unavailable,
)

__version__ = _core.version()

__all__ = [
    "connect", "default_client", "Client", "Table", "Future", "OptimizerConfig",
    "SGD", "Adam", "AdamW", "Adagrad", "FTRL", "held_buffers",
    "Error", "InvalidArgument", "NotFound", "Corruption", "Unavailable", "DeadlineExceeded",
    "FailedPrecondition", "AlreadyExists", "Aborted", "Internal", "ResourceExhausted",
]


def held_buffers():
    """Arrays the library holds now for pushes in flight (each sent without a copy)."""
    return _core.held_buffers()


# --- Optimizers: each returns the OptimizerConfig a table is created with -------------------


def _config(kind, lr, schedule, clip_norm, staleness_aware):
    c = OptimizerConfig()
    c.kind = kind
    c.lr = lr
    c.clip_norm = clip_norm
    c.staleness_aware = staleness_aware
    if schedule is not None:
        kind_of, settings = schedule
        c.schedule = kind_of
        for name, value in settings.items():
            setattr(c, name, value)
    return c


def cosine(total_steps, warmup_steps=0, min_lr_ratio=0.0):
    """A cosine learning-rate schedule over total_steps (after a linear warm-up)."""
    return ("cosine", dict(total_steps=total_steps, warmup_steps=warmup_steps, min_lr_ratio=min_lr_ratio))


def step_decay(step_size, gamma=0.1, warmup_steps=0):
    """The learning rate times gamma every step_size steps (after a linear warm-up)."""
    return ("step", dict(step_size=step_size, gamma=gamma, warmup_steps=warmup_steps))


def SGD(lr, momentum=0.0, nesterov=False, weight_decay=0.0, schedule=None, clip_norm=0.0,
        staleness_aware=False):
    """SGD as torch.optim.SGD: momentum, Nesterov, L2 weight decay added to the gradient."""
    c = _config("sgd", lr, schedule, clip_norm, staleness_aware)
    c.momentum, c.nesterov, c.weight_decay = momentum, nesterov, weight_decay
    c.validate()
    return c


def Adam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, schedule=None,
         clip_norm=0.0, staleness_aware=False):
    """Adam as torch.optim.Adam (weight decay: L2 added to the gradient)."""
    c = _config("adam", lr, schedule, clip_norm, staleness_aware)
    c.beta1, c.beta2 = betas
    c.epsilon, c.weight_decay, c.amsgrad = eps, weight_decay, amsgrad
    c.validate()
    return c


def AdamW(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, amsgrad=False, schedule=None,
          clip_norm=0.0, staleness_aware=False):
    """AdamW as torch.optim.AdamW (decoupled weight decay)."""
    c = _config("adamw", lr, schedule, clip_norm, staleness_aware)
    c.beta1, c.beta2 = betas
    c.epsilon, c.weight_decay, c.amsgrad = eps, weight_decay, amsgrad
    c.validate()
    return c


def Adagrad(lr=1e-2, eps=1e-10, initial_accumulator_value=0.0, weight_decay=0.0, schedule=None,
            clip_norm=0.0, staleness_aware=False):
    """AdaGrad as torch.optim.Adagrad."""
    c = _config("adagrad", lr, schedule, clip_norm, staleness_aware)
    c.epsilon, c.initial_accumulator, c.weight_decay = eps, initial_accumulator_value, weight_decay
    c.validate()
    return c


def FTRL(alpha=0.05, beta=1.0, l1=0.0, l2=0.0, clip_norm=0.0):
    """FTRL-Proximal (McMahan et al. 2013), per coordinate."""
    c = _config("ftrl", alpha, None, clip_norm, False)
    c.ftrl_alpha, c.ftrl_beta, c.ftrl_l1, c.ftrl_l2 = alpha, beta, l1, l2
    c.validate()
    return c


# --- Arrays: NumPy as they are, CPU torch tensors as NumPy views of the same memory ----------


def _is_tensor(x):
    return type(x).__module__.split(".")[0] == "torch"


def _array(x, what):
    """x as a NumPy array sharing its memory: a torch tensor must be CPU float32 and contiguous
    (a copy here would hide the cost the caller asked to avoid)."""
    if _is_tensor(x):
        if x.device.type != "cpu":
            raise InvalidArgument(f"{what} is a tensor on {x.device}: pushpull takes CPU tensors (tensor.cpu())")
        if not x.is_contiguous():
            raise InvalidArgument(f"{what} must be contiguous (tensor.contiguous())")
        if x.dtype.is_floating_point and str(x.dtype) != "torch.float32":
            raise InvalidArgument(f"{what} must be float32, not {x.dtype} (tensor.float())")
        return x.detach().numpy()
    return x


def _keys(keys):
    if keys is None:
        return None
    if _is_tensor(keys):
        if keys.device.type != "cpu":
            raise InvalidArgument(f"keys are a tensor on {keys.device}: pushpull takes CPU tensors")
        if keys.dtype.is_floating_point:
            raise InvalidArgument(f"keys must be integers (uint64 or int64), not {keys.dtype}")
        return keys.detach().contiguous().numpy()
    return keys


class Client:
    """A worker's connection to the job: made by pushpull.connect(). Use it as a context manager
    (finish() on a normal exit, leave(reason) on an exception), or call finish() yourself."""

    def __init__(self, core):
        self._c = core

    # The job.
    @property
    def rank(self):
        """This worker's rank, 0 .. num_workers - 1."""
        return self._c.rank

    @property
    def num_workers(self):
        return self._c.num_workers

    @property
    def num_servers(self):
        return self._c.num_servers

    @property
    def consistency(self):
        """The job's consistency model ("bsp", "ssp:K", "asp"): tables' default."""
        return self._c.consistency

    @property
    def current_clock(self):
        """This worker's clock: the steps it has ended with clock()."""
        return self._c.current_clock

    @property
    def replacement(self):
        """Whether this worker took a dead one's place mid-job (--on_worker_death=wait): its
        clock then starts where that worker's was."""
        return self._c.replacement

    @property
    def checkpoints_enabled(self):
        """Whether the scheduler has a checkpoint directory (checkpoint() fails without one)."""
        return self._c.checkpoints_enabled

    @property
    def restored_run(self):
        """In a job restored from a checkpoint, the run text given to checkpoint(run); else ""."""
        return self._c.restored_run

    def create_table(self, name, rows=0, dim=1, sparse=False, optimizer=None, consistency=None,
                     init="zeros", init_scale=0.01, seed=1):
        """Creates the table, or returns it when it exists with the same settings (every worker
        may call it). rows: a dense table's row count (a sparse one takes any uint64 key);
        optimizer: pushpull.SGD(...), Adam(...), ...; consistency: "bsp", "ssp:K", "asp" (None:
        the job's); init: "zeros", "uniform", "normal", "glorot"."""
        if optimizer is None:
            optimizer = SGD(lr=0.01)
        if not isinstance(optimizer, OptimizerConfig):
            raise InvalidArgument("optimizer must be made by pushpull.SGD, Adam, AdamW, Adagrad or FTRL")
        return self._c._create_table(name, int(rows), int(dim), bool(sparse), optimizer, consistency or "",
                                     init, float(init_scale), int(seed))

    # Data: pulls and pushes.
    def pull_async(self, table, keys=None, out=None):
        """Starts a pull: the whole table (keys None, dense tables) or the rows of keys. out: a
        float32 array or CPU tensor to fill in place (kept alive by the Future), else a new
        array. Returns a Future whose wait() returns the array."""
        if out is not None and _is_tensor(out):
            dest = _array(out, "out")
            f = self._c._pull_async(table, _keys(keys), dest, False)
            return _TensorFuture(f, out)
        return self._c._pull_async(table, _keys(keys), out, False)

    def pull(self, table, keys=None, out=None, timeout=None):
        """The table's rows (all of a dense table, or those of keys) as a float32 array of
        rows x dim, or written into out. Under BSP and SSP it waits for the slower workers as
        the table's consistency model says."""
        return self.pull_async(table, keys, out).wait(timeout)

    def lookup(self, table, keys, out=None, timeout=None):
        """Reads rows as pull() does, without adding keys a sparse table does not hold yet (they
        read as their rows would start): for evaluation."""
        dest = _array(out, "out") if out is not None else None
        result = self._c._pull_async(table, _keys(keys), dest, True).wait(timeout)
        return out if out is not None else result

    def push_async(self, table, grads, keys=None):
        """Starts a push of gradients (float32 array or CPU tensor, rows x dim: the whole table,
        or the rows of keys). The array is sent as it is, not copied: leave it unchanged until
        the Future is done."""
        return self._c._push_async(table, _array(grads, "grads"), _keys(keys))

    def push(self, table, grads, keys=None, timeout=None):
        """Pushes gradients and waits for the servers to take them (see push_async)."""
        self.push_async(table, grads, keys).wait(timeout)

    # Steps and the job.
    def clock(self):
        """Ends this worker's step: its clock advances on every server."""
        self._c._clock()

    def barrier(self):
        """Waits until every live worker reaches the barrier."""
        self._c._barrier()

    def checkpoint(self, run=""):
        """Every live worker calls it at the same clock: the servers write every table, with its
        optimizer state, and the scheduler commits the checkpoint."""
        self._c._checkpoint(run)

    def finish(self):
        """Closes the last step, waits for every push to be answered, tells the job this worker
        is done. No calls after it."""
        self._c._finish()

    def leave(self, reason):
        """Tells the job this worker stops early because of reason. No calls after it."""
        self._c._leave(str(reason))

    def stats(self):
        """Counters of this client: pushes, pulls, clocks, bytes sent and received, ..."""
        return self._c._stats()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.finish()
        else:
            try:
                self.leave(f"{exc_type.__name__}: {exc}")
            except Error:
                pass  # the job may be gone already: the exception in flight says more
        return False


class _TensorFuture:
    """A pull into a tensor: wait() returns the tensor."""

    def __init__(self, future, tensor):
        self._f, self._t = future, tensor

    def wait(self, timeout=None):
        self._f.wait(timeout)
        return self._t

    def done(self):
        return self._f.done()


def connect(scheduler=None, rank=None, consistency=None, request_timeout=None,
            heartbeat_interval=None, register_timeout=None, max_unanswered_mb=None):
    """Joins the job. What is not given comes from the environment pushpull-launch sets
    (PUSHPULL_SCHEDULER, PUSHPULL_RANK, PUSHPULL_CONSISTENCY, ...). Timeouts in seconds. Blocks
    until the whole job has registered."""
    o = _core.ClientOptions()
    if scheduler is not None:
        o.scheduler = scheduler
    if rank is not None:
        o.requested_rank = int(rank)
    if consistency is not None:
        o.consistency = consistency
    if request_timeout is not None:
        o.request_timeout_ms = max(1, int(request_timeout * 1000))
    if heartbeat_interval is not None:
        o.heartbeat_interval_ms = max(1, int(heartbeat_interval * 1000))
    if register_timeout is not None:
        o.register_timeout_ms = max(1, int(register_timeout * 1000))
    if max_unanswered_mb is not None:
        o.max_unanswered_mb = int(max_unanswered_mb)
    global _default
    client = Client(_core._connect(o))
    _default = client  # (returned from the local: another thread may connect at once)
    return client


_default = None


def default_client():
    """The client pushpull.connect() made last (pushpull.torch's default)."""
    if _default is None:
        raise FailedPrecondition("no client: call pushpull.connect() first, or pass client=")
    return _default
