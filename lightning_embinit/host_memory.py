"""Freed host memory kept for reuse while a process trains on a CPU.

glibc's ``malloc`` hands a large block (≥ 128 KiB at first, up to 32 MiB as it adapts) to the kernel when it is
freed (``munmap``, or trimming the heap's top), so a training step that allocates the same activations again gets
fresh pages, and the kernel zeroes each one on first touch: 30,000–40,000 page faults a step in fp32 and 50,000 in
bf16-mixed for [K]'s model (``benchmarks/profile_step.py --size k``), CPU time spent in the kernel (docs/cli.md).
:func:`keep_freed_memory` raises glibc's ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD`` (``mallopt``) so that freed
blocks up to :data:`KEPT_BLOCK_BYTES` stay in the heap for the next step — on a CPU what a caching allocator does on
a GPU. The process's resident memory then stays at its peak instead of shrinking between steps.

The package's training commands (``embinit fit|validate|test|predict``, a sweep's trials, the quick start) call it;
``EMBINIT_KEEP_FREED_MEMORY=0`` turns that off. In a script or notebook call it once before training. Only the
standard library and the package's argument checks are imported; elsewhere than glibc (macOS, musl, Windows) it
changes nothing and says so.
"""

from __future__ import annotations

import ctypes
import sys

from lightning_embinit.checks import environment_flag

VARIABLE = "EMBINIT_KEEP_FREED_MEMORY"
"""The variable that turns :func:`keep_freed_memory_for_training` off (``0``, ``false``, ``no``, ``off``)."""
KEPT_BLOCK_BYTES = (1 << 30, 32 << 20)
"""Freed blocks up to the first size glibc takes (1 GiB; 32 MiB, the largest its manual promises on 64-bit systems,
where a glibc refuses more) stay in the heap; larger ones still go back to the kernel at once."""
TRIM_BYTES = (1 << 31) - 1
"""The heap's top is given back to the kernel only when this much of it (2 GiB, ``mallopt``'s largest value) is free."""
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
"""glibc's ``mallopt`` parameter numbers (``<malloc.h>``)."""
_state = {"kept": False}


def _glibc_mallopt():
    """glibc's ``mallopt`` function, or None where the C library is not glibc."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 -- only glibc has it (musl has mallopt but ignores these parameters)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt


def keep_freed_memory() -> bool:
    """Keep freed blocks up to :data:`KEPT_BLOCK_BYTES` in this process's heap for reuse (module docstring): True
    when glibc took both settings, False where the C library is not glibc or refused them (nothing changed).
    Idempotent; lasts for the process (forked children inherit it)."""
    if _state["kept"]:
        return True
    mallopt = _glibc_mallopt()
    if mallopt is None:
        return False
    kept_blocks = any(mallopt(M_MMAP_THRESHOLD, size) for size in KEPT_BLOCK_BYTES)
    _state["kept"] = kept_blocks and bool(mallopt(M_TRIM_THRESHOLD, TRIM_BYTES))
    return _state["kept"]


def freed_memory_kept() -> bool:
    """Whether :func:`keep_freed_memory` took effect in this process."""
    return _state["kept"]


def keep_freed_memory_for_training() -> bool:
    """What the training commands call: :func:`keep_freed_memory` unless :data:`VARIABLE` turns it off."""
    return environment_flag(VARIABLE, default=True) and keep_freed_memory()
