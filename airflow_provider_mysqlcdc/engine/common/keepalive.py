"""TCP keepalive on every network session: a path that went silent is noticed even while a session rightly
waits a long time for a reply.

A NAT or firewall that forgets an idle session drops its packets without telling either end, and the
operating system's default (first probe after 2 hours) would leave a waiting read hanging that long. With
these settings the kernel probes a session that carried nothing for ``KEEPALIVE_IDLE_S`` seconds every
``KEEPALIVE_INTERVAL_S`` seconds and gives up after ``KEEPALIVE_PROBES`` unanswered probes: a dead path fails
the read after about ``KEEPALIVE_SILENCE_S`` seconds, however long the query may legitimately run. The probes
also keep the NAT's entry alive, so the fault is rarer in the first place. A middlebox that answers the probes
itself (a proxy whose upstream died) is what the per-read timeouts of each session are for.
"""
from __future__ import annotations

import socket

KEEPALIVE_IDLE_S = 60
KEEPALIVE_INTERVAL_S = 10
KEEPALIVE_PROBES = 6
KEEPALIVE_SILENCE_S = KEEPALIVE_IDLE_S + KEEPALIVE_INTERVAL_S * KEEPALIVE_PROBES


def tune_keepalive(sock: socket.socket) -> None:
    """Turn on keepalive with the timings above (TCP sockets only; options a platform lacks are left out)."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE_S), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_S),
                        ("TCP_KEEPCNT", KEEPALIVE_PROBES)):
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


def libpq_keepalive_params() -> dict[str, int]:
    """The same timings as libpq connection parameters (PostgreSQL)."""
    return {"keepalives": 1, "keepalives_idle": KEEPALIVE_IDLE_S, "keepalives_interval": KEEPALIVE_INTERVAL_S,
            "keepalives_count": KEEPALIVE_PROBES}
