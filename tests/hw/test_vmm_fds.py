"""The W-rank file-descriptor exchange of ``PeerRange`` (``hw/common/vmm_fds.py``), on the CPU: real processes
pass descriptors of ordinary temporary files through SCM_RIGHTS; each rank reads every received file and must find the
right sender's bytes at the right index."""

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from xstage.errors import InputError
from xstage.hw.common.vmm_fds import FdExchangeError, exchange_fds, socket_name, store_prefix

CHILD = """
import json, os, sys
from xstage.hw.common.vmm_fds import exchange_fds
rank, world, where = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].replace("NUL", "\\0")
import tempfile
with tempfile.TemporaryFile() as t:
    t.write(f"from-{rank}".encode()); t.flush()
    fds = exchange_fds(t.fileno(), rank, world, where, timeout_s=30)
print(json.dumps([os.pread(f, 64, 0).decode() for f in fds]))
"""


def _file_with(text: str) -> int:
    """A read-only descriptor of a temporary file holding ``text`` (read with ``os.pread``: every process
    that received it reads the whole text, whatever the others did)."""
    t = tempfile.TemporaryFile()
    t.write(text.encode())
    t.flush()
    fd = os.dup(t.fileno())
    t.close()
    return fd


def _run_ranks(world: int, me: int, where: str) -> dict:
    """Ranks other than ``me`` as child processes, ``me`` here: {rank: what it read from each index}."""
    arg = where.replace("\0", "NUL")
    kids = {j: subprocess.Popen([sys.executable, "-c", CHILD, str(j), str(world), arg], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for j in range(world) if j != me}
    mine = _file_with(f"from-{me}")
    fds = exchange_fds(mine, me, world, where, timeout_s=60)
    os.close(mine)
    seen = {me: [os.pread(f, 64, 0).decode() for f in fds]}
    for f in fds:
        os.close(f)
    for j, kid in kids.items():
        out, err = kid.communicate(timeout=60)
        assert kid.returncode == 0, err
        seen[j] = json.loads(out)
    return seen


def test_three_processes_each_get_every_senders_fd_at_its_rank(tmp_path):
    seen = _run_ranks(3, 1, str(tmp_path))
    want = ["from-0", "from-1", "from-2"]
    assert seen == {0: want, 1: want, 2: want}
    assert not list(tmp_path.iterdir())  # every rank removed its socket file


def test_abstract_prefix_from_a_store_two_processes():
    class Store(dict):
        def set(self, k, v):
            self[k] = v.encode()

        def get(self, k):
            return self[k]

    store = Store()
    prefix = store_prefix(store, 0, "vmm-test")
    assert prefix.startswith("\0xstage-vmm-") and store_prefix(store, 1, "vmm-test") == prefix
    assert _run_ranks(2, 0, prefix) == {0: ["from-0", "from-1"], 1: ["from-0", "from-1"]}


def test_store_prefix_waits_for_rank_0_then_gives_up_with_one_error():
    class Late(dict):
        set = dict.__setitem__

        def get(self, k):
            return self[k]

    store = Late()
    threading.Timer(0.2, lambda: store.set("k", b"\0p-")).start()
    assert store_prefix(store, 1, "k", timeout_s=10) == "\0p-"
    with pytest.raises(FdExchangeError, match=r"rank 2: no socket prefix under 'missing' within 0.3 s"):
        store_prefix(store, 2, "missing", timeout_s=0.3)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_missing_peer_is_one_error_within_the_timeout_and_leaks_no_fd(tmp_path):
    fd = _file_with("x")
    before, t0 = _open_fds(), time.monotonic()
    with pytest.raises(FdExchangeError, match=r"rank 0 of 2, sending to rank 1: no answer within 0.4 s"):
        exchange_fds(fd, 0, 2, str(tmp_path), timeout_s=0.4)
    assert time.monotonic() - t0 < 5 and _open_fds() == before
    os.close(fd)


def test_a_peer_claiming_the_wrong_world_is_refused(tmp_path):
    where = str(tmp_path)

    def fake_rank_1():  # binds rank 1's socket (so rank 0's send lands), then sends a bad header
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        srv.bind(socket_name(where, 1))
        srv.listen(2)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
                    s.connect(socket_name(where, 0))
                    socket.send_fds(s, [(1).to_bytes(4, "little") + (3).to_bytes(4, "little")], [0])
                break
            except (FileNotFoundError, ConnectionRefusedError):
                time.sleep(0.01)
        time.sleep(0.5)
        srv.close()

    peer = threading.Thread(target=fake_rank_1)
    peer.start()
    fd = _file_with("x")
    with pytest.raises(FdExchangeError, match=r"rank 0 of 2: a peer claimed rank 1 of world 3"):
        exchange_fds(fd, 0, 2, where, timeout_s=10)
    peer.join(10)
    os.close(fd)


def test_world_of_one_returns_a_duplicate_of_its_own_fd(tmp_path):
    fd = _file_with("solo")
    [mine] = exchange_fds(fd, 0, 1, str(tmp_path), timeout_s=1)
    assert mine != fd and os.pread(mine, 8, 0) == b"solo"
    os.close(mine)
    os.close(fd)


@pytest.mark.parametrize("kw,field", [({"world": 0}, "world"), ({"rank": 2}, "rank"), ({"rank": -1}, "rank"),
                                      ({"fd": -1}, "fd"), ({"where": ""}, "where"), ({"timeout_s": 0}, "timeout_s"),
                                      ({"where": "/" + "d" * 120}, "where")])
def test_bad_input_is_one_input_error_naming_the_field(kw, field):
    args = {"fd": 0, "rank": 0, "world": 2, "where": "/tmp", "timeout_s": 1.0} | kw
    with pytest.raises(InputError) as info:
        exchange_fds(**args)
    assert info.value.field == field and "\n" not in str(info.value)
