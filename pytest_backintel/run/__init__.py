"""Run: the bench session behind the hooks, one trial end to end (ask the analyst, re-execute
its evidence, score), analysts, budgets, streaks of provider failures, watchdogs, progress,
heap and process hygiene. The top stage: it may use every other stage."""
