"""Helpers for tests and the demo: throwaway servers. Not used by the product's data path."""
