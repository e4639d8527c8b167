"""The launcher every backend runs first: apply rlimits, run the payload, report how it ended.

It runs as `python -I -S _launcher.py SPEC` (standard library only, shipped into the sandbox)
where SPEC is a JSON object: `rlimits` (name -> [soft, hard]), `argv` (the payload; empty means
"run the Python code read from stdin"), `python` (the interpreter for code), `status` (a path the
launcher writes one JSON line to when the payload ends: returncode, signal, cpu_s, maxrss_kb).
The payload runs as a child so the launcher can report its signal and CPU time exactly.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import tempfile

_MAX_ARG = 100_000
"""Code longer than this is written to a temporary file instead of passed with `-c`."""


def _apply_rlimits(rlimits: dict[str, list[int]]) -> None:
    for name, (soft, hard) in rlimits.items():
        resource.setrlimit(getattr(resource, name), (soft, hard))
    # Python ignores SIGXFSZ itself; a non-Python payload gets the default (terminate).
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)


def main() -> int:
    spec = json.loads(sys.argv[1])
    status = open(spec["status"], "w", encoding="utf-8")  # noqa: SIM115 - kept open on purpose
    argv: list[str] = spec["argv"]
    if not argv:
        code = sys.stdin.read()
        if len(code) <= _MAX_ARG:
            argv = [spec["python"], "-s", "-c", code]
        else:
            fd, path = tempfile.mkstemp(prefix="cell_", suffix=".py")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(code)
            argv = [spec["python"], "-s", path]
    rlimits = spec["rlimits"]
    try:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            close_fds=True,
            preexec_fn=lambda: _apply_rlimits(rlimits),
        )
    except OSError as exc:
        print(f"sandbox: cannot start {argv[0]!r}: {exc}", file=sys.stderr)
        status.write(json.dumps({"returncode": 127, "signal": None, "spawn_error": str(exc)}))
        status.close()
        return 127
    _, wait_status, usage = os.wait4(child.pid, 0)
    sig = os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else None
    returncode = -sig if sig is not None else os.WEXITSTATUS(wait_status)
    record = {
        "returncode": returncode,
        "signal": sig,
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 4),
        "maxrss_kb": usage.ru_maxrss,
    }
    status.write(json.dumps(record) + "\n")
    status.close()
    return 128 + sig if sig is not None else returncode


if __name__ == "__main__":
    sys.exit(main())
