"""The training loop and its parts: updates, schedule, stopping, validation, logging."""
