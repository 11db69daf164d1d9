"""Helpers only the tests use; the worlds the benchmarks use as well are in worlds/."""
