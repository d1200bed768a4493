"""The errors of GTID positions and sets (both flavors): ``engine/binlog/gtid.py`` re-exports them."""
from __future__ import annotations

from airflow_provider_mysqlcdc.engine.common.errors import CdcError


class GtidError(CdcError):
    """A GTID position cannot be used on this server."""


class GtidUnsupported(GtidError):
    """The text is not a GTID position (set) of this server's flavor, or a form not supported."""


class GtidNotFound(GtidError):
    """This server's binlog does not hold the point a GTID position names (purged, behind, other history)."""


class GtidsNotCommitted(GtidError):
    """Transactions written to the binlog did not commit within the wait: the executed GTID set cannot be
    proven to hold every transaction before a position yet."""
