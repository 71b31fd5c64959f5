"""The application layer: the run10 workflow, benchmarks, the run report and its plots."""
