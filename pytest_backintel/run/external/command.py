"""`--analyst cmd:"python my_agent.py"`: the agent's command and the folder mounted for it.

The folder of the first argument that names an existing file (relative to the run's working
directory, or for a suite file's `analyst:` to the suite file's folder) is the agent's code,
mounted read-only at AGENT_DIR inside the sandbox (and the argument rewritten to its path
there). That folder may not hold the run's working directory, nor the suite file's folder: the
scenarios, lock file and results would be mounted with it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AGENT_DIR", "CMD_PREFIX", "AgentCommand", "AgentCommandError", "parse_command"]

CMD_PREFIX = "cmd:"
AGENT_DIR = "/agent"
"""Where the agent's folder appears inside its sandbox (read-only)."""


class AgentCommandError(ValueError):
    """A `cmd:` analyst that cannot run as given; the message says what and the fix."""


@dataclass(frozen=True)
class AgentCommand:
    text: str
    argv: list[str]
    """The command on the host (an unsandboxed run)."""
    argv_inside: list[str]
    """The command inside the sandbox (the agent's file under AGENT_DIR)."""
    folder: Path | None
    """The agent's folder on the host (None: the command names no file)."""


def parse_command(spec: str, cwd: Path) -> AgentCommand:
    """Parse `cmd:...` (or the bare command), its paths relative to `cwd`."""
    text = spec.removeprefix(CMD_PREFIX).strip()
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise AgentCommandError(f"--analyst {spec!r}: cannot split the command: {exc}") from exc
    if not argv:
        raise AgentCommandError(
            f'--analyst {spec!r}: no command; give one, as in cmd:"python my_agent.py"'
        )
    folder: Path | None = None
    inside = list(argv)
    for index, arg in enumerate(argv):
        path = (cwd / arg).resolve()
        if not arg.startswith("-") and path.is_file():
            folder = path.parent
            inside[index] = f"{AGENT_DIR}/{path.name}"
            argv[index] = str(path)
            break
    held = [
        d
        for d in dict.fromkeys((cwd.resolve(), Path.cwd().resolve()))
        if folder and d.is_relative_to(folder)
    ]
    if held:
        what = "the run's working directory"
        if held[0] != Path.cwd().resolve():
            what = "the suite file's folder"
        raise AgentCommandError(
            f"--analyst {spec!r}: the agent's folder {folder} holds {what} {held[0]}, whose "
            "scenarios, lock file and results would be mounted into the agent's sandbox; put "
            "the agent in a folder of its own (e.g. agents/my_agent.py)"
        )
    return AgentCommand(text, argv, inside, folder)
