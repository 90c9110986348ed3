"""A gloo job whose ranks disagree on their collectives, one scenario per run (tests/fr).

    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=P TORCH_FR_BUFFER_SIZE=2000 \
        python fr_job.py SCENARIO OUT_PREFIX DELAY [exit]

Test scaffolding, standing in for the in-process handler: a background thread writes this rank's
flight recorder with rankscope.inproc.frdump.dump_flight_recorder (what the handler calls: pickle
with frames to OUT_PREFIX<rank>, JSON to OUT_PREFIX<rank>.json) after DELAY seconds, while the main
thread is blocked in a collective; with ``exit`` the rank then ends itself once every rank dumped.
With OUT_PREFIX ``-`` nothing is dumped: the job as it would run with no code added (the in-process
handler, RANKSCOPE_INPROC=1, gives its recorder to `rankscope stacks`).
"""

import os
import sys
import threading
import time

import torch
import torch.distributed as dist

from rankscope.inproc.frdump import dump_flight_recorder

SCENARIO, PREFIX, DELAY = sys.argv[1], sys.argv[2], float(sys.argv[3])
EXIT = sys.argv[4:] == ["exit"]
RANK = int(os.environ["RANK"])


def dump_later():
    time.sleep(DELAY)
    for path in (f"{PREFIX}{RANK}.json", f"{PREFIX}{RANK}"):  # the pickle last: its name says "done"
        problem = dump_flight_recorder(path)
        if problem:
            print(f"rank {RANK}: {problem}", file=sys.stderr, flush=True)
    if EXIT:  # once every rank has written its dump (a rank that ends first kills the others' gloo pairs)
        world = int(os.environ["WORLD_SIZE"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(os.path.exists(f"{PREFIX}{r}") for r in range(world)):
            time.sleep(0.1)
        os._exit(0)


def log_global_loss(t):
    dist.all_reduce(t)


def step(t, group=None):
    dist.all_reduce(t, group=group)


def evaluate():
    time.sleep(3600)


def receive_activations(t, src):
    dist.recv(t, src)


def main():
    dist.init_process_group("gloo")
    if PREFIX != "-":
        threading.Thread(target=dump_later, daemon=True).start()
    t = torch.ones(4)
    for i in range(3):
        if SCENARIO == "skip" and RANK == 1 and i == 2:
            evaluate()  # rank 1 skips the last all_reduce
        step(t)
        if SCENARIO == "extra" and RANK == 0 and i == 1:
            log_global_loss(t)  # an all_reduce the other ranks never issue
    if SCENARIO in ("extra", "skip"):
        dist.barrier()
    elif SCENARIO == "op":
        if RANK == 1:
            dist.barrier()
        else:
            step(t)
    elif SCENARIO == "size":
        try:  # gloo aborts the rank that receives more than it expects; the others see an error and stay
            dist.all_reduce(torch.ones(8) if RANK == 1 else t)
            dist.barrier()
        except RuntimeError:
            pass
    elif SCENARIO == "subgroup":
        sub = dist.new_group([0, 1])
        if RANK in (0, 1):
            dist.all_reduce(t, group=sub)
        if RANK == 0:
            dist.all_reduce(t, group=sub)
        dist.barrier()
    elif SCENARIO == "p2p":
        if RANK == 0:
            dist.send(t, 1)
        elif RANK == 1:
            dist.recv(t, 0)
            dist.recv(t, 0)
        dist.barrier()
    elif SCENARIO in ("pipeline", "pipeline-idle"):
        # Rank 0 never sends its activations: it is elsewhere (a barrier; or, idle, its own code, where
        # the recorders agree); every later stage waits in recv from the stage before it (gloo records
        # no send/recv).
        if RANK == 0:
            dist.barrier() if SCENARIO == "pipeline" else evaluate()
        else:
            receive_activations(t, RANK - 1)
            if int(os.environ["WORLD_SIZE"]) > RANK + 1:
                dist.send(t, RANK + 1)
            dist.barrier()
    elif SCENARIO == "member-skips":
        # Rank 0 waits in the first all_reduce of a new group [0, 1] that rank 1, busy in its own code,
        # never issues; rank 2 (no member) sleeps too. gloo's recorder names no group's members.
        sub = dist.new_group([0, 1])
        if RANK == 0:
            step(t, sub)
        evaluate()
    elif SCENARIO == "same-call":
        # Every rank ends in step's all_reduce, reached from one line: rank 0 waits in the second one
        # of a new group, which rank 1 skipped; rank 1 waits in the next one of the default group.
        # (Both issue the group's first: gloo's recorder names no group's members, the entries do.)
        sub = dist.new_group([0, 1])
        step(t, sub)
        for group in (sub, None):
            if not (RANK == 1 and group is sub):
                step(t, group)
    time.sleep(3600)


main()
