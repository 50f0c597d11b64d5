"""`gymflow view`: a local, read-only web page over the rollout tables (`gymflow.viewer.app`)."""
