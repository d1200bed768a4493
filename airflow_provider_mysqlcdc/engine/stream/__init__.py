"""The stream phase: the filter that decides which events are emitted, startup modes, failover, admission."""
