"""Networks between nodes: interfaces and their kinds, which interface a job should use, port reachability.

collect: :mod:`sysfs` (/sys/class/net, /sys/class/infiniband), :mod:`netlink` (addresses and link
kinds from the kernel), :mod:`probe` (concurrent non-blocking connects, a bounded listener),
:mod:`check` (every node probes every other over the cluster fan-out), :mod:`master`
(MASTER_ADDR:MASTER_PORT before a job starts). Pure: :mod:`ifaces` (kind classification),
:mod:`advice` (which interface to name, hostname -> loopback), :mod:`verdicts` (what a probe
verdict means, the reachability matrix and its findings).
"""
