"""AgentEval: held-out evaluation of a policy, and its metrics."""
