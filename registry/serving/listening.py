"""A node's listening sockets refuse connections until its worker can answer them.

gunicorn's master binds and listens before it forks the worker, and the worker needs a while (Django, the
warm-restart snapshot, the cluster) before it accepts: meanwhile the kernel completes handshakes into the
listen backlog, so a client's heartbeat waits there instead of being refused and going on to its next
service URL at once, as it does against a Java server that is not up yet. So the master takes its TCP
listeners out of LISTEN before it forks a worker (the first one, or one replacing a worker that died:
gunicorn's ``pre_fork``) and the worker listens again once its node has started (``post_worker_init``): a
connection meanwhile is refused (RST, ECONNREFUSED), and one that was waiting in the backlog of a worker
that died is reset.

Linux: ``connect()`` with ``AF_UNSPEC`` on a listening TCP socket disconnects it (``tcp_disconnect``:
the backlog is reset, the socket goes to CLOSE) and keeps its address and port when the port was
given explicitly (bound with a port other than 0); ``listen()`` then puts it back in LISTEN. A socket
bound to port 0, a Unix socket, or another system is left listening (as gunicorn leaves it), as is a
socket the call fails on (logged).
"""

from __future__ import annotations

import ctypes
import logging
import socket
import sys
from collections.abc import Iterable
from typing import Any

logger = logging.getLogger(__name__)


class _SockAddr(ctypes.Structure):
    _fields_ = [("sa_family", ctypes.c_ushort), ("sa_data", ctypes.c_char * 14)]


def _can_pause(listener: Any) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    if listener.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    # An ephemeral port (bound to 0) would be given back by the disconnect and a new one chosen by
    # listen(): only a port chosen by the operator is kept.
    configured = getattr(listener, "cfg_addr", None)
    return not (isinstance(configured, tuple) and len(configured) >= 2 and configured[1] == 0)


def stop_listening(listeners: Iterable[Any]) -> list[Any]:
    """Take each TCP listener out of LISTEN (connections are refused until ``listen_again``); returns
    those it did."""
    paused = []
    libc = ctypes.CDLL(None, use_errno=True)
    address = _SockAddr(socket.AF_UNSPEC)
    for listener in listeners:
        if not _can_pause(listener):
            continue
        if libc.connect(listener.fileno(), ctypes.byref(address), ctypes.sizeof(address)) != 0:
            error = ctypes.get_errno()
            logger.warning(
                "could not pause listening on %s (errno %d): connections queue until the worker serves",
                listener,
                error,
            )
            continue
        paused.append(listener)
    return paused


def listen_again(sockets: Iterable[Any], backlog: int) -> None:
    """LISTEN again (the worker, once it can answer). Harmless on a socket that still listens: it only
    sets the backlog again."""
    for sock in sockets:
        sock.listen(backlog)
