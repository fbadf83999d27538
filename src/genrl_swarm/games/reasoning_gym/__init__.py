"""Reasoning Gym with SAPO sharing: library components only, see recipe.yaml."""
