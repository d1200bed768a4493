"""Pieces every room of the engine shares: errors, environment variable names, secrets, retries."""
