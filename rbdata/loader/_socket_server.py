"""An authenticated request/reply server on an abstract Unix socket, a thread per client.

What the training process serves to other processes of the same machine
goes through one: the draws of DataLoader workers
(:mod:`rbdata.loader._draw_service`) and the global draws DDP ranks share
(:mod:`rbdata.loader._rank_share`). The socket lives in the abstract
namespace (nothing on disk, gone with the process); a random key
authenticates both sides (``multiprocessing``'s challenge), so only a
process given the :class:`ServerAccess` is served. Each connection gets a
thread, so a client that stalls stalls only its own.

Messages are plain pickles (:func:`send`, :func:`receive`), tensors by value:
``Connection.send`` would pickle tensors as torch does for a child process,
moving each to shared memory and passing its descriptor through the
sender's resource sharer, which only processes holding its ``authkey`` (its
children) can reach, and which costs a shared segment a message.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import socket
import threading
from dataclasses import dataclass
from multiprocessing.connection import Client, Connection, answer_challenge, deliver_challenge
from typing import Any

__all__ = ["ServerAccess", "SocketServer", "connect", "hang_up", "receive", "request", "send"]

_log = logging.getLogger("rbdata.loader")


@dataclass(frozen=True)
class ServerAccess:
    """What a client needs to reach a server: its address and key (pickled to clients)."""

    address: str
    key: bytes


class SocketServer:
    """Serves ``handle(request) -> reply`` to authenticated clients (see the module doc).

    A request the handler raises on is answered ``("error", "<type>: <message>")``.

    Args:
        name: a word naming the service in its address.

    Examples:
        >>> class Echo(SocketServer):
        ...     def handle(self, request):
        ...         return ("echo", *request)
        >>> server = Echo("echo")
        >>> conn = connect(server.access)
        >>> request(conn, ("hi",), 5.0, "the echo server")
        ('echo', 'hi')
        >>> conn.close(); server.close()
    """

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self._clients_lock = threading.Lock()
        key = os.urandom(32)
        address = f"\0rbdata-{name}-{os.getpid()}-{key[:8].hex()}"
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket.bind(address)
        self._socket.listen()
        self.access = ServerAccess(address, key)
        self._connections: list[Connection] = []
        self._accept = threading.Thread(
            target=self._accept_loop, name=f"rbdata-{name}", daemon=True
        )
        self._accept.start()

    def handle(self, request: tuple[Any, ...]) -> tuple[Any, ...]:
        """The reply to ``request`` (subclasses serve their requests here)."""
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._stop.is_set()

    def close(self) -> None:
        """Stop serving: clients still connected get end of file."""
        if self._stop.is_set():
            return
        self._stop.set()
        with contextlib.suppress(OSError):  # wakes the accept loop (Linux), which closes it
            self._socket.shutdown(socket.SHUT_RDWR)
        with self._clients_lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            hang_up(conn)

    def _accept_loop(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    sock, _ = self._socket.accept()
                except OSError:  # shut down by close()
                    return
                conn = Connection(sock.detach())
                with self._clients_lock:
                    if self._stop.is_set():
                        conn.close()
                        return
                    self._connections.append(conn)
                threading.Thread(
                    target=self._serve, args=(conn,), name="rbdata-client", daemon=True
                ).start()
        finally:
            self._socket.close()

    def _serve(self, conn: Connection) -> None:
        try:
            try:  # what multiprocessing's Listener does (here, so a stalled client stalls
                # only its own thread): both sides prove they hold the key
                deliver_challenge(conn, self.access.key)
                answer_challenge(conn, self.access.key)
            except (EOFError, OSError):
                raise
            except Exception:
                _log.warning("rbdata %s: refused a connection", type(self).__name__, exc_info=True)
                return
            while not self._stop.is_set():
                message = receive(conn)
                try:
                    reply = self.handle(message)
                except Exception as error:  # the client raises it
                    reply = ("error", f"{type(error).__name__}: {error}")
                send(conn, reply)
        except (EOFError, OSError):  # the client ended (or died), or the server closed
            pass
        finally:
            with self._clients_lock:
                if conn in self._connections:
                    self._connections.remove(conn)
            conn.close()


def hang_up(conn: Connection) -> None:
    """Shut ``conn`` down: a thread blocked reading it gets end of file (close alone does not)."""
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(conn.fileno())) as sock:
        sock.shutdown(socket.SHUT_RDWR)


def send(conn: Connection, message: Any) -> None:
    """Send ``message`` as a plain pickle (tensors by value; see the module doc)."""
    conn.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))


def receive(conn: Connection) -> Any:
    """Receive what :func:`send` sent (from an authenticated peer)."""
    return pickle.loads(conn.recv_bytes())


def connect(access: ServerAccess) -> Connection:
    """A connection to the server at ``access`` (authenticated both ways)."""
    return Client(access.address, family="AF_UNIX", authkey=access.key)


def request(
    conn: Connection, message: tuple[Any, ...], timeout: float | None, server: str
) -> tuple[Any, ...]:
    """Send ``message`` and return the reply, waiting ``timeout`` seconds at most (None: no bound).

    Raises:
        RuntimeError: if the server is gone (end of file) or answered an error.
        TimeoutError: if no reply came within ``timeout``.
    """
    try:
        send(conn, message)
        if timeout is not None and not conn.poll(timeout):
            raise TimeoutError(f"{server} did not answer {message[0]!r} within {timeout:g} s")
        reply: tuple[Any, ...] = receive(conn)
    except (EOFError, OSError) as error:
        raise RuntimeError(f"{server} closed (its process ended, or it was closed)") from error
    if reply[0] == "error":
        raise RuntimeError(f"{server} failed: {reply[1]}")
    return reply
