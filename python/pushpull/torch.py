"""pushpull for PyTorch: parameters and embeddings that live on the servers.

ServerOptimizer trains a model's parameters with the optimizer running on the servers (its state,
such as Adam's moments, lives there too); ShardedEmbedding is an embedding table too large for
one machine, sharded over the servers, that a model uses as nn.EmbeddingBag.

    client = pushpull.connect()
    model = Net()
    opt = pushpull.torch.ServerOptimizer(model.named_parameters(), pushpull.Adam(lr=1e-3))
    for x, y in loader:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()          # push every gradient, end the step, pull the new values
    client.finish()
"""

import collections.abc

import torch

from . import (_COUNT, _NUMBER, _OPTIMIZER, _STR, SGD, Client, InvalidArgument, _check, _Kind,
               default_client)

_CLIENT = _Kind(Client, "a pushpull.Client (from pushpull.connect)")
_TENSOR = _Kind(torch.Tensor, "a torch.Tensor")
_PARAMS = _Kind((torch.nn.Module, collections.abc.Iterable), "a model, its named_parameters() or a list of tensors",
                lambda v: not isinstance(v, torch.Tensor))


class ServerOptimizer:
    """A torch.optim-style optimizer whose update runs on the servers.

    The parameters are one dense table, sharded over the servers: step() pushes every
    parameter's gradient in one push, ends the step (client.clock()) and pulls the new values in
    one pull. Under BSP the servers apply the workers' mean gradient: W workers on batches of B
    train as one process on batches of W * B. The parameters become views of one flat buffer
    (as the pulled values land there), so keep using the model's own tensors, not copies.

    All workers start from worker 0's initial values, whatever their own. The table holds the
    parameters' change since then (added to those values here), so the optimizer's state starts
    fresh on the servers while the model keeps its own initialisation. Weight decay is added to
    the gradient here (SGD, Adam, Adagrad: L2) or taken as a step of its own (AdamW: decoupled),
    where the parameters' values are known; both give torch's update exactly.

    params: tensors, (name, tensor) pairs (model.named_parameters()), or a model.
    optimizer: pushpull.SGD, Adam, AdamW or Adagrad (FTRL is for sparse tables).
    consistency: the table's model ("bsp", "ssp:K", "asp"; None: the job's).
    client: the job's client (None: the one pushpull.connect() made last). name: the tables'
    name ("model", "model/initial", "model/decay"), which two optimizers in one job must not share.
    """

    ROW = 1024  # floats a row of the table: rows spread the parameters over the servers

    def __init__(self, params, optimizer, consistency=None, client=None, name="model"):
        call = "ServerOptimizer"
        _check(call, "params", params, _PARAMS)
        _check(call, "optimizer", optimizer, _OPTIMIZER)
        _check(call, "consistency", consistency, _STR, none=True)
        client = _check(call, "client", client, _CLIENT, none=True) or default_client()
        _check(call, "name", name, _STR)
        if hasattr(params, "named_parameters"):
            params = params.named_parameters()
        named = []
        for i, p in enumerate(params):
            n, t = p if isinstance(p, tuple) else (str(i), p)
            if not isinstance(t, torch.Tensor):
                raise InvalidArgument(f"parameter {n} is not a tensor")
            if t.device.type != "cpu" or t.dtype != torch.float32:
                raise InvalidArgument(f"parameter {n} is {t.dtype} on {t.device}: ServerOptimizer takes CPU float32")
            named.append((n, t))
        if not named:
            raise InvalidArgument("ServerOptimizer got no parameters")
        if optimizer.kind == "ftrl":
            raise InvalidArgument("FTRL's weights are not a sum of steps: use it for sparse tables (ShardedEmbedding)")
        self.client, self.config, self.name = client, optimizer, name
        self._decay = optimizer.weight_decay
        self._decoupled = optimizer.kind == "adamw"
        # The servers run the optimizer without weight decay: it is applied here (see above).
        on_server = optimizer.copy()
        on_server.weight_decay = 0.0
        if self._decoupled:
            on_server.kind = "adam"
        total = sum(t.numel() for _, t in named)
        dim = min(self.ROW, total)
        rows = -(-total // dim)
        self.table = client.create_table(name, rows=rows, dim=dim, optimizer=on_server, consistency=consistency)
        start = client.create_table(f"{name}/initial", rows=rows, dim=dim, optimizer=SGD(lr=1.0), consistency="asp")
        self._decay_table = None
        if self._decoupled:
            self._decay_table = client.create_table(f"{name}/decay", rows=rows, dim=dim, optimizer=SGD(lr=1.0),
                                                    consistency=consistency)
        # One flat buffer each: the parameters (their tensors become views of it; the change is
        # pulled into it), the gradients pushed, worker 0's values; padded to whole rows.
        size = rows * dim
        self._param = torch.zeros(size)
        self._grad = torch.zeros(size)
        self._decayed = torch.zeros(size) if self._decoupled else None
        self.params, self.layout, offset = [], [], 0
        for n, t in named:
            self._param[offset:offset + t.numel()].copy_(t.detach().reshape(-1))
            self.params.append(t)
            self.layout.append((n, offset, tuple(t.shape)))
            offset += t.numel()
        # Worker 0's values, as the start of every worker: its push makes them the initial
        # table's values (SGD with rate 1 from zeros, applied at once under ASP).
        if client.rank == 0:
            client.push(start, torch.neg(self._param).reshape(rows, dim))
        client.barrier()
        self._base = torch.from_numpy(client.pull(start).reshape(-1))
        self._param.copy_(self._base)
        for t, (_, offset, shape) in zip(self.params, self.layout):
            t.data = self._param[offset:offset + t.numel()].view(shape)
        self._attach_grads()
        # NumPy views of the flat buffers, made once: step() calls the client's core directly.
        shape = (rows, dim)
        self._np = {k: getattr(self, k).numpy().reshape(shape) for k in ("_grad", "_param", "_decayed")
                    if getattr(self, k) is not None}
        self.steps = 0

    def _attach_grads(self):
        # Each parameter's .grad a view of the flat gradient buffer: backward accumulates into it
        # in place, and step() pushes it as it is (a .grad replaced since is copied in).
        for t, (_, offset, shape) in zip(self.params, self.layout):
            t.grad = self._grad[offset:offset + t.numel()].view(shape)

    def zero_grad(self, set_to_none=False):
        """Zeroes the gradients (set_to_none: drops them instead, as torch's optimizers may; a
        parameter without one pushes zeros)."""
        self._grad.zero_()
        if set_to_none:
            for p in self.params:
                p.grad = None
        else:
            self._attach_grads()

    def step(self):
        """Pushes every parameter's gradient (zeros where there is none), ends this worker's
        step, and pulls the parameters' new values."""
        c, table = self.client, self.table
        base = self._grad.data_ptr()
        for p, (_, offset, _) in zip(self.params, self.layout):
            g = p.grad
            if g is None:
                self._grad[offset:offset + p.numel()].zero_()
            elif g.data_ptr() != base + 4 * offset or not g.is_contiguous():
                self._grad[offset:offset + p.numel()].copy_(g.reshape(-1))
        if self._decay and not self._decoupled:
            self._grad.add_(self._param, alpha=self._decay)
        core, views = c._c, self._np
        futures = [core._push_async(table, views["_grad"], None)]
        if self._decoupled:
            # p <- p - lr * decay * p, the step AdamW takes before Adam's.
            torch.mul(self._param, self.config.scheduled_lr(self.steps) * self._decay, out=self._decayed)
            futures.append(core._push_async(self._decay_table, views["_decayed"], None))
        # No wait for the pushes before the clock: a push refused fails the clock, and the pull's
        # answer comes after the pushes' on each server, so the buffers are free by then.
        core._clock()
        self.steps += 1
        # The change lands in the parameters' own buffer, and the start is added in place.
        change = core._pull_async(table, None, views["_param"], False)
        decay = core._pull_async(self._decay_table, None, views["_decayed"], False) if self._decoupled else None
        change.wait()
        self._param.add_(self._base)
        if decay is not None:
            decay.wait()
            self._param.add_(self._decayed)
        for f in futures:
            f.wait()

    def state_dict(self):
        """The tables that hold the parameters and their optimizer state, each parameter's place
        in them, and the steps taken."""
        return {"tables": [self.table.name] + ([self._decay_table.name] if self._decay_table else []),
                "parameters": [{"name": n, "offset": o, "shape": list(s)} for n, o, s in self.layout],
                "steps": self.steps, "optimizer": self.config.kind}


class _PullRows(torch.autograd.Function):
    """The rows of the batch's unique ids, pulled from the servers; their gradient, summed per
    id by autograd, is pushed in backward."""

    @staticmethod
    def forward(ctx, anchor, emb, ids):
        rows = emb.client.pull(emb.table, keys=ids.numpy())
        ctx.emb, ctx.ids = emb, ids
        return torch.from_numpy(rows)

    @staticmethod
    def backward(ctx, grad):
        emb = ctx.emb
        emb._pending.append(emb.client.push_async(emb.table, grad.contiguous(), keys=ctx.ids.numpy()))
        return None, None, None


class ShardedEmbedding(torch.nn.Module):
    """An embedding table on the servers, used as nn.EmbeddingBag: forward(input, offsets) pulls
    the rows of the batch's unique ids; backward pushes their gradients, summed per id. The
    servers apply the table's optimizer (pushpull.Adagrad(...), FTRL, ...).

    num_embeddings may be up to 2^64: the table is sparse, its rows made on first touch (init:
    "zeros", "uniform", "normal", with init_scale; None: "normal", or "zeros" under FTRL, whose
    rows must start there). mode: "sum" or "mean". End each step with client.clock() (or a
    ServerOptimizer's step()), after backward."""

    def __init__(self, num_embeddings, dim, optimizer=None, client=None, mode="mean", init=None,
                 init_scale=0.01, name="embedding", consistency=None, seed=1):
        super().__init__()
        call = "ShardedEmbedding"
        for arg, value, kind in [("num_embeddings", num_embeddings, _COUNT), ("dim", dim, _COUNT), ("mode", mode, _STR),
                                 ("init_scale", init_scale, _NUMBER), ("name", name, _STR), ("seed", seed, _COUNT)]:
            _check(call, arg, value, kind)
        for arg, value, kind in [("optimizer", optimizer, _OPTIMIZER), ("init", init, _STR),
                                 ("consistency", consistency, _STR)]:
            _check(call, arg, value, kind, none=True)
        client = _check(call, "client", client, _CLIENT, none=True) or default_client()
        if mode not in ("sum", "mean"):
            raise InvalidArgument(f"mode must be 'sum' or 'mean', not {mode!r}")
        self.num_embeddings, self.dim, self.mode, self.client = int(num_embeddings), int(dim), mode, client
        if init is None:
            init = "zeros" if optimizer is not None and optimizer.kind == "ftrl" else "normal"
        self.table = client.create_table(name, dim=dim, sparse=True, optimizer=optimizer, consistency=consistency,
                                         init=init, init_scale=init_scale, seed=seed)
        self._pending = []
        # A leaf that requires grad, so that autograd calls backward of the pulled rows.
        self._anchor = torch.zeros((), requires_grad=True)

    def forward(self, input, offsets=None):
        _check("ShardedEmbedding.forward", "input", input, _TENSOR)
        _check("ShardedEmbedding.forward", "offsets", offsets, _TENSOR, none=True)
        if input.dtype not in (torch.int64, torch.int32):
            raise InvalidArgument(f"ids must be integers, not {input.dtype}")
        if input.dim() == 2 and offsets is None:
            offsets = torch.arange(0, input.numel(), input.shape[1])
            input = input.reshape(-1)
        if offsets is None:
            raise InvalidArgument("a 1-D input needs offsets (as nn.EmbeddingBag)")
        if input.numel() and (int(input.min()) < 0 or int(input.max()) >= self.num_embeddings):
            raise InvalidArgument(f"ids must be in [0, {self.num_embeddings})")
        self.wait()
        ids, inverse = torch.unique(input, return_inverse=True)
        rows = _PullRows.apply(self._anchor, self, ids)
        return torch.nn.functional.embedding_bag(inverse, rows, offsets, mode=self.mode)

    def wait(self):
        """Waits for the pushes of earlier backward passes."""
        pending, self._pending = self._pending, []
        for f in pending:
            f.wait()
