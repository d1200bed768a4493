"""A TCP proxy for fault tests: cut every connection (an outage, refused until restored), cut right after a
marked client packet (a COMMIT whose reply is lost), cut one connection after it carried some bytes to the
client (a network cut in the middle of a binlog read), black-hole the live connections (a NAT or firewall
that forgot them: nothing arrives, nothing closes) while new ones work, or move to another server in the
middle of binlog reads (a failover behind a virtual IP)."""
from __future__ import annotations

import itertools
import re
import socket
import threading

_DUMP_COMMANDS = (0x12, 0x1E)  # COM_BINLOG_DUMP, COM_BINLOG_DUMP_GTID
_CLIENT_SSL = 0x0800  # the capability flag of the client's SSL request (then the connection turns to TLS)
_SSL_REQUEST_SIZE = 32  # an SSL request's payload: capabilities, max packet, charset, filler


class _ClientPackets:
    """The client's side of a MySQL connection read far enough to tell whether it is a binlog dump: it sent
    COM_BINLOG_DUMP (a command: a packet of sequence 0), or it opened TLS (its SSL request, the first packet,
    hides every command after it; pymysql tries TLS wherever the server offers it, and Oracle MySQL does).

    Packets are followed across what each ``recv`` returns: one may hold several packets (a loaded machine
    lets the client's SSL request and its TLS ClientHello arrive together) or part of one."""

    def __init__(self) -> None:
        self._head = bytearray()  # the current packet's header and up to 11 bytes of its payload
        self._skip = 0  # bytes of the current packet's payload still to pass over
        self._first = True
        self.server_id: int | None = None  # the replica server_id a (plain) binlog dump named

    def feed(self, data: bytes) -> bool:
        """True once the bytes so far say the connection is (possibly) a binlog dump."""
        at = 0
        while at < len(data):
            if self._skip:
                n = min(self._skip, len(data) - at)
                self._skip -= n
                at += n
                continue
            head = self._head
            if len(head) < 4:  # the header first: 3 bytes of payload length, the sequence id
                take = min(4 - len(head), len(data) - at)
                head += data[at:at + take]
                at += take
                continue
            length = int.from_bytes(head[:3], "little")
            need = 4 + min(11, length)
            take = min(need - len(head), len(data) - at)
            head += data[at:at + take]
            at += take
            if len(head) < need:
                continue
            seq, payload = head[3], bytes(head[4:])
            first, self._first = self._first, False
            self._head, self._skip = bytearray(), length - len(payload)
            if first and length == _SSL_REQUEST_SIZE and int.from_bytes(payload[:4], "little") & _CLIENT_SSL:
                return True
            if seq == 0 and payload[:1] and payload[0] in _DUMP_COMMANDS:
                # COM_BINLOG_DUMP: command, position (4), flags (2), server_id (4); _GTID: command, flags (2),
                # server_id (4)
                at_id = 7 if payload[0] == _DUMP_COMMANDS[0] else 3
                if len(payload) >= at_id + 4:
                    self.server_id = int.from_bytes(payload[at_id:at_id + 4], "little")
                return True
        return False


class CuttableProxy:
    """Forwards 127.0.0.1:<port> to ``target``. ``cut()`` closes every live connection and the listener (new
    connections are refused) until ``restore()``; ``cut_after(marker)`` cuts right after forwarding the
    first client packet matching ``marker`` (the server gets it, the client never hears back)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self.cuts = 0
        self.cut_done = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._marker: re.Pattern[bytes] | None = None
        self._frozen = False  # between the marked packet and the cut: drop what the server sends
        self._hold: float | None = None
        self._cut_after_bytes: int | None = None
        self.connection_cuts = 0  # connections cut by cut_connection_after
        self._blackholed: set[int] = set()  # connections whose traffic is dropped, both ways
        self._clients: set[int] = set()  # every connection's number (never ``id(socket)``: ids are reused)
        self._numbers = itertools.count()
        self._redirect: tuple[tuple[str, int], int] | None = None  # (new target, dump bytes left before it)
        self._redirect_server_id: int | None = None  # count only the dumps of this replica server_id
        self._dump_ids: dict[int, int | None] = {}  # connection number -> the server_id its dump named
        self.redirected = threading.Event()
        self.restore()

    def restore(self) -> None:
        self._frozen = False
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._sockets = self._sockets, set()
            self.cuts += 1
        for sock in ([listener] if listener else []) + list(sockets):
            _close(sock)  # a listener shut down refuses connections
        self.cut_done.set()

    def cut_for(self, seconds: float) -> threading.Timer:
        self.cut()
        timer = threading.Timer(seconds, self.restore)
        timer.start()
        return timer

    def cut_after(self, marker: re.Pattern[bytes], hold: float | None = None) -> None:
        """Cut after the next client packet matching ``marker``; restore ``hold`` seconds later (if given)."""
        self.cut_done.clear()
        self._hold = hold
        self._marker = marker

    def cut_connection_after(self, downstream_bytes: int) -> None:
        """Cut the next MySQL binlog dump connection (a client that sent COM_BINLOG_DUMP, or any TLS one) once
        it carried ``downstream_bytes`` to the client; only that one: the listener stays open, the client may
        reconnect."""
        self._cut_after_bytes = downstream_bytes

    def live(self) -> int:
        """How many connections are open now (one whose either end closed no longer counts)."""
        with self._lock:
            return len(self._clients)

    def blackhole_live(self) -> int:
        """Silently drop all traffic of the connections open now (they stay open, and one end closing is not
        passed on to the other); returns how many."""
        with self._lock:
            self._blackholed |= self._clients
            return len(self._clients)

    def redirect_after(self, target: tuple[str, int], dump_bytes: int, server_id: int | None = None) -> None:
        """Once binlog dump connections (from now on, all together) carried ``dump_bytes`` to their clients,
        move to ``target``: the live connections are cut, new ones reach ``target`` (a failover behind a
        virtual IP in the middle of binlog reads). ``server_id``: count only the dumps that replica id asked
        for (and those under TLS, whose id cannot be seen): one reader's, not the driver's boundary scan's."""
        self.redirected.clear()
        self._redirect_server_id = server_id
        self._redirect = (target, dump_bytes)

    def _counted(self, key: int) -> bool:
        """Whether connection ``key``'s dump bytes count toward the redirect (an unseen id: TLS, counted)."""
        wanted = self._redirect_server_id
        return wanted is None or self._dump_ids.get(key) in (None, wanted)

    def _count_dump_bytes(self, n: int) -> None:
        with self._lock:
            if self._redirect is None:
                return
            target, left = self._redirect
            if left > n:
                self._redirect = (target, left - n)
                return
            self._redirect, self.target = None, target
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            _close(sock)
        self.redirected.set()

    @property
    def armed(self) -> bool:
        """A ``cut_connection_after`` is still waiting for its connection."""
        return self._cut_after_bytes is not None

    def close(self) -> None:
        self.cut()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
                server.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    for sock in (client, server):
                        _close(sock)
                    continue
                self._sockets |= {client, server}
                key = next(self._numbers)
                self._clients.add(key)
            dump = threading.Event()  # set once the client asked for a binlog dump (or opened TLS)
            threading.Thread(target=self._pump, args=(client, server, True, dump, key), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False, dump, key), daemon=True).start()

    def _pump(
        self, source: socket.socket, sink: socket.socket, upstream: bool, dump: threading.Event, key: int
    ) -> None:
        carried = 0
        packets = _ClientPackets()
        try:
            while data := source.recv(65536):
                if key in self._blackholed:
                    continue
                if upstream and not dump.is_set() and packets.feed(data):
                    self._dump_ids[key] = packets.server_id
                    dump.set()
                carried += len(data) if dump.is_set() else 0
                if not upstream and dump.is_set() and self._redirect is not None and self._counted(key):
                    self._count_dump_bytes(len(data))
                limit = self._cut_after_bytes
                if not upstream and limit is not None and carried >= limit:
                    self._cut_after_bytes = None
                    self.connection_cuts += 1
                    sink.sendall(data[: max(0, len(data) - (carried - limit))])
                    return  # finally closes both sides: the client sees its connection drop mid-read
                marker = self._marker
                if not upstream and self._frozen:
                    continue  # the server's answer to the marked packet: the client never gets it
                if upstream and marker is not None and marker.search(data):
                    self._marker, self._frozen = None, True
                    sink.sendall(data)
                    if self._hold is None:
                        self.cut()
                    else:
                        self.cut_for(self._hold)
                    return
                sink.sendall(data)
        except OSError:
            pass
        finally:
            # a black-holed connection: the other end never learns that this one closed (its FIN is lost too)
            for sock in (source,) if key in self._blackholed else (source, sink):
                _close(sock)
            if key not in self._blackholed:
                with self._lock:
                    self._clients.discard(key)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


