"""gymflow: a reproducible pipeline for training LLM agents on multi-turn tasks."""

__version__ = "0.1.0"
