"""A node's side of a multi-node `rankscope stacks` in POSIX sh: /proc's raw files and py-spy's dumps.

Why it exists: every node of ``stacks --hosts`` used to start rankscope's Python command, whose
interpreter, guardian and imports cost 45-90 ms of CPU above the manual ``pgrep | xargs py-spy
dump`` line on each node; on 32 nodes sharing two cores that is 1.9-2.6x the manual pdsh line
(docs/benchmarks.md, "Multi-node"). This script costs what that line costs: one process per kind
of file, not one per rank (a trial with a ``cat`` per rank cost 25% more), and the dumps.

What it does, in order, on the node (``sh -c SCRIPT rankscope-node NONCE PATTERN -- COMMAND...``,
COMMAND being the Python node's own ``rankscope stacks --local --json --node-answer ...``):

1. hands over to COMMAND (``exec``) whenever the Python node must answer: rankscope, py-spy or
   ``timeout`` missing there, an option this script does not take (``--pid``, ``--native``, more
   than one sample ...), no process with a rank variable, a candidate stopped or traced, a
   candidate with files in its rankscope runtime directory (progress markers, an in-process
   handler), a dump that failed for any reason but its time limit;
2. reads every environment once for the variables discovery reads (one ``grep -oP``: a variable a
   line, its value cut at a newline), and picks the processes to dump: those with a rank variable,
   not zombies, not a launcher by name, not a child with its parent's very values (a data loader),
   Python by name or by a mapped interpreter;
3. dumps them with py-spy, ``--jobs`` at a time, each under ``timeout --foreground`` (``--timeout``;
   py-spy stays in the script's process group);
4. answers with the raw files, all through one ``grep -H`` (no ``tail``, no file of its own for them):
   every process's ``stat`` and command line (an argument a line: one with a newline in it arrives
   as several), the candidates' ``status`` (owner, pid namespaces), and its own scratch files: the
   variables read, which candidates map an interpreter, the run's facts, each dump. Every line goes
   out behind the name of the file it comes from, so no process can make a line of its command line
   read as a line of the script's files; and as lines, which pdsh (it prefixes lines and ends strings
   at NUL) passes unchanged. The head (rankscope.stacks.shell_answer) finds the jobs with the same
   discovery a node runs, from this snapshot.

The head chooses the processes, as a node does; a process it chooses that the script did not dump
(a rule above missed it), or a rank that waits for its GPU on a node with the NVIDIA driver, sends
the head back to that node with COMMAND (rankscope.cluster.stacks_remote). Everything this script
starts ends with it: the remote script's stdin watcher (rankscope.cluster.transports) ends the
process group when the connection goes, each dump is bounded by ``timeout``, and the scratch files
(``$TMPDIR/rankscope-UUID.NONCE.*``, created 0600 and never through an existing name: ``set -C``)
are removed on exit.

Measured on a node of its own (a pid namespace holding a 2-rank job), CPU of the whole command,
medians of 15 runs: 26 ms against 24 ms for ``pgrep -f ... | xargs py-spy dump`` (each process
this script starts costs about 1 ms; docs/benchmarks.md has each step).
"""

from __future__ import annotations

import os
import re

from rankscope.inproc.runtime import PLACE_VARIABLES
from rankscope.jobkey import KEY_VARIABLES
from rankscope.ranks import ENV_VARIABLES, RANK_VARIABLES

#: Every variable discovery reads from a process's environment (rankscope.ranks' rank, launcher and
#: node rank, rankscope.jobkey's key, the runtime directory; a relaunched job's local ranks are among
#: the first). The snapshot holds only these; tests/stacks/test_shell_node.py checks that the readers
#: ask for no other.
ENV_NAMES = tuple(dict.fromkeys([*ENV_VARIABLES, *KEY_VARIABLES, *PLACE_VARIABLES]))
#: Variables read by their prefix (rankscope.ranks.launcher_of: Accelerate's).
ENV_PREFIXES = ("ACCELERATE_",)

#: The node options the script takes; any other sends it to the Python node (``exec``).
SHELL_OPTIONS = ("--timeout", "--deadline", "--jobs", "--no-fr")
#: How many dumps at once without ``--jobs`` (the Python node's default is two per CPU, at least 4).
DEFAULT_JOBS = 8
#: The first line of the script's answer; the nonce follows it.
SNAPSHOT_MAGIC = "RANKSCOPE-NODE-SNAPSHOT-1"
#: The launchers a process's name alone tells: rankscope.procs' executables and console scripts (not
#: imported here: the head sends this script before it imports discovery; a test keeps them equal).
_LAUNCHER_NAMES = (
    "torchrun",
    "deepspeed",
    "accelerate",
    "mpirun",
    "mpiexec",
    "orterun",
    "prterun",
    "prted",
    "orted",
    "slurmstepd",
    "mpiexec.hydra",
)

# The script. $1 nonce, $2 the variables' pattern, $3 "--", then the Python node's command line.
# Only builtins run per process and per rank (read, case, eval of names made of digits); each
# external command reads every file of its kind at once.
SCRIPT = r"""
n=$1 v=$2; shift 3
command -v "$1" >/dev/null 2>&1 || exec "$@"
command -v timeout >/dev/null 2>&1 || exec "$@"
case $1 in */*) b=$1 ;; *) b=$(command -v "$1") ;; esac
p=${b%/*}/py-spy
[ -x "$p" ] || p=$(command -v py-spy) || exec "$@"
t=10 j=@JOBS@ w=
for a do
  case $w in --timeout) t=$a ;; --jobs) j=$a ;; esac
  case $a in --pid|--pid=*|--all-python|--native|--native-all|--locals|--samples|--interval|--via-signal|--slurm-job) exec "$@" ;; esac
  w=$a
done
cd /proc 2>/dev/null || exec "$@"
read -r r </proc/sys/kernel/random/uuid || exec "$@"
umask 077
set -C
d=${TMPDIR:-/tmp}/rankscope-$r.$n
case $d in *[!A-Za-z0-9_./-]*) d=/tmp/rankscope-$r.$n ;; esac
F="$d.maps $d.env $d.meta"
: >"$d.maps" 2>/dev/null || exec "$@"
trap 'rm -f $F' EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
trap 'exit 129' HUP
z() { rm -f $F; trap - EXIT; exec "$@"; }
f() { e=$1 q=$2; }
n2() { o=$3; }
LC_ALL=C grep -HasoP "$v" [0-9]*/environ >"$d.env" 2>/dev/null
c=
while IFS= read -r l; do
  q=${l%%/*}
  case $q in ''|*[!0-9]*) continue ;; esac
  k=${l#*/environ:}
  eval "g$q=\${g$q}'|'\$k"
  case ${k%%=*} in
    @RANKS@) case " $c " in *" $q "*) ;; *) c="$c $q" ;; esac ;;
    RANKSCOPE_RUNTIME_DIR) eval "r$q=\${k#*=}" ;;
    TMPDIR) eval "m$q=\${k#*=}" ;;
  esac
done <"$d.env"
[ -n "$c" ] || z "$@"
x=" $$ " q=$$
while read -r s <"$q/stat" 2>/dev/null; do
  f ${s##*) }
  case $q in 0|1|'') break ;; esac
  x="$x$q "
done
u= y=
for a in $c; do
  case $x in *" $a "*) continue ;; esac
  read -r s <"$a/stat" 2>/dev/null || continue
  l=${s#*\(}
  l=${l%) *}
  f ${s##*) }
  case $e in Z|X) continue ;; T|t) z "$@" ;; esac
  case $l in @LAUNCHERS@) continue ;; esac
  case " $c " in *" $q "*) eval "[ \"\$g$q\" = \"\$g$a\" ]" && continue ;; esac
  o=
  while IFS= read -r k; do case $k in Uid:*) n2 $k; break ;; esac; done 2>/dev/null <"$a/status"
  eval "h=\${r$a:-\${m$a:-/tmp}/rankscope-$o}"
  if [ -d "$h" ]; then for k in "$h"/*.pid-$a.*; do [ -e "$k" ] && z "$@"; done; fi
  case $l in python*|pypy*) u="$u $a" ;; *) y="$y $a/maps" ;; esac
done
if [ -n "$y" ]; then
  grep -lsE 'libpython|libpypy|python3' $y >>"$d.maps"
  while IFS= read -r a; do u="$u ${a%/maps}"; done <"$d.maps"
fi
[ -n "$u" ] || z "$@"
i=0 k= m= b=
w() {
  for e in $k; do
    wait "${e#*:}"
    case $? in 0) m="${m}dumped ${e%%:*}\n" ;; 124|137) m="${m}timedout ${e%%:*}\n" ;; *) b=1 ;; esac
  done
  k= i=0
}
for a in $u; do
  F="$F $d.dump.$a"
  RUST_BACKTRACE=0 timeout --foreground -k 1 "$t" "$p" dump --pid "$a" --json >"$d.dump.$a" 2>/dev/null &
  k="$k $a:$!" i=$((i + 1))
  [ "$i" -lt "$j" ] || w
done
w
[ -z "$b" ] || z "$@"
s=
for a in $c; do s="$s $a/status"; done
read -r h </proc/sys/kernel/hostname
g=0
[ -e /dev/nvidiactl ] && g=1
printf "host %s\nnvidia %s\ntimeout %s\nself%s\nmaps%s\n$m" "$h" "$g" "$t" "$x" "$y" >"$d.meta"
printf '%s %s %s\n' @MAGIC@ "$n" "$d"
LC_ALL=C grep -HasoP '[^\x00]+' [0-9]*/cmdline [0-9]*/stat $s $F 2>/dev/null
"""


def _script() -> str:
    return (
        SCRIPT.replace("@JOBS@", str(DEFAULT_JOBS))
        .replace("@RANKS@", "|".join(RANK_VARIABLES))
        .replace("@LAUNCHERS@", "|".join(_LAUNCHER_NAMES))
        .replace("@MAGIC@", SNAPSHOT_MAGIC)
        .strip()
    )


def env_pattern() -> str:
    """The variables the script reads, as ``grep -oP`` finds them in /proc/PID/environ (its entries end
    at NUL; a value is cut at a newline, so that every one the script sends is one line)."""
    names = "|".join(re.escape(name) for name in ENV_NAMES)
    prefixes = "|".join(re.escape(prefix) + "[A-Za-z0-9_]*" for prefix in ENV_PREFIXES)
    return f"(?<=\\x00|^)({names}|{prefixes})=[^\\x00\\n]*"


def new_nonce() -> str:
    """The marker of one run's headers (letters and digits: it is part of a file name there)."""
    return os.urandom(8).hex()  # not `secrets`: its import (hashlib, hmac, random) costs 8 ms of start-up


def shell_argv(python_argv: list[str], nonce: str) -> list[str]:
    """The node's command line: the script, with ``python_argv`` (the Python node's) to hand over to."""
    return ["sh", "-c", _script(), "rankscope-node", nonce, env_pattern(), "--", *python_argv]


def takes(python_argv: list[str]) -> bool:
    """Whether the script can answer for this Python node command line (else the head sends it as is):
    a raw answer (``--node-answer``) with no option but :data:`SHELL_OPTIONS`."""
    if "--node-answer" not in python_argv:
        return False
    words = python_argv[python_argv.index("--node-answer") + 1 :]
    index = 0
    while index < len(words):
        if words[index] in ("--timeout", "--deadline", "--jobs") and index + 1 < len(words):
            index += 2
        elif words[index] == "--no-fr":
            index += 1
        else:
            return False
    return True
