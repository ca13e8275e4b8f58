"""Trains fashion_mnist.cnn in one PyTorch process, the reference for
BenchmarkWholeJobVsTorch (bench/whole_test.go): the same network as
model/zoo's (standardized inputs, Conv 1->16 3x3 same, ReLU, MaxPool 2,
Conv 16->32, ReLU, MaxPool 2, Dense 1568->128, ReLU, Dense 128->10), the
same optimizer (Adam, learning rate 0.002 with Keras' decay 0.001:
lr / (1 + 0.001*step)), minibatches of 64 shuffled every epoch, 2 epochs
on the 60,000 training images, then the test accuracy on the 10,000.

Prints one JSON object: {"accuracy", "train_seconds", "threads"}. The
whole process's wall time (import torch, reading the data) is the
caller's to measure.

  /usr/bin/python3 bench/torch_train.py [--threads 2] [--epochs 2] [--data DIR]
"""

import argparse
import gzip
import json
import time

import numpy as np
import torch
from torch import nn

MEAN, STD = 0.2860, 0.3530


def idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def images(path):
    return torch.from_numpy(idx(path).astype(np.float32) / 255.0).unsqueeze(1)


def labels(path):
    return torch.from_numpy(idx(path).astype(np.int64))


class Standardize(nn.Module):
    def forward(self, x):
        return (x - MEAN) * (1 / STD)


def cnn():
    return nn.Sequential(
        Standardize(),
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x = images(args.data + "/train-images-idx3-ubyte.gz")
    y = labels(args.data + "/train-labels-idx1-ubyte.gz")
    tx = images(args.data + "/t10k-images-idx3-ubyte.gz")
    ty = labels(args.data + "/t10k-labels-idx1-ubyte.gz")
    model = cnn()
    opt = torch.optim.Adam(model.parameters(), lr=0.002)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1 / (1 + 0.001 * step))
    start = time.perf_counter()
    model.train()
    for _ in range(args.epochs):
        order = torch.randperm(len(x))
        for lo in range(0, len(x), 64):
            i = order[lo:lo + 64]
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[i]), y[i]).backward()
            opt.step()
            sched.step()
    train_seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(tx[lo:lo + 1000]).argmax(1) == ty[lo:lo + 1000]).sum()) for lo in range(0, len(tx), 1000))
    print(json.dumps({"accuracy": correct / len(tx), "train_seconds": train_seconds, "threads": args.threads}))


if __name__ == "__main__":
    main()
