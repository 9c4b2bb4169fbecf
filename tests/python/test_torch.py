"""pushpull.torch against single-process PyTorch: ServerOptimizer under BSP with two workers
(threads of this process) matches torch.optim on the global batch, parameter by parameter, and
ShardedEmbedding matches nn.EmbeddingBag trained the same way."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import run_workers  # noqa: E402

import pushpull  # noqa: E402
import pushpull.torch as ptorch  # noqa: E402

torch.set_num_threads(1)


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


@pytest.mark.parametrize("name,ours,theirs", [
    ("sgd_momentum", lambda: pushpull.SGD(lr=0.05, momentum=0.9, weight_decay=0.01),
     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01)),
    ("nesterov", lambda: pushpull.SGD(lr=0.05, momentum=0.9, nesterov=True),
     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True)),
    ("adam", lambda: pushpull.Adam(lr=0.01, weight_decay=0.001),
     lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.001)),
    ("adamw", lambda: pushpull.AdamW(lr=0.01, weight_decay=0.1),
     lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1)),
])
def test_server_optimizer_under_bsp_matches_torch_on_the_global_batch(job_factory, name, ours, theirs):
    job = job_factory(servers=2, workers=2)
    steps, batch = 50, 16
    gen = torch.Generator().manual_seed(7)
    xs = torch.randn(steps, 2 * batch, 6, generator=gen)
    ys = torch.randn(steps, 2 * batch, 3, generator=gen)
    final, initial = {}, {}

    def worker(r):
        model = make_model(seed=100 + r)  # each its own initial values: worker 0's win
        if r == 0:
            initial.update({n: p.detach().clone() for n, p in model.named_parameters()})
        with pushpull.connect(scheduler=job.scheduler, rank=r, request_timeout=60) as c:
            opt = ptorch.ServerOptimizer(model, ours(), client=c, name=name)
            for s in range(steps):
                opt.zero_grad()
                half = slice(r * batch, (r + 1) * batch)
                torch.nn.functional.mse_loss(model(xs[s, half]), ys[s, half]).backward()
                opt.step()
            final[r] = {n: p.detach().clone() for n, p in model.named_parameters()}
            state = opt.state_dict()
            assert state["tables"][0] == name and state["parameters"][0]["name"] == "0.weight"

    run_workers(2, worker)
    reference = make_model(seed=0)
    with torch.no_grad():
        for n, p in reference.named_parameters():
            p.copy_(initial[n])
    opt = theirs(reference.parameters())
    for s in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(reference(xs[s]), ys[s]).backward()
        opt.step()
    for n, p in reference.named_parameters():
        for r in (0, 1):
            np.testing.assert_allclose(final[r][n].numpy(), p.detach().numpy(), rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name}: worker {r}'s {n}")


def test_sharded_embedding_matches_embedding_bag(job_factory):
    job = job_factory(servers=2, workers=1)
    vocab, dim, steps = 1 << 40, 4, 30
    gen = torch.Generator().manual_seed(3)
    ids = [torch.randint(0, 50, (8, 5), generator=gen) * (1 << 33) for _ in range(steps)]  # ids far apart
    targets = [torch.randn(8, dim, generator=gen) for _ in range(steps)]
    with pushpull.connect(scheduler=job.scheduler, rank=0, request_timeout=60) as c:
        emb = ptorch.ShardedEmbedding(vocab, dim, optimizer=pushpull.Adagrad(lr=0.1), client=c, mode="mean",
                                      init="normal", init_scale=0.1)
        every = torch.unique(torch.cat([i.reshape(-1) for i in ids]))
        start = torch.from_numpy(c.pull(emb.table, keys=every.numpy()))  # the rows as they start
        for s in range(steps):
            loss = torch.nn.functional.mse_loss(emb(ids[s]), targets[s])
            loss.backward()
            emb.wait()
            c.clock()
        ours = c.pull(emb.table, keys=every.numpy())
    # nn.EmbeddingBag over the same rows (renumbered 0..n-1), from the same values.
    index = {int(k): i for i, k in enumerate(every)}
    bag = torch.nn.EmbeddingBag(len(every), dim, mode="mean")
    with torch.no_grad():
        bag.weight.copy_(start)
    opt = torch.optim.Adagrad(bag.parameters(), lr=0.1)
    for s in range(steps):
        opt.zero_grad()
        local = torch.tensor([[index[int(k)] for k in row] for row in ids[s]])
        torch.nn.functional.mse_loss(bag(local), targets[s]).backward()
        opt.step()
    np.testing.assert_allclose(ours, bag.weight.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_server_optimizer_refuses_what_it_cannot_train(job_factory):
    job = job_factory(servers=1, workers=1)
    with pushpull.connect(scheduler=job.scheduler, rank=0, request_timeout=30) as c:
        with pytest.raises(pushpull.InvalidArgument, match="FTRL"):
            ptorch.ServerOptimizer(make_model(0), pushpull.FTRL(), client=c)
        with pytest.raises(pushpull.InvalidArgument, match="float64"):
            ptorch.ServerOptimizer([torch.zeros(3, dtype=torch.float64)], pushpull.SGD(lr=0.1))  # connect()'s
        emb = ptorch.ShardedEmbedding(100, 2)
        with pytest.raises(pushpull.InvalidArgument, match=r"ids must be in \[0, 100\)"):
            emb(torch.tensor([[5, 100]]))
        with pytest.raises(pushpull.InvalidArgument, match="ids must be integers"):
            emb(torch.tensor([[0.5]]))


def test_a_wrong_argument_type_names_the_call_and_the_argument(job_factory):
    job = job_factory(servers=1, workers=1)
    with pushpull.connect(scheduler=job.scheduler, rank=0, request_timeout=30) as c:
        model = make_model(0)
        for call, error, message in [
            (lambda: ptorch.ServerOptimizer(model, "adam"), TypeError,
             "ServerOptimizer(optimizer): expected an optimizer"),
            (lambda: ptorch.ServerOptimizer(model, pushpull.SGD(lr=0.1), client="c"), TypeError,
             "ServerOptimizer(client): expected a pushpull.Client (from pushpull.connect) or None, got str 'c'"),
            (lambda: ptorch.ServerOptimizer(3, pushpull.SGD(lr=0.1)), TypeError,
             "ServerOptimizer(params): expected a model, its named_parameters() or a list of tensors, got int 3"),
            (lambda: ptorch.ServerOptimizer(torch.zeros(3), pushpull.SGD(lr=0.1)), pushpull.InvalidArgument,
             "ServerOptimizer(params): expected a model"),
            (lambda: ptorch.ShardedEmbedding(100, "8"), TypeError,
             "ShardedEmbedding(dim): expected an integer >= 0, got str '8'"),
            (lambda: ptorch.ShardedEmbedding(100, 2, optimizer=pushpull.Adagrad), TypeError,
             "ShardedEmbedding(optimizer): expected an optimizer"),
        ]:
            with pytest.raises(error) as e:
                call()
            assert str(e.value).startswith(message), (str(e.value), message)
        emb = ptorch.ShardedEmbedding(100, 2, client=c)
        with pytest.raises(TypeError, match=r"^ShardedEmbedding.forward\(input\): expected a torch.Tensor, got list"):
            emb([[1, 2]])
        assert emb(torch.tensor([[1, 2]])).shape == (1, 2)
