"""Errors the engine raises: each one says what is wrong and how to fix it."""
from __future__ import annotations


class CdcError(Exception):
    """Base class: a problem the user can act on; the CLI prints it without a traceback."""


class ConfigurationError(CdcError):
    """A setting of ours (URL, option, table selection) is missing or invalid."""


class ConnectionFailed(CdcError):
    """The MySQL server could not be reached or refused the credentials."""


class ServerUnavailable(ConnectionFailed):
    """The server went away or cannot be reached right now (restart, failover, network cut, KILL of our
    session): transient, so a read that was cut may be run again from its start once the server is back."""


class ServerNotReady(CdcError):
    """The server is reachable but not configured for CDC (binlog settings, privileges)."""
