"""Models: the tiny default built from a config, and how a stage finds the model it starts from."""
