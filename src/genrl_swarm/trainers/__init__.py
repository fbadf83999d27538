"""Learners. GRPO imports torch and transformers, so it is imported from its module."""
