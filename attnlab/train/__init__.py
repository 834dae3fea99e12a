"""Training: the Trainer loop, schedules and the run-directory event log."""
