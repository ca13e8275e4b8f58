"""elasticdl: PyTorch workers for elasticdl jobs.

A worker script::

    import elasticdl
    job = elasticdl.connect()           # the job's master and PS, from the environment
    model = MyNet()
    job.register(model)                 # parameters go to (and come from) the PS
    for batch in job.batches():         # the master's tasks, as minibatches
        loss = torch.nn.functional.cross_entropy(model(batch.x), batch.y)
        loss.backward()
        job.step(loss)                  # push the gradients

run by ``elasticdl train --worker_command='python3 train.py' --optimizer=...``.
See docs/python.md.
"""

from ._rpc import ElasticDLError
from .data import DataError, Records
from .embedding import Embedding
from .job import Batch, Job, connect

__all__ = ["connect", "Job", "Batch", "Embedding", "Records", "ElasticDLError", "DataError"]
