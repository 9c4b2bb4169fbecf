"""pushpull for PyTorch: parameters and embeddings that live on the servers.

ServerOptimizer trains a model's parameters with the optimizer running on the servers (its state,
such as Adam's moments, lives there too); ShardedEmbedding is an embedding table too large for
one machine, sharded over the servers, that a model uses as nn.EmbeddingBag.

    client = pushpull.connect()
    model = Net()
    opt = pushpull.torch.ServerOptimizer(model.named_parameters(), client, pushpull.Adam(lr=1e-3))
    for x, y in loader:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()          # push every gradient, end the step, pull the new values
    client.finish()
"""

import torch

from . import SGD, InvalidArgument, OptimizerConfig


def _table_shape(p):
    """A parameter as a dense table: its first dimension as rows, the rest as each row."""
    rows = p.shape[0] if p.dim() > 0 else 1
    return rows, max(1, p.numel() // rows)


class ServerOptimizer:
    """A torch.optim-style optimizer whose update runs on the servers.

    Each parameter is a dense table; step() pushes every parameter's gradient, ends the step
    (client.clock()) and pulls the new values into the parameters. Under BSP the servers apply the
    workers' mean gradient: W workers on batches of B train as one process on batches of W * B.

    All workers start from worker 0's initial values, whatever their own. A table holds the
    parameter's change since then (added to those values here), so the optimizer's state starts
    fresh on the servers while the model keeps its own initialisation. Weight decay is added to
    the gradient here (SGD, Adam, Adagrad: L2) or taken as a step of its own (AdamW: decoupled),
    where the parameter's value is known; both give torch's update exactly.

    params: tensors, (name, tensor) pairs (model.named_parameters()), or a model.
    optimizer: pushpull.SGD, Adam, AdamW or Adagrad (FTRL is for sparse tables).
    """

    def __init__(self, params, client, optimizer, consistency=None, name="model"):
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
        on_server = _copy_config(optimizer)
        on_server.weight_decay = 0.0
        if self._decoupled:
            on_server.kind = "adam"
        self.params, self.tables, self._base, self._grads = [], [], [], []
        self._decay_tables = []
        for n, t in named:
            rows, dim = _table_shape(t)
            table = client.create_table(f"{name}/{n}", rows=rows, dim=dim, optimizer=on_server, consistency=consistency)
            start = client.create_table(f"{name}/{n}/initial", rows=rows, dim=dim, optimizer=SGD(lr=1.0),
                                        consistency="asp")
            if self._decoupled:
                self._decay_tables.append(client.create_table(f"{name}/{n}/decay", rows=rows, dim=dim,
                                                              optimizer=SGD(lr=1.0), consistency=consistency))
            self.params.append(t)
            self.tables.append((table, start))
        # Worker 0's values, as the start of every worker: its push makes them the initial
        # tables' values (SGD with lr 1 from zeros, applied at once under ASP).
        if client.rank == 0:
            for t, (_, start) in zip(self.params, self.tables):
                client.push(start, -t.detach().reshape(start.rows, start.dim).contiguous())
        client.barrier()
        for t, (_, start) in zip(self.params, self.tables):
            base = client.pull(start).reshape(t.shape)
            self._base.append(torch.from_numpy(base))
            with torch.no_grad():
                t.copy_(self._base[-1])
            self._grads.append(torch.empty(start.rows, start.dim))
        self.steps = 0

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def step(self):
        """Pushes every parameter's gradient (zeros where there is none), ends this worker's
        step, and pulls the parameters' new values."""
        c = self.client
        lr = self.config.scheduled_lr(self.steps)
        futures = []
        for i, (p, (table, _)) in enumerate(zip(self.params, self.tables)):
            g = self._grads[i]
            if p.grad is None:
                g.zero_()
            else:
                g.copy_(p.grad.reshape(g.shape))
            if self._decay and not self._decoupled:
                g.add_(p.detach().reshape(g.shape), alpha=self._decay)
            futures.append(c.push_async(table, g))
            if self._decoupled:
                # p <- p - lr * decay * p, the step AdamW takes before Adam's.
                d = p.detach().reshape(g.shape) * (lr * self._decay)
                futures.append(c.push_async(self._decay_tables[i], d))
        # No wait for the pushes before the clock: a push refused fails the clock, and the pulls'
        # answers come after the pushes' on each server, so the buffers are free by then.
        c.clock()
        self.steps += 1
        self._pull()
        for f in futures:
            f.wait()

    def _pull(self):
        c = self.client
        pulls = [c.pull_async(table) for table, _ in self.tables]
        decays = [c.pull_async(t) for t in self._decay_tables]
        for i, p in enumerate(self.params):
            change = torch.from_numpy(pulls[i].wait()).reshape(p.shape)
            with torch.no_grad():
                torch.add(self._base[i], change, out=p.data)
                if decays:
                    p.data.add_(torch.from_numpy(decays[i].wait()).reshape(p.shape))

    def state_dict(self):
        """The tables that hold the parameters and their optimizer state, and the steps taken."""
        return {"tables": [table.name for table, _ in self.tables], "steps": self.steps,
                "optimizer": self.config.kind}


def _copy_config(c):
    d = OptimizerConfig()
    for field in ("kind", "lr", "momentum", "nesterov", "weight_decay", "beta1", "beta2", "epsilon", "amsgrad",
                  "initial_accumulator", "ftrl_alpha", "ftrl_beta", "ftrl_l1", "ftrl_l2", "clip_norm",
                  "staleness_aware", "schedule", "warmup_steps", "step_size", "gamma", "total_steps",
                  "min_lr_ratio"):
        setattr(d, field, getattr(c, field))
    return d


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
    "zeros", "uniform", "normal", with init_scale). mode: "sum" or "mean". End each step with
    client.clock() (or a ServerOptimizer's step()), after backward."""

    def __init__(self, num_embeddings, dim, client, optimizer=None, mode="mean", init="normal", init_scale=0.01,
                 name="embedding", consistency=None, seed=1):
        super().__init__()
        if mode not in ("sum", "mean"):
            raise InvalidArgument(f"mode must be 'sum' or 'mean', not {mode!r}")
        self.num_embeddings, self.dim, self.mode, self.client = int(num_embeddings), int(dim), mode, client
        self.table = client.create_table(name, dim=dim, sparse=True, optimizer=optimizer, consistency=consistency,
                                         init=init, init_scale=init_scale, seed=seed)
        self._pending = []
        # A leaf that requires grad, so that autograd calls backward of the pulled rows.
        self._anchor = torch.zeros((), requires_grad=True)

    def forward(self, input, offsets=None):
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
