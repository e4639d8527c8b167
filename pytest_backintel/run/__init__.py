"""Running a plan of trials: resuming, retrying blocked trials, shards and their merge."""
