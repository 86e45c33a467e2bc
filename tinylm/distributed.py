"""Data-parallel training with PyTorch's own engine: torchrun + torch.distributed + DistributedDataParallel.

    torchrun --nproc_per_node=2 -m tinylm.train ...        # 2 processes on this machine (CPUs or GPUs)

torchrun starts one copy of the training command per process and tells each who it is through
environment variables: RANK (0 ... WORLD_SIZE-1), WORLD_SIZE, LOCAL_RANK (its index on this machine, i.e.
its GPU) and MASTER_ADDR / MASTER_PORT (where rank 0 waits for the others). Every rank then:

    global batch (B, T)  ── same seeded sampler on every rank ──►  rank r keeps rows r*B/W ... (r+1)*B/W - 1
    forward + backward on its (B/W, T) slice;  DDP averages the gradients over the W ranks during backward
    the same clipped AdamW step on every rank  ──►  the weights stay identical everywhere

With equal slices and a mean loss, the average of the W slice gradients is the gradient of the whole
batch's mean loss: W processes take the same steps as one process with batch B (up to float rounding).
Only rank 0 logs and writes checkpoints; checkpoints hold the plain model, so any world size can resume.
Gradient averaging: Li et al., 2020, "PyTorch Distributed: Experiences on Accelerating Data Parallel Training".
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ._checks import IGNORE_INDEX

LAUNCH_HINT = "launch with `torchrun --nproc_per_node=N -m tinylm.train ...`, which sets them for every process"


@dataclass(frozen=True)
class Launch:
    """Who this process is, read from the variables torchrun sets (a plain `python` run is rank 0 of 1)."""

    rank: int = 0          # global index of this process, 0 ... world_size - 1
    world_size: int = 1    # processes taking part, on every machine
    local_rank: int = 0    # index of this process on its machine (picks its GPU)

    @property
    def distributed(self) -> bool:
        """True when several processes train together (a world of one runs exactly as plain python)."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0 logs, shows the progress bar and writes checkpoints."""
        return self.rank == 0


def read_launch(environ: Mapping[str, str] | None = None) -> Launch:
    """The Launch described by RANK, WORLD_SIZE, LOCAL_RANK (and MASTER_ADDR / MASTER_PORT) in environ.

    No RANK and no WORLD_SIZE: a single process. Raises ValueError naming the variable when one is
    missing or wrong, e.g. WORLD_SIZE=2 without MASTER_ADDR (the processes could not find each other).
    """
    env = os.environ if environ is None else environ
    if "RANK" not in env and "WORLD_SIZE" not in env:
        return Launch()
    values = {}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        raw = env.get(name, "0" if name == "LOCAL_RANK" else None)
        if raw is None:
            raise ValueError(f"{name} is not set but {'WORLD_SIZE' if name == 'RANK' else 'RANK'} is; {LAUNCH_HINT}")
        try:
            values[name] = int(raw)
        except ValueError:
            raise ValueError(f"{name} must be an integer, got {raw!r}; {LAUNCH_HINT}") from None
    rank, world, local = values["RANK"], values["WORLD_SIZE"], values["LOCAL_RANK"]
    if world < 1:
        raise ValueError(f"WORLD_SIZE must be >= 1, got {world}")
    if not 0 <= rank < world:
        raise ValueError(f"RANK must be in [0, WORLD_SIZE={world}), got {rank}")
    if local < 0:
        raise ValueError(f"LOCAL_RANK must be >= 0, got {local}")
    if world > 1:
        missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not env.get(name)]
        if missing:
            raise ValueError(f"WORLD_SIZE={world} but {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
                             f"not set: the processes cannot find each other (the rendezvous); {LAUNCH_HINT}, "
                             "or for several machines add --nnodes, --node_rank, --master_addr and --master_port")
    return Launch(rank=rank, world_size=world, local_rank=local)


def check_batch_size(batch_size: int, world_size: int) -> int:
    """Sequences per process, batch_size // world_size; ValueError when the global batch does not divide."""
    if batch_size % world_size:
        fits = list(range(world_size, 4 * world_size + 1, world_size))
        raise ValueError(f"--batch-size {batch_size} (the global batch) is not divisible by the {world_size} "
                         f"processes: each takes batch_size / world_size sequences; use a multiple of "
                         f"{world_size} such as {fits}")
    return batch_size // world_size


def launch_device(launch: Launch, device: torch.device) -> torch.device:
    """The device of this process: cuda -> cuda:LOCAL_RANK (one GPU per process); cpu stays cpu."""
    if not launch.distributed:
        return device
    if device.type == "cuda":
        if device.index is not None:
            raise ValueError(f"--device {device} names one GPU, but under torchrun each process takes the GPU "
                             "of its LOCAL_RANK; pass --device cuda (or auto)")
        gpus = torch.cuda.device_count()
        if gpus == 0:
            raise ValueError("--device cuda but this machine shows no GPU to PyTorch; use --device cpu")
        if launch.local_rank >= gpus:
            raise ValueError(f"LOCAL_RANK {launch.local_rank} has no GPU: this machine has {gpus}; "
                             f"use --nproc_per_node {gpus} or fewer")
        return torch.device("cuda", launch.local_rank)
    if device.type != "cpu":
        raise ValueError(f"--device {device.type} cannot train with several processes; use cpu or cuda")
    return device


def backend(device: torch.device) -> str:
    """The communication library for device: nccl between GPUs, gloo between CPU processes."""
    return "nccl" if device.type == "cuda" else "gloo"


def init(launch: Launch, device: torch.device) -> None:
    """Join the process group (env:// rendezvous at MASTER_ADDR:MASTER_PORT); nothing for a single process."""
    if not launch.distributed or active():
        return
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend(device), rank=launch.rank, world_size=launch.world_size)


def active() -> bool:
    """True inside a process group (after `init`, under torchrun)."""
    return dist.is_available() and dist.is_initialized()


def close() -> None:
    """Wait for every rank (rank 0 may still be saving), then leave the process group."""
    if active():
        dist.barrier()
        dist.destroy_process_group()


def rank_and_world() -> tuple[int, int]:
    """(rank, world_size) of the current process group, (0, 1) without one."""
    if active():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def broadcast_object(obj):
    """Rank 0's obj on every rank (pickled: for small things such as the tokenizer); obj without a group."""
    if not active():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def wrap(model: torch.nn.Module, find_unused_parameters: bool = False) -> DistributedDataParallel:
    """The model in DistributedDataParallel: gradients are averaged over the ranks during backward.

    DDP copies rank 0's weights to every rank when wrapping. Pass find_unused_parameters=True when some
    weights may get no gradient on a rank, as a mixture of experts may leave an expert without tokens.
    """
    device = next(model.parameters()).device
    return DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None,
                                   find_unused_parameters=find_unused_parameters)


def shard(batch: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """This rank's rows of a global batch: (B, ...) -> (B / world_size, ...), rows rank*B/W ... (rank+1)*B/W - 1."""
    per_rank = check_batch_size(batch.shape[0], world_size)
    return batch[rank * per_rank : (rank + 1) * per_rank]


def all_reduce_sum(values: list[float], device: torch.device | str = "cpu") -> list[float]:
    """Element-wise sum of the values over all ranks, in float64 (the values themselves without a group)."""
    if not active():
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def loss_weight(n_local: torch.Tensor, n_global: torch.Tensor, world_size: int) -> torch.Tensor:
    """Factor for this rank's mean loss so that the ranks' average is the global batch's mean loss.

    The chat mask (-100) leaves each rank a different number of supervised positions n_local; the mean
    over all of them is sum_r (n_r * mean_r) / n_global = average over ranks of mean_r * (n_r * W / n_global).
    DDP averages gradients, so scaling each rank's loss by n_local * W / n_global gives the global gradient.
    """
    return (n_local.double() * world_size / n_global.double().clamp(min=1)).float()


def rebalance_loss(loss: torch.Tensor, targets: torch.Tensor, world_size: int) -> torch.Tensor:
    """This rank's mean loss (over targets != -100) weighted by `loss_weight`; 0 when it has no such target.

    Needs the process group (one all-reduce of the count). Without a loss mask every rank has the same
    count and the weight is exactly 1, so the training loop only calls this for masked (chat) data.
    """
    n_local = (targets != IGNORE_INDEX).sum()   # supervised positions on this rank
    n_global = n_local.clone()
    dist.all_reduce(n_global)                 # ... on all ranks
    return torch.where(n_local > 0, loss * loss_weight(n_local, n_global, world_size), 0.0)
