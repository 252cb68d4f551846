"""A region of code that must not read a tensor back to the host (a CUDA synchronisation), made
to fail on the CPU too: the operators that copy a value out or whose output shape depends on the
data raise, and so do ``tolist``, ``cpu`` and ``numpy``; so does a tensor made from host data
(``torch.tensor(...)``, indexing by a Python list), which on a GPU is a copy from pageable memory
that waits, and that a CUDA graph cannot hold."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

# a value copied to the host (item, bool, int, float) or a shape that depends on the values
READS = {
    aten._local_scalar_dense.default,
    aten.nonzero.default,
    aten.masked_select.default,
    aten.is_nonzero.default,
    aten.equal.default,
    aten.unique_consecutive.default,
    aten._unique2.default,
    aten.repeat_interleave.Tensor,
    aten.lift_fresh.default,
    aten.lift_fresh_copy.default,
}


class HostRead(AssertionError):
    """A tensor was read back to the host inside a region that must not."""


def _bool_index(args: tuple) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ())


class _NoReads(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        boolean = func in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default)
        if func in READS or (boolean and _bool_index(args)):
            raise HostRead(f"{func} reads the device back to the host")
        return func(*args, **(kwargs or {}))


def _refuse(name: str):
    def method(self, *args, **kwargs):
        raise HostRead(f"Tensor.{name} reads the device back to the host")

    return method


@contextlib.contextmanager
def no_host_reads() -> Iterator[None]:
    """Inside, any read of a tensor's values by the host raises `HostRead`."""
    with pytest.MonkeyPatch.context() as patch:
        for name in ("tolist", "cpu", "numpy"):
            patch.setattr(torch.Tensor, name, _refuse(name))
        with _NoReads():
            yield
