"""One batch-64 plain-SGD training step of the Fashion-MNIST zoo models in
PyTorch, timed on one thread: the reference for BenchmarkKernelsVsTorch
(bench/kernels_test.go), which runs the same models' Go step
(model/zoo's BenchmarkTrainStep step) in the same run.

A step is what the Go side does: zero the gradients, forward, mean softmax
cross-entropy, backward, then p -= lr*grad. The models mirror
model/zoo (NHWC there, NCHW here; same layer shapes, 'same' padding):

  mlp:      Standardize, Flatten, Dense 784->256, ReLU, Dense 256->10
  cnn:      Conv 1->16 3x3, ReLU, MaxPool 2, Conv 16->32 3x3, ReLU,
            MaxPool 2, Dense 1568->128, ReLU, Dense 128->10
  cnn_wide: the same with 32/64 channels (Dense 3136->128)

Prints one JSON object: {"mean": {"mlp": steps/s, "cnn": ..., "cnn_wide":
...}, "p10": {...}}, "p10" being 1/(10th-percentile step time) (on a
shared machine the fast steps are the undisturbed ones).

  /usr/bin/python3 bench/torch_step.py [--seconds 3] [--models mlp,cnn]
"""

import argparse
import json
import time

import torch
from torch import nn

BATCH = 64
MEAN, STD = 0.2860, 0.3530  # model/zoo's standardize constants


class Standardize(nn.Module):
    def forward(self, x):
        return (x - MEAN) * (1 / STD)


def mlp():
    return nn.Sequential(Standardize(), nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def cnn(c1, c2, hidden=128):
    return nn.Sequential(
        nn.Conv2d(1, c1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(7 * 7 * c2, hidden), nn.ReLU(), nn.Linear(hidden, 10))


MODELS = {
    "mlp": mlp,
    "cnn": lambda: cnn(16, 32),
    "cnn_wide": lambda: cnn(32, 64),
}


def steps_per_second(build, seconds):
    """Returns the mean steps/s and 1/(10th-percentile step time)."""
    torch.manual_seed(1)
    net = build()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.rand(BATCH, 1, 28, 28)
    y = torch.randint(0, 10, (BATCH,))

    def step():
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()

    warm = time.perf_counter()
    while time.perf_counter() - warm < min(1.0, seconds / 3):
        step()
    n, start, times = 0, time.perf_counter(), []
    while True:
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
        n += 1
        el = time.perf_counter() - start
        if el >= seconds:
            return n / el, 1 / sorted(times)[len(times) // 10]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--models", default=",".join(MODELS))
    a = ap.parse_args()
    torch.set_num_threads(1)
    out = {"mean": {}, "p10": {}}
    for name in a.models.split(","):
        out["mean"][name], out["p10"][name] = steps_per_second(MODELS[name], a.seconds)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
