"""A click-through-rate model: embedding tables on the pushpull servers, an MLP in PyTorch.

    pushpull-launch --servers=2 --workers=2 -- python3 examples/python/ctr_embedding.py

The data is synthetic, from a known generator (as pushpull-worker's sparse_lr): each example has
one id per field, drawn from a Zipf law over that field's vocabulary; the click's log-odds are
a bias plus one hidden weight per id. The model sees only ids and clicks. It has a wide part (one
weight per id: ShardedEmbedding of dim 1) and a deep part (an 8-float embedding per id, fields
concatenated, through an MLP), the embeddings trained by AdaGrad on the servers and the MLP by
ServerOptimizer (Adam). Ids are 64-bit (field << 40 | id): the tables are sparse, their rows made
on first touch. Worker 0 reports the held-out AUC next to the generator's own (the best a model
can do). When the model's is more than --tolerance below, it says so ("missed target: ..."), ends
the job with that cause (pushpull.TargetMissed) and exits 3.
"""

import argparse
import json
import sys
import time

import numpy as np
import torch

import pushpull
import pushpull.torch


class Generator:
    """Examples from the known model: ids per field from a Zipf law, clicks from the hidden
    weights. The same seed gives the same model on every worker."""

    def __init__(self, fields, vocab, zipf, seed=2024):
        rng = np.random.default_rng(seed)
        self.fields, self.vocab = fields, vocab
        self.weights = rng.normal(0.0, 0.8, size=(fields, vocab)).astype(np.float32)
        self.bias = -1.0
        p = 1.0 / np.arange(1, vocab + 1) ** zipf
        self.cdf = np.cumsum(p / p.sum())

    def draw(self, n, seed):
        rng = np.random.default_rng(seed)
        ids = np.minimum(np.searchsorted(self.cdf, rng.random((n, self.fields))), self.vocab - 1)
        logits = self.bias + self.weights[np.arange(self.fields), ids].sum(axis=1)
        clicks = (rng.random(n) < 1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
        keys = ids.astype(np.int64) + (np.arange(self.fields, dtype=np.int64) << 40)
        return torch.from_numpy(keys), torch.from_numpy(clicks), logits


def auc(scores, labels):
    """Area under the ROC curve: the chance a random click scores above a random non-click."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels > 0.5
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


class CtrModel(torch.nn.Module):
    def __init__(self, client, fields, dim=8):
        super().__init__()
        vocab = 1 << 48
        self.wide = pushpull.torch.ShardedEmbedding(vocab, 1, pushpull.Adagrad(lr=0.1), client, mode="sum",
                                                    init="zeros", name="ctr/wide")
        self.deep = pushpull.torch.ShardedEmbedding(vocab, dim, pushpull.Adagrad(lr=0.05), client, mode="sum",
                                                    init="normal", init_scale=0.01, name="ctr/deep")
        self.mlp = torch.nn.Sequential(torch.nn.Linear(fields * dim, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
        self.fields, self.dim = fields, dim

    def forward(self, keys):
        n = keys.shape[0]
        wide = self.wide(keys)  # (n, 1): each example's ids summed
        flat = keys.reshape(-1)
        one_each = torch.arange(0, flat.numel())  # a bag per id: the fields' vectors side by side
        deep = self.deep(flat, one_each).reshape(n, self.fields * self.dim)
        return (wide + self.mlp(deep)).squeeze(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fields", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=2000, help="ids per field")
    ap.add_argument("--zipf", type=float, default=1.05)
    ap.add_argument("--examples", type=int, default=2000000, help="training examples, all workers together")
    ap.add_argument("--batch", type=int, default=512, help="minibatch per worker")
    ap.add_argument("--heldout", type=int, default=50000)
    ap.add_argument("--tolerance", type=float, default=0.01, help="AUC below the generator's allowed")
    ap.add_argument("--metrics_out", default="", help="append a JSON line of the result to this file")
    args = ap.parse_args()
    torch.set_num_threads(1)

    gen = Generator(args.fields, args.vocab, args.zipf)
    with pushpull.connect() as client:
        rank, workers = client.rank, client.num_workers
        torch.manual_seed(rank)
        model = CtrModel(client, args.fields)
        opt = pushpull.torch.ServerOptimizer(model.mlp, pushpull.Adam(lr=3e-3), name="ctr/mlp")
        steps = args.examples // (workers * args.batch)
        keys, clicks, _ = gen.draw(steps * args.batch, seed=100 + rank)
        print(f"worker {rank}: {steps} steps of {args.batch} examples, consistency {client.consistency}", flush=True)
        start, loss_sum = time.time(), 0.0
        for s in range(steps):
            batch = slice(s * args.batch, (s + 1) * args.batch)
            opt.zero_grad()
            loss = torch.nn.functional.binary_cross_entropy_with_logits(model(keys[batch]), clicks[batch])
            loss.backward()
            model.wide.wait()
            model.deep.wait()
            opt.step()  # pushes the MLP's gradient, ends the step, pulls the MLP
            loss_sum += float(loss)
            if (s + 1) % 100 == 0:
                print(f"worker {rank}: step {s + 1}/{steps} loss {loss_sum / (s + 1):.4f}", flush=True)
        seconds = time.time() - start
        result = {"worker": rank, "steps": steps, "loss": loss_sum / max(steps, 1),
                  "samples_per_s": steps * args.batch / seconds, "consistency": client.consistency}
        if rank == 0:
            hk, hc, true_logits = gen.draw(args.heldout, seed=999)
            with torch.no_grad():
                scores = np.concatenate([model(hk[i:i + 5000]).numpy() for i in range(0, args.heldout, 5000)])
            result["auc"], result["generator_auc"] = auc(scores, hc.numpy()), auc(true_logits, hc.numpy())
        print(json.dumps(result), flush=True)
        if args.metrics_out:
            with open(args.metrics_out, "a") as f:
                f.write(json.dumps(result) + "\n")
        if rank == 0:
            got, best = result["auc"], result["generator_auc"]
            print(f"ctr_embedding: held-out AUC {got:.4f}, the generator's {best:.4f}", flush=True)
            if got < best - args.tolerance:
                # The job ends with this cause, which the scheduler and the launcher name (exit 3),
                # rather than with a bare exit status. The other workers finish as usual.
                why = (f"missed target: AUC {got:.4f} < {best - args.tolerance:.4f} "
                       f"(generator {best:.4f} - tolerance {args.tolerance:g})")
                print(f"ctr_embedding: {why}", flush=True)
                client.leave(pushpull.TargetMissed(why))
                sys.exit(3)


if __name__ == "__main__":
    main()
