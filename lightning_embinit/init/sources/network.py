"""Whether a download may be tried: offline flags, then a short TCP probe of the host (pre-trained sources).

For every source that can download (gensim-data, the Hugging Face hub). A probe's answer is kept for
:data:`PROBE_TTL_S` seconds only, so a network that comes back (or goes away) during a long run is noticed.
"""

from __future__ import annotations

import os
import socket
import time
import urllib.parse

OFFLINE_FLAGS = ("EMBINIT_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
PROBE_TIMEOUT_S = 3.0
#: Seconds a network probe's answer is reused.
PROBE_TTL_S = 30.0
_probes: dict[tuple[str, int], tuple[float, str | None]] = {}


def offline_flag() -> str | None:
    """``"<VARIABLE> is set"`` for the first offline flag that is on (read at call time), else None."""
    for variable in OFFLINE_FLAGS:
        if os.environ.get(variable, "").strip().lower() in ("1", "true", "yes", "on"):
            return f"{variable} is set"
    return None


def unreachable(url: str) -> str | None:
    """Why the host of ``url`` cannot be reached (a TCP connect), or None; not probed behind a proxy."""
    if any(os.environ.get(variable) for variable in PROXY_VARIABLES):
        return None
    parsed = urllib.parse.urlparse(url if "//" in url else f"https://{url}")
    host, port = parsed.hostname or "", parsed.port or (80 if parsed.scheme == "http" else 443)
    now = time.monotonic()
    cached = _probes.get((host, port))
    if cached is not None and now - cached[0] < PROBE_TTL_S:
        return cached[1]
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
        reason = None
    except OSError as error:
        reason = f"no network: {url} is unreachable ({error})"
    _probes[(host, port)] = (now, reason)
    return reason


def offline_reason(url: str) -> str | None:
    """Why no download from ``url`` should be tried (an offline flag, or no route to it), else None."""
    return offline_flag() or unreachable(url)
