"""Running a recipe: launching peers, logs, checkpoints, console output."""
