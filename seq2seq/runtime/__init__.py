"""Where a process runs: device, precision, threads, torchrun's process group, checkpoints."""
