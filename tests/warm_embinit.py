"""A warm ``embinit`` for the docs tests.

Each ``embinit`` call in a docs page's bash block would start a fresh interpreter that imports torch, Lightning,
jsonargparse and transformers again (5-6 s a call on the project's 2-core machine, about 50 calls in the docs).
:class:`WarmEmbinit` starts one server process per test process that imports them once; a small client script,
put first on the block's ``PATH`` under the name ``embinit``, hands the server its arguments, working directory,
environment and standard streams (file descriptors over a Unix socket), and the server forks a child that runs
the console script's entry point in exactly that context and reports its exit status. ``embinit sweep`` does
the same for its trials (``multiprocessing``'s forkserver).

The server never runs a torch operation, so the forked children start with no OpenMP thread pool (forking after
one has started deadlocks the child's first parallel op). What a real console-script process has and a forked one
would not, the child restores: a fresh seed for Python's and numpy's global generators, ``SIGCHLD`` at its
default, the caller's environment and ``sys.argv``. The console script's own process stays tested as a process in
``test_console_scripts.py`` and ``test_cli_errors.py``; ``EMBINIT_DOCS_COLD=1`` turns the warm server off.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

PRELOAD = (
    "lightning_embinit.commands.main",
    "lightning_embinit.commands.lightning_cli",
    "lightning_embinit.commands.inspect",
    "lightning_embinit.commands.study",
    "lightning_embinit.commands.use",
    "matplotlib.pyplot",
)
"""What the server imports once; the rest is imported by each child on use."""
HEADER_BYTES = 8
CLIENT = """#!{python} -S
import json, os, socket, sys
connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
connection.connect({socket_path!r})
request = json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}}).encode()
socket.send_fds(connection, [len(request).to_bytes({header}, "big") + request], [0, 1, 2])
status = b""
while chunk := connection.recv(64):
    status += chunk
sys.exit(int(status) if status else 1)
"""


def serve(socket_path: str, console_script: str) -> None:
    """Import :data:`PRELOAD`, then fork a child per connection until stdin closes (the test process ended)."""
    import importlib
    import select
    import threading

    sys.path[0] = os.path.dirname(console_script)  # as in the console script's own process
    for module in PRELOAD:
        importlib.import_module(module)
    if threading.active_count() != 1:
        raise RuntimeError(f"the warm embinit server has {threading.active_count()} threads: forking it is unsafe")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(socket_path)
    server.listen(8)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children; each reports its own status
    print("ready", flush=True)
    while True:
        ready, _, _ = select.select([server, sys.stdin], [], [])
        if sys.stdin in ready:
            return
        connection, _ = server.accept()
        message, fds, _, _ = socket.recv_fds(connection, 1 << 22, 3)
        size = int.from_bytes(message[:HEADER_BYTES], "big")
        while len(message) < HEADER_BYTES + size:
            message += connection.recv(1 << 22)
        if os.fork() == 0:
            server.close()
            run_child(connection, json.loads(message[HEADER_BYTES:]), fds, console_script)
        connection.close()
        for fd in fds:
            os.close(fd)


def run_child(connection: socket.socket, request: dict, fds: list[int], console_script: str) -> None:
    """Become the console script's process: the caller's streams, directory, environment and argv; never returns."""
    import random

    import numpy

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [console_script, *request["argv"]]
    random.seed()
    numpy.random.seed()
    status = 1
    try:
        from lightning_embinit.commands.main import main

        status = exit_status(main())
    except SystemExit as done:
        status = exit_status(done.code)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            connection.sendall(str(status).encode())
        finally:
            os._exit(status)


def exit_status(code: object) -> int:
    """``sys.exit(code)``'s status: None is 0, an int is itself, anything else is printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


class WarmEmbinit:
    """The server for this test process, started on first use; :meth:`bin_dir` holds the ``embinit`` client."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self.directory = ""

    def bin_dir(self) -> str:
        if self.process is None:
            self.start()
        return os.path.join(self.directory, "bin")

    def start(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="embinit-warm-")
        socket_path = os.path.join(self.directory, "socket")
        console_script = shutil.which("embinit", path=str(Path(sys.executable).parent)) or "embinit"
        self.process = subprocess.Popen(
            [sys.executable, "-c", f"from tests.warm_embinit import serve; serve({socket_path!r}, {console_script!r})"],
            cwd=Path(__file__).resolve().parent.parent,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the warm embinit server did not start (exit status {self.process.wait()})")
        client = Path(self.directory, "bin", "embinit")
        client.parent.mkdir()
        client.write_text(CLIENT.format(python=sys.executable, socket_path=socket_path, header=HEADER_BYTES))
        client.chmod(0o755)
        atexit.register(self.stop)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            shutil.rmtree(self.directory, ignore_errors=True)
            self.process = None
