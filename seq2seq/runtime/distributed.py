"""torchrun's processes: where this one stands, the process group, and what rank 0 shares.

Under ``torchrun`` (``RANK``/``WORLD_SIZE`` in the environment) training runs one process per rank:
nccl on CUDA, gloo on the CPU; without it, one plain process, for which every collective here is a
no-op. Rank 0 owns the run folder; the others are told what they need by broadcasts from it.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from seq2seq.errors import ReportedByRankZero, Seq2SeqError

# Generous: ranks wait at a collective while rank 0 validates and writes checkpoints.
COLLECTIVE_TIMEOUT = datetime.timedelta(hours=2)
CLOSE_TIMEOUT = datetime.timedelta(minutes=1)

T = TypeVar("T")


@dataclass(frozen=True)
class Topology:
    """Where this process stands among torchrun's processes (one process: rank 0 of 1)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @classmethod
    def from_env(cls) -> Topology:
        env = os.environ
        world = int(env.get("WORLD_SIZE", 1))
        return cls(
            rank=int(env.get("RANK", 0)),
            world_size=world,
            local_rank=int(env.get("LOCAL_RANK", 0)),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", world)),
        )


def process_rank() -> int:
    """torchrun's ``RANK`` of this process, read before any process group exists (0 without)."""
    return int(os.environ.get("RANK", 0))


def processes() -> int:
    """torchrun's ``WORLD_SIZE``, read before any process group exists (1 without)."""
    return int(os.environ.get("WORLD_SIZE", 1))


def join(topology: Topology, device: torch.device) -> Any:
    """Join torchrun's process group (nccl on CUDA, gloo on the CPU); returns the gloo group for
    host-side objects and flags, or None for one process."""
    if topology.world_size <= 1:
        return None
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=COLLECTIVE_TIMEOUT)
    return dist.new_group(backend="gloo") if backend == "nccl" else dist.group.WORLD


def follower_argv(argv: Sequence[str]) -> list[str]:
    """The command line of a rank other than 0: no Hydra output folder or log file of its own
    (rank 0 owns the run folder and tells the others where it is)."""
    kept = [arg for arg in argv if not arg.startswith("hydra.run.dir=")]
    quiet = ["hydra.run.dir=.", "hydra.output_subdir=null"]
    return with_overrides(kept, [*quiet, "hydra/job_logging=stderr", "hydra/hydra_logging=stderr"])


def with_overrides(argv: Sequence[str], extra: list[str]) -> list[str]:
    """``argv`` with ``extra`` overrides beside its own, which Hydra reads only as one run of
    arguments (``x=1 hydra.run.dir=... --cfg job``, not ``x=1 --cfg job hydra.run.dir=...``)."""
    given = [i for i, arg in enumerate(argv) if "=" in arg and not arg.startswith("-")]
    at = given[-1] + 1 if given else len(argv)
    return [*argv[:at], *extra, *argv[at:]]


_FINE, _REFUSED, _INTERRUPTED = 0, 1, 2  # how rank 0's part of `from_main` ended


class ProcessGroup:
    """This process's place among torchrun's processes and the collectives between them, on host
    objects and numbers (every call is a no-op for one process)."""

    def __init__(self, topology: Topology, host_group: Any = None) -> None:
        self.topology = topology
        self._host_group = host_group  # gloo group for host-side objects and flags

    def close(self) -> None:
        """Leave the process group, if any, once every rank has come to leave it: a rank that
        tears it down while another still uses it, or exits without leaving, aborts. A rank
        that does not come within a minute (it failed elsewhere) is not waited for longer."""
        if not (self.distributed and dist.is_initialized()):
            return
        with contextlib.suppress(RuntimeError):
            dist.monitored_barrier(group=self._host_group, timeout=CLOSE_TIMEOUT)
        dist.destroy_process_group()

    # -- where this process stands ---------------------------------------------------------------

    @property
    def rank(self) -> int:
        return self.topology.rank

    @property
    def world_size(self) -> int:
        return self.topology.world_size

    @property
    def distributed(self) -> bool:
        return self.topology.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes files and logs."""
        return self.topology.rank == 0

    # -- between processes (every call is a no-op for one process) -------------------------------

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier(group=self._host_group)

    def broadcast(self, obj: T) -> T:
        """Rank 0's ``obj`` on every rank."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self._host_group)
        return box[0]

    def from_main(self, produce: Callable[[], T]) -> T:
        """Rank 0's ``produce()`` on every rank. A user error there stops every rank with the
        same message; Ctrl-C or a failure there stops them too: first comes a one-number
        collective (a rank waiting inside one hears no signal until it ends), then the value."""
        if not self.distributed:
            return produce()
        status, value, error = _FINE, None, None
        if self.is_main:
            try:
                value = produce()
            except Seq2SeqError as e:
                status, value, error = _REFUSED, str(e), e
            except KeyboardInterrupt as e:
                status, error = _INTERRUPTED, e
            except Exception as e:
                status, value, error = _REFUSED, f"rank 0 stopped: {type(e).__name__}: {e}", e
        flag = torch.tensor([status])
        dist.broadcast(flag, src=0, group=self._host_group)
        if int(flag) == _INTERRUPTED:
            raise error or KeyboardInterrupt()
        value = self.broadcast(value)
        if error is not None:
            raise error
        if int(flag) == _REFUSED:
            raise ReportedByRankZero(value)
        return value

    def gather(self, obj: T) -> list[T] | None:
        """Every rank's ``obj`` in rank order on rank 0; None on the others."""
        if not self.distributed:
            return [obj]
        out: list[Any] | None = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, out, dst=0, group=self._host_group)
        return out

    def max_over_ranks(self, value: int) -> int:
        """The largest ``value`` of all ranks (a flag any rank may raise)."""
        if not self.distributed:
            return value
        flag = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._host_group)
        return int(flag.item())

    def sum_over_ranks(self, values: Sequence[float]) -> list[float]:
        """Element-wise sums of ``values`` over all ranks (host numbers, for logging)."""
        if not self.distributed:
            return list(values)
        total = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(total, group=self._host_group)
        return total.tolist()
