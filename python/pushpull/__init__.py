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
(InvalidArgument, Unavailable, DeadlineExceeded, ...), with the servers' message. An argument of
the wrong type raises TypeError naming the call and the argument.
"""

import collections
import numbers

from . import _core
from ._core import (  # noqa: F401  (re-exported)
    Aborted,
    AlreadyExists,
    Corruption,
    DeadlineExceeded,
    Diverged,
    Error,
    FailedPrecondition,
    Future,
    Internal,
    InvalidArgument,
    NotFound,
    OptimizerConfig,
    ResourceExhausted,
    Table,
    TargetMissed,
    Unavailable,
)

__version__ = _core.version()

__all__ = [
    "connect", "default_client", "Client", "Table", "Future", "OptimizerConfig",
    "SGD", "Adam", "AdamW", "Adagrad", "FTRL", "cosine", "step_decay", "held_buffers",
    "Error", "InvalidArgument", "NotFound", "Corruption", "Unavailable", "DeadlineExceeded",
    "FailedPrecondition", "AlreadyExists", "Aborted", "Internal", "ResourceExhausted", "Diverged",
    "TargetMissed",
]


# --- Arguments: each public call checks its own, so that a mistake names the call ------------

# What an argument must be: its types, the words an error says, and a test of its value.
_Kind = collections.namedtuple("_Kind", "types what ok", defaults=(None,))
_STR = _Kind(str, "a string")
_BOOL = _Kind(numbers.Integral, "True or False")  # (bool is an Integral)
_NUMBER = _Kind(numbers.Real, "a number")
_COUNT = _Kind(numbers.Integral, "an integer >= 0", lambda v: v >= 0)
_SECONDS = _Kind(numbers.Real, "seconds (a number >= 0)", lambda v: v >= 0)
_TABLE = _Kind(Table, "a pushpull.Table (from client.create_table)")
_OPTIMIZER = _Kind(OptimizerConfig, "an optimizer (from pushpull.SGD, Adam, AdamW, Adagrad or FTRL)")
_BETAS = _Kind((tuple, list), "a pair of numbers", lambda v: len(v) == 2)
_SCHEDULE = _Kind(tuple, "a schedule (from pushpull.cosine or pushpull.step_decay)",
                  lambda v: len(v) == 2 and v[0] in ("cosine", "step") and isinstance(v[1], dict))
_REASON = _Kind((str, BaseException), "a string or an exception (such as pushpull.TargetMissed(...))")


def _show(value):
    """The value as an error shows it: its type and its repr, cut short ("str 'name'")."""
    r = repr(value)
    return f"{type(value).__name__} {r if len(r) <= 60 else r[:57] + '...'}"


def _check(call, name, value, kind, none=False):
    """value, when it is of kind (or None, where none allows it). Else a TypeError, or
    InvalidArgument (a ValueError) for a value of the right type out of range, that names the
    call, the argument and what it must be."""
    if value is None and none:
        return value
    what = kind.what + (" or None" if none else "")
    if not isinstance(value, kind.types):
        raise TypeError(f"{call}({name}): expected {what}, got {_show(value)}")
    if kind.ok is not None and not kind.ok(value):
        raise InvalidArgument(f"{call}({name}): expected {what}, got {_show(value)}")
    return value


def held_buffers():
    """Arrays the library holds now for pushes in flight (each sent without a copy)."""
    return _core.held_buffers()


# --- Optimizers: each returns the OptimizerConfig a table is created with -------------------


# The OptimizerConfig field of each optimizer argument whose name differs from it, and those of
# True or False.
_FIELDS = {"eps": "epsilon", "initial_accumulator_value": "initial_accumulator", "alpha": "ftrl_alpha",
           "beta": "ftrl_beta", "l1": "ftrl_l1", "l2": "ftrl_l2"}
_FLAGS = ("nesterov", "amsgrad", "staleness_aware")


def _config(call, kind, schedule, **settings):
    """The OptimizerConfig of kind with settings (an argument of call: its value), each checked."""
    c = OptimizerConfig()
    c.kind = kind
    for name, value in settings.items():
        if name == "betas":
            c.beta1, c.beta2 = (_check(call, name, b, _NUMBER) for b in _check(call, name, value, _BETAS))
        elif name in _FLAGS:
            setattr(c, name, bool(_check(call, name, value, _BOOL)))
        else:
            setattr(c, _FIELDS.get(name, name), _check(call, name, value, _NUMBER))
    if _check(call, "schedule", schedule, _SCHEDULE, none=True) is not None:
        kind_of, values = schedule
        c.schedule = kind_of
        for name, value in values.items():
            setattr(c, name, value)
    c.validate()
    return c


def cosine(total_steps, warmup_steps=0, min_lr_ratio=0.0):
    """A cosine learning-rate schedule over total_steps (after a linear warm-up)."""
    return ("cosine", dict(total_steps=_check("cosine", "total_steps", total_steps, _COUNT),
                           warmup_steps=_check("cosine", "warmup_steps", warmup_steps, _COUNT),
                           min_lr_ratio=_check("cosine", "min_lr_ratio", min_lr_ratio, _NUMBER)))


def step_decay(step_size, gamma=0.1, warmup_steps=0):
    """The learning rate times gamma every step_size steps (after a linear warm-up)."""
    return ("step", dict(step_size=_check("step_decay", "step_size", step_size, _COUNT),
                         gamma=_check("step_decay", "gamma", gamma, _NUMBER),
                         warmup_steps=_check("step_decay", "warmup_steps", warmup_steps, _COUNT)))


def SGD(lr, momentum=0.0, nesterov=False, weight_decay=0.0, schedule=None, clip_norm=0.0,
        staleness_aware=False):
    """SGD as torch.optim.SGD: momentum, Nesterov, L2 weight decay added to the gradient."""
    return _config("SGD", "sgd", schedule, lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay,
                   clip_norm=clip_norm, staleness_aware=staleness_aware)


def Adam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, schedule=None,
         clip_norm=0.0, staleness_aware=False):
    """Adam as torch.optim.Adam (weight decay: L2 added to the gradient)."""
    return _config("Adam", "adam", schedule, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                   amsgrad=amsgrad, clip_norm=clip_norm, staleness_aware=staleness_aware)


def AdamW(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, amsgrad=False, schedule=None,
          clip_norm=0.0, staleness_aware=False):
    """AdamW as torch.optim.AdamW (decoupled weight decay)."""
    return _config("AdamW", "adamw", schedule, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                   amsgrad=amsgrad, clip_norm=clip_norm, staleness_aware=staleness_aware)


def Adagrad(lr=1e-2, eps=1e-10, initial_accumulator_value=0.0, weight_decay=0.0, schedule=None,
            clip_norm=0.0, staleness_aware=False):
    """AdaGrad as torch.optim.Adagrad."""
    return _config("Adagrad", "adagrad", schedule, lr=lr, eps=eps,
                   initial_accumulator_value=initial_accumulator_value, weight_decay=weight_decay,
                   clip_norm=clip_norm, staleness_aware=staleness_aware)


def FTRL(alpha=0.05, beta=1.0, l1=0.0, l2=0.0, clip_norm=0.0):
    """FTRL-Proximal (McMahan et al. 2013), per coordinate."""
    # lr too: the table's rate, as the servers report it (alpha is checked first, so an error
    # names alpha).
    return _config("FTRL", "ftrl", None, alpha=alpha, beta=beta, l1=l1, l2=l2, clip_norm=clip_norm, lr=alpha)


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
        call = "create_table"
        if _check(call, "optimizer", optimizer, _OPTIMIZER, none=True) is None:
            optimizer = SGD(lr=0.01)
        for arg, value, kind in [("name", name, _STR), ("rows", rows, _COUNT), ("dim", dim, _COUNT),
                                 ("sparse", sparse, _BOOL), ("init", init, _STR), ("init_scale", init_scale, _NUMBER),
                                 ("seed", seed, _COUNT)]:
            _check(call, arg, value, kind)
        _check(call, "consistency", consistency, _STR, none=True)
        return self._c._create_table(name, int(rows), int(dim), bool(sparse), optimizer, consistency or "", init,
                                     float(init_scale), int(seed))

    # Data: pulls and pushes.
    def _pull(self, call, table, keys, out, lookup=False):
        _check(call, "table", table, _TABLE)
        if out is not None and _is_tensor(out):
            return _TensorFuture(self._c._pull_async(table, _keys(keys), _array(out, "out"), lookup), out)
        return self._c._pull_async(table, _keys(keys), out, lookup)

    def _push(self, call, table, grads, keys):
        return self._c._push_async(_check(call, "table", table, _TABLE), _array(grads, "grads"), _keys(keys))

    def pull_async(self, table, keys=None, out=None):
        """Starts a pull: the whole table (keys None, dense tables) or the rows of keys. out: a
        float32 array or CPU tensor to fill in place (kept alive by the Future), else a new
        array. Returns a Future whose wait() returns the array."""
        return self._pull("pull_async", table, keys, out)

    def pull(self, table, keys=None, out=None, timeout=None):
        """The table's rows (all of a dense table, or those of keys) as a float32 array of
        rows x dim, or written into out. Under BSP and SSP it waits for the slower workers as
        the table's consistency model says."""
        _check("pull", "timeout", timeout, _SECONDS, none=True)  # (before the call goes out)
        return self._pull("pull", table, keys, out).wait(timeout)

    def lookup(self, table, keys, out=None, timeout=None):
        """Reads rows as pull() does, without adding keys a sparse table does not hold yet (they
        read as their rows would start): for evaluation."""
        _check("lookup", "timeout", timeout, _SECONDS, none=True)
        return self._pull("lookup", table, keys, out, lookup=True).wait(timeout)

    def push_async(self, table, grads, keys=None):
        """Starts a push of gradients (float32 array or CPU tensor, rows x dim: the whole table,
        or the rows of keys). The array is sent as it is, not copied: leave it unchanged until
        the Future is done."""
        return self._push("push_async", table, grads, keys)

    def push(self, table, grads, keys=None, timeout=None):
        """Pushes gradients and waits for the servers to take them (see push_async)."""
        _check("push", "timeout", timeout, _SECONDS, none=True)
        self._push("push", table, grads, keys).wait(timeout)

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
        self._c._checkpoint(_check("checkpoint", "run", run, _STR))

    def finish(self):
        """Closes the last step, waits for every push to be answered, tells the job this worker
        is done. No calls after it."""
        self._c._finish()

    def leave(self, reason):
        """Tells the job this worker stops early because of reason: a string, or an exception. A
        pushpull.Error gives its code too (leave(pushpull.TargetMissed("AUC 0.84 < 0.86")): the
        scheduler acts on it as on a C++ worker's; another exception is sent as "Type: message",
        as Aborted. No calls after it."""
        _check("leave", "reason", reason, _REASON)
        if isinstance(reason, Error):
            self._c._leave(getattr(reason, "code", "Aborted"), str(reason))
        elif isinstance(reason, BaseException):
            self._c._leave("Aborted", f"{type(reason).__name__}: {reason}")
        else:
            self._c._leave("Aborted", reason)

    def stats(self):
        """Counters of this client: pushes, pulls, clocks, bytes sent and received, ..."""
        return self._c._stats()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            try:
                self.finish()
            except BaseException as e:
                # The job hears why this worker stops, rather than blaming another process or,
                # later, this one's silence.
                self._leave_quietly(e)
                raise
        else:
            self._leave_quietly(exc)
        return False

    def _leave_quietly(self, reason):
        try:
            self.leave(reason)
        except Error:
            pass  # the job may be gone already: the exception in flight says more


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
            heartbeat_interval=None, register_timeout=None, max_unanswered_mb=None, connect_timeout=None):
    """Joins the job. What is not given comes from the environment pushpull-launch sets
    (PUSHPULL_SCHEDULER, PUSHPULL_RANK, PUSHPULL_CONSISTENCY, ...). Timeouts in seconds. Blocks
    until the whole job has registered.

    connect_timeout: a scheduler address that does not resolve or refuses connections this long
    fails connect() with the address and the reason (default 10 s, PUSHPULL_CONNECT_TIMEOUT_MS)."""
    o = _core.ClientOptions()
    if _check("connect", "scheduler", scheduler, _STR, none=True) is not None:
        o.scheduler = scheduler
    if _check("connect", "rank", rank, _COUNT, none=True) is not None:
        o.requested_rank = int(rank)
    if _check("connect", "consistency", consistency, _STR, none=True) is not None:
        o.consistency = consistency
    # Seconds as the options' milliseconds (an int): at least 1, as 0 means "the default".
    for name, value, field in [("request_timeout", request_timeout, "request_timeout_ms"),
                               ("heartbeat_interval", heartbeat_interval, "heartbeat_interval_ms"),
                               ("register_timeout", register_timeout, "register_timeout_ms"),
                               ("connect_timeout", connect_timeout, "connect_timeout_ms")]:
        if _check("connect", name, value, _SECONDS, none=True) is not None:
            setattr(o, field, max(1, min(int(value * 1000), 2**31 - 1)))
    if _check("connect", "max_unanswered_mb", max_unanswered_mb, _COUNT, none=True) is not None:
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
