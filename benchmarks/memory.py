"""Resident-memory readings shared by the benchmark scripts (Linux ``/proc`` and ``getrusage``)."""

from __future__ import annotations

import resource


def rss_mib() -> float:
    """The process's resident set size now, in MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mib() -> float:
    """The process's peak resident set size so far, in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
