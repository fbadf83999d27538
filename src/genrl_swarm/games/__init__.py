"""Example games: each folder is one game (its logic and a recipe)."""
