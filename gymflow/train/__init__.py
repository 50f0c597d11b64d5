"""Trainers: SFT (behaviour cloning), and later AgentEvol and the policy-gradient family."""
