"""One stream per checkpoint: a lock file with an owner and a lease, kept alive by a heartbeat.

Two streams on one checkpoint would plan the same batch ids over different offsets and overwrite each other's
changelog. Spark refuses a second query only inside one Spark application, so the stream takes
``<checkpoint>/mysqlcdc/stream.lock`` before it starts: JSON naming the owner (host, pid, user, start time,
token) and ``heartbeat_at``, renewed every ``lease / 4`` seconds.

A lock is *stale*, and is taken over with a warning, when its heartbeat is older than its lease, or when it
was written on this host by a process that no longer exists (a killed stream restarts at once). Otherwise a
second start fails with ``StreamLocked``, saying who holds it and how to break it. A free lock on a local file
system is created exclusively (a hard link); otherwise (taking over, HDFS, object stores, which have no
exclusive create) it is write-then-verify: of two starts racing, the one whose token is not read back after
``SETTLE_SECONDS`` gives up.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import posixpath
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Self

import pyarrow.fs as pafs

from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.layout import filesystem

log = logging.getLogger(__name__)

LOCK_FILE = "mysqlcdc/stream.lock"
DEFAULT_LEASE_SECONDS = 60.0
SETTLE_SECONDS = 0.2  # between writing a lock and reading it back


class StreamLocked(CdcError):
    """Another stream holds the checkpoint's lock."""


@dataclass(frozen=True)
class LockOwner:
    host: str
    pid: int
    user: str
    token: str
    started_at: float
    heartbeat_at: float
    lease_seconds: float
    description: str = ""

    def age(self, now: float | None = None) -> float:
        return (now if now is not None else time.time()) - self.heartbeat_at

    def stale_reason(self, now: float | None = None) -> str | None:
        if self.host == socket.gethostname() and not _pid_alive(self.pid):
            return f"its process {self.pid} on this host no longer exists"
        if self.age(now) > self.lease_seconds:
            return f"its last heartbeat is {self.age(now):.0f}s old (lease {self.lease_seconds:.0f}s)"
        return None

    def describe(self) -> str:
        started = datetime.fromtimestamp(self.started_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        what = f" ({self.description})" if self.description else ""
        return (
            f"{self.user}@{self.host} pid {self.pid}{what}, started {started}, last heartbeat "
            f"{self.age():.0f}s ago"
        )


class StreamLock:
    """``acquire()`` before the query starts, ``release()`` after it stopped; a context manager too."""

    def __init__(
        self,
        checkpoint: str,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        description: str = "",
        on_lost: Callable[[str], None] | None = None,
    ) -> None:
        self.path = posixpath.join(checkpoint.rstrip("/"), LOCK_FILE)
        self.lease_seconds = lease_seconds
        self.description = description
        self.on_lost = on_lost
        self.owner: LockOwner | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._also_release: list[Callable[[], None]] = []

    # -- public --

    def release_with(self, release: Callable[[], None]) -> None:
        """Call ``release`` when this lock is released: what the stream holds for as long as it holds the lock
        (its server_id range claim) goes with it, on every path that ends the stream."""
        self._also_release.append(release)

    def acquire(self, *, break_lock: bool = False) -> LockOwner:
        current = self.read()
        if current is not None:
            reason = "--break-lock was given" if break_lock else current.stale_reason()
            if reason is None:
                raise StreamLocked(self._held_message(current))
            log.warning(
                "taking over the stream lock %s held by %s: %s", self.path, current.describe(), reason
            )
        now = time.time()
        owner = LockOwner(
            host=socket.gethostname(),
            pid=os.getpid(),
            user=_user(),
            token=uuid.uuid4().hex,
            started_at=now,
            heartbeat_at=now,
            lease_seconds=self.lease_seconds,
            description=self.description,
        )
        if current is None and self._create_exclusively(owner):
            pass  # a local file no one held: created only if absent, so no racer can have written it too
        else:
            self._write(owner)
            time.sleep(SETTLE_SECONDS)
            back = self.read()
            if back is None or back.token != owner.token:
                raise StreamLocked(
                    self._held_message(back) if back else f"lost the race for {self.path}; retry"
                )
        self.owner = owner
        self._stop.clear()
        self._thread = threading.Thread(target=self._heartbeat, name="mysqlcdc-stream-lock", daemon=True)
        self._thread.start()
        return owner

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        while self._also_release:
            try:
                self._also_release.pop()()
            except Exception as exc:  # noqa: BLE001 - the lock itself must still be released
                log.warning("releasing what the stream held with its lock failed: %s", exc)
        if self.owner is None:
            return
        current = self.read()
        if current is not None and current.token == self.owner.token:
            fs, inner = filesystem(self.path)
            try:
                fs.delete_file(inner)
            except FileNotFoundError:
                pass
        self.owner = None

    def read(self) -> LockOwner | None:
        fs, inner = filesystem(self.path)
        try:
            with fs.open_input_stream(inner) as src:
                data = json.loads(src.read().decode("utf-8"))
            return LockOwner(**data)
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as exc:
            raise StreamLocked(
                f"the stream lock {self.path} is unreadable ({exc}); if no stream runs on this checkpoint, "
                "delete the file"
            ) from None

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # -- internals --

    def _held_message(self, owner: LockOwner) -> str:
        return (
            f"another stream runs on this checkpoint: the lock {self.path} is held by {owner.describe()}. "
            "Only "
            "one stream may run per checkpoint. If that stream is gone, its lock expires "
            f"{max(0.0, owner.lease_seconds - owner.age()):.0f}s from now (lease "
            f"{owner.lease_seconds:.0f}s); to break it at once, make sure it is not running, then start with "
            "--break-lock or delete the file"
        )

    def _write(self, owner: LockOwner) -> None:
        fs, inner = filesystem(self.path)
        fs.create_dir(posixpath.dirname(inner), recursive=True)
        tmp = f"{inner}.tmp-{uuid.uuid4().hex[:8]}"
        with fs.open_output_stream(tmp) as out:
            out.write(json.dumps(asdict(owner), indent=1).encode("utf-8"))
        fs.move(tmp, inner)

    def _create_exclusively(self, owner: LockOwner) -> bool:
        """On a local file system, create the lock only if it does not exist (a hard link of a written file
        is atomic and fails if the name is taken): True once created. False elsewhere (HDFS, object stores:
        no exclusive create), where the caller writes and reads back."""
        fs, inner = filesystem(self.path)
        if not isinstance(fs, pafs.LocalFileSystem):
            return False
        fs.create_dir(posixpath.dirname(inner), recursive=True)
        tmp = f"{inner}.tmp-{uuid.uuid4().hex[:8]}"
        with open(tmp, "wb") as out:
            out.write(json.dumps(asdict(owner), indent=1).encode("utf-8"))
        try:
            os.link(tmp, inner)
        except FileExistsError:
            holder = self.read()
            raise StreamLocked(
                self._held_message(holder) if holder else f"lost the race for {self.path}; retry"
            ) from None
        finally:
            os.unlink(tmp)
        return True

    def _heartbeat(self) -> None:
        interval = max(0.5, self.lease_seconds / 4)
        while not self._stop.wait(interval):
            owner = self.owner
            if owner is None:
                return
            try:
                current = self.read()
            except Exception as exc:  # noqa: BLE001 - a transient read error: try again next beat
                log.warning("stream lock heartbeat: cannot read %s: %s", self.path, exc)
                continue
            if current is None or current.token != owner.token:
                holder = current.describe() if current else "nobody (the file was deleted)"
                message = f"the stream lock {self.path} was taken over; it is now held by {holder}"
                log.error(message)
                self.owner = None
                if self.on_lost is not None:
                    self.on_lost(message)
                return
            self.owner = LockOwner(**{**asdict(owner), "heartbeat_at": time.time()})
            try:
                self._write(self.owner)
            except Exception as exc:  # noqa: BLE001
                log.warning("stream lock heartbeat: cannot renew %s: %s", self.path, exc)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in some containers
        return str(os.getuid())
