"""A real distributed training job for Corral: PyTorch DDP on the CPU ``gloo`` backend.

Every rank trains the same small MLP on its own shard of synthetic regression data for a
few hundred steps; DDP averages gradients across ranks after every step, so all ranks
end with identical parameters. Each rank prints its loss and a checksum of the final
parameters, so the job's logs show that it really trained together:

    rank=0 world=2 step=0 loss=...
    rank=0 final_loss=... params_sha256=...

Corral gives every task the rendezvous environment (MASTER_ADDR, MASTER_PORT,
WORLD_SIZE, RANK, LOCAL_RANK), which ``init_process_group("gloo")`` reads by itself.

Teardown is explicit: the model lives only inside ``train``, so once it returns nothing
holds the process group, and ``destroy_process_group`` frees gloo's backend (its worker
threads, its TCP loop and rank 0's store server) before the interpreter exits. Threads
still running while a process exits race its teardown and can abort it after it has
printed its result (see the ``torch._dynamo`` import below).
"""

from __future__ import annotations

import hashlib
import os

import torch

# DistributedDataParallel's constructor imports torch._dynamo. Imported for the first time
# while a process group exists, it keeps that group alive (torch 2.13): no later
# destroy_process_group can free its gloo backend, whose threads then run on while the
# interpreter exits, and that race sometimes aborts a rank after its last line
# ("terminate called without an active exception", exit 134). Imported before the group
# exists, it keeps nothing.
import torch._dynamo
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

STEPS = int(os.environ.get("TRAIN_STEPS", "300"))


def train(rank: int, world: int) -> str:
    """Train this rank's replica; the line to print at the end."""
    torch.manual_seed(0)  # same initial weights on every rank (DDP also broadcasts them)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    optimiser = torch.optim.SGD(model.parameters(), lr=0.05)

    generator = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard
    true_weights = torch.arange(16, dtype=torch.float32) / 16
    first_loss = last_loss = 0.0
    for step in range(STEPS):
        inputs = torch.randn(64, 16, generator=generator)
        targets = (inputs @ true_weights).unsqueeze(1) + 0.01 * torch.randn(64, 1, generator=generator)
        loss = nn.functional.mse_loss(model(inputs), targets)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        last_loss = loss.item()
        if step == 0:
            first_loss = last_loss
        if step % 100 == 0:
            print(f"rank={rank} world={world} step={step} loss={last_loss:.5f}", flush=True)

    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    # Exact bits of every parameter (float.hex), the same on every rank.
    digest = hashlib.sha256(",".join(float(v).hex() for v in flat.tolist()).encode()).hexdigest()
    return f"rank={rank} first_loss={first_loss:.5f} final_loss={last_loss:.5f} params_sha256={digest}"


def main() -> None:
    dist.init_process_group("gloo")
    try:
        print(train(dist.get_rank(), dist.get_world_size()), flush=True)
        dist.barrier()  # every rank's collectives done before any rank tears down
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
