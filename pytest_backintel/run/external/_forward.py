"""Runs inside the agent's sandbox (standard library only): forwards 127.0.0.1:<port> to the
Unix socket of the trial's MCP server (and the model gateway), then runs the agent as a child
and ends as it ended (a signal that killed the agent kills this process the same way).

`python _forward.py SPEC -- AGENT ARGV...`, SPEC a JSON list of `[port, socket path]`.
The sandbox has its own network namespace: these ports are the only way out.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        client, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            upstream.close()
            continue
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def main() -> int:
    spec = json.loads(sys.argv[1])
    argv = sys.argv[3:]
    for port, path in spec:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", int(port)))
        listener.listen(64)
        threading.Thread(target=_serve, args=(listener, path), daemon=True).start()
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            os.write(2, f"backintel: cannot start the agent {argv[0]!r}: {exc}\n".encode())
        os._exit(127)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main())
