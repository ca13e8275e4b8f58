"""A Fashion-MNIST MLP with BatchNorm, for the AllReduce tests: at the end
each worker prints a digest of its whole state_dict (parameters and the
BatchNorm buffers), so that a test can check every member holds the same."""

import hashlib

import torch
import torch.nn.functional as F

import elasticdl


def main():
    job = elasticdl.connect()
    torch.manual_seed(job.seed + job.worker_id)  # different on purpose: the ring must make them one
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 64), torch.nn.BatchNorm1d(64),
                                torch.nn.ReLU(), torch.nn.Linear(64, 10))
    job.register(model)
    for batch in job.batches():
        loss = F.cross_entropy(model(batch.x), batch.y)
        loss.backward()
        job.step(loss)
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    print("bn-test: state digest %s after %d steps" % (h.hexdigest(), job._member.steps), flush=True)


if __name__ == "__main__":
    main()
