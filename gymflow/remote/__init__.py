"""Environments over HTTP: the server (`gymflow serve-env`) and the client that plays through it."""
