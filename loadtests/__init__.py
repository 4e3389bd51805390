"""Load tests (locust) and benchmarks (`make bench`)."""
