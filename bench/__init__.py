"""`make bench`: the gateway's overhead against a zero-latency upstream (docs/benchmarks.md).

Bench code only: nothing under apps/ or gateway_project/ imports it, and it is not packaged.
"""
