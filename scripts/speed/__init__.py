"""The parts of scripts/benchmark.py, by what they measure."""
