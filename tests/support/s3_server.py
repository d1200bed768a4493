"""A throwaway S3-compatible server on a loopback port (moto's server, from its own venv ``.venv-s3`` that
``make setup`` builds), for the object store tests: the output root is an ``s3://`` URI that pyarrow and
delta-rs reach through the standard AWS environment variables, as in production."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

REPO = Path(__file__).resolve().parents[2]
SERVER = REPO / ".venv-s3" / "bin" / "moto_server"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class S3Server:
    """``with S3Server() as s3``: ``s3.env`` holds the variables a writer or reader needs, ``s3.bucket(name)``
    creates a bucket."""

    port: int = field(default_factory=_free_port)
    process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": "mysqlcdc-test",
            "AWS_SECRET_ACCESS_KEY": "mysqlcdc-test-secret",
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    @property
    def storage_options(self) -> dict[str, str]:
        """The same settings as delta-rs ``storage_options`` (for a reader that passes them)."""
        return {k: v for k, v in self.env.items() if k != "AWS_DEFAULT_REGION"}

    def __enter__(self) -> Self:
        if not SERVER.exists():
            raise RuntimeError(f"{SERVER} is missing: run `make setup` (it builds .venv-s3)")
        self.process = subprocess.Popen([str(SERVER), "-H", "127.0.0.1", "-p", str(self.port)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(self.endpoint, timeout=2).close()
                return self
            except (urllib.error.URLError, ConnectionError, OSError):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError(f"the S3 test server did not start on port {self.port}") from None
                time.sleep(0.2)

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
            self.process = None

    def bucket(self, name: str) -> str:
        """Create bucket ``name``; returns ``s3://name``."""
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/{name}", method="PUT"),
                               timeout=10).close()
        return f"s3://{name}"
