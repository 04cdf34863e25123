"""Length-bucketed batches, sharded across DDP ranks (issues 8 and 10); :mod:`lightning_embinit.text.batches` pads them.

:class:`BucketBatchSampler` forms the batches of *all* ranks identically in every process (same seed, same
epoch), then hands rank ``r`` of ``W`` every ``W``-th batch:

- training (``shuffle=True``): the examples are shuffled (seeded by ``seed + epoch``), cut into pools of
  ``batch_size · pool_batches``, each pool sorted by length (longest and shortest first in turn, so a batch
  spanning two pools still joins similar lengths); the W batches of one step are neighbours in that order
  (similar shapes on every rank), and the order of these groups is shuffled again.
- evaluation (``shuffle=False``): all examples sorted by length, longest first; ``index`` restores the order.
- The N examples are cut into ``B = W · ⌈⌈N / batch_size⌉ / W⌉`` near-equal batches (none above
  ``batch_size``), so every rank gets ``B / W`` batches and none waits at the end of an epoch. When N < B (N < W,
  or ``batch_size=1`` and N not a multiple of W: N = 1014, W = 4 gives two repeats) the order wraps round to fill
  the extra batches. Evaluation with N ≥ W uses ``B = W · ⌊N / W⌋`` batches of one or two examples instead, so
  every example is scored exactly once. ``drop_last=True`` uses ``batch_size``-sized batches only and leaves the
  remainder out (a different one each epoch).

Lightning (``Trainer(use_distributed_sampler=True)``, the default) re-creates a ``BatchSampler`` subclass with a
``DistributedSampler`` as its ``sampler`` (``lightning.fabric.utilities.data._dataloader_init_kwargs_resolve_sampler``)
and calls ``set_epoch`` on it every epoch. This sampler never iterates it: it reads ``num_replicas``, ``rank`` and
``epoch`` from it and shards the batches itself, so the examples are not sharded twice. Otherwise the world comes
from ``torch.distributed`` when it is initialized.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import BatchSampler, Sampler
from torch.utils.data.distributed import DistributedSampler


class EpochSampler(Sampler[int]):
    """``range(n)`` with an epoch counter: Lightning's ``batch_sampler.sampler.set_epoch`` reaches the bucketing."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.size))

    def __len__(self) -> int:
        return self.size


def near_equal_chunks(order: np.ndarray, count: int) -> list[np.ndarray]:
    """``order`` cut into ``count`` consecutive chunks whose sizes differ by at most one."""
    bounds = (np.arange(count + 1) * len(order)) // count
    return [order[bounds[k] : bounds[k + 1]] for k in range(count)]


class BucketBatchSampler(BatchSampler):
    """Batches of examples of similar ``lengths``, the same number for every rank (see the module doc)."""

    def __init__(
        self,
        sampler: Sampler[int] | Sequence[int],
        lengths: Sequence[int] | np.ndarray | None = None,
        batch_size: int = 1,
        drop_last: bool = False,
        *,
        shuffle: bool | None = None,
        seed: int | None = None,
        pool_batches: int | None = None,
        num_replicas: int | None = None,
        rank: int | None = None,
    ) -> None:
        super().__init__(sampler, batch_size, drop_last)
        # Lightning re-creates a batch sampler it did not see built (a loader made outside its hooks, e.g.
        # trainer.predict(model, data.val_dataloader())) from (sampler, batch_size, drop_last) alone; the rest
        # then comes from the dataset the new sampler walks over (its ``lengths`` and ``bucket_options``).
        dataset = getattr(sampler, "dataset", None) or getattr(sampler, "data_source", None)
        options = dict(getattr(dataset, "bucket_options", None) or {})
        if lengths is None:
            lengths = getattr(dataset, "lengths", None)
            if lengths is None:
                raise TypeError(
                    "BucketBatchSampler needs lengths= (or a sampler over a dataset with a `lengths` attribute)"
                )
        shuffle = options.get("shuffle", True) if shuffle is None else shuffle
        seed = options.get("seed", 0) if seed is None else seed
        pool_batches = options.get("pool_batches", 50) if pool_batches is None else pool_batches
        self.lengths = np.asarray(lengths, dtype=np.int64)
        examples = len(sampler.dataset) if isinstance(sampler, DistributedSampler) else len(sampler)  # type: ignore[arg-type]
        if len(self.lengths) != examples:
            raise ValueError(f"{len(self.lengths)} lengths for a sampler over {examples} examples")
        if pool_batches < 1:
            raise ValueError(f"pool_batches must be ≥ 1, got {pool_batches}")
        if (num_replicas is None) != (rank is None) or (num_replicas is not None and not 0 <= rank < num_replicas):
            raise ValueError(
                f"give num_replicas and rank together with 0 ≤ rank < num_replicas; got {num_replicas}, {rank}"
            )
        self.shuffle, self.seed, self.pool_batches = shuffle, seed, pool_batches
        self.num_replicas, self.rank = num_replicas, rank

    # ------------------------------------------------------------------ world and epoch
    def world(self) -> tuple[int, int]:
        """(number of ranks, this rank): Lightning's injected sampler, the arguments, or torch.distributed."""
        if isinstance(self.sampler, DistributedSampler):
            return self.sampler.num_replicas, self.sampler.rank
        if self.num_replicas is not None:
            return self.num_replicas, self.rank  # type: ignore[return-value]
        if dist.is_available() and dist.is_initialized():
            return dist.get_world_size(), dist.get_rank()
        return 1, 0

    @property
    def epoch(self) -> int:
        return int(getattr(self.sampler, "epoch", 0))

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle for ``epoch`` (Lightning calls ``set_epoch`` on ``batch_sampler.sampler`` itself)."""
        if not callable(getattr(self.sampler, "set_epoch", None)):
            raise TypeError(f"the sampler {type(self.sampler).__name__} of this BucketBatchSampler has no set_epoch")
        self.sampler.set_epoch(epoch)  # type: ignore[union-attr]

    # ------------------------------------------------------------------ batches
    def _batch_count(self, size: int, world: int) -> int:
        """B of the module doc: the same on every rank, a multiple of ``world``."""
        if self.drop_last:
            return (size // (self.batch_size * world)) * world
        count = world * math.ceil(math.ceil(size / self.batch_size) / world)
        if not self.shuffle and world <= size < count:  # evaluation: fewer, larger batches rather than repeats
            count = world * (size // world)
        return count

    def global_batches(self) -> list[np.ndarray]:
        """Every rank's batches of this epoch, in order: rank r takes positions r, r + W, r + 2W, …"""
        world, _ = self.world()
        size = len(self.lengths)
        count = self._batch_count(size, world)
        if count == 0:
            return []
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(size, generator=generator).numpy()
            pool = self.batch_size * self.pool_batches
            pools = np.split(order, range(pool, size, pool))
            # pools sorted longest-first and shortest-first in turn, so a batch that spans two pools joins like lengths
            order = np.concatenate(
                [
                    chunk[np.argsort(self.lengths[chunk] * (1 if k % 2 else -1), kind="stable")]
                    for k, chunk in enumerate(pools)
                ]
            )
        else:
            order = np.argsort(-self.lengths, kind="stable")
        if self.drop_last:
            order = order[: count * self.batch_size]
        elif size < count:  # fewer examples than batches: repeat some so every batch has one (module doc)
            order = np.resize(order, count)
        batches = near_equal_chunks(order, count)
        if self.shuffle:
            groups = torch.randperm(count // world, generator=generator).tolist()
            batches = [batches[g * world + r] for g in groups for r in range(world)]
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        world, rank = self.world()
        for batch in self.global_batches()[rank::world]:
            yield batch.tolist()

    def __len__(self) -> int:
        world, _ = self.world()
        return self._batch_count(len(self.lengths), world) // world
