"""Harness code for the tests and the benchmarks: servers, workloads, reference implementations, audits."""
