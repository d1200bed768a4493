"""The source server: connections, what server it is,
readiness checks, limits on what we ask of it, outages."""
