"""Exchange one file descriptor per rank among W processes of one host: Unix domain sockets with SCM_RIGHTS.

Pure Python (no CUDA): ``PeerRange`` (``vmm_peer``) sends the POSIX file descriptor of its exported
``cuMemCreate`` allocation through it, but any descriptor travels (the CPU tests pass pipes).

Each rank binds a ``SOCK_SEQPACKET`` socket named ``socket_name(where, rank)``, connects to every other
rank's and sends ``(rank, world)`` with its descriptor (``socket.send_fds``), then accepts W−1 connections
and receives one descriptor each (``socket.recv_fds``). Sending before accepting cannot deadlock: a connect
to a listening socket is queued (backlog W) and an 8-byte message is buffered, whether or not the peer
has accepted yet. A peer not bound yet is retried until the deadline. Every step is bounded by
``timeout_s``; any failure closes what was received and raises one ``FdExchangeError`` naming the rank.

``where``: a directory both ranks can reach (``<where>/xstage-vmm-<rank>.sock``), or a name prefix
starting with ``"\\0"`` (Linux abstract namespace, no file: ``<where><rank>``). ``store_prefix`` agrees on
a fresh abstract prefix through a ``torch.distributed`` store (rank 0 makes it, the others wait for it).
A peer must run as the same user (checked with ``SO_PEERCRED``).
"""

import os
import socket
import struct
import time
import uuid

from xstage.errors import InputError, require_int

_MSG = struct.Struct("<ii")  # sender rank, world size
_CRED = struct.Struct("3i")  # pid, uid, gid


class FdExchangeError(RuntimeError):
    """The exchange did not complete: which rank, and what was missing or wrong."""


def socket_name(where: str, rank: int) -> str:
    """The socket of ``rank``: a file in the directory ``where``, or ``where + rank`` for an abstract prefix."""
    if where.startswith("\0"):
        return f"{where}{rank}"
    return os.path.join(where, f"xstage-vmm-{rank}.sock")


def _check(fd, rank, world, where, timeout_s):
    world = require_int("world", world, minimum=1)
    rank = require_int("rank", rank, minimum=0)
    if rank >= world:
        raise InputError("rank", rank, f"must be < world ({world})")
    if not isinstance(fd, int) or isinstance(fd, bool) or fd < 0:
        raise InputError("fd", fd, "must be an open file descriptor (int >= 0)")
    if not isinstance(where, str) or not where:
        raise InputError("where", where, "must be a directory or an abstract prefix starting with '\\0'")
    if len(socket_name(where, world - 1).encode()) > 107:
        raise InputError("where", where, "makes a socket name longer than 107 bytes")
    if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise InputError("timeout_s", timeout_s, "must be > 0")
    return rank, world


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _send(fd: int, rank: int, world: int, peer: str, deadline: float) -> None:
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.settimeout(_left(deadline))
            sock.connect(peer)
            socket.send_fds(sock, [_MSG.pack(rank, world)], [fd])
            return
        except (FileNotFoundError, ConnectionRefusedError):
            time.sleep(0.01)  # the peer has not bound yet
        finally:
            sock.close()


def _receive(server, world: int, got: dict, deadline: float) -> None:
    conn, _ = server.accept()
    with conn:
        conn.settimeout(_left(deadline))
        _pid, uid, _gid = _CRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
        msg, fds, _flags, _addr = socket.recv_fds(conn, _MSG.size, 2)
        try:
            if uid != os.getuid():
                raise FdExchangeError(f"a peer of uid {uid} connected (this process: uid {os.getuid()})")
            if len(msg) != _MSG.size or len(fds) != 1:
                raise FdExchangeError(f"a peer sent {len(msg)} bytes and {len(fds)} descriptors (want 8 and 1)")
            sender, their_world = _MSG.unpack(msg)
            if their_world != world or not 0 <= sender < world or sender in got:
                raise FdExchangeError(f"a peer claimed rank {sender} of world {their_world} "
                                      f"(world {world}; ranks already received: {sorted(got)})")
        except FdExchangeError:
            for f in fds:
                os.close(f)
            raise
        got[sender] = fds[0]


def exchange_fds(fd: int, rank: int, world: int, where: str, timeout_s: float = 60.0) -> list:
    """Every rank's descriptor, index = rank: this rank's as ``os.dup(fd)``, the others as received.

    The caller owns (and closes) every returned descriptor; ``fd`` itself stays open and the caller's.
    Collective: all ``world`` ranks call it with the same ``where``. Raises FdExchangeError."""
    rank, world = _check(fd, rank, world, where, timeout_s)
    deadline = time.monotonic() + timeout_s
    got, step = {rank: os.dup(fd)}, "binding"
    path = socket_name(where, rank)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        if not where.startswith("\0") and os.path.exists(path):
            os.unlink(path)  # a stale socket of an earlier run of this rank
        server.bind(path)
        server.listen(world)
        for peer in range(world):
            if peer != rank:
                step = f"sending to rank {peer}"
                _send(fd, rank, world, socket_name(where, peer), deadline)
        while len(got) < world:
            step = f"waiting for ranks {sorted(set(range(world)) - set(got))}"
            server.settimeout(_left(deadline))
            _receive(server, world, got, deadline)
        return [got[j] for j in range(world)]
    except Exception as err:
        for f in got.values():
            os.close(f)
        if isinstance(err, FdExchangeError):
            raise FdExchangeError(f"fd exchange, rank {rank} of {world}: {err}") from None
        why = f"no answer within {timeout_s:g} s" if isinstance(err, (TimeoutError, socket.timeout)) else repr(err)
        raise FdExchangeError(f"fd exchange, rank {rank} of {world}, {step}: {why}") from None
    finally:
        server.close()
        if not where.startswith("\0"):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def store_prefix(store, rank: int, key: str, timeout_s: float = 60.0) -> str:
    """A fresh abstract socket prefix agreed through ``store`` (``set`` / ``get``, a torch.distributed store):
    rank 0 makes and publishes it under ``key``; the others wait for it (their store's own timeout)."""
    if rank == 0:
        prefix = f"\0xstage-vmm-{uuid.uuid4().hex}-"
        store.set(key, prefix)
        return prefix
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = store.get(key)
            return value.decode() if isinstance(value, bytes) else str(value)
        except Exception as err:  # noqa: BLE001 - a store's get may time out; retry until our deadline
            if time.monotonic() > deadline:
                raise FdExchangeError(f"fd exchange, rank {rank}: no socket prefix under {key!r} "
                                      f"within {timeout_s:g} s ({err!r})") from None
            time.sleep(0.05)
