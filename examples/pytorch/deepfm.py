"""A PyTorch DeepFM on click-through-rate data, its embeddings on the PS.

    bin/elasticdl data export --data='synthetic-ctr://?records=200000&zipf=2' --output=ctr.csv
    export PYTHONPATH=$PWD/python
    bin/elasticdl train --worker_command='python3 examples/pytorch/deepfm.py' \
      --optimizer='adagrad:learning_rate=0.1,initial_accumulator_value=0.001' \
      --training_data='csv://'$PWD'/ctr.csv?schema=label:label,f{1..13}:num,c{1..26}:id' \
      --num_workers=2 --num_ps_pods=2 --minibatch_size=256 --output=out/

The id of every categorical field indexes two tables on the parameter
servers, a first-order weight (dim 1) and an embedding (dim 8), which no
worker holds whole: each minibatch pulls the rows of its ids and pushes
their gradients. The network is elasticdl's ctr.deepfm: the first-order
and factorization-machine terms are added to the click logit of a
Dense(13+26·8 → 64 → 32 → 2) tower over the dense features and the
embeddings. --model_params: dense=N, fields=N, embedding_dim=N.
"""

import torch
import torch.nn.functional as F

import elasticdl


class DeepFM(torch.nn.Module):
    def __init__(self, dense=13, fields=26, dim=8, hidden=(64, 32)):
        super().__init__()
        self.first_order = elasticdl.Embedding(1, "ctr_linear", initializer="zeros")
        self.embedding = elasticdl.Embedding(dim, "ctr_embed", initializer="uniform:-0.05,0.05")
        self.fc1 = torch.nn.Linear(dense + fields * dim, hidden[0])
        self.fc2 = torch.nn.Linear(hidden[0], hidden[1])
        self.out = torch.nn.Linear(hidden[1], 2)

    def forward(self, x, ids):
        v = self.embedding(ids)                             # [N, fields, dim]
        wide = self.first_order(ids).sum((1, 2))            # Σ_f w(id_f)
        fm = 0.5 * (v.sum(1).pow(2) - v.pow(2).sum(1)).sum(1)  # Σ_{i<j} <v_i, v_j>
        deep = self.out(F.relu(self.fc2(F.relu(self.fc1(torch.cat([x, v.flatten(1)], 1))))))
        return deep + torch.stack([torch.zeros_like(wide), wide + fm], 1)


def main():
    job = elasticdl.connect()
    p = job.model_params
    torch.manual_seed(job.seed)
    model = DeepFM(int(p.get("dense", 13)), int(p.get("fields", 26)), int(p.get("embedding_dim", 8)))
    job.register(model)
    for batch in job.batches():
        loss = F.cross_entropy(model(batch.x, batch.ids), batch.y)
        loss.backward()
        job.step(loss)


if __name__ == "__main__":
    main()
