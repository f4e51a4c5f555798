"""The worker: owns partitions of the commands topic and drives the runs that live there."""
