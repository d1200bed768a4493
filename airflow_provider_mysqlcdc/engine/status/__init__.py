"""Where each table stands: snapshot progress, stream position and lag, mirror consistency."""
