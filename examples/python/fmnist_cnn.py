"""A small CNN on Fashion-MNIST, its parameters and Adam's moments on the pushpull servers.

    pushpull-launch --servers=2 --workers=2 -- python3 examples/python/fmnist_cnn.py
    pushpull-launch --servers=2 --workers=2 --consistency=ssp:2 -- python3 examples/python/fmnist_cnn.py

Each worker trains on its share of the training set (every num_workers-th image from its rank);
under BSP the servers apply the workers' mean gradient each step. Worker 0 evaluates on the test
set after each epoch. Data: Debian's dataset-fashion-mnist (or --data_dir). When the last epoch's
test accuracy is below --target, worker 0 says so ("missed target: ..."), ends the job with that
cause (pushpull.TargetMissed) and exits 3.
"""

import argparse
import gzip
import json
import os
import sys
import time

import numpy as np
import torch

import pushpull
import pushpull.torch


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    paths = [os.path.join(data_dir, f"{prefix}-{kind}-idx{n}-ubyte.gz") for kind, n in (("images", 3), ("labels", 1))]
    for p in paths:
        if not os.path.exists(p):
            sys.exit(f"fmnist_cnn: {p} not found (apt-get install dataset-fashion-mnist, or --data_dir)")
    images = torch.from_numpy(read_idx(paths[0]).astype(np.float32) / 255.0).unsqueeze(1)
    labels = torch.from_numpy(read_idx(paths[1]).astype(np.int64))
    return (images - 0.2860) / 0.3530, labels


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = torch.nn.Conv2d(16, 32, 5, padding=2)
        self.fc1 = torch.nn.Linear(32 * 7 * 7, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def accuracy(model, images, labels):
    model.eval()
    with torch.no_grad():
        right = sum(int((model(images[i:i + 1000]).argmax(1) == labels[i:i + 1000]).sum())
                    for i in range(0, len(images), 1000))
    model.train()
    return right / len(images)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64, help="minibatch per worker")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--train_limit", type=int, default=0, help="use the first N training images (0: all)")
    ap.add_argument("--test_limit", type=int, default=0, help="evaluate on the first N test images (0: all)")
    ap.add_argument("--target", type=float, default=0.90, help="test accuracy the last epoch must reach")
    ap.add_argument("--metrics_out", default="", help="append a JSON line per epoch to this file")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    train_x, train_y = load(args.data_dir, "train")
    test_x, test_y = load(args.data_dir, "test")
    if args.train_limit:
        train_x, train_y = train_x[:args.train_limit], train_y[:args.train_limit]
    if args.test_limit:
        test_x, test_y = test_x[:args.test_limit], test_y[:args.test_limit]

    with pushpull.connect() as client:
        rank, workers = client.rank, client.num_workers
        mine_x, mine_y = train_x[rank::workers], train_y[rank::workers]
        torch.manual_seed(rank)
        model = Net()
        # Every worker takes the same number of steps an epoch (BSP waits for the slowest).
        steps = len(mine_x) // args.batch
        # The learning rate decays along a cosine over the run: the servers count a step per clock
        # under BSP (one mean update), per push under SSP and ASP.
        updates = args.epochs * steps * (1 if client.consistency == "bsp" else workers)
        adam = pushpull.Adam(lr=args.lr, schedule=pushpull.cosine(total_steps=updates))
        opt = pushpull.torch.ServerOptimizer(model, adam, name="fmnist_cnn")
        print(f"worker {rank}: {len(mine_x)} images, {steps} steps of {args.batch} an epoch, "
              f"consistency {client.consistency}", flush=True)
        acc = 0.0
        for epoch in range(1, args.epochs + 1):
            order = torch.randperm(len(mine_x), generator=torch.Generator().manual_seed(epoch * 1000 + rank))
            start, loss_sum = time.time(), 0.0
            for s in range(steps):
                idx = order[s * args.batch:(s + 1) * args.batch]
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(mine_x[idx]), mine_y[idx])
                loss.backward()
                opt.step()
                loss_sum += float(loss)
            seconds = time.time() - start
            line = {"worker": rank, "epoch": epoch, "loss": loss_sum / max(steps, 1),
                    "samples_per_s": steps * args.batch / seconds, "consistency": client.consistency}
            if rank == 0:
                acc = accuracy(model, test_x, test_y)
                line["test_accuracy"] = acc
            print(json.dumps(line), flush=True)
            if args.metrics_out:
                with open(args.metrics_out, "a") as f:
                    f.write(json.dumps(line) + "\n")
        if rank == 0:
            print(f"fmnist_cnn: test accuracy {acc:.4f} after {args.epochs} epochs (target {args.target})", flush=True)
            if acc < args.target:
                # The job ends with this cause, which the scheduler and the launcher name (exit 3),
                # rather than with a bare exit status. The other workers finish as usual.
                why = f"missed target: test accuracy {acc:.4f} < {args.target:g} after {args.epochs} epochs"
                print(f"fmnist_cnn: {why}", flush=True)
                client.leave(pushpull.TargetMissed(why))
                sys.exit(3)


if __name__ == "__main__":
    main()
