"""Pure: socket tables and descriptor kinds, on lines recorded from /proc."""

from __future__ import annotations

import pytest

from rankscope.inspect.fdkinds import (
    classify,
    counts_of,
    kind_of,
    mode_of,
    parse_inet_table,
    parse_unix_table,
)
from rankscope.inspect.report import FdKind

TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:E09D 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1535086 1 0000000077 100 0 0 10 0
   1: 0100007F:BC1A 0100007F:E09D 01 00000000:00000000 00:00000000 00000000     0        0 1535090 1 0000000078 20 4 30 10 -1
"""
TCP6 = """  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0000000000000000FFFF00000100007F:8809 0000000000000000FFFF00000100007F:B46A 01 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000
   1: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4243 1 0000000000
"""
UDP = """   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  100: 00000000:14E9 00000000:0000 07 00000000:00000000 00:00000000 00000000   108        0 17077 2 00000000 0
"""
UNIX = """Num       RefCount Protocol Flags    Type St Inode Path
00000000c614f333: 00000003 00000000 00000000 0001 03  1595
0000000042051d61: 00000002 00000000 00010000 0001 01 1538926 /tmp/munge/munge.socket
0000000042051d62: 00000002 00000000 00000000 0002 01 77 @/org/abstract
"""


def test_tcp_lines_give_addresses_and_state() -> None:
    table = parse_inet_table("tcp", TCP)
    assert table[1535086].local == "127.0.0.1:57501" and table[1535086].peer is None
    assert table[1535086].state == "LISTEN"
    assert table[1535090].local == "127.0.0.1:48154" and table[1535090].peer == "127.0.0.1:57501"
    assert table[1535090].state == "ESTABLISHED"


def test_only_the_wanted_inodes_are_decoded() -> None:
    assert set(parse_inet_table("tcp", TCP, wanted={1535090})) == {1535090}
    assert set(parse_unix_table(UNIX, wanted={77, 5})) == {77}


def test_tcp6_shows_v4_mapped_addresses_as_v4_and_others_in_brackets() -> None:
    table = parse_inet_table("tcp6", TCP6)
    assert table[4242].local == "127.0.0.1:34825" and table[4242].peer == "127.0.0.1:46186"
    assert table[4243].local == "[::1]:8080" and table[4243].state == "LISTEN"


def test_an_unconnected_udp_socket_has_no_peer() -> None:
    socket = parse_inet_table("udp", UDP)[17077]
    assert (socket.local, socket.peer, socket.state) == ("0.0.0.0:5353", None, None)


def test_unix_sockets_keep_their_path() -> None:
    table = parse_unix_table(UNIX)
    assert table[1595].local == "-" and table[1595].state == "CONNECTED"
    assert table[1538926].local == "/tmp/munge/munge.socket" and table[1538926].state == "UNCONNECTED"
    assert table[77].protocol == "unix-dgram" and table[77].local == "@/org/abstract"


@pytest.mark.parametrize(
    ("target", "kind"),
    [
        ("socket:[1535090]", FdKind.SOCKET),
        ("pipe:[99]", FdKind.PIPE),
        ("anon_inode:[eventfd]", FdKind.EVENTFD),
        ("anon_inode:[eventpoll]", FdKind.EPOLL),
        ("anon_inode:[timerfd]", FdKind.ANON),
        ("/dev/nvidia0", FdKind.GPU),
        ("/dev/nvidiactl", FdKind.GPU),
        ("/dev/infiniband/uverbs0", FdKind.RDMA),
        ("/dev/shm/nccl-abc (deleted)", FdKind.DELETED),
        ("/dev/null", FdKind.DEVICE),
        ("/data/shard-0001.bin", FdKind.FILE),
        ("net:[4026531840]", FdKind.OTHER),
    ],
)
def test_kinds(target: str, kind: FdKind) -> None:
    assert kind_of(target) == kind


def test_modes_from_octal_flags() -> None:
    assert mode_of(0o100000) == "r"
    assert mode_of(0o2001) == "w,append"
    assert mode_of(0o4002) == "rw,nonblock"


def test_classify_joins_the_socket_table_and_fdinfo() -> None:
    sockets = parse_inet_table("tcp", TCP)
    entry = classify(4, "socket:[1535090]", ["pos:\t0", "flags:\t02", "mnt_id:\t8", "ino:\t1535090"], sockets)
    assert entry.describe() == "tcp 127.0.0.1:48154 -> 127.0.0.1:57501 ESTABLISHED"
    assert entry.mode == "rw" and entry.offset is None
    epoll = classify(
        7, "anon_inode:[eventpoll]", ["flags:\t02000002", "tfd:        4 events:       19 data: 4"], {}
    )
    assert epoll.watches == (4,) and "watching fds 4" in epoll.describe()
    unknown = classify(5, "socket:[1]", [], sockets)
    assert unknown.kind == FdKind.SOCKET and unknown.protocol is None and unknown.describe() == "socket:[1]"
    assert counts_of([entry, epoll, unknown]) == {"socket": 2, "epoll": 1}
