"""A zygote child's query channel (`zygote.py`): the child holds one end of a socket pair; each
request it sends there goes over a new connection to the item's own channel (its limits and its
session, as a fresh sandbox's connection would), and the reply comes back the same way."""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

from pytest_backintel.sandbox.backintel_store import MAX_REQUEST_BYTES, recv_frame, send_frame

__all__ = ["ChannelRelay"]


class ChannelRelay:
    """The child's query channel: requests read from its end of a socket pair, each sent over a
    new connection to the item's channel (its limits and session), the reply sent back."""

    def __init__(self, folder: Path) -> None:
        self.path = str(folder / "query.sock")
        self.host, self.inside = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, name="backintel-zygote-relay")
        self._thread.daemon = True

    def start(self) -> None:
        self._thread.start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            while True:
                header = _recv_exact(self.host, 4)
                if not header:
                    return
                size = int.from_bytes(header, "big")
                if size > MAX_REQUEST_BYTES:
                    send_frame(self.host, {"ok": False, "kind": "BadRequest", "error": "too large"})
                    return
                body = _recv_exact(self.host, size)
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                    conn.connect(self.path)
                    conn.sendall(header + body)
                    reply = recv_frame(conn)
                send_frame(self.host, reply)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.host.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)
        self.host.close()


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return b""
        data += chunk
    return data
