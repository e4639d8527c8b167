"""The launcher every backend runs first: apply rlimits, run the payload, report how it ended.

It runs as `python -I -S _launcher.py SPEC` (standard library only, shipped into the sandbox)
where SPEC is a JSON object: `rlimits` (name -> [soft, hard]), `argv` (the payload; empty means
"run the Python code read from stdin"), `python` (the interpreter for code), `status` (a path the
launcher writes one JSON line to when the payload ends: returncode, signal, cpu_s, maxrss_kb).
The payload runs as a child so the launcher can report its signal and CPU time exactly.
Optional `seed` (a folder copied into the working directory first) and `hold` (after the
report, stop what the payload left running and wait to be killed, so the host can still copy
the working directory out): the bwrap backend's tmpfs workspace (`workspace_tmpfs.py`).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import stat
import sys
import time
from typing import TextIO

_MAX_ARG = 100_000
"""Code longer than this is written to a temporary file instead of passed with `-c`."""


def _apply_rlimits(rlimits: dict[str, list[int]]) -> None:
    for name, (soft, hard) in rlimits.items():
        resource.setrlimit(getattr(resource, name), (soft, hard))
    # Python ignores SIGXFSZ itself; a non-Python payload gets the default (terminate).
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)


def _seed(folder: str) -> None:
    """Copy the host workspace (mounted read-only at `folder`) into the working directory,
    links as links and hard links as hard links (so they hold no more room than outside)."""
    seen: dict[tuple[int, int], str] = {}
    failed: list[str] = []
    for root, dirs, files in os.walk(folder):
        rel = os.path.relpath(root, folder)
        for name in (*dirs, *files):
            src, dst = os.path.join(root, name), os.path.normpath(os.path.join(rel, name))
            try:
                st = os.lstat(src)
                if stat.S_ISLNK(st.st_mode):
                    os.symlink(os.readlink(src), dst)
                elif stat.S_ISDIR(st.st_mode):
                    os.makedirs(dst, exist_ok=True)
                elif stat.S_ISREG(st.st_mode):
                    key = (st.st_dev, st.st_ino)
                    if key in seen:
                        os.link(seen[key], dst)
                    else:
                        shutil.copy2(src, dst)
                        seen[key] = dst
            except OSError as exc:
                failed.append(f"{dst}: {exc.strerror}")
    if failed:
        text = "; ".join(failed[:5])
        os.write(2, f"sandbox: the workspace could not be copied in whole: {text}\n".encode())


def _hold(status: TextIO) -> None:
    """Stop every process the payload left (the sandbox's init and this one survive), tell
    the host (`{"held": true}`: no more output will come), then wait while the host copies the
    workspace out and kills the sandbox."""
    for fd in (0, 1, 2):
        os.close(fd)
    with contextlib.suppress(OSError):
        os.kill(-1, signal.SIGKILL)
    status.write('{"held": true}\n')
    status.close()
    while True:
        time.sleep(3600)


def main() -> int:
    spec = json.loads(sys.argv[1])
    status = open(spec["status"], "w", encoding="utf-8")  # noqa: SIM115 - kept open on purpose
    if spec.get("seed"):
        _seed(spec["seed"])
    status.write('{"started": true}\n')  # tells the host that set-up worked
    status.flush()
    argv: list[str] = spec["argv"]
    if not argv:
        code = sys.stdin.read()
        if len(code) <= _MAX_ARG:
            argv = [spec["python"], "-s", "-c", code]
        else:
            path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"cell_{os.getpid()}.py")
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(code)
            argv = [spec["python"], "-s", path]
    pid = os.fork()
    if pid == 0:  # the payload: no inherited descriptors but 0-2, stdin empty, limits applied
        try:
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.closerange(3, 65536)
            _apply_rlimits(spec["rlimits"])
            os.execvp(argv[0], argv)
        except OSError as exc:
            os.write(2, f"sandbox: cannot start {argv[0]!r}: {exc}\n".encode())
        os._exit(127)
    _, wait_status, usage = os.wait4(pid, 0)
    sig = os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else None
    returncode = -sig if sig is not None else os.WEXITSTATUS(wait_status)
    record = {
        "returncode": returncode,
        "signal": sig,
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 4),
        "maxrss_kb": usage.ru_maxrss,
    }
    status.write(json.dumps(record) + "\n")
    status.flush()
    if spec.get("hold"):
        _hold(status)
    status.close()
    return 128 + sig if sig is not None else returncode


if __name__ == "__main__":
    sys.exit(main())
