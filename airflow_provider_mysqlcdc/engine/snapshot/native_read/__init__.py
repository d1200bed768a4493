"""The native chunk reader: connectorx reads a chunk as Arrow inside its own consistent read view."""
