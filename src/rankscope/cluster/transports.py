"""How a command reaches a node: argv builders for ssh, pdsh and srun.

Nothing here runs a shell locally. The remote command is one string built by
:func:`remote_script` from an argv list (each word ``shlex.quote``d) plus the user's own
``--remote-setup`` text; node names were checked by :mod:`rankscope.cluster.targets`.

The script brackets the command with two marker lines on stderr: one when the node starts
running it (so a timeout tells "never answered" from "answered, then hung") and one with
its exit status (so one srun step over many nodes still gives every node's exit code).
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional, Union

from rankscope.cluster import TRANSPORTS as TRANSPORTS
from rankscope.errors import MissingToolError

START_MARKER = "__rankscope_node_started__"
EXIT_MARKER = "__rankscope_node_exit__"


def command_string(command: Union[str, Sequence[str]]) -> str:
    """A command line for the remote shell: a string is used as written, a list is quoted word by word."""
    if isinstance(command, str):
        return command
    return shlex.join(list(command))


#: Runs in the background of the remote shell while the command runs: when the connection drops
#: (rankscope gave up on the node, was killed, or the network went), sshd closes the session's
#: stdin; at that end of file it ends the remote shell's process group (sshd made the shell a
#: session and group leader): SIGTERM, then SIGKILL a second later. It ignores SIGTERM itself
#: so that it lives to send the SIGKILL; after a normal end the script kills it first.
_WATCHER = (
    "( trap '' TERM; while read -r _ <&3; do :; done; kill -TERM 0; sleep 1; kill -KILL 0 )"
    " </dev/null >/dev/null 2>&1 & __rankscope_watcher=$!"
)


def remote_script(command: Union[str, Sequence[str]], setup: str = "", watch_stdin: bool = True) -> str:
    """The text the remote shell runs: markers, the user's setup, the command, its exit status.

    ``watch_stdin`` (ssh, pdsh): the command dies with the connection. The remote stdin is
    kept for the watcher (fd 3); the setup and the command read /dev/null, as they did when
    rankscope gave ssh /dev/null. Not for srun: the step's stdin is not ours, and SLURM ends
    the step's processes itself.
    """
    parts = []
    if watch_stdin:
        parts += ["exec 3<&0 </dev/null", _WATCHER]
    # SLURMD_NODENAME names the node in an srun step (its hostname may differ); empty elsewhere.
    parts.append(f"printf '%s %s\\n' {START_MARKER} \"${{SLURMD_NODENAME:-}}\" >&2")
    if setup.strip():
        parts.append(setup.strip().rstrip(";"))
    # A subshell, so that an `exit` in the user's command still lets us report its status.
    close_watch = " 3<&-" if watch_stdin else ""
    parts.append(f"( {command_string(command)}\n){close_watch}")
    body = "; ".join(parts)
    done = "rc=$?; "
    if watch_stdin:
        done += "kill -KILL $__rankscope_watcher 2>/dev/null; "
    return f'{body}; {done}printf \'%s %s\\n\' {EXIT_MARKER} "$rc" >&2; exit "$rc"'


@dataclass(frozen=True)
class SshOptions:
    """What the user's ssh needs; the user's own ~/.ssh/config applies unless ``config_file`` replaces it."""

    config_file: Optional[str] = None
    options: tuple[str, ...] = ()
    connect_timeout: float = 10.0
    insecure_no_host_key_check: bool = False

    def args(self) -> list[str]:
        args: list[str] = []
        if self.config_file:
            args += ["-F", self.config_file]
        # BatchMode: never wait for a password or a yes/no prompt that nobody will answer.
        # -v: its "Connection established" / "Authenticated to" lines tell a dead node from a
        # slow login when a deadline hits (the fan-out strips them from what users see).
        args += ["-v", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, round(self.connect_timeout))}"]
        if self.insecure_no_host_key_check:
            args += [
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "LogLevel=ERROR",
            ]
        for option in self.options:
            args += ["-o", option]
        return args


def _require(tool: str, hint: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise MissingToolError(tool, hint)
    return path


@dataclass(frozen=True)
class SshTransport:
    ssh: SshOptions = field(default_factory=SshOptions)
    name: str = "ssh"

    def check(self) -> None:
        _require("ssh", "install openssh-client, or use --via srun inside a SLURM job")

    def node_argv(self, node: str, script: str) -> list[str]:
        # `--` ends ssh's options: the node name can never be read as one.
        return ["ssh", *self.ssh.args(), "--", node, script]

    def env(self) -> Optional[dict[str, str]]:
        return None


@dataclass(frozen=True)
class PdshTransport:
    """pdsh over its ssh module, one node per invocation (so every node keeps its own exit code)."""

    ssh: SshOptions = field(default_factory=SshOptions)
    command_timeout: float = 0.0
    name: str = "pdsh"

    def check(self) -> None:
        _require("pdsh", "install pdsh (apt-get install pdsh), or use --via ssh")

    def node_argv(self, node: str, script: str) -> list[str]:
        argv = ["pdsh", "-R", "ssh", "-S", "-N", "-t", str(max(1, round(self.ssh.connect_timeout)))]
        if self.command_timeout > 0:
            argv += ["-u", str(max(1, round(self.command_timeout)))]
        return [*argv, "-w", node, script]

    def env(self) -> Optional[dict[str, str]]:
        env = dict(os.environ)
        env["PDSH_RCMD_TYPE"] = "ssh"
        append = env.get("PDSH_SSH_ARGS_APPEND", "")
        env["PDSH_SSH_ARGS_APPEND"] = " ".join([append, *map(shlex.quote, self.ssh.args())]).strip()
        return env


@dataclass(frozen=True)
class SrunStep:
    """One srun job step over every node of a running allocation, one task per node.

    ``overlap`` and ``gres_zero`` are what SLURM needs to share a fully allocated job; some
    versions refuse one or the other, and :mod:`rankscope.cluster.fanout` retries without it.
    """

    jobid: str
    overlap: bool = True
    gres_zero: bool = True
    name: str = "srun"

    def check(self) -> None:
        _require("srun", "run on a SLURM login node, or use --via ssh|pdsh with --hosts")

    def argv(self, nodes: Sequence[str], script: str, output_dir: str) -> list[str]:
        argv = ["srun", f"--jobid={self.jobid}"]
        if self.overlap:
            argv.append("--overlap")
        if self.gres_zero:
            argv.append("--gres=gpu:0")
        argv += [
            f"--nodes={len(nodes)}",
            "--ntasks-per-node=1",
            f"--ntasks={len(nodes)}",
            f"--nodelist={','.join(nodes)}",
            "--kill-on-bad-exit=0",
            # Per task, not %N: srun's %N is the host name, which need not be the SLURM node name.
            f"--output={output_dir}/%t.out",
            f"--error={output_dir}/%t.err",
            "sh",
            "-c",
            script,
        ]
        return argv

    def without(self, refused_option: str) -> SrunStep:
        if refused_option == "overlap":
            return SrunStep(self.jobid, overlap=False, gres_zero=self.gres_zero)
        return SrunStep(self.jobid, overlap=self.overlap, gres_zero=False)
